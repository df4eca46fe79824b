"""CLUENER2020 files (``cluener``): a stream of JSON objects with ``text``
and ``label`` (``{TYPE: {MENTION: [[start, end_inclusive], ...]}}``)."""

import json
from collections import Counter
from pathlib import Path
from typing import Iterator, List, Optional, Set, Tuple

from spacy.tokens import Doc, Span, SpanGroup
from spacy.vocab import Vocab

from .base import CorpusFormatError, PathLike, _entity_spans, _tag_source, _warn, char_tokenizer

#: Span group where :func:`read_cluener` keeps every mention, including
#: those that overlap another mention and so cannot all be in ``doc.ents``.
MENTIONS_KEY = "mentions"


def _iter_json_stream(path: PathLike, stats: Counter) -> Iterator[Tuple[int, object]]:
    """Yield ``(line, object)`` for each JSON value of a concatenated stream."""
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorpusFormatError(path, raw.count(b"\n", 0, err.start) + 1, f"invalid UTF-8: {err.reason}") from None
    pos = 0
    if text.startswith("\ufeff"):
        pos = 1
        stats["byte_order_mark_removed"] += 1
    decoder = json.JSONDecoder()
    line, counted = 1, 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            raise CorpusFormatError(path, err.lineno, f"invalid JSON (column {err.colno}): {err.msg}") from None
        yield line, obj


def read_cluener(path: PathLike, vocab: Vocab, *, stats: Optional[Counter] = None) -> Iterator[Doc]:
    """Read CLUENER2020: a stream of JSON objects with ``text`` and optional
    ``label`` (``{TYPE: {MENTION: [[start, end_inclusive], ...]}}``).

    Each offset pair must select exactly its mention (error naming the line of
    the object otherwise). Objects without ``label`` (test.json) give docs
    without entities. ``doc.ents`` cannot hold overlapping mentions: the
    longest (then earliest) wins and the others are warned about; all
    mentions, overlapping or not, are kept in ``doc.spans["mentions"]`` for
    labelled objects. Exact duplicates of a mention are counted and kept once.
    """
    stats = Counter() if stats is None else stats
    tokenizer = char_tokenizer(vocab)
    for index, (lineno, obj) in enumerate(_iter_json_stream(path, stats)):
        if not isinstance(obj, dict):
            raise CorpusFormatError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
        text = obj.get("text")
        if not isinstance(text, str):
            raise CorpusFormatError(path, lineno, 'object has no string field "text"')
        unknown = set(obj) - {"text", "label", "id"}
        if unknown:
            raise CorpusFormatError(path, lineno, f"unexpected fields {sorted(unknown)}")
        if "id" in obj and obj["id"] != index:
            _warn(
                stats,
                "ids_out_of_order",
                path,
                lineno,
                f"id {obj['id']!r} is not the position {index} of the object; ids are not stored, the order is",
            )
        doc = tokenizer(text)
        _tag_source(doc, path, lineno)
        if not text:
            stats["empty_texts"] += 1
        if "label" not in obj or obj["label"] is None:
            yield doc
            continue
        mentions = _cluener_mentions(obj["label"], text, path, lineno, stats)
        spans = _entity_spans(doc, mentions, path, lineno, stats)
        doc.spans[MENTIONS_KEY] = SpanGroup(doc, name=MENTIONS_KEY, spans=spans)
        kept: List[Span] = []
        taken: Set[int] = set()
        for span in sorted(spans, key=lambda s: (-(s.end_char - s.start_char), s.start_char)):
            if taken.isdisjoint(range(span.start, span.end)):
                kept.append(span)
                taken.update(range(span.start, span.end))
        for span in spans:
            if span not in kept:
                _warn(
                    stats,
                    "overlapping_mentions_not_in_ents",
                    path,
                    lineno,
                    f"{span.label_} mention {span.text!r} (chars {span.start_char}-{span.end_char}) "
                    "overlaps a longer "
                    f"mention; it is kept in doc.spans[{MENTIONS_KEY!r}] but not in doc.ents",
                )
        doc.ents = sorted(kept, key=lambda s: s.start)
        yield doc


def _cluener_mentions(
    label: object, text: str, path: PathLike, lineno: int, stats: Counter
) -> List[Tuple[int, int, str]]:
    if not isinstance(label, dict):
        raise CorpusFormatError(path, lineno, '"label" must be an object {TYPE: {MENTION: [[start, end], ...]}}')
    seen: Set[Tuple[int, int, str]] = set()
    mentions: List[Tuple[int, int, str]] = []
    for ent_type, by_mention in label.items():
        if not ent_type or not isinstance(by_mention, dict):
            raise CorpusFormatError(path, lineno, f"label type {ent_type!r} must map mentions to offset lists")
        for mention, offsets in by_mention.items():
            if not isinstance(offsets, list):
                raise CorpusFormatError(
                    path, lineno, f"{ent_type} mention {mention!r}: offsets must be a list of [start, end]"
                )
            for pair in offsets:
                ok = (
                    isinstance(pair, list)
                    and len(pair) == 2
                    and all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
                )
                if not ok:
                    raise CorpusFormatError(
                        path, lineno, f"{ent_type} mention {mention!r}: offset {pair!r} is not [start, end]"
                    )
                start, end = pair
                if not 0 <= start <= end < len(text):
                    raise CorpusFormatError(
                        path,
                        lineno,
                        f"{ent_type} mention {mention!r}: offsets {pair} outside the text of {len(text)} characters",
                    )
                if text[start : end + 1] != mention:
                    raise CorpusFormatError(
                        path,
                        lineno,
                        f"{ent_type} mention {mention!r} at [{start}, {end}] does not match the text there: "
                        f"{text[start : end + 1]!r}",
                    )
                key = (start, end + 1, ent_type)
                if key in seen:
                    stats["duplicate_mentions"] += 1
                    continue
                seen.add(key)
                mentions.append(key)
    return sorted(mentions)
