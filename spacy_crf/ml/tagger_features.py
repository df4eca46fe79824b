"""The ``spacy_crf.TaggerFeatures.v1`` layer: a trained Chinese character
tagger's outputs (:mod:`.char_tagger`) as a trained vector per token, for the
emission layer beside the encoder's features (``spacy_crf.CRFTagger.v1``'s
``tagger_features``).

For a batch of docs with N tokens: the tagger runs over each doc's text (its
whitespace included, as context), giving C ``[n_chars, D]`` per doc with D the
width of the chosen ``outputs``; a token's row F[i] is the mean of the rows of
its characters; H = tanh(F Wᵀ + b), W ``tagger_projection_W`` ``[width, D]``,
b ``tagger_projection_b`` ``[width]``; H: ``[N, width]`` split per doc.
Backprop: dZ = dH ⊙ (1 - H²), dW = dZᵀ F, db = sum_i dZ[i]; the tagger
itself is fixed (no gradient reaches it, nor the docs).

In training the tagger's rows are kept per distinct text
(:meth:`~.char_tagger.CharTagger.cached_char_features`): it runs once per
text of the corpus, not once per step. At prediction the two heads of a joint
pipeline share each batch's rows (one run per batch).

The tagger lives in the layer (the ``char_tagger`` attribute, saved with the
weights and checked against its sha256 at load); it is given at
``initialize`` (``spacy_crf.read_char_tagger.v1``); construction reads no
file.
"""

from typing import List, Optional, Sequence

import numpy
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, glorot_uniform_init, zero_init
from thinc.types import Floats2d

from ..util import matmul, save_attr_once, split_rows
from .batch_cache import BatchCache, read_only
from .char_tagger import OUTPUTS, CharTagger, check_outputs
from .lexicon_match import batch_texts, token_bounds

PROJECTION_W, PROJECTION_B = "tagger_projection_W", "tagger_projection_b"
TAGGER_ATTR = "char_tagger"
#: the name of the layer in a CRF tagger model (``model.get_ref``)
REF = "tagger_features"
NOT_INITIALIZED = (
    "spacy_crf.TaggerFeatures.v1: the layer has no tagger: it was never initialized. Give the component "
    'one at initialize ([initialize.components.NAME.tagger_features] with @readers = "spacy_crf.read_char_tagger.v1" '
    "and the folder of `spacy crf extract-tagger`), or load a trained pipeline."
)
_batches = BatchCache()


@registry.layers("spacy_crf.TaggerFeatures.v1")
def TaggerFeatures(width: int, outputs: Sequence[str] = ("marginals",)) -> Model[List[Doc], List[Floats2d]]:
    """Docs -> ``[len(doc), width]`` features from a trained character tagger
    (see the module doc). ``outputs``: which of the tagger's outputs, of
    ``["marginals", "hidden"]``. The tagger is set at initialize."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"spacy_crf.TaggerFeatures.v1: width must be a whole number >= 1, got {width!r}")
    try:
        chosen = check_outputs(list(outputs) if not isinstance(outputs, str) else outputs)
    except ValueError as e:
        raise ValueError(f"spacy_crf.TaggerFeatures.v1: {e}") from None
    return Model(
        REF,
        _forward,
        init=_init,
        dims={"nO": width},
        params={PROJECTION_W: None, PROJECTION_B: None},
        attrs={TAGGER_ATTR: CharTagger(), "outputs": list(chosen)},
    )


def tagger_of(layer: Model) -> CharTagger:
    tagger = layer.attrs.get(TAGGER_ATTR)
    if not isinstance(tagger, CharTagger) or not tagger:
        raise ValueError(NOT_INITIALIZED)
    return tagger


def has_tagger(layer: Model) -> bool:
    tagger = layer.attrs.get(TAGGER_ATTR)
    return isinstance(tagger, CharTagger) and bool(tagger)


def token_features(tagger: CharTagger, docs: Sequence[Doc], outputs: Sequence[str], cached: bool) -> numpy.ndarray:
    """F of the module doc: float32 ``[N, D]`` over the batch's tokens, doc after doc.
    ``cached``: keep the tagger's rows per text for the rest of the process (training)."""
    texts = batch_texts(docs)
    chars = (tagger.cached_char_features if cached else tagger.char_features)(texts, outputs)
    rows = []
    for doc, C in zip(docs, chars):
        bounds = token_bounds([doc])[0]
        if not len(bounds):
            continue
        sums = numpy.zeros((len(C) + 1, C.shape[1]), "float64")
        numpy.cumsum(C, axis=0, out=sums[1:])
        starts, ends = bounds[:, 0], bounds[:, 0] + bounds[:, 1]
        lengths = numpy.maximum(bounds[:, 1], 1)[:, None]
        rows.append(((sums[ends] - sums[starts]) / lengths).astype("float32"))
    width = tagger.width(outputs)
    return numpy.concatenate(rows) if rows else numpy.zeros((0, width), "float32")


def _init(model: Model, X: Optional[List[Doc]] = None, Y=None) -> None:
    tagger = tagger_of(model)
    nO = model.get_dim("nO")
    nI = tagger.width(model.attrs["outputs"])
    model.set_param(PROJECTION_W, glorot_uniform_init(model.ops, (nO, nI)))
    model.set_param(PROJECTION_B, zero_init(model.ops, (nO,)))


def _forward(model: Model, docs: List[Doc], is_train: bool):
    tagger = tagger_of(model)
    outputs = tuple(model.attrs["outputs"])
    W = model.get_param(PROJECTION_W)
    b = model.get_param(PROJECTION_B)
    lengths = [len(doc) for doc in docs]
    n_tokens = sum(lengths)
    if is_train:
        F = token_features(tagger, docs, outputs, cached=True)
    else:
        F = _batches.get(
            docs,
            (tagger.sha256, outputs),
            n_tokens,
            lambda: read_only(token_features(tagger, docs, outputs, cached=False)),
        )
    F = model.ops.asarray2f(F)
    H = model.ops.xp.tanh(matmul(model.ops, F, W, trans2=True) + b)

    def backprop(dHs: List[Floats2d]) -> List[Doc]:
        dH = model.ops.flatten(dHs, pad=0) if dHs else model.ops.alloc2f(0, W.shape[0])
        dZ = dH * (1 - H * H)
        model.inc_grad(PROJECTION_W, matmul(model.ops, dZ, F, trans1=True))
        model.inc_grad(PROJECTION_B, dZ.sum(axis=0))
        return []

    return split_rows(model.ops, H, lengths), backprop


def initialize_tagger(model: Model, tagger: Optional[CharTagger], name: str) -> None:
    """``CRFTagger.initialize``'s ``tagger_features``: give the CRF tagger
    ``model``'s tagger features their tagger. A model without the features must
    get none; a model with them needs one, unless it has one (a loaded pipeline)."""
    layer = model.get_ref(REF) if model.has_ref(REF) else None
    if layer is None:
        if tagger is not None:
            raise ValueError(
                f"[{name}] initialize got a tagger_features tagger, but the model has no tagger features: set "
                f"[components.{name}.model.tagger_features], or set "
                f"[initialize.components.{name}.tagger_features] path = null."
            )
        return
    if tagger is None:
        if not has_tagger(layer):
            raise ValueError(
                f"[{name}] the model has tagger features but initialize got no tagger: set "
                f"[initialize.components.{name}.tagger_features] "
                '(@readers = "spacy_crf.read_char_tagger.v1", path = the folder of `spacy crf extract-tagger`).'
            )
        return
    if not isinstance(tagger, CharTagger) or not tagger:
        raise ValueError(f"[{name}] tagger_features must be a CharTagger with a model, got {tagger!r}")
    layer.attrs[TAGGER_ATTR] = tagger


# --- saved with the model's weights (sha256 checked): one copy, one session, one cache for both heads

save_attr_once(CharTagger, CharTagger.from_bytes)


__all__ = ["OUTPUTS", "REF", "TaggerFeatures", "initialize_tagger", "tagger_of", "token_features"]
