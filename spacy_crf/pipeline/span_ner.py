"""The span (pointer) NER component (:class:`SpanNER`, factory ``span_ner``).

It scores every span of a doc for every label with the GlobalPointer head
of :mod:`spacy_crf.ml.span_model` and writes:

* ``doc.spans[spans_key]``: every span scoring above ``threshold``, nested
  and overlapping ones included, highest score first, with the scores in
  ``doc.spans[spans_key].attrs["scores"]`` (as spaCy's ``spancat``);
* ``doc.ents``: a non-overlapping subset, chosen greedily by score: the
  highest-scoring span is kept, then the next one that overlaps no kept
  span, and so on. Entities already on the doc (set by hand or by an
  ``entity_ruler``) are kept and the predictions are placed around them, as
  the CRF taggers do; spans starting or ending on a whitespace token are
  never predicted.

Gold, per reference doc: the span group ``spans_key`` if the doc has one
(nested spans allowed), else ``doc.ents`` if the doc has entity annotation
(tokens whose entity annotation is missing are unknown), else nothing (the
doc teaches this component nothing, as an NER-less doc of
``spacy_crf.JointCorpus.v1``). Gold spans that do not align with the
predicted tokens make the cells starting or ending inside them unknown
for their label.
"""

import math
import warnings
from itertools import islice
from typing import Callable, Iterable, List, Optional, Sequence

import numpy
from spacy.language import Language
from spacy.tokens import Doc, Span, SpanGroup
from spacy.training import Example, validate_examples, validate_get_examples
from spacy.vocab import Vocab
from thinc.api import Model
from thinc.types import Floats2d

from ..doc_keys import DEFAULT_SPAN_KEY, quote_text
from ..ml import span_model
from ..ml.span_model import NEGATIVE, POSITIVE, UNKNOWN, Prediction
from .forced_tags import preset_entity_tokens
from .guarded_update import check_on_nonfinite
from .scorers import score_span_ner
from .trainable_head import TrainableHead

#: the default longest span, in tokens: the longest entity of the project's
#: NER training sets is 58 characters (Resume; MSRA 35, CLUENER 44, Weibo 11).
#: 0 (no limit) scores and may predict n² spans per doc.
DEFAULT_MAX_LENGTH = 64
#: per doc, at most this many predictions per token and label (the best ones):
#: an undertrained model can score nearly every cell above the threshold
MAX_SPANS_PER_TOKEN = 1


def _is_finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


class SpanNER(TrainableHead):
    """Entities, nested ones included, from a span-scoring (pointer) head."""

    config_settings = ("spans_key", "max_length", "threshold", "on_nonfinite")

    def __init__(
        self,
        vocab: Vocab,
        model: Model,
        name: str = "span_ner",
        *,
        spans_key: str = DEFAULT_SPAN_KEY,
        max_length: int = DEFAULT_MAX_LENGTH,
        threshold: float = 0.0,
        labels: Sequence[str] = (),
        scorer: Optional[Callable] = score_span_ner,
        on_nonfinite: str = "raise",
    ) -> None:
        check_on_nonfinite(name, on_nonfinite)
        if max_length < 0:
            raise ValueError(f"[{name}] max_length must be >= 0 (0: no limit), not {max_length}.")
        # a NaN threshold predicts no span and an infinite one none or all, silently
        # (spaCy's config check lets through a string that reads as one: "nan")
        if not _is_finite(threshold):
            raise ValueError(f"[{name}] threshold must be a finite number, not {threshold!r}.")
        self.vocab = vocab
        self.model = model
        self.name = name
        self.scorer = scorer
        self.cfg = {
            "labels": list(labels),
            "spans_key": spans_key,
            "max_length": int(max_length),
            "threshold": float(threshold),
            "on_nonfinite": on_nonfinite,
        }
        self._warned_cap = False

    def add_label(self, label: str) -> int:
        if label in self.labels:
            return 0
        if self.model.get_ref("span_projection").has_dim("nO"):
            raise ValueError(
                f"[{self.name}] cannot add label {label!r} after the model was initialized: "
                "pass all labels to initialize()."
            )
        self.cfg["labels"] = list(self.labels) + [label]
        return 1

    # --- prediction -----------------------------------------------------------

    def predict(self, docs: Iterable[Doc]) -> List[List[Prediction]]:
        """Per doc, the spans scoring above ``threshold`` as ``(start, end,
        label_id, score)`` (token offsets, end exclusive), best first; at
        most :data:`MAX_SPANS_PER_TOKEN` per token and label (the best ones,
        with a warning the first time a doc reaches the cap)."""
        docs = list(docs)
        if not any(len(doc) for doc in docs):
            return [[] for _ in docs]
        self._require_initialized("predict")
        projections = self.model.predict(docs)
        caps = [MAX_SPANS_PER_TOKEN * len(doc) * len(self.labels) for doc in docs]
        preds = span_model.predict_spans(
            self.model, projections, self.cfg["max_length"], self.cfg["threshold"], max_spans=caps
        )
        full = next((i for i, (p, cap) in enumerate(zip(preds, caps)) if cap and len(p) >= cap), None)
        if full is not None and not self._warned_cap:
            self._warned_cap = True
            warnings.warn(
                f"[{self.name}] doc {quote_text(docs[full], 40)}: as many spans scored above the "
                f"threshold as the cap allows ({caps[full]}: {MAX_SPANS_PER_TOKEN} per token and label); "
                "only the best are kept. The model is probably undertrained, or threshold too low. "
                "(Reported once.)",
                stacklevel=2,
            )
        return preds

    def span_scores(self, docs: Iterable[Doc]) -> List[numpy.ndarray]:
        """Per doc, the full score table ``[n_labels, n, n]`` (``[l, i, j]``:
        tokens i..j, both included; only ``i <= j`` is meaningful). With a
        listener upstream, pass docs the shared encoder has already run over
        (e.g. the output of ``nlp``), as for any listening component."""
        docs = list(docs)
        if not any(len(doc) for doc in docs):
            return [numpy.zeros((len(self.labels), len(d), len(d)), dtype="f") for d in docs]
        self._require_initialized("span_scores")
        return span_model.all_scores(self.model, self.model.predict(docs))

    def set_annotations(self, docs: Iterable[Doc], predictions: List[List[Prediction]]) -> None:
        labels, key = self.labels, self.cfg["spans_key"]
        for doc, preds in zip(docs, predictions):
            preds = [p for p in preds if not (doc[p[0]].is_space or doc[p[1] - 1].is_space)]
            spans = [Span(doc, s, e, label=labels[label]) for s, e, label, _ in preds]
            doc.spans[key] = SpanGroup(
                doc, name=key, spans=spans, attrs={"scores": numpy.asarray([p[3] for p in preds], dtype="f")}
            )
            write_greedy_entities(doc, [(s, e, labels[label]) for s, e, label, _ in preds])

    def _is_initialized(self) -> bool:
        return span_model.is_initialized(self.model)

    # --- training -------------------------------------------------------------

    def get_loss(self, examples: Iterable[Example], projections: List[Floats2d]):
        """Multilabel categorical cross-entropy over the span cells, summed over docs and labels."""
        examples = list(examples)
        validate_examples(examples, "SpanNER.get_loss")
        gold = [gold_cells(eg, self.labels, self.cfg["spans_key"]) for eg in examples]
        return span_model.span_loss(self.model, projections, gold, self.cfg["max_length"])

    def initialize(
        self,
        get_examples: Callable[[], Iterable[Example]],
        *,
        nlp: Optional[Language] = None,
        labels: Optional[Sequence[str]] = None,
    ) -> None:
        """Set the labels (given, or found in the examples' entities and span
        groups plus those added before) and the model's shapes."""
        examples = list(islice(get_examples(), 1000))
        if examples:
            validate_get_examples(get_examples, "SpanNER.initialize")
        if labels is None:
            found = set(self.labels)
            key = self.cfg["spans_key"]
            for eg in get_examples():
                found.update(ent.label_ for ent in eg.reference.ents)
                if key in eg.reference.spans:
                    found.update(s.label_ for s in eg.reference.spans[key])
            labels = sorted(found)
        if not labels:
            raise ValueError(
                f"[{self.name}] initialize() found no entity labels in the examples "
                f"(doc.ents or doc.spans[{self.cfg['spans_key']!r}]) and none were given."
            )
        self.cfg["labels"] = list(labels)
        layer = self.model.get_ref("span_projection")
        if layer.has_dim("nO") and layer.get_dim("nO") != len(labels):
            raise ValueError(
                f"[{self.name}] the model's nO is {layer.get_dim('nO')} but there are "
                f"{len(labels)} labels {list(labels)}."
            )
        layer.set_dim("nO", len(labels))
        docs = [eg.reference for eg in examples[:10]] or [Doc(self.vocab, words=["x"])]
        self.model.initialize(X=docs)


def write_greedy_entities(doc: Doc, spans: Sequence[tuple]) -> None:
    """Set ``doc.ents`` from ``(start, end, label)`` spans sorted best first:
    each span that overlaps neither a kept span nor an entity already on the
    doc is kept; the other free tokens are outside."""
    taken = preset_entity_tokens(doc)
    preset = taken.any()
    taken = taken.copy()
    kept = []
    for start, end, label in spans:
        if not taken[start:end].any():
            taken[start:end] = True
            kept.append(Span(doc, start, end, label=label))
    if not preset:
        doc.set_ents(kept, default="outside")
        return
    outside = [Span(doc, i, i + 1) for i in numpy.flatnonzero(~taken).tolist()]
    doc.set_ents(kept, outside=outside, default="unmodified")


def gold_cells(eg: Example, labels: Sequence[str], spans_key: str) -> Optional[numpy.ndarray]:
    """int8 ``[n_labels, n, n]`` over the predicted tokens (see the module
    doc): :data:`POSITIVE` at gold spans, :data:`UNKNOWN` where the gold is
    unknown, :data:`NEGATIVE` elsewhere; None when the doc has no gold."""
    ref, pred = eg.reference, eg.predicted
    if spans_key in ref.spans:
        spans, missing = list(ref.spans[spans_key]), []
    elif ref.has_annotation("ENT_IOB"):
        spans, missing = list(ref.ents), [t for t in ref if t.ent_iob == 0]
    else:
        return None
    n = len(pred)
    cells = numpy.full((len(labels), n, n), NEGATIVE, dtype="int8")
    label_ids = {label: i for i, label in enumerate(labels)}
    for token in missing:
        p = pred.char_span(token.idx, token.idx + len(token), alignment_mode="expand")
        if p is not None:
            cells[:, p.start : p.end, :] = UNKNOWN
            cells[:, :, p.start : p.end] = UNKNOWN
    for span in spans:
        label = label_ids.get(span.label_)
        if label is None:
            continue
        p = pred.char_span(span.start_char, span.end_char)
        if p is not None:
            cells[label, p.start, p.end - 1] = POSITIVE
            continue
        p = pred.char_span(span.start_char, span.end_char, alignment_mode="expand")
        if p is not None:
            cells[label, p.start : p.end, :] = UNKNOWN
            cells[label, :, p.start : p.end] = UNKNOWN
    return cells
