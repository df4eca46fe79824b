"""Splitting long docs (never inside a word, entity or span) and carving a
dev set out of a training corpus."""
import random
import unicodedata
from collections import Counter
from typing import List, Optional, Sequence, Tuple

from spacy.tokens import Doc, Span, SpanGroup

from ..util import SOURCE_KEY, doc_source

#: Sentence-final punctuation: preferred places to split a long doc.
SENTENCE_PUNCT = "。！？；…!?;"
#: Clause punctuation: the fallback places to split a long doc.
CLAUSE_PUNCT = "，,、：:"
#: Closing quotes and brackets that may follow the punctuation of a split point.
_CLOSERS = "”’」』）)》〉】〕]}\"'"


class SplitError(ValueError):
    """A doc cannot be split into pieces of at most ``max_chars`` characters."""


def _protected_spans(doc: Doc) -> List[Span]:
    spans = list(doc.ents)
    for group in doc.spans.values():
        spans.extend(group)
    return spans


def _alnum(ch: str) -> bool:
    return unicodedata.category(ch) == "Nd" or (ch.isalpha() and "LATIN" in unicodedata.name(ch, ""))


#: Kinds of cut of :func:`split_long`, from the least to the most preferred.
CUT_KINDS = ("hard", "token", "clause", "sentence")


def _boundary_level(text: str, start_char: int, cut: int) -> int:
    """Index in :data:`CUT_KINDS` of a cut at char ``cut``: after sentence
    punctuation, after clause punctuation, between tokens that are not both
    digits or Latin letters (``３６`` stays whole), or anywhere else."""
    before = text[start_char:cut].rstrip().rstrip(_CLOSERS)
    if before and before[-1] in SENTENCE_PUNCT:
        return 3
    if before and before[-1] in CLAUSE_PUNCT:
        return 2
    if cut > 0 and cut < len(text) and _alnum(text[cut - 1]) and _alnum(text[cut]):
        return 0
    return 1


def split_long(doc: Doc, max_chars: int, *, stats: Optional[Counter] = None) -> List[Doc]:
    """Split ``doc`` into docs of at most ``max_chars`` characters.

    Cuts go at token boundaries only (never inside a CWS reference word or a
    character token) and never inside an entity or a span of any span group.
    Each piece is as long as possible; its end is the last sentence
    punctuation (``。！？；…``, with any closing quotes after it) that fits,
    else the last clause punctuation (``，、：``), else the last allowed token
    boundary that is not inside a run of digits or Latin letters, else the
    last allowed token boundary. The pieces' texts concatenate to
    ``doc.text``; entities and span groups are carried over. A word or entity
    longer than ``max_chars`` raises :class:`SplitError`. ``max_chars <= 0``
    means no limit. ``stats`` counts the cuts by kind (:data:`CUT_KINDS`).
    """
    text = doc.text
    if max_chars <= 0 or len(text) <= max_chars:
        return [doc]
    n = len(doc)
    blocked = [False] * (n + 1)
    for span in _protected_spans(doc):
        for i in range(span.start + 1, span.end):
            blocked[i] = True
    char_at = [token.idx for token in doc] + [len(text)]
    pieces: List[Doc] = []
    start = 0
    while len(text) - char_at[start] > max_chars:
        limit = char_at[start] + max_chars
        best = [-1] * len(CUT_KINDS)
        b = start + 1
        while b < n and char_at[b] <= limit:
            if not blocked[b]:
                best[_boundary_level(text, char_at[start], char_at[b])] = b
            b += 1
        level = next((lvl for lvl in (3, 2, 1, 0) if best[lvl] >= 0), -1)
        cut = best[level] if level >= 0 else -1
        if cut < 0:
            end = start + 1
            while end < n and blocked[end]:
                end += 1
            unit = "entity or span" if end > start + 1 else "word (token)"
            raise SplitError(
                f"{doc_source(doc)}: cannot split into pieces of at most {max_chars} characters: the {unit} "
                f"{text[char_at[start]:char_at[end]]!r} at chars {char_at[start]}-{char_at[end]} is longer"
            )
        if stats is not None:
            stats[CUT_KINDS[level]] += 1
        pieces.append(_piece(doc, start, cut))
        start = cut
    pieces.append(_piece(doc, start, n))
    return pieces


def _piece(doc: Doc, start: int, end: int) -> Doc:
    piece = doc[start:end].as_doc()
    # as_doc drops span groups: carry over the spans that lie in the piece.
    for key, group in doc.spans.items():
        inside = [
            Span(piece, s.start - start, s.end - start, label=s.label, kb_id=s.kb_id, span_id=s.id)
            for s in group
            if s.start >= start and s.end <= end
        ]
        piece.spans[key] = SpanGroup(piece, name=key, attrs=dict(group.attrs), spans=inside)
    if SOURCE_KEY in doc.user_data:
        piece.user_data[SOURCE_KEY] = doc.user_data[SOURCE_KEY]
    return piece


def carve_dev(docs: Sequence[Doc], ratio: float, seed: int) -> Tuple[List[Doc], List[Doc]]:
    """Split docs into (train, dev): ``round(len(docs) * ratio)`` docs (at least
    one when ``ratio > 0`` and there are two docs or more) drawn at random with
    ``seed``. Both parts keep the original order. Deterministic given the seed."""
    if not 0 <= ratio < 1:
        raise ValueError(f"dev ratio must be in [0, 1), got {ratio}")
    docs = list(docs)
    n_dev = int(round(len(docs) * ratio))
    if ratio > 0 and n_dev == 0 and len(docs) >= 2:
        n_dev = 1
    dev_ids = set(random.Random(seed).sample(range(len(docs)), n_dev))
    train = [doc for i, doc in enumerate(docs) if i not in dev_ids]
    dev = [doc for i, doc in enumerate(docs) if i in dev_ids]
    return train, dev
