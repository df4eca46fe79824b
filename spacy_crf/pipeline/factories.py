"""The factories of the CRF tagger: one class (:class:`~spacy_crf.pipeline.crf_tagger.CRFTagger`),
three factories, as spaCy gives ``ner``/``beam_ner`` their own factory.

* ``crf_tagger``: the general factory, any ``scheme``; declares the union of
  what the schemes write and score, so a config should set its own
  ``[training.score_weights]``.
* ``crf_ner``: entities (``bio``/``bioes``, default ``bioes``); assigns
  ``doc.ents``, ``token.ent_iob``, ``token.ent_type``; weights ``ents_f``.
* ``crf_segmenter``: word segmentation (``bmes``); assigns
  ``doc.spans[spans_key]``; weights ``words_f``.

The variants differ only in their defaults, their declared ``assigns`` and
their default score weights, so a config that uses them needs no
``[training.score_weights]`` block. A pipeline saved with
``factory = "crf_tagger"`` loads as before.

``span_ner`` (:class:`~spacy_crf.pipeline.span_ner.SpanNER`) is the span
(GlobalPointer) head: nested spans to ``doc.spans[spans_key]``, the best
non-overlapping ones to ``doc.ents``; weights ``ents_f``.
"""

import inspect
from typing import Callable, Dict, List, Optional, Tuple

from spacy.language import Language
from spacy.tokens import Doc
from thinc.api import Config, Model
from thinc.types import Floats2d

from ..doc_keys import DEFAULT_SPANS_KEY
from ..ml.schemes import SchemeError, check_scheme
from .crf_tagger import CRFTagger
from .span_ner import DEFAULT_MAX_LENGTH, DEFAULT_SPAN_KEY, SpanNER
from .user_dict import add_from_file

DEFAULT_MODEL_CONFIG = """
[model]
@architectures = "spacy_crf.CRFTagger.v1"
nO = null
use_crf = true
use_start_end = true
lexicon_width = 0
tagger_features = null
fusion = null

[model.tok2vec]
@architectures = "spacy.HashEmbedCNN.v2"
pretrained_vectors = null
width = 96
depth = 4
embed_size = 2000
window_size = 1
maxout_pieces = 3
subword_features = false
"""
DEFAULT_MODEL = Config().from_str(DEFAULT_MODEL_CONFIG)["model"]
COMMON_CONFIG = {
    "model": DEFAULT_MODEL,
    "spans_key": DEFAULT_SPANS_KEY,
    "constrain_training": True,
    "max_batch_items": 4096,
    "on_nonfinite": "raise",
    "respect_ents": False,
    "user_dict": None,
}
ENTS_WEIGHTS = {"ents_f": 1.0, "ents_p": 0.0, "ents_r": 0.0, "ents_per_type": None}
WORDS_WEIGHTS: Dict[str, Optional[float]] = {"words_f": 1.0, "words_p": 0.0, "words_r": 0.0}


@Language.factory(
    "crf_tagger",
    assigns=["doc.ents", "token.ent_iob", "token.ent_type", "token.tag", "doc.spans"],
    default_config={**COMMON_CONFIG, "scheme": "bio", "scorer": {"@scorers": "spacy_crf.crf_scorer.v1"}},
    default_score_weights={**WORDS_WEIGHTS, **ENTS_WEIGHTS, "tag_acc": 1.0},
)
def make_crf_tagger(
    nlp: Language,
    name: str,
    model: Model[List[Doc], List[Floats2d]],
    scheme: str,
    spans_key: str,
    constrain_training: bool,
    max_batch_items: int,
    scorer: Optional[Callable],
    on_nonfinite: str = "raise",
    respect_ents: bool = False,
    user_dict: Optional[str] = None,
) -> CRFTagger:
    """Create a CRF tagger for any scheme. Its default score weights are the
    union of what the schemes report; prefer ``crf_ner`` / ``crf_segmenter``,
    whose weights need no ``[training.score_weights]`` override.

    model: a ``spacy_crf.CRFTagger.v1`` model (tok2vec -> emissions -> CRF).
    scheme: "bmes" (word segmentation), "bio"/"bioes" (entities) or "tag".
    spans_key: the span group that receives predicted words ("bmes").
    constrain_training: also apply the scheme's constraints in training, so
        that the partition function sums over well-formed paths only.
        Decoding is always constrained.
    max_batch_items: at prediction time (``nlp.pipe``), docs of a batch are
        sorted by length and predicted in sub-batches of at most this many
        padded tokens, as spaCy's ``transformer`` component does. It matters
        when the tagger embeds its own transformer (after
        ``replace_listeners``): padding short docs to the longest one of a
        mixed batch can cost as much as the encoder itself. 0 disables it.
    scorer: defaults to ``spacy_crf.crf_scorer.v1``, which reports
        ``words_p/r/f``, ``ents_p/r/f`` + ``ents_per_type`` or ``tag_acc``
        depending on the scheme.
    on_nonfinite: what ``update`` does when the loss or a gradient of this
        component is NaN or infinite: "raise" (default) a ``NonFiniteError``
        naming the component and the batch, or "skip" the batch with a
        warning. Either way nothing non-finite reaches the weights. Only this
        component's loss and gradients are checked: a shared upstream encoder
        (listener) updates itself.
    respect_ents: scheme "bmes" only. When true and the doc already has
        entities (an NER component ran before the segmenter), every entity
        boundary is a forced word boundary in decoding: the entity's first
        token is B/S, its last E/S, the token before it E/S and the token
        after it B/S. The words then never cross an entity, so
        ``crf_merge_words`` has nothing to split (whitespace tokens are
        outside words anyway). Default false (entities are ignored). As
        every setting here but ``scheme``, the config gives it at load (its
        ``config.cfg``, or ``spacy.load(path, config={"components": {NAME:
        {"respect_ents": True}}})``), over the value saved in the pipe's
        ``cfg``; a ``scheme`` other than the saved one is refused at load.
    user_dict: a user dictionary file read each time the pipe is created
        (:func:`spacy_crf.pipeline.user_dict.read_user_dict`: ``WORD [force|prior
        [WEIGHT]]`` lines for "bmes", ``TEXT LABEL [force|prior [WEIGHT]]``
        for "bio"/"bioes"), e.g. ``spacy.load(path, config={"components":
        {NAME: {"user_dict": "words.txt"}}})``. A relative path is relative
        to the working directory. Its entries are not copied into the saved
        pipe (entries added with ``add_user_words``/``add_user_entities``
        are). Default null: none.

    Entities already on a doc are kept by schemes "bio"/"bioes" and the
    remaining tokens are decoded around them (see :mod:`spacy_crf.pipeline.forced_tags`).
    """
    try:
        check_scheme(scheme)
    except SchemeError as e:
        raise ValueError(f"[{name}] {e}") from None
    if respect_ents and scheme != "bmes":
        raise ValueError(
            f"[{name}] respect_ents applies to scheme 'bmes' (word segmentation), "
            f"not {scheme!r}: entity taggers always keep the entities already on a doc."
        )
    if on_nonfinite not in ("raise", "skip"):
        raise ValueError(f"[{name}] on_nonfinite must be 'raise' or 'skip', not {on_nonfinite!r}.")
    # a negative budget would predict every doc alone, silently: refused here, not at the first batch
    if isinstance(max_batch_items, bool) or not isinstance(max_batch_items, int) or max_batch_items < 0:
        raise ValueError(
            f"[{name}] max_batch_items must be a whole number >= 0 (0: no sub-batches), not {max_batch_items!r}."
        )
    pipe = CRFTagger(
        nlp.vocab,
        model,
        name,
        scheme=scheme,
        spans_key=spans_key,
        constrain_training=constrain_training,
        max_batch_items=max_batch_items,
        scorer=scorer,
        on_nonfinite=on_nonfinite,
        respect_ents=respect_ents,
    )
    if user_dict is not None:
        add_from_file(pipe, user_dict)
    return pipe


def _variant(factory: str, schemes: Tuple[str, ...], doc: str) -> Callable[..., CRFTagger]:
    """``make_crf_tagger`` for ``schemes`` only, with its signature, from which
    spaCy reads and validates the settings."""

    def make(nlp: Language, name: str, **settings) -> CRFTagger:
        scheme = settings["scheme"]
        if scheme not in schemes:
            raise ValueError(
                f"[{name}] factory {factory!r} takes scheme {' or '.join(map(repr, schemes))}, not {scheme!r}; "
                "use factory 'crf_tagger' for other schemes."
            )
        return make_crf_tagger(nlp, name, **settings)

    make.__signature__ = inspect.signature(make_crf_tagger)  # type: ignore[attr-defined]
    make.__name__ = make.__qualname__ = f"make_{factory}"
    make.__doc__ = doc
    return make


make_crf_ner = Language.factory(
    "crf_ner",
    assigns=["doc.ents", "token.ent_iob", "token.ent_type"],
    default_config={**COMMON_CONFIG, "scheme": "bioes", "scorer": {"@scorers": "spacy_crf.ents_scorer.v1"}},
    default_score_weights=ENTS_WEIGHTS,
    func=_variant(
        "crf_ner",
        ("bio", "bioes"),
        """Create a CRF entity tagger: scheme "bio" or "bioes" (default);
    writes ``doc.ents``; scored by ``ents_p/r/f`` and ``ents_per_type``. The
    other settings are those of ``crf_tagger``.""",
    ),
)

make_crf_segmenter = Language.factory(
    "crf_segmenter",
    assigns=["doc.spans"],
    default_config={**COMMON_CONFIG, "scheme": "bmes", "scorer": {"@scorers": "spacy_crf.words_scorer.v1"}},
    default_score_weights=WORDS_WEIGHTS,
    func=_variant(
        "crf_segmenter",
        ("bmes",),
        """Create a CRF word segmenter: scheme "bmes"; writes the predicted
    words to ``doc.spans[spans_key]`` (``crf_merge_words`` turns them into
    tokens); scored by ``words_p/r/f``. The other settings are those of
    ``crf_tagger``.""",
    ),
)


DEFAULT_SPAN_MODEL = {
    "@architectures": "spacy_crf.SpanPointer.v1",
    "nO": None,
    "width": 64,
    "rope": True,
    "tok2vec": DEFAULT_MODEL["tok2vec"],
}
SPANS_WEIGHTS = {
    f"spans_{DEFAULT_SPAN_KEY}_{k}": v for k, v in (("f", 0.0), ("p", 0.0), ("r", 0.0), ("per_type", None))
}


@Language.factory(
    "span_ner",
    assigns=["doc.ents", "token.ent_iob", "token.ent_type", "doc.spans"],
    default_config={
        "model": DEFAULT_SPAN_MODEL,
        "spans_key": DEFAULT_SPAN_KEY,
        "max_length": DEFAULT_MAX_LENGTH,
        "threshold": 0.0,
        "scorer": {"@scorers": "spacy_crf.span_scorer.v1"},
        "on_nonfinite": "raise",
    },
    default_score_weights={**ENTS_WEIGHTS, **SPANS_WEIGHTS},
)
def make_span_ner(
    nlp: Language,
    name: str,
    model: Model[List[Doc], List[Floats2d]],
    spans_key: str,
    max_length: int,
    threshold: float,
    scorer: Optional[Callable],
    on_nonfinite: str = "raise",
) -> SpanNER:
    """Create a span (GlobalPointer) entity recognizer: every span scoring
    above ``threshold`` goes to ``doc.spans[spans_key]`` (nested ones
    included, scores in the group's ``attrs["scores"]``), and the
    highest-scoring non-overlapping ones to ``doc.ents``.

    model: a ``spacy_crf.SpanPointer.v1`` model.
    max_length: longest span in tokens, default 64 (the longest entity of
        the project's NER training sets is 58 characters); longer spans are
        neither scored nor learned, and the cost of a doc grows with
        ``n * max_length`` instead of ``n²``. 0 means no limit, to be asked
        for explicitly: every span of a doc is scored (2 million cells per
        label for a 2,000-character doc), and time and memory grow with n².
        Whatever the setting, a doc gets at most
        ``span_ner.MAX_SPANS_PER_TOKEN`` (1) prediction per token and
        label, the best ones (a warning says when a doc reaches that cap).
    threshold: the score above which a span is predicted (0 is the loss's
        decision boundary).
    scorer: ``spacy_crf.span_scorer.v1`` (``ents_*`` and ``spans_{spans_key}_*``).
    on_nonfinite: "raise" (default) or "skip", as for ``crf_tagger``.
    """
    return SpanNER(
        nlp.vocab,
        model,
        name,
        spans_key=spans_key,
        max_length=max_length,
        threshold=threshold,
        scorer=scorer,
        on_nonfinite=on_nonfinite,
    )
