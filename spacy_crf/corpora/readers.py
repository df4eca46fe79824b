"""Registered training readers: ``spacy_crf.CharCorpus.v1`` and
``spacy_crf.JointCorpus.v1`` over the ``.spacy`` files of :func:`convert_corpus`."""

import math
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import spacy
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Corpus, Example

from ..doc_keys import NO_GOLD_WORDS, doc_source
from ..util import check_number
from .base import PathLike
from .split import split_long


class CharCorpus(Corpus):
    """``spacy.Corpus`` for the docs written by :func:`convert_corpus`.

    ``spacy.Corpus.v1`` already builds ``Example(nlp.make_doc(ref.text), ref)``.
    This wrapper only changes what is unsafe for our docs:

    * ``max_length`` counts *characters* and long docs are split with
      :func:`split_long` (never inside a word or entity). ``spacy.Corpus.v1``
      counts reference tokens (words for CWS) and silently drops a longer doc
      unless it has sentence boundaries, which ours do not.
    * ``gold_preproc=True`` is refused: it would give the predicted doc the
      reference words as tokens, handing the segmenter the answer.
    * A reference doc with unknown spaces is refused: its text is not the
      raw text (spaCy would tokenize the predicted doc from the gold words).

    ``sort_by_length`` (dev sets) yields the examples shortest first; see
    :func:`by_length`.
    """

    def __init__(self, path: PathLike, *, max_length: int = 0, limit: int = 0, sort_by_length: bool = False) -> None:
        check_number("max_length", max_length, minimum=0, hint="0: no limit")
        check_number("limit", limit, minimum=0, hint="0: all docs")
        super().__init__(path, limit=limit, gold_preproc=False, max_length=0)
        self.max_chars = max_length
        self.sort_by_length = sort_by_length

    def __call__(self, nlp: Language) -> Iterator[Example]:
        examples = super().__call__(nlp)
        yield from by_length(examples) if self.sort_by_length else examples

    def make_examples(self, nlp: Language, reference_docs: Iterable[Doc]) -> Iterator[Example]:
        for reference in reference_docs:
            if reference.has_unknown_spaces:
                raise ValueError(
                    f"{self.path}: reference doc {doc_source(reference)} has unknown spaces, so its text is "
                    "not the raw text; write the corpus with convert-corpus"
                )
            for piece in split_long(reference, self.max_chars):
                if len(piece):
                    yield Example(nlp.make_doc(piece.text), piece)


def by_length(examples: Iterable[Example]) -> list:
    """The examples sorted by the length of their text, shortest first (stable).

    For dev sets: ``spacy train`` evaluates the dev stream in ``nlp.batch_size``
    batches in stream order, and the encoder pads each batch to its longest
    doc, so a batch that mixes lengths spends most of its time on padding.
    Scores are sums over examples and do not depend on their order.
    """
    return sorted(examples, key=lambda eg: len(eg.predicted.text))


@spacy.registry.readers("spacy_crf.CharCorpus.v1")
def create_char_corpus_reader(
    path: Path, max_length: int = 0, limit: int = 0, gold_preproc: bool = False, sort_by_length: bool = False
) -> Callable[[Language], Iterable[Example]]:
    """Reader of ``.spacy`` files from :func:`convert_corpus` (see :class:`CharCorpus`).

    max_length: split reference docs longer than this many characters (0: no limit).
    limit: read at most this many docs from the file(s) (0: all).
    gold_preproc: must be False (kept for config compatibility with spacy.Corpus.v1).
    sort_by_length: yield the examples shortest first, so that the batches of
        a dev evaluation hold docs of like length (faster; same scores). Not
        for training: the batcher makes its own order.
    """
    if path is None:
        raise ValueError("spacy_crf.CharCorpus.v1 needs a path")
    if gold_preproc:
        raise ValueError(
            "spacy_crf.CharCorpus.v1: gold_preproc=true would tokenize the predicted docs into the "
            "gold words, which gives the word segmenter the answer; set gold_preproc = false"
        )
    return CharCorpus(path, max_length=max_length, limit=limit, sort_by_length=sort_by_length)


class JointCorpus:
    """Word-segmentation docs and NER docs in one stream, for one transformer
    shared by a segmenter and an NER tagger (multi-task training).

    Each side keeps the other task's annotation *missing* rather than
    wrong: CWS docs have no entity annotation (``ENT_IOB`` unset, so the NER
    tagger's gold is unknown and spaCy's NER scorer skips them), and NER docs
    are marked with :data:`~spacy_crf.doc_keys.NO_GOLD_WORDS` (their character
    tokens are not words, so the segmenter's gold is unknown and word scores
    skip them).

    With ``balance`` (training), the stream interleaves the two tasks so that
    a share ``ents_share`` of its docs are NER docs (0.5: alternately one of
    each), cycling through the side that runs out first; a pass ends when
    both sides have been seen whole. MSRA is four times the size of SXU:
    ``ents_share`` above 0.5 gives NER more of each step.
    Without it (dev), every doc is yielded once: the CWS docs, then the NER
    docs, or, with ``sort_by_length``, all of them shortest first.
    """

    def __init__(
        self,
        words_path: PathLike,
        ents_path: PathLike,
        *,
        max_length: int = 0,
        limit: int = 0,
        balance: bool = True,
        ents_share: float = 0.5,
        sort_by_length: bool = False,
        augmenter: Optional[Callable[[Language, Example], Iterable[Example]]] = None,
    ) -> None:
        if balance and sort_by_length:
            raise ValueError(
                "spacy_crf.JointCorpus.v1: sort_by_length is for dev sets (balance = false): "
                "sorted, a training stream would no longer interleave the two tasks"
            )
        check_number("ents_share", ents_share, minimum=0.0, hint="the share of NER docs in the stream")
        if not 0.0 < ents_share < 1.0:
            raise ValueError(
                f"spacy_crf.JointCorpus.v1: ents_share must be between 0 and 1 (exclusive), "
                f"got {ents_share}: each task needs some of the stream."
            )
        self.words = CharCorpus(words_path, max_length=max_length, limit=limit)
        self.ents = CharCorpus(ents_path, max_length=max_length, limit=limit)
        self.balance = balance
        self.ents_share = float(ents_share)
        self.sort_by_length = sort_by_length
        self.augmenter = augmenter

    def __call__(self, nlp: Language) -> Iterator[Example]:
        words = list(self.words(nlp))
        ents = []
        for eg in self.ents(nlp):
            eg.reference.user_data[NO_GOLD_WORDS] = True
            ents.append(eg)
        for side, examples in (("words", words), ("ents", ents)):
            if not examples:
                raise ValueError(f"spacy_crf.JointCorpus.v1: the {side} corpus {getattr(self, side).path} has no docs")
        if not self.balance:
            yield from by_length(words + ents) if self.sort_by_length else words + ents
            return
        share = self.ents_share
        total = max(math.ceil(len(words) / (1 - share)), math.ceil(len(ents) / share))
        counts = {"words": 0, "ents": 0}
        for t in range(total):
            # NER at the steps where floor(t * share) goes up: exact shares, evenly spread
            side, examples = (
                ("ents", ents)
                if math.floor((t + 1) * share + 1e-9) > math.floor(t * share + 1e-9)
                else ("words", words)
            )
            i = counts[side]
            counts[side] += 1
            # a repeated example is a copy: training writes into predicted docs
            example = examples[i] if i < len(examples) else examples[i % len(examples)].copy()
            if self.augmenter is None:
                yield example
            else:
                yield from self.augmenter(nlp, example)


@spacy.registry.readers("spacy_crf.JointCorpus.v1")
def create_joint_corpus_reader(
    words: Optional[Path],
    ents: Optional[Path],
    max_length: int = 0,
    limit: int = 0,
    balance: bool = True,
    ents_share: float = 0.5,
    sort_by_length: bool = False,
    augmenter: Optional[Callable[[Language, Example], Iterable[Example]]] = None,
) -> Callable[[Language], Iterable[Example]]:
    """Reader of a CWS and an NER ``.spacy`` file (from :func:`convert_corpus`)
    for joint training of a segmenter and an NER tagger (see :class:`JointCorpus`).

    words: docs whose tokens are the gold words (e.g. SXU).
    ents: docs with gold entities on character tokens (e.g. MSRA).
    max_length: split reference docs longer than this many characters (0: no limit).
    limit: read at most this many docs from each file (0: all).
    balance: interleave the tasks, cycling the side that runs out first (training).
    ents_share: with balance, the share of NER docs in the stream (0.5: as
        many of each).
    sort_by_length: without balance, yield the docs of both tasks shortest
        first, so that the batches of a dev evaluation hold docs of like
        length (faster; same scores).
    augmenter: a spaCy augmenter applied to the training stream (with
        balance), e.g. ``spacy_crf.mention_replacement.v1``; null: none.
    """
    if words is None or ents is None:
        raise ValueError("spacy_crf.JointCorpus.v1 needs both a words path and an ents path")
    return JointCorpus(
        words,
        ents,
        max_length=max_length,
        limit=limit,
        balance=balance,
        ents_share=ents_share,
        sort_by_length=sort_by_length,
        augmenter=augmenter,
    )
