"""Span groups and entities as arrays, without a Python object per span.

spaCy's ``Span`` objects cost microseconds each, which adds up to more than
the rest of a pipeline's CRF side on a stream of short docs; these helpers
read entities from the token attribute arrays instead (:func:`entity_rows`).
Span groups are read through their own serialization (:func:`span_rows`)
where srsly looks its msgpack hooks up once (:func:`spacy_crf.enable_speed_ups`:
else each call would cost more than the objects, which are read instead) and
written through ``Span`` objects
(:func:`span_group`: building them from bytes is slower). Rows are
``(start, end, label, kb_id, id)`` in tokens and string hashes, uint64.
"""

from itertools import chain
from typing import List, Optional, Sequence, Tuple

import numpy
import srsly
from spacy.attrs import IDX, IS_SPACE, LENGTH, SPACY
from spacy.tokens import Doc, Span, SpanGroup

from .._compat import msgpack_hooks_sped_up
from ..ml.schemes import bmes_word_bounds


def batch_table(docs: Sequence[Doc], attrs: Sequence[int]) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """The docs' ``attrs`` arrays laid end to end, uint64 ``[n_tokens,
    len(attrs)]``, and ``doc_starts``, int64 ``[len(docs) + 1]``: doc ``k``'s
    rows are ``doc_starts[k]:doc_starts[k + 1]``."""
    doc_starts = numpy.zeros(len(docs) + 1, dtype=numpy.int64)
    numpy.cumsum([len(doc) for doc in docs], out=doc_starts[1:])
    arrays = [doc.to_array(list(attrs)).reshape((len(doc), len(attrs))) for doc in docs]
    table = numpy.concatenate([numpy.zeros((0, len(attrs)), dtype=numpy.uint64), *arrays])
    return table, doc_starts


def batch_ids(tag_ids: Sequence[numpy.ndarray]) -> numpy.ndarray:
    """Each doc's decoded tag ids laid end to end, int64 ``[n_tokens]`` (the
    rows of :func:`batch_table`)."""
    return numpy.concatenate(
        [numpy.zeros(0, dtype=numpy.int64)] + [numpy.asarray(i, dtype=numpy.int64).reshape(-1) for i in tag_ids]
    )


def entity_rows(doc: Doc, ent_rows: numpy.ndarray) -> numpy.ndarray:
    """``doc.ents`` as rows (start, end, label, kb_id, id), uint64, from the
    doc's ``_ENT_ATTRS`` array: an entity starts at a "B" token with a label
    and runs over the "I" tokens after it, as spaCy's ``Doc.ents`` reads
    them. An "I" token outside any entity is spaCy's error, raised by
    ``doc.ents`` itself."""
    return batch_entity_rows([doc], ent_rows, numpy.zeros(1, dtype=numpy.int64))


def batch_entity_rows(docs: Sequence[Doc], ent_rows: numpy.ndarray, doc_starts: numpy.ndarray) -> numpy.ndarray:
    """:func:`entity_rows` of several docs at once: ``ent_rows`` are their
    ``_ENT_ATTRS`` arrays one after the other, doc ``k``'s first row at
    ``doc_starts[k]``; token offsets in the result count across the docs too.
    A stray "I" token raises spaCy's error for the doc that has it."""
    iob, label = ent_rows[:, 0], ent_rows[:, 1]
    is_begin = (iob == 3) & (label != 0)
    begins = numpy.flatnonzero(is_begin)
    inside = iob == 1
    # an "I" token opening a doc continues nothing (the run before it is another doc's)
    opening = doc_starts[doc_starts < len(iob)]
    if inside[opening].any():
        _raise_stray_inside(docs, doc_starts, int(opening[inside[opening]][0]))
    heads = numpy.flatnonzero(~inside)  # the token each run of "I" tokens follows
    if inside.any():
        inner = numpy.flatnonzero(inside)
        head_of = numpy.searchsorted(heads, inner, side="right") - 1
        stray = ~is_begin[heads[head_of]]
        if stray.any():
            _raise_stray_inside(docs, doc_starts, int(inner[stray][0]))
    stops = numpy.append(heads, len(iob))
    ends = stops[numpy.searchsorted(stops, begins, side="right")]
    rows = numpy.empty((len(begins), 5), dtype=numpy.uint64)
    rows[:, 0], rows[:, 1], rows[:, 2:] = begins, ends, ent_rows[begins, 1:]
    return rows


def _raise_stray_inside(docs: Sequence[Doc], doc_starts: numpy.ndarray, token: int) -> None:
    doc = docs[int(numpy.searchsorted(doc_starts, token, side="right")) - 1]
    tuple(doc.ents)  # raises spaCy's E093, naming the tokens
    raise AssertionError("doc.ents accepted a stray I token")  # pragma: no cover


def with_char_offsets(
    rows: numpy.ndarray, token_start: numpy.ndarray, token_end: numpy.ndarray, shift=0
) -> numpy.ndarray:
    """Span rows (start, end, ...) with character offsets for the token
    bounds; spans must not be empty. ``shift`` (a number, or one per row) is
    added to the rows' token offsets first, where the rows count tokens from
    another origin than ``token_start`` and ``token_end``."""
    out = rows.astype(numpy.int64)
    if len(out):
        out[:, 0], out[:, 1] = token_start[out[:, 0] + shift], token_end[out[:, 1] - 1 + shift]
    return out


def span_rows(group: SpanGroup) -> numpy.ndarray:
    """(start, end, label, kb_id, id) of each span, uint64, shape (len(group), 5)."""
    rows = _packed_rows(group) if len(group) else None
    if rows is None:
        values = chain.from_iterable((s.start, s.end, s.label, s.kb_id, s.id) for s in group)
        rows = numpy.fromiter(values, dtype=numpy.uint64, count=5 * len(group)).reshape((len(group), 5))
    return rows


def span_tables(doc: Doc) -> List[Tuple[str, str, dict, numpy.ndarray]]:
    """Each span group of ``doc`` as ``(key, name, attrs, rows)``, rows as
    :func:`span_rows` reads them (what :func:`span_group` writes back)."""
    return [(key, group.name, dict(group.attrs), span_rows(group)) for key, group in doc.spans.items()]


#: a span as ``SpanGroup.to_bytes`` packs it (``struct`` format ``">QQQllll"``)
_PACKED_SPAN = numpy.dtype(
    [("id", ">u8"), ("kb_id", ">u8"), ("label", ">u8"), ("start", ">i4"), ("end", ">i4"), ("chars", ">i4", (2,))]
)


def _packed_rows(group: SpanGroup) -> Optional[numpy.ndarray]:
    """:func:`span_rows` read from the group's own serialization, without a
    ``Span`` object per span (faster); None where the layout is
    not the one expected, checked against the first span (the caller then
    reads the spans), and where srsly's hook lookup is catalogue's own
    (``to_bytes`` looks its hooks up: without the opt-in, the spans cost less)."""
    if not msgpack_hooks_sped_up():
        return None
    # (no msgpack hooks to read: the message holds the group's attrs and the spans as bytes)
    message = srsly.msgpack.unpackb(group.to_bytes(), raw=False, object_pairs_hook=dict)
    packed = message.get("spans") if isinstance(message, dict) else None
    data = b"".join(packed) if isinstance(packed, list) and len(packed) == len(group) else b""
    if len(data) != len(group) * _PACKED_SPAN.itemsize:
        return None
    records = numpy.frombuffer(data, dtype=_PACKED_SPAN)
    rows = numpy.empty((len(records), 5), dtype=numpy.uint64)
    for column, field in enumerate(("start", "end", "label", "kb_id", "id")):
        rows[:, column] = records[field]
    first = group[0]
    if rows[0].tolist() != [first.start, first.end, first.label, first.kb_id, first.id]:
        return None
    return rows


def span_group(doc: Doc, name: str, attrs: dict, rows: numpy.ndarray) -> SpanGroup:
    """A span group of ``doc`` with spans (start, end, label, kb_id, id) (``rows``)."""
    group = SpanGroup(doc, name=name, attrs=attrs)
    # (appended one by one: a list of 100k Span objects would set off full
    # garbage collections, which cost as much as the rest)
    append = group.append
    for start, end, label, kb_id, span_id in rows.tolist():
        append(Span(doc, start, end, label=label, kb_id=kb_id, span_id=span_id))
    return group


def whitespace_cuts(spacy: numpy.ndarray, is_space: numpy.ndarray) -> numpy.ndarray:
    """bool per token (one doc's, or a batch's laid end to end): a word is
    cut before this token because of whitespace, i.e. the token is a
    whitespace token, or follows one or a token with trailing whitespace
    (``spacy``). The one rule by which ``crf_merge_words`` keeps whitespace
    out of its tokens and ``spacy crf annotate`` out of its words."""
    cut = is_space.astype(bool)
    cut[1:] |= spacy[:-1].astype(bool) | cut[:-1]
    return cut


def word_char_bounds(doc: Doc, group: SpanGroup) -> List[List[int]]:
    """``[start_char, end_char]`` of each span of ``group`` (the words), in
    order, cut where :func:`whitespace_cuts` cuts and without whitespace
    tokens: the words as ``crf_merge_words`` makes them tokens (before the
    cuts at entity and other span groups' edges)."""
    if not len(group):
        return []
    table = doc.to_array([SPACY, IS_SPACE, IDX, LENGTH]).reshape((len(doc), 4)).astype(numpy.int64)
    space = table[:, 1].astype(bool)
    cuts = numpy.flatnonzero(whitespace_cuts(table[:, 0], space))
    rows = span_rows(group)[:, :2].astype(numpy.int64)
    rows = rows[rows[:, 1] > rows[:, 0]]  # an empty word covers nothing
    starts, ends = rows[:, 0], rows[:, 1]
    first = numpy.searchsorted(cuts, starts, side="right")  # the cuts inside each word
    last = numpy.searchsorted(cuts, ends, side="left")
    if (last > first).any():  # some words hold whitespace: cut them into pieces
        inner = [cuts[a:b].tolist() for a, b in zip(first.tolist(), last.tolist())]
        starts = numpy.array([p for s, c in zip(starts.tolist(), inner) for p in [s, *c]], dtype=numpy.int64)
        ends = numpy.array([p for e, c in zip(ends.tolist(), inner) for p in [*c, e]], dtype=numpy.int64)
    keep = ~space[starts]  # a piece that starts at a whitespace token is that token alone
    starts, ends = starts[keep], ends[keep]
    return numpy.stack([table[starts, 2], table[ends - 1, 2] + table[ends - 1, 3]], axis=1).tolist()


def write_words(docs: Sequence[Doc], tag_ids: Sequence[numpy.ndarray], key: str) -> None:
    """``doc.spans[key]`` of each doc: the words of its decoded BMES tag ids
    (ids into ``BMES_TAGS``, one per token), found for the whole batch at
    once (:func:`~spacy_crf.ml.schemes.bmes_word_bounds`). A whitespace token
    is never part of a word: it closes any open word."""
    table, doc_starts = batch_table(docs, [IS_SPACE])
    ids = batch_ids(tag_ids)
    if len(ids) != doc_starts[-1] or len(tag_ids) != len(docs):
        raise ValueError(f"write_words: {len(ids)} tag ids for {len(docs)} docs of {doc_starts[-1]} tokens")
    starts, ends = bmes_word_bounds(ids, table[:, 0].astype(bool), doc_starts[:-1])
    split = numpy.searchsorted(starts, doc_starts).tolist()
    for k, doc in enumerate(docs):
        first, (a, b) = int(doc_starts[k]), split[k : k + 2]
        bounds = zip((starts[a:b] - first).tolist(), (ends[a:b] - first).tolist())
        doc.spans[key] = SpanGroup(doc, name=key, spans=[Span(doc, s, e) for s, e in bounds])
