"""How much of an evaluation split a model has already seen in training:
the OOV rate of its words (segmentation) and the share of its entity
mentions that also occur in training (NER).

Both predict how hard a split is. A dev set carved as random single lines
of an article-ordered corpus has most of its words and names in the
neighbouring training lines, so it is easier than the official test; these
rates show it before any model is trained (``project/scripts/dev_rates.py``
and the corpus manifest).

The definitions follow the project's scores: a word is OOV exactly when
:func:`spacy_crf.pipeline.scorers.score_words` counts it in ``words_oov_recall``
against the training word set of :func:`spacy_crf.corpora.read_word_set`
(non-space tokens of docs with gold words); an entity mention is
``doc.ents`` as scored by ``ents_p/r/f``.
"""

from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

from spacy.tokens import Doc
from spacy.vocab import Vocab

from ..doc_keys import has_gold_words
from .base import PathLike, read_docbin

Mention = Tuple[str, str]


def doc_words(doc: Doc) -> List[str]:
    """The reference words of a word-tokenized doc (none for a doc marked as
    having no gold words); whitespace is never a word."""
    if not has_gold_words(doc):
        return []
    return [t.text for t in doc if not t.is_space]


def doc_mentions(doc: Doc) -> List[Mention]:
    """``(text, label)`` of each entity of ``doc``."""
    return [(ent.text, ent.label_) for ent in doc.ents]


def oov_rate(train_words: Iterable[Sequence[str]], eval_words: Iterable[Sequence[str]]) -> Dict[str, object]:
    """Share of the word tokens of ``eval_words`` (one word list per doc)
    whose text is not among the training words: ``{"words", "oov", "oov_rate"}``
    (``oov_rate`` None without words)."""
    vocab: Set[str] = set()
    for words in train_words:
        vocab.update(words)
    n = oov = 0
    for words in eval_words:
        n += len(words)
        oov += sum(1 for w in words if w not in vocab)
    return {"words": n, "oov": oov, "oov_rate": oov / n if n else None}


def seen_entity_rate(
    train_mentions: Iterable[Sequence[Mention]], eval_mentions: Iterable[Sequence[Mention]]
) -> Dict[str, object]:
    """Share of the entity mentions of ``eval_mentions`` (one list of
    ``(text, label)`` per doc) that also occur in training: by text alone
    (``seen_text_rate``: the name was seen, with any label) and by text and
    label (``seen_rate``: the same entity was seen). Rates are None without
    mentions."""
    texts: Set[str] = set()
    pairs: Set[Mention] = set()
    for mentions in train_mentions:
        for text, label in mentions:
            texts.add(text)
            pairs.add((text, label))
    n = seen = seen_text = 0
    for mentions in eval_mentions:
        for mention in mentions:
            n += 1
            seen += mention in pairs
            seen_text += mention[0] in texts
    return {
        "entities": n,
        "seen": seen,
        "seen_rate": seen / n if n else None,
        "seen_text": seen_text,
        "seen_text_rate": seen_text / n if n else None,
    }


def split_rates(task: str, train_docs: Iterable[Doc], eval_docs: Iterable[Doc]) -> Dict[str, object]:
    """:func:`oov_rate` (``task == "cws"``) or :func:`seen_entity_rate` (NER)
    of ``eval_docs`` against ``train_docs``."""
    if task == "cws":
        return oov_rate(map(doc_words, train_docs), map(doc_words, eval_docs))
    return seen_entity_rate(map(doc_mentions, train_docs), map(doc_mentions, eval_docs))


def read_docs(path: PathLike, vocab: Optional[Vocab] = None) -> Iterable[Doc]:
    """The docs of a ``.spacy`` file."""
    return read_docbin(path, vocab)


def mention_set(docs: Iterable[Doc]) -> Set[Mention]:
    """``(text, label)`` of every entity of ``docs``: given the training docs,
    the entities that :func:`spacy_crf.pipeline.scorers.score_ents_seen`
    counts as seen."""
    mentions: Set[Mention] = set()
    for doc in docs:
        mentions.update(doc_mentions(doc))
    return mentions


def file_rates(task: str, train_path: PathLike, eval_path: PathLike) -> Dict[str, object]:
    """:func:`split_rates` of two ``.spacy`` files. Splitting long docs keeps
    every word and entity, so the converted files give the rates of the
    corpus lines they hold."""
    vocab = Vocab()
    return split_rates(task, read_docs(train_path, vocab), read_docs(eval_path, vocab))
