"""The trainable CRF tagger component (:class:`CRFTagger`).

Its factories (``crf_tagger``, ``crf_ner``, ``crf_segmenter``) are in
:mod:`spacy_crf.factories`. What the tagger learns and writes depends on
``scheme``:

* ``"bmes"``: word segmentation over character tokens. Gold word boundaries
  come from the *reference tokens* through ``Example`` alignment. Predicted
  words are written as the span group ``doc.spans[spans_key]``; the doc is
  not retokenized, so other components listening to the same transformer
  keep working. ``crf_merge_words`` turns the words into tokens at the end.
* ``"bio"`` / ``"bioes"``: entities, learned from and written to ``doc.ents``.
* ``"tag"``: ``token.tag_``, with no transition constraints.
"""
import warnings
from itertools import islice
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy
from thinc.api import Model
from thinc.types import Floats2d, Ints1d
from spacy.language import Language
from spacy.pipeline import TrainablePipe
from spacy.tokens import Doc, Span, SpanGroup
from spacy.training import Example, validate_examples, validate_get_examples
from spacy.util import minibatch
from spacy.vocab import Vocab

from . import model as crf_model
from .schemes import (
    SchemeError,
    TransitionMask,
    check_labels,
    check_scheme,
    from_biluo,
    make_tags,
    position_tag,
    tags_to_spans,
    transition_mask,
)
from .scorers import score_crf_tagger
from .transitions import TransitionTable
from .util import DEFAULT_SPANS_KEY, has_gold_words, quote_text

UNKNOWN = -1


class CRFTagger(TrainablePipe):
    """Label token sequences with a linear-chain CRF over token features."""

    def __init__(
        self,
        vocab: Vocab,
        model: Model,
        name: str = "crf_tagger",
        *,
        scheme: str = "bio",
        spans_key: str = DEFAULT_SPANS_KEY,
        constrain_training: bool = True,
        max_batch_items: int = 4096,
        labels: Sequence[str] = (),
        scorer: Optional[Callable] = score_crf_tagger,
    ) -> None:
        self.vocab = vocab
        self.model = model
        self.name = name
        self.scorer = scorer
        self.cfg = {
            "scheme": check_scheme(scheme),
            "labels": check_labels(scheme, labels),
            "spans_key": spans_key,
            "constrain_training": constrain_training,
            "max_batch_items": max_batch_items,
        }
        self._mask_cache: Tuple[Tuple[str, ...], Optional[TransitionMask]] = ((), None)
        crf_model.install_fork_hook()

    # --- labels and tags ------------------------------------------------------

    @property
    def scheme(self) -> str:
        return self.cfg["scheme"]

    @property
    def labels(self) -> Tuple[str, ...]:
        return tuple(self.cfg["labels"])

    @property
    def tags(self) -> List[str]:
        """The tag inventory; tag ids index this list."""
        return make_tags(self.scheme, self.labels)

    @property
    def label_data(self) -> List[str]:
        return list(self.labels)

    @property
    def constraints(self) -> TransitionMask:
        tags = tuple(self.tags)
        if self._mask_cache[0] != tags:
            self._mask_cache = (tags, transition_mask(self.scheme, tags))
        return self._mask_cache[1]

    def add_label(self, label: str) -> int:
        if self.scheme == "bmes":
            raise ValueError(f"[{self.name}] scheme 'bmes' has no labels to add.")
        if label in self.labels:
            return 0
        if self.model.has_dim("nO") and self.model.get_ref("emissions").has_dim("nO"):
            raise ValueError(
                f"[{self.name}] cannot add label {label!r} after the model was "
                "initialized: the number of tags is fixed. Pass all labels to "
                "initialize()."
            )
        self.cfg["labels"] = check_labels(self.scheme, list(self.labels) + [label])
        return 1

    # --- prediction -----------------------------------------------------------

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """Annotate a stream of docs, in order, predicting length-sorted sub-batches."""
        error_handler = self.get_error_handler()
        max_items = self.cfg.get("max_batch_items", 4096)
        for docs in minibatch(stream, size=batch_size):
            docs = list(docs)
            try:
                for indices in batch_by_length([len(doc) for doc in docs], max_items):
                    sub_batch = [docs[i] for i in indices]
                    self.set_annotations(sub_batch, self.predict(sub_batch))
                yield from docs
            except Exception as e:
                error_handler(self.name, self, docs, e)

    def predict(self, docs: Iterable[Doc]) -> List[Ints1d]:
        """Best tag ids per doc (constrained Viterbi, or argmax without a CRF)."""
        docs = list(docs)
        if not any(len(doc) for doc in docs):
            return [numpy.zeros((len(doc),), dtype="int64") for doc in docs]
        scores = self.model.predict(docs)
        return crf_model.decode(self.model, scores, self.constraints)

    def predict_marginals(self, docs: Iterable[Doc]) -> List[Floats2d]:
        """Per-token tag posteriors [n_tokens, n_tags] per doc (confidences)."""
        docs = list(docs)
        if not any(len(doc) for doc in docs):
            return [numpy.zeros((len(doc), len(self.tags)), dtype="f") for doc in docs]
        scores = self.model.predict(docs)
        return crf_model.marginals(self.model, scores, self.constraints)

    def set_annotations(self, docs: Iterable[Doc], tag_ids: List[Ints1d]) -> None:
        tags = self.tags
        for doc, ids in zip(docs, tag_ids):
            doc_tags = [tags[i] for i in ids]
            if self.scheme == "tag":
                for token, tag in zip(doc, doc_tags):
                    token.tag_ = tag
                continue
            # A whitespace token is never part of a word or an entity: it
            # closes any open span (the gold treats it as O / unknown too).
            seq = [None if t.is_space else tag for t, tag in zip(doc, doc_tags)]
            spans = tags_to_spans(self.scheme, seq)
            if self.scheme == "bmes":
                key = self.cfg["spans_key"]
                doc.spans[key] = SpanGroup(doc, name=key, spans=[Span(doc, s, e) for s, e, _ in spans])
            else:
                doc.set_ents([Span(doc, s, e, label=label) for s, e, label in spans], default="outside")

    # --- training -------------------------------------------------------------

    def get_loss(self, examples: Iterable[Example], scores: List[Floats2d]) -> Tuple[float, List[Floats2d]]:
        """Negative log-likelihood of the gold tags, summed over the docs."""
        validate_examples(examples, "CRFTagger.get_loss")
        gold = [self._gold_tag_ids(eg) for eg in examples]
        return crf_model.crf_loss(
            self.model,
            scores,
            gold,
            self.constraints,
            constrain_training=self.cfg["constrain_training"],
        )

    def _gold_tag_ids(self, eg: Example) -> numpy.ndarray:
        """Gold tag ids over the predicted tokens; -1 where the gold is unknown."""
        index = {tag: i for i, tag in enumerate(self.tags)}
        if self.scheme == "bmes":
            return bmes_gold(eg, index)
        if self.scheme == "tag":
            gold = eg.get_aligned("TAG", as_string=True)
            return numpy.array([index.get(t, UNKNOWN) if t else UNKNOWN for t in gold], dtype="int64")
        x_ents, biluo = eg.get_aligned_ents_and_ner()
        if len(x_ents) < len(eg.reference.ents):
            aligned = {(e.start_char, e.end_char) for e in x_ents}
            lost = [e for e in eg.reference.ents if (e.start_char, e.end_char) not in aligned]
            one = len(lost) == 1
            warnings.warn(
                f"[{self.name}] {len(lost)} gold entit{'y' if one else 'ies'} of doc "
                f"{quote_text(eg.reference, 60)} {'does' if one else 'do'} not align with its "
                f"tokens and {'is' if one else 'are'} treated as unknown in training: "
                + ", ".join(f"{e.text!r} ({e.label_}, chars {e.start_char}-{e.end_char})" for e in lost)
            )
        ids = numpy.full(len(biluo), UNKNOWN, dtype="int64")
        for i, tag in enumerate(biluo):
            if tag is None or tag == "-":
                continue
            tag = from_biluo(tag, self.scheme)
            if tag in index:
                ids[i] = index[tag]
            else:
                warnings.warn(
                    f"[{self.name}] doc {quote_text(eg.reference, 60)}: gold label of tag "
                    f"{tag!r} is not among the labels {list(self.labels)}; treated as unknown."
                )
        return ids

    def initialize(
        self,
        get_examples: Callable[[], Iterable[Example]],
        *,
        nlp: Optional[Language] = None,
        labels: Optional[Sequence[str]] = None,
    ) -> None:
        """Set the labels (given, or read from the examples) and the model's shapes.

        labels: entity types ("bio"/"bioes") or tags ("tag"), e.g. from
            ``[initialize.components.NAME.labels]``. Leave unset for "bmes".
        """
        examples = list(islice(get_examples(), 1000))
        if not examples and labels is None:
            raise ValueError(
                f"[{self.name}] initialize() got no examples and no labels: the "
                "tagger cannot know its tag set. Check the training corpus path, "
                "or pass labels."
            )
        if examples:
            validate_get_examples(get_examples, "CRFTagger.initialize")
        if labels is None:
            labels = self._labels_from(get_examples())
        try:
            self.cfg["labels"] = check_labels(self.scheme, labels)
            tags = self.tags
        except SchemeError as e:
            raise ValueError(f"[{self.name}] {e}") from None
        if self.scheme in ("bio", "bioes", "tag") and not self.labels:
            what = "entities" if self.scheme != "tag" else "tags"
            raise ValueError(
                f"[{self.name}] scheme {self.scheme!r} found no {what} in the "
                "training examples and no labels were given."
            )
        n_tags = len(tags)
        for ref in ("emissions", "crf"):
            if self.model.has_ref(ref):
                layer = self.model.get_ref(ref)
                if layer.has_dim("nO") and layer.get_dim("nO") != n_tags:
                    raise ValueError(
                        f"[{self.name}] the model's nO is {layer.get_dim('nO')} but the "
                        f"scheme {self.scheme!r} with labels {list(self.labels)} has {n_tags} tags."
                    )
                layer.set_dim("nO", n_tags)
        docs = [eg.reference for eg in examples[:10]] or [Doc(self.vocab, words=["x"])]
        self.model.initialize(X=docs)

    def _labels_from(self, examples: Iterable[Example]) -> List[str]:
        found = set()
        for eg in examples:
            if self.scheme in ("bio", "bioes"):
                found.update(ent.label_ for ent in eg.reference.ents)
            elif self.scheme == "tag":
                found.update(t.tag_ for t in eg.reference if t.tag_)
        return sorted(found)

    # --- inspection -----------------------------------------------------------

    def transition_table(self) -> TransitionTable:
        """The learned transition, start and end scores, labelled by tag."""
        transitions, start, end = crf_model.transition_scores(self.model)
        return TransitionTable(self.tags, transitions, start, end, self.constraints)


def batch_by_length(lengths: Sequence[int], max_items: int) -> List[List[int]]:
    """Indices of docs grouped by length (shortest first) so that a group padded to
    its longest doc has at most ``max_items`` tokens; one group when ``max_items`` is 0.
    A doc longer than ``max_items`` is a group of its own.

    The grouping of ``spacy_transformers.util.batch_by_length``, which is not
    imported here: that module loads ``transformers`` on import, a cost every
    pipeline with a ``crf_tagger`` would pay at start-up, transformer or not."""
    if not max_items:
        return [list(range(len(lengths)))] if len(lengths) else []
    batches: List[List[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if batches and lengths[i] * (len(batches[-1]) + 1) <= max_items:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def bmes_gold(eg: Example, index: Optional[Dict[str, int]] = None) -> numpy.ndarray:
    """BMES tag ids of the predicted tokens from the reference tokens (words).

    A predicted token gets a tag when the alignment maps it into exactly one
    reference word; its position inside that word (by character offsets)
    gives B, M, E or S (:func:`~spacy_crf.schemes.position_tag`). Whitespace
    and tokens spanning several words are unknown (-1), which the CRF
    marginalises over; so is every token of a reference marked as having no
    gold words (an NER doc in joint training).

    index: tag -> id; defaults to the ``bmes`` inventory of :func:`make_tags`.
    """
    if index is None:
        index = {tag: i for i, tag in enumerate(make_tags("bmes", ()))}
    if not has_gold_words(eg.reference):
        return numpy.full(len(eg.predicted), UNKNOWN, dtype="int64")
    x2y = eg.alignment.x2y
    lengths, flat = x2y.lengths, x2y.data
    offsets = numpy.concatenate([[0], numpy.cumsum(lengths)[:-1]]) if len(lengths) else lengths
    ref = eg.reference
    ids = numpy.full(len(eg.predicted), UNKNOWN, dtype="int64")
    for i, token in enumerate(eg.predicted):
        if lengths[i] != 1 or token.is_space:
            continue
        word = ref[int(flat[offsets[i]])]
        if word.is_space:
            continue
        start, end = token.idx, token.idx + len(token)
        ids[i] = index[position_tag("bmes", start == word.idx, end == word.idx + len(word))]
    return ids
