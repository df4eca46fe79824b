"""Scorers for the ``crf_tagger`` schemes, registered by name.

Word segmentation is scored as spans of characters: a predicted word is
correct when its start and end offsets match a reference word (the SIGHAN
bakeoff definition). Entities and tags use spaCy's own scorers so that the
keys (``ents_p/r/f``, ``ents_per_type``, ``tag_acc``) and their maths match
every other spaCy pipeline.
"""

import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from spacy.scorer import PRFScore, Scorer, get_ner_prf
from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import registry

from ..corpora.sighan import read_word_set
from ..doc_keys import DEFAULT_SPAN_KEY, DEFAULT_SPANS_KEY, has_gold_words
from ..ml.schemes import BMES_TAGS, tags_to_spans


def predicted_words(doc: Doc, spans_key: Optional[str] = DEFAULT_SPANS_KEY) -> Set[Tuple[int, int]]:
    """Character offsets of the words a segmenter predicted.

    Uses the span group if present (before the merge step), else the tokens
    (after merging characters into word tokens); ``spans_key=None`` scores
    the tokens whatever groups the doc has (what a user of the pipeline
    reads as words). Whitespace is never a word.
    """
    if spans_key is not None and spans_key in doc.spans:
        spans = doc.spans[spans_key]
        return {(s.start_char, s.end_char) for s in spans if not s.text.isspace()}
    return reference_words(doc)


def reference_words(doc: Doc) -> Set[Tuple[int, int]]:
    return {(t.idx, t.idx + len(t)) for t in doc if not t.is_space}


def count_matches(prf: PRFScore, gold: Set[Tuple], pred: Set[Tuple]) -> None:
    """Add one doc's gold and predicted items (words as character offsets,
    entities as offsets and label) to ``prf``: exact matches are hits."""
    prf.tp += len(gold & pred)
    prf.fp += len(pred - gold)
    prf.fn += len(gold - pred)


def _words_prf(prf: PRFScore) -> Dict[str, Any]:
    """``words_p/r/f``, None when no doc had a word to score."""
    if prf.tp + prf.fp + prf.fn == 0:
        return {"words_p": None, "words_r": None, "words_f": None}
    return {"words_p": prf.precision, "words_r": prf.recall, "words_f": prf.fscore}


def score_words(
    examples: Iterable[Example],
    spans_key: Optional[str] = DEFAULT_SPANS_KEY,
    iv_words: Optional[Set[str]] = None,
    **kwargs: Any,
) -> Dict[str, Any]:
    """Word P/R/F (``words_p``, ``words_r``, ``words_f``) over character spans.

    With ``iv_words`` (the training word list), also ``words_oov_recall`` and
    ``words_iv_recall``: recall of reference words outside / inside the list.
    Reference docs marked as having no gold words (:data:`NO_GOLD_WORDS`) are
    skipped, as spaCy's NER scorer skips docs without entity annotation.
    """
    prf = PRFScore()
    oov_found = oov_total = iv_found = iv_total = 0
    for eg in examples:
        if not has_gold_words(eg.reference):
            continue
        gold = reference_words(eg.reference)
        pred = predicted_words(eg.predicted, spans_key)
        count_matches(prf, gold, pred)
        if iv_words is not None:
            text = eg.reference.text
            for start, end in gold:
                hit = (start, end) in pred
                if text[start:end] in iv_words:
                    iv_total += 1
                    iv_found += hit
                else:
                    oov_total += 1
                    oov_found += hit
    scores = _words_prf(prf)
    if iv_words is not None:
        scores["words_oov_recall"] = oov_found / oov_total if oov_total else None
        scores["words_iv_recall"] = iv_found / iv_total if iv_total else None
    return scores


def word_offsets_from_tags(tags: Sequence[str], doc: Doc) -> List[Tuple[int, int]]:
    """Token ranges ``(start, end)`` of the words encoded by BMES ``tags``
    (one per token of ``doc``, e.g. a softmax tagger's ``tag_``).

    Greedy, tolerant decoding (:func:`spacy_crf.ml.schemes.tags_to_spans`): a
    word starts at ``B``/``S`` and after ``E``/``S``, and ends after ``E``/``S``;
    a whitespace token is a word of its own. Unknown tags count as ``S``."""
    seq = [None if token.is_space else tag if tag in BMES_TAGS else "S" for tag, token in zip(tags, doc)]
    words = [(start, end) for start, end, _ in tags_to_spans("bmes", seq)]
    words.extend((token.i, token.i + 1) for token in doc[: len(seq)] if token.is_space)
    return sorted(words)


def tagged_words(doc: Doc) -> Set[Tuple[int, int]]:
    """Character offsets of the words the tokens' BMES ``tag_`` encode
    (whitespace is never a word)."""
    return {
        (doc[s].idx, doc[e - 1].idx + len(doc[e - 1]))
        for s, e in word_offsets_from_tags([t.tag_ for t in doc], doc)
        if not doc[s].is_space
    }


def score_bmes_tag_words(examples: Iterable[Example], **kwargs: Any) -> Dict[str, Any]:
    """For a character tagger on BMES tags (spaCy's ``tagger``, the softmax
    segmentation baseline): spaCy's ``tag_acc``, and word P/R/F (``words_p/r/f``)
    of the words its tags encode, so that it is scored, and its ``model-best``
    picked, like the CRF segmenter. Gold words come from the reference's BMES
    tags, or from its tokens where it has no tags (word-tokenized docs)."""
    examples = list(examples)
    scores = Scorer.score_token_attr(examples, "tag", **kwargs)
    prf = PRFScore()
    for eg in examples:
        gold = tagged_words(eg.reference) if eg.reference.has_annotation("TAG") else reference_words(eg.reference)
        count_matches(prf, gold, tagged_words(eg.predicted))
    scores.update(_words_prf(prf))
    return scores


def score_ents(examples: Iterable[Example], **kwargs: Any) -> Dict[str, Any]:
    """``ents_p``, ``ents_r``, ``ents_f`` and ``ents_per_type``, as spaCy's ``ner``."""
    return get_ner_prf(examples)


def score_ents_seen(examples: Iterable[Example], seen_ents: Set[Tuple[str, str]]) -> Dict[str, Any]:
    """Recall of the reference entities whose ``(text, label)`` is in
    ``seen_ents`` (the training entities: ``ents_seen_recall``) and of the
    others (``ents_unseen_recall``): for NER what ``words_iv_recall`` and
    ``words_oov_recall`` are for words. "Seen" is the definition of
    :func:`spacy_crf.corpora.rates.seen_entity_rate`, so the two recalls
    split the dev set the way its seen-entity rate does. An entity is found
    when a predicted entity has its character offsets and label; docs without
    entity annotation are skipped, as spaCy's NER scorer skips them. A
    recall is None where no reference entity falls on its side.
    """
    found = {True: 0, False: 0}
    total = {True: 0, False: 0}
    for eg in examples:
        if not eg.reference.has_annotation("ENT_IOB"):
            continue
        predicted = {(e.start_char, e.end_char, e.label_) for e in eg.predicted.ents}
        for ent in eg.reference.ents:
            seen = (ent.text, ent.label_) in seen_ents
            total[seen] += 1
            found[seen] += (ent.start_char, ent.end_char, ent.label_) in predicted
    return {
        "ents_seen_recall": found[True] / total[True] if total[True] else None,
        "ents_unseen_recall": found[False] / total[False] if total[False] else None,
    }


def score_tags(examples: Iterable[Example], **kwargs: Any) -> Dict[str, Any]:
    """``tag_acc``, as spaCy's ``tagger``."""
    return Scorer.score_token_attr(examples, "tag", **kwargs)


def score_crf_tagger(examples: Iterable[Example], scheme: str = "bio", **kwargs: Any) -> Dict[str, Any]:
    """Dispatch on the pipe's scheme (spaCy passes the pipe's cfg as kwargs)."""
    if scheme == "bmes":
        return score_words(examples, **kwargs)
    if scheme in ("bio", "bioes"):
        return score_ents(examples, **kwargs)
    return score_tags(examples, **kwargs)


@registry.scorers("spacy_crf.crf_scorer.v1")
def make_crf_scorer() -> Callable:
    return score_crf_tagger


@registry.scorers("spacy_crf.words_scorer.v1")
def make_words_scorer() -> Callable:
    return score_words


@registry.scorers("spacy_crf.words_scorer.v2")
def make_words_scorer_v2(iv_words: Optional[Path] = None) -> Callable:
    """:func:`score_words`; with ``iv_words`` (the training words: a
    word-tokenized ``.spacy`` corpus or a one-word-a-line list, see
    :func:`spacy_crf.corpora.read_word_set`) also ``words_oov_recall`` and
    ``words_iv_recall`` at every evaluation, so that a training log shows
    the OOV recall rise or fall with the steps.

    The list is read at the first scoring, not when the pipeline is built:
    a trained pipeline whose config names it loads anywhere. Where the file
    is missing at that point, a warning names it and only P/R/F are scored.
    """
    if iv_words is None:
        return score_words
    cache: Dict[str, Optional[Set[str]]] = {}

    def words() -> Optional[Set[str]]:
        if "words" not in cache:
            if Path(iv_words).exists():
                cache["words"] = read_word_set(iv_words)
            else:
                warnings.warn(
                    f"spacy_crf.words_scorer.v2: the training word list {str(iv_words)!r} does not exist "
                    "(relative to the working directory); OOV and IV recall are not scored",
                    stacklevel=2,
                )
                cache["words"] = None
        return cache["words"]

    def score(examples: Iterable[Example], **kwargs: Any) -> Dict[str, Any]:
        kwargs.pop("iv_words", None)
        return score_words(examples, iv_words=words(), **kwargs)

    return score


@registry.scorers("spacy_crf.ents_scorer.v1")
def make_ents_scorer() -> Callable:
    return score_ents


@registry.scorers("spacy_crf.tags_scorer.v1")
def make_tags_scorer() -> Callable:
    return score_tags


@registry.scorers("spacy_crf.bmes_tag_words_scorer.v1")
def make_bmes_tag_words_scorer() -> Callable:
    return score_bmes_tag_words


def score_span_ner(examples: Iterable[Example], spans_key: str = DEFAULT_SPAN_KEY, **kwargs) -> Dict:
    """``ents_p/r/f`` + ``ents_per_type`` (``doc.ents``, as spaCy's ``ner``) and
    ``spans_{spans_key}_p/r/f`` + ``_per_type`` (the span group, overlaps allowed,
    over reference docs that have that group)."""
    examples = list(examples)
    scores = dict(get_ner_prf(examples))
    scores.update(
        Scorer.score_spans(
            examples,
            f"spans_{spans_key}",
            getter=lambda doc, attr: doc.spans.get(spans_key, []),
            has_annotation=lambda doc: spans_key in doc.spans,
            labeled=True,
            allow_overlap=True,
        )
    )
    return scores


@registry.scorers("spacy_crf.span_scorer.v1")
def make_span_scorer() -> Callable:
    return score_span_ner
