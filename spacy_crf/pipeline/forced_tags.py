"""Tags forced at decoding time: what a doc already says before a tagger runs.

The CRF decodes around forced tags (``crf.viterbi``'s ``tag_mask``, a bool
``[n_tokens, n_tags]`` array per doc):

* a whitespace token is outside every word and entity: ``S`` for ``bmes``,
  ``O`` for ``bio``/``bioes``, so the tokens around it close and open words
  or entities cleanly;
* ``bio``/``bioes``: entities already on the doc (set by hand, or by an
  earlier component such as ``entity_ruler``) are kept as they are and their
  tokens forced to their tags; blocked tokens (``Doc.set_ents(blocked=...)``)
  are forced ``O`` and stay blocked. Tokens marked ``O`` or with no entity
  annotation are free: ``doc.ents = [...]`` and ``entity_ruler`` mark every
  token outside their entities ``O``, so forcing ``O`` would leave nothing to
  predict (spaCy's ``ner`` treats them as free too). A preset entity whose
  label is not among the tagger's labels is kept, and its tokens are decoded
  as ``O`` (outside of the tagger's entities);
* ``bmes`` with ``respect_ents``: every entity on the doc (an NER component
  ran before the segmenter) is a forced word boundary: its first token is
  ``B``/``S``, its last ``E``/``S``, the token before it ``E``/``S`` and the
  one after it ``B``/``S``, so no word crosses an entity boundary.
"""

from typing import List, Optional, Sequence, Tuple

import numpy
from spacy.attrs import ENT_IOB, ENT_KB_ID, ENT_TYPE, IS_SPACE
from spacy.tokens import Doc, Span

from ..ml.schemes import OUTSIDE, entity_bounds, position_tag, split_tag, tags_to_spans
from ..util import run_offsets
from .span_arrays import batch_ids, batch_table

# spaCy's ENT_IOB values
_IOB_INSIDE, _IOB_OUTSIDE, _IOB_BEGIN = 1, 2, 3


def preset_entity_tokens(doc: Doc) -> numpy.ndarray:
    """bool [len(doc)]: tokens in an entity or blocked before the tagger ran
    (``ent_iob_`` "B" or "I"). Tokens marked "O" or missing are free."""
    return _preset(doc.to_array("ENT_IOB").reshape(-1))


def _preset(iob: numpy.ndarray) -> numpy.ndarray:
    """bool per token of ``ENT_IOB`` values: in an entity or blocked ("B" or "I")."""
    return (iob == _IOB_INSIDE) | (iob == _IOB_BEGIN)


def tag_mask(
    doc: Doc,
    scheme: str,
    tags: Sequence[str],
    labels: Sequence[str],
    *,
    preset: bool = True,
    respect_ents: bool = False,
) -> Optional[numpy.ndarray]:
    """The tags allowed at each token of ``doc`` (see the module doc), or
    None when every tag is allowed everywhere. ``preset``: also force what
    the doc already says (entities; entity boundaries for ``bmes`` with
    ``respect_ents``); without it only whitespace is forced."""
    if scheme == "tag" or not len(doc):
        return None
    space = doc.to_array("IS_SPACE").reshape(-1).astype(bool)
    fixed = preset_entity_tokens(doc) if scheme != "bmes" and preset else None
    has_preset = fixed is not None and bool(fixed.any())
    boundaries = scheme == "bmes" and preset and respect_ents and len(doc.ents) > 0
    if not space.any() and not has_preset and not boundaries:
        return None
    index = {tag: i for i, tag in enumerate(tags)}
    mask = numpy.ones((len(doc), len(tags)), dtype=bool)
    outside = index["S" if scheme == "bmes" else OUTSIDE]
    mask[space] = False
    mask[space, outside] = True
    if has_preset:
        known = set(labels)
        mask[fixed] = False
        mask[fixed, outside] = True  # blocked tokens, entities of other labels
        for ent in doc.ents:
            if ent.label_ not in known:
                continue
            for k in range(ent.start, ent.end):
                mask[k] = False
                mask[k, index[position_tag(scheme, k == ent.start, k == ent.end - 1, ent.label_)]] = True
    if boundaries:
        opens = numpy.zeros(len(tags), dtype=bool)  # may open a word: B, S
        opens[[index["B"], index["S"]]] = True
        closes = numpy.zeros(len(tags), dtype=bool)  # may close a word: E, S
        closes[[index["E"], index["S"]]] = True
        for ent in doc.ents:
            mask[ent.start] &= opens
            mask[ent.end - 1] &= closes
            if ent.start > 0:
                mask[ent.start - 1] &= closes
            if ent.end < len(doc):
                mask[ent.end] &= opens
    return mask


def tag_masks(
    docs: Sequence[Doc],
    scheme: str,
    tags: Sequence[str],
    labels: Sequence[str],
    *,
    preset: bool = True,
    respect_ents: bool = False,
) -> List[Optional[numpy.ndarray]]:
    """:func:`tag_mask` of each doc. Most docs force nothing (no whitespace,
    no entity set before the tagger), and reading two token arrays per doc
    to find that out cost more than decoding it: the batch's arrays are read
    at once, and only the docs with a whitespace token or an entity token
    take :func:`tag_mask`."""
    if scheme == "tag" or not docs:
        return [None] * len(docs)
    table, doc_starts = batch_table(docs, [IS_SPACE, ENT_IOB])
    flagged = table[:, 0] != 0
    if preset and (scheme != "bmes" or respect_ents):
        flagged |= _preset(table[:, 1])
    seen = numpy.zeros(len(flagged) + 1, dtype=numpy.int64)
    numpy.cumsum(flagged, out=seen[1:])
    per_doc = (seen[doc_starts[1:]] - seen[doc_starts[:-1]]).tolist()
    return [
        tag_mask(doc, scheme, tags, labels, preset=preset, respect_ents=respect_ents) if n else None
        for doc, n in zip(docs, per_doc)
    ]


def write_entities(doc: Doc, scheme: str, tags: List[Optional[str]]) -> None:
    """Set ``doc.ents`` from decoded ``bio``/``bioes`` tags (None: a token in
    no entity, e.g. whitespace), keeping the entities and blocked tokens that
    were on the doc before; the other tokens get the predicted entities or O."""
    preset = preset_entity_tokens(doc)
    if not preset.any():
        _set_ents_outside(doc, tags_to_spans(scheme, tags))
        return
    spans = tags_to_spans(scheme, [None if preset[i] else tag for i, tag in enumerate(tags)])
    covered = preset.copy()
    for s, e, _ in spans:
        covered[s:e] = True
    outside = [Span(doc, i, i + 1) for i in numpy.flatnonzero(~covered).tolist()]
    doc.set_ents([Span(doc, s, e, label=label) for s, e, label in spans], outside=outside, default="unmodified")


def write_entity_ids(docs: Sequence[Doc], scheme: str, tags: Sequence[str], tag_ids: Sequence[numpy.ndarray]) -> None:
    """:func:`write_entities` of each doc from its decoded tag ids (ids into
    ``tags``), whitespace tokens in no entity. The entities of the docs
    without preset entities are read from the tags of the whole batch at
    once (:func:`~spacy_crf.ml.schemes.entity_bounds`) and written through the
    token arrays, one ``from_array`` per doc: no Python step per token."""
    if not docs:
        return
    table, doc_starts = batch_table(docs, [IS_SPACE, ENT_IOB, ENT_TYPE, ENT_KB_ID])
    ids = batch_ids(tag_ids)
    space = table[:, 0].astype(bool)
    preset = _preset(table[:, 1])
    starts, ends, first = entity_bounds(scheme, tags, ids, space, doc_starts[:-1])
    add = docs[0].vocab.strings.add
    label_hash = numpy.array([add(split_tag(tag)[1]) if tag != OUTSIDE else 0 for tag in tags], dtype=numpy.uint64)
    rows = table[:, 1:].copy()
    rows[:, 0], rows[:, 1] = _IOB_OUTSIDE, 0
    lengths = ends - starts
    covered = numpy.repeat(starts, lengths) + run_offsets(lengths)
    rows[covered, 0] = _IOB_INSIDE
    rows[starts, 0] = _IOB_BEGIN
    rows[covered, 1] = numpy.repeat(label_hash[first], lengths)
    rows[covered, 2] = 0
    for k, doc in enumerate(docs):
        a, b = int(doc_starts[k]), int(doc_starts[k + 1])
        if a == b:
            continue
        if preset[a:b].any():  # decoded around entities already on the doc: kept as they are
            seq = [None if sp else tags[i] for sp, i in zip(space[a:b].tolist(), ids[a:b].tolist())]
            write_entities(doc, scheme, seq)
        else:
            doc.from_array([ENT_IOB, ENT_TYPE, ENT_KB_ID], numpy.ascontiguousarray(rows[a:b]))  # type: ignore[arg-type]


def _set_ents_outside(doc: Doc, spans: List[Tuple[int, int, str]]) -> None:
    """``doc.set_ents([Span(doc, s, e, label=label) ...], default="outside")``
    for spans that do not overlap, through the token arrays: no ``Span``
    object per entity. The entities' tokens get B/I, their label and no KB
    id; every other token is O without a label; entity ids and the other
    tokens' KB ids stay as they are, as ``set_ents`` leaves them."""
    n = len(doc)
    if not n:
        return
    rows = doc.to_array([ENT_IOB, ENT_TYPE, ENT_KB_ID]).reshape((n, 3))
    rows[:, 0], rows[:, 1] = _IOB_OUTSIDE, 0
    add = doc.vocab.strings.add
    for start, end, label in spans:
        rows[start, 0] = _IOB_BEGIN
        rows[start + 1 : end, 0] = _IOB_INSIDE
        rows[start:end, 1] = add(label)
        rows[start:end, 2] = 0
    doc.from_array([ENT_IOB, ENT_TYPE, ENT_KB_ID], rows)  # type: ignore[arg-type]  # thinc's Ints2d is nominal
