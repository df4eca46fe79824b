"""The ``spacy_crf.LexiconFeatures.v1`` layer: what a dictionary knows about the
words each token may belong to, as a trained vector per token, for the
emission layer beside the encoder's features (``spacy_crf.CRFTagger.v1``'s
``lexicon_width``).

This is SoftLexicon (Ma et al., 2020, "Simplify the Usage of Lexicon in
Chinese NER"), the family of Lattice LSTM, FLAT and LEBERT, with tag classes
in place of word embeddings: a table of an embedding per dictionary word
(hundreds of thousands of rows) would be most of the model and would learn
only the words of the training data; a word's position and class are what
carry over to unseen words.

The maths, for a batch of docs with N tokens in all, and a dictionary D
(:class:`~spacy_crf.ml.lexicon_match.TaggedLexicon`) of words w with a
frequency f(w) and a tag class c(w) in C = :data:`TAG_CLASSES` (|C| = 5):

* occurrences: every token span (s, e) whose text is a word of D, on token
  boundaries and never across whitespace (one token for a single character
  or for a multi-character token that is a word);
* the position p of token i in an occurrence (s, e), one of P = 4:
  ``single`` if e - s = 1, else ``begin`` at i = s, ``end`` at i = e - 1,
  ``middle`` between;
* the weight z(w) = 1 + ln(1 + f(w)): SoftLexicon weights a word by its
  frequency; the logarithm keeps the commonest words (jieba's counts run
  to millions) from drowning the rest, the 1 makes a word without a
  frequency count;
* A[i, p, c] = sum of z(w) over the occurrences covering token i at position p
  with c(w) = c, A: ``[N, P, C]``;
* F[i] = A[i] / sum_{p,c} A[i, p, c] flattened to ``[N, P*C]`` (p major):
  SoftLexicon's normalisation over all four position sets, so that a token
  covered by many words and one covered by few are on one scale; a token no
  word covers gets F[i] = 0;
* H = tanh(F Wᵀ + b), W ``lexicon_projection_W`` ``[width, P*C]``,
  b ``lexicon_projection_b`` ``[width]``; H: ``[N, width]``, unflattened to
  ``[n_k, width]`` per doc. Without the tanh, this projection followed by the
  linear emission layer would be one linear map of F, and ``width`` could
  only restrict it.

Backprop, from dH ``[N, width]``: dZ = dH ⊙ (1 - H²); dW = dZᵀ F
``[width, P*C]``; db = sum_i dZ[i] ``[width]``. Docs get no gradient.

The tag classes: person (``nr*``), place (``ns*``), organisation (``nt*``),
other proper name (``nz``) and other. The first three are the entity types
every NER corpus of the project has (MSRA's PER/LOC/ORG; Weibo and CLUENER
split them finer, e.g. GPE, company, address, and ``nz`` holds works,
products, games); a segmenter needs a word's extent more than its class, so
the common-word tags (n, v, a, ...) share one class, which keeps the layer at
20 inputs.

The dictionary lives in the layer (the ``lexicon`` attribute, saved with the
weights), so a saved pipeline needs no dictionary file. It is given at
``initialize`` (:func:`initialize_lexicon`); construction reads no file.
"""

from typing import List, Optional, Sequence

import numpy
import srsly
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, glorot_uniform_init, zero_init
from thinc.types import Floats2d

from ..util import flat_rows, matmul, run_offsets, save_attr_once, split_rows
from . import shared_listener
from .batch_cache import read_only
from .lexicon_match import TAG_CLASSES, TaggedLexicon, token_bounds

POSITIONS = ("begin", "middle", "end", "single")
N_FEATURES = len(POSITIONS) * len(TAG_CLASSES)
PROJECTION_W, PROJECTION_B = "lexicon_projection_W", "lexicon_projection_b"
LEXICON_ATTR = "lexicon"
#: the name of the layer in a CRF tagger model (``model.get_ref``)
REF = "lexicon_features"
_BEGIN, _MIDDLE, _END, _SINGLE = range(len(POSITIONS))
NOT_INITIALIZED = (
    "spacy_crf.LexiconFeatures.v1: the layer has no dictionary: it was never initialized. Give the "
    "component one at initialize ([initialize.components.NAME.lexicon_features] with "
    '@readers = "spacy_crf.read_tagged_lexicon.v1"), or load a trained pipeline.'
)


@registry.layers("spacy_crf.LexiconFeatures.v1")
def LexiconFeatures(width: int) -> Model[List[Doc], List[Floats2d]]:
    """Docs -> ``[len(doc), width]`` lexicon features per doc (see the module
    doc). The dictionary is set at initialize (:func:`initialize_lexicon`)."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"spacy_crf.LexiconFeatures.v1: width must be a whole number >= 1, got {width!r}")
    return Model(
        REF,
        _forward,
        init=_init,
        dims={"nO": width},  # no nI: the input is docs (concatenate would set it to their "width")
        params={PROJECTION_W: None, PROJECTION_B: None},
        attrs={LEXICON_ATTR: TaggedLexicon()},
    )


def lexicon_of(layer: Model) -> TaggedLexicon:
    """The layer's dictionary; an error if it has none (not initialized)."""
    lexicon = layer.attrs.get(LEXICON_ATTR)
    if not isinstance(lexicon, TaggedLexicon) or not len(lexicon):
        raise ValueError(NOT_INITIALIZED)
    return lexicon


def has_lexicon(layer: Model) -> bool:
    lexicon = layer.attrs.get(LEXICON_ATTR)
    return isinstance(lexicon, TaggedLexicon) and len(lexicon) > 0


def model_lexicon(model: Model) -> Optional[TaggedLexicon]:
    """The dictionary of a tagger ``model``'s lexicon features; None when it
    has no features or they have no dictionary yet."""
    layer = model.get_ref(REF) if model.has_ref(REF) else None
    return lexicon_of(layer) if layer is not None and has_lexicon(layer) else None


def lexicon_features(lexicon: TaggedLexicon, docs: Sequence[Doc]) -> numpy.ndarray:
    """F of the module doc: float32 ``[N, P*C]`` over the batch's N tokens (doc
    after doc), column ``position * len(TAG_CLASSES) + class``; read-only.

    The two heads of a loaded joint pipeline share one dictionary and see the
    same docs in turn: the last batch's features are kept on the dictionary
    and given again for the same doc objects with the same token boundaries.
    """
    bounds = token_bounds(docs)
    layout = b"".join(b.tobytes() for b in bounds)
    return lexicon.for_batch(docs, layout, lambda: read_only(_features(lexicon, docs, bounds)))


def _features(lexicon: TaggedLexicon, docs: Sequence[Doc], bounds: List[numpy.ndarray]) -> numpy.ndarray:
    n_tokens = sum(len(doc) for doc in docs)
    starts, ends, ids = lexicon.batch_matches(docs, bounds)
    spans = ends - starts
    which = numpy.repeat(numpy.arange(len(starts)), spans)  # occurrence of each (occurrence, token) pair
    offset = run_offsets(spans)
    span = spans[which]
    position = numpy.where(
        span == 1, _SINGLE, numpy.where(offset == 0, _BEGIN, numpy.where(offset == span - 1, _END, _MIDDLE))
    )
    word = ids[which]
    column = position * len(TAG_CLASSES) + lexicon.classes[word]
    weight = 1.0 + numpy.log1p(lexicon.freqs[word].astype("float64"))
    counts = numpy.bincount(
        (starts[which] + offset) * N_FEATURES + column, weights=weight, minlength=n_tokens * N_FEATURES
    ).reshape(n_tokens, N_FEATURES)
    total = counts.sum(axis=1, keepdims=True)
    return (counts / numpy.where(total > 0, total, 1.0)).astype("float32")


def _init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    nO = model.get_dim("nO")
    model.set_param(PROJECTION_W, glorot_uniform_init(model.ops, (nO, N_FEATURES)))
    model.set_param(PROJECTION_B, zero_init(model.ops, (nO,)))


def _forward(model: Model, docs: List[Doc], is_train: bool):
    lexicon = lexicon_of(model)
    W = model.get_param(PROJECTION_W)
    b = model.get_param(PROJECTION_B)
    lengths = [len(doc) for doc in docs]
    F = model.ops.asarray2f(lexicon_features(lexicon, docs))
    H = model.ops.xp.tanh(matmul(model.ops, F, W, trans2=True) + b)

    def backprop(dHs: List[Floats2d]) -> List[Doc]:
        dH = model.ops.flatten(dHs, pad=0) if dHs else model.ops.alloc2f(0, W.shape[0])
        dZ = dH * (1 - H * H)
        model.inc_grad(PROJECTION_W, matmul(model.ops, dZ, F, trans1=True))
        model.inc_grad(PROJECTION_B, dZ.sum(axis=0))
        return []

    return split_rows(model.ops, H, lengths), backprop


def with_lexicon_features(tok2vec: Model, *features: Model) -> Model[List[Doc], List[Floats2d]]:
    """``[tok2vec(docs) | features(docs) ...]`` per doc: ``[n, width(tok2vec) + sum of widths]``.
    Not thinc's ``concatenate``, which adds the input gradients of its layers:
    a transformer listener's is None."""
    return Model(
        "with_lexicon_features", _concat_forward, init=_concat_init, layers=[tok2vec, *features], dims={"nO": None}
    )


def _concat_init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    for layer in model.layers:
        layer.initialize(X=X)
    widths = [layer.maybe_get_dim("nO") for layer in model.layers]
    if None not in widths:
        model.set_dim("nO", sum(widths))


def _concat_forward(model: Model, docs: List[Doc], is_train: bool):
    tok2vec, *features = model.layers
    if is_train:
        Xs, backprop_tok2vec = tok2vec(docs, is_train)
    else:  # the other head's pooled transformer output, where it listens the same way
        Xs, backprop_tok2vec = shared_listener.predict(tok2vec, docs), _no_backprop
    outputs = [layer(docs, is_train) for layer in features]
    widths = [Xs[0].shape[1] if len(Xs) else 0] + [layer.get_dim("nO") for layer in features]
    bounds = numpy.cumsum([0] + widths)
    # the batch's rows side by side at once: one hstack per doc costs more
    # than the copy on short docs
    Ys: List[Floats2d] = []
    if len(Xs):
        blocks = [flat_rows(model.ops, arrays) for arrays in [Xs] + [Hs for Hs, _ in outputs]]
        Ys = split_rows(model.ops, model.ops.xp.hstack(blocks), [len(doc_X) for doc_X in Xs])

    def backprop(dYs: List[Floats2d]):
        for i, (_, backprop_features) in enumerate(outputs, start=1):
            backprop_features([model.ops.as_contig(dY[:, bounds[i] : bounds[i + 1]]) for dY in dYs])
        return backprop_tok2vec([model.ops.as_contig(dY[:, : bounds[1]]) for dY in dYs])

    return Ys, backprop


def _no_backprop(dXs):  # pragma: no cover (prediction only)
    raise ValueError("with_lexicon_features: no backprop at prediction")


def initialize_lexicon(model: Model, lexicon: Optional[TaggedLexicon], name: str) -> None:
    """``CRFTagger.initialize``'s ``lexicon_features``: give the CRF tagger
    ``model``'s lexicon features their dictionary. A model without the
    features must get none; a model with them needs one, unless it has one
    already (a loaded pipeline)."""
    layer = model.get_ref(REF) if model.has_ref(REF) else None
    if layer is None:
        if lexicon is not None:
            raise ValueError(
                f"[{name}] initialize got a lexicon_features dictionary, but the model has no lexicon "
                f"features (lexicon_width = 0): set [components.{name}.model] lexicon_width, or set "
                f"[initialize.components.{name}.lexicon_features] path = null."
            )
        return
    if lexicon is None:
        if not has_lexicon(layer):
            raise ValueError(
                f"[{name}] the model has lexicon features (lexicon_width = {layer.get_dim('nO')}) but "
                f"initialize got no dictionary: set [initialize.components.{name}.lexicon_features] "
                '(@readers = "spacy_crf.read_tagged_lexicon.v1", path = a `word freq tag` file).'
            )
        return
    if not isinstance(lexicon, TaggedLexicon) or not len(lexicon):
        raise ValueError(f"[{name}] lexicon_features must be a non-empty TaggedLexicon, got {lexicon!r}")
    layer.attrs[LEXICON_ATTR] = lexicon


# --- saved with the model's weights: one copy for heads that saved the same one -------

save_attr_once(TaggedLexicon, lambda data: TaggedLexicon.from_dict(srsly.msgpack_loads(data)))
