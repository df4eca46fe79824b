"""Span groups and entities as arrays, without a Python object per span.

spaCy's ``Span`` objects cost microseconds each, which adds up to more than
the rest of a pipeline's CRF side on a stream of short docs; these helpers
read entities from the token attribute arrays instead (:func:`entity_rows`).
Span groups go through ``Span`` objects (:func:`span_rows`,
:func:`span_group`): their serialization would avoid them, but srsly looks
up its msgpack extensions among the installed packages' entry points on
every call, which costs more than the objects. Rows are
``(start, end, label, kb_id, id)`` in tokens and string hashes, uint64.
"""

from itertools import chain
from typing import Tuple

import numpy
from spacy.attrs import IDX, LENGTH
from spacy.tokens import Doc, Span, SpanGroup


def entity_rows(doc: Doc, ent_rows: numpy.ndarray) -> numpy.ndarray:
    """``doc.ents`` as rows (start, end, label, kb_id, id), uint64, from the
    doc's ``_ENT_ATTRS`` array: an entity starts at a "B" token with a label
    and runs over the "I" tokens after it, as spaCy's ``Doc.ents`` reads
    them. An "I" token outside any entity is spaCy's error, raised by
    ``doc.ents`` itself."""
    iob, label = ent_rows[:, 0], ent_rows[:, 1]
    begins = numpy.flatnonzero((iob == 3) & (label != 0))
    inside = iob == 1
    heads = numpy.flatnonzero(~inside)  # the token each run of "I" tokens follows
    if inside.any():
        head_of = numpy.searchsorted(heads, numpy.flatnonzero(inside), side="right") - 1
        if (head_of < 0).any() or not ((iob[heads[head_of]] == 3) & (label[heads[head_of]] != 0)).all():
            tuple(doc.ents)  # raises spaCy's E093, naming the tokens
            raise AssertionError("doc.ents accepted a stray I token")  # pragma: no cover
    stops = numpy.append(heads, len(iob))
    ends = stops[numpy.searchsorted(stops, begins, side="right")]
    rows = numpy.empty((len(begins), 5), dtype=numpy.uint64)
    rows[:, 0], rows[:, 1], rows[:, 2:] = begins, ends, ent_rows[begins, 1:]
    return rows


def char_offsets(doc: Doc) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Start and end character offset of each token."""
    layout = doc.to_array([IDX, LENGTH]).reshape((len(doc), 2)).astype(numpy.int64)
    return layout[:, 0], layout[:, 0] + layout[:, 1]


def with_char_offsets(rows: numpy.ndarray, token_start: numpy.ndarray, token_end: numpy.ndarray) -> numpy.ndarray:
    """Span rows (start, end, ...) with character offsets for the token
    bounds; spans must not be empty."""
    out = rows.astype(numpy.int64)
    if len(out):
        out[:, 0], out[:, 1] = token_start[out[:, 0]], token_end[out[:, 1] - 1]
    return out


def span_rows(group: SpanGroup) -> numpy.ndarray:
    """(start, end, label, kb_id, id) of each span, uint64, shape (len(group), 5)."""
    values = chain.from_iterable((s.start, s.end, s.label, s.kb_id, s.id) for s in group)
    return numpy.fromiter(values, dtype=numpy.uint64, count=5 * len(group)).reshape((len(group), 5))


def span_group(doc: Doc, name: str, attrs: dict, rows: numpy.ndarray) -> SpanGroup:
    """A span group of ``doc`` with spans (start, end, label, kb_id, id) (``rows``)."""
    group = SpanGroup(doc, name=name, attrs=attrs)
    # (appended one by one: a list of 100k Span objects would set off full
    # garbage collections, which cost as much as the rest)
    append = group.append
    for start, end, label, kb_id, span_id in rows.tolist():
        append(Span(doc, start, end, label=label, kb_id=kb_id, span_id=span_id))
    return group
