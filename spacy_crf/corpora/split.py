"""Splitting long docs (never inside a word, entity or span) and carving a
dev set out of a training corpus."""

import random
import unicodedata
from collections import Counter
from typing import List, Optional, Sequence, Set, Tuple, TypeVar

from spacy.tokens import Doc, Span, SpanGroup

from ..doc_keys import SOURCE_KEY, doc_source

T = TypeVar("T")

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
                f"{text[char_at[start] : char_at[end]]!r} at chars {char_at[start]}-{char_at[end]} is longer"
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


#: Ways of carving a dev set (:func:`carve_dev`).
CARVES = ("blocks", "lines")
#: Lines per dev block of the default carve. Chosen on SXU and MSRA
#: (``project/scripts/dev_rates.py``): the dev's OOV rate and seen-entity
#: rate come closest to those of the official tests, where random single
#: lines make dev far easier (its words and names are in the neighbouring
#: training lines of the same article).
DEFAULT_BLOCK_SIZE = 200


def dev_size(n_docs: int, ratio: float) -> int:
    """Docs carved into dev from ``n_docs``: ``round(n_docs * ratio)``, at least
    one when ``ratio > 0`` and there are two docs or more."""
    if not 0 <= ratio < 1:
        raise ValueError(f"dev ratio must be in [0, 1), got {ratio}")
    n_dev = int(round(n_docs * ratio))
    if ratio > 0 and n_dev == 0 and n_docs >= 2:
        n_dev = 1
    return n_dev


def dev_blocks(n_docs: int, n_dev: int, block_size: int, seed: int) -> List[Tuple[int, int]]:
    """``(start, end)`` ranges of the dev blocks: ``ceil(n_dev / block_size)``
    runs of consecutive docs, all of ``block_size`` docs but one (the
    remainder, at a random place in the order), ``n_dev`` in all.

    The blocks are spread over the whole file: the training docs are shared
    out evenly between the blocks, and each block lies at a random place
    (drawn with ``seed``) in its own stretch of the file, between the
    previous block's stretch and the next. A corpus drifts in topic along
    its file; one block in every stretch keeps each period in dev, so the
    dev's rates vary less from seed to seed than with blocks placed
    anywhere (``project/scripts/dev_rates.py``). Blocks may touch."""
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
        raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
    if not 0 <= n_dev <= n_docs:
        raise ValueError(f"cannot carve {n_dev} dev docs from {n_docs}")
    if n_dev == 0:
        return []
    rng = random.Random(seed)
    k = -(-n_dev // block_size)
    sizes = [block_size] * (k - 1) + [n_dev - (k - 1) * block_size]
    rng.shuffle(sizes)
    free = n_docs - n_dev
    blocks, start = [], 0
    for i, size in enumerate(sizes):
        gap = (i + 1) * free // k - i * free // k  # training docs in this block's stretch
        offset = rng.randint(0, gap)
        blocks.append((start + offset, start + offset + size))
        start += gap + size
    return blocks


def carve_dev(
    docs: Sequence[T], ratio: float, seed: int, *, carve: str = "blocks", block_size: int = DEFAULT_BLOCK_SIZE
) -> Tuple[List[T], List[T]]:
    """Split docs into (train, dev): :func:`dev_size` docs, drawn with ``seed``.
    Both parts keep the original order. Deterministic given the seed.

    ``carve="blocks"`` (the default) takes runs of ``block_size`` consecutive
    docs (:func:`dev_blocks`): a corpus ordered by source article then keeps
    most of each dev article out of training, as a held-out test does.
    ``carve="lines"`` draws single docs at random (the carve of earlier
    versions, the same docs for the same seed): their neighbours, often from
    the same article, stay in training, so dev has fewer unseen words and
    names than a test set."""
    if carve not in CARVES:
        raise ValueError(f"unknown dev carve {carve!r}; expected one of {', '.join(CARVES)}")
    docs = list(docs)
    n_dev = dev_size(len(docs), ratio)
    if carve == "lines":
        return carve_lines(docs, n_dev, seed)
    dev_ids = {i for start, end in dev_blocks(len(docs), n_dev, block_size, seed) for i in range(start, end)}
    return _parts(docs, dev_ids)


def carve_lines(docs: Sequence[T], n_dev: int, seed: int) -> Tuple[List[T], List[T]]:
    """Split docs into (train, dev) with ``n_dev`` single docs drawn at random
    with ``seed`` into dev (``carve_dev``'s ``"lines"`` carve, by count).
    Both parts keep the original order."""
    docs = list(docs)
    if not 0 <= n_dev <= len(docs):
        raise ValueError(f"cannot carve {n_dev} dev docs from {len(docs)}")
    return _parts(docs, set(random.Random(seed).sample(range(len(docs)), n_dev)))


def _parts(docs: Sequence[T], dev_ids: Set[int]) -> Tuple[List[T], List[T]]:
    train = [doc for i, doc in enumerate(docs) if i not in dev_ids]
    dev = [doc for i, doc in enumerate(docs) if i in dev_ids]
    return train, dev
