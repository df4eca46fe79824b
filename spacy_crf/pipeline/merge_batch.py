"""The merge of ``crf_merge_words`` (:mod:`.merge_words`, whose docstring
gives the rules), over a batch of docs at once.

On short docs the per-doc work is a few dozen small numpy calls, each costing
microseconds whatever its size. :func:`merge_docs` reads each doc's token
arrays in one ``to_array`` call, lays the batch end to end, and computes the
token cuts, the entities, the index maps and the entity guard once for the
whole batch; what stays per doc is building the merged ``Doc`` (in one linear
pass, or with spaCy's retokenizer for a parsed doc) and its span groups.
"""

from typing import List, Sequence, Tuple

import numpy
from spacy.attrs import (
    ENT_ID,
    ENT_IOB,
    ENT_KB_ID,
    ENT_TYPE,
    IDX,
    IS_SPACE,
    LEMMA,
    LENGTH,
    MORPH,
    NORM,
    ORTH,
    POS,
    SENT_START,
    SPACY,
    TAG,
)
from spacy.tokens import Doc

from .._compat import copy_doc_private_fields
from ..doc_keys import DEFAULT_SPANS_KEY  # the segmenter's default span group
from .span_arrays import batch_entity_rows, batch_table, span_group, span_rows, with_char_offsets

DEFAULT_UNALIGNED_ENTS_KEY = "ents_chars"
ENTITY_POLICIES = ("split", "keep_words")
#: ``attrs`` key of the unaligned-entities group: ``[start_char, end_char]``
#: of each of its spans, in order.
CHAR_OFFSETS = "char_offsets"

# Token attributes carried from a merged token's first character token.
_TOKEN_ATTRS = [TAG, POS, MORPH, LEMMA, NORM, SENT_START]
_ENT_ATTRS = [ENT_IOB, ENT_TYPE, ENT_KB_ID, ENT_ID]
_IOB_O = 2
# What a batch reads of each doc, in one ``to_array`` call: the layout, then
# the entity and the carried token attributes.
_ATTRS = [ORTH, SPACY, IS_SPACE, IDX, LENGTH] + _ENT_ATTRS + _TOKEN_ATTRS
_ORTH, _SPACY, _IS_SPACE, _IDX, _LENGTH = range(5)
_ENT_COLUMNS = list(range(5, 5 + len(_ENT_ATTRS)))
_TOKEN_COLUMNS = list(range(5 + len(_ENT_ATTRS), len(_ATTRS)))


class MergeWordsError(ValueError):
    """The doc does not carry usable predicted words, or the config is wrong."""


def _check_config(spans_key: str, entity_policy: str, unaligned_ents_key: str, component: str) -> None:
    if entity_policy not in ENTITY_POLICIES:
        raise MergeWordsError(
            f"[{component}] unknown entity_policy {entity_policy!r}; use one of {', '.join(ENTITY_POLICIES)}"
        )
    if entity_policy == "keep_words" and unaligned_ents_key == spans_key:
        raise MergeWordsError(
            f"[{component}] unaligned_ents_key and spans_key are both {spans_key!r}; they must differ"
        )


def merge_docs(
    docs: Sequence[Doc],
    spans_key: str = DEFAULT_SPANS_KEY,
    *,
    entity_policy: str = "split",
    unaligned_ents_key: str = DEFAULT_UNALIGNED_ENTS_KEY,
    component: str = "crf_merge_words",
    via_retokenizer: bool = False,
) -> List[Doc]:
    """:func:`~spacy_crf.pipeline.merge_words.merge_words` of each doc, in
    order, with the same results (see the module docstring)."""
    _check_config(spans_key, entity_policy, unaligned_ents_key, component)
    keep_words = entity_policy == "keep_words"
    for doc in docs:
        _check_doc(doc, spans_key, keep_words, unaligned_ents_key, component)
    if not docs:
        return []
    table, doc_starts = batch_table(docs, _ATTRS)  # doc k: tokens doc_starts[k]:doc_starts[k + 1]
    lengths = numpy.diff(doc_starts)
    n_all = int(doc_starts[-1])
    ent_rows = table[:, _ENT_COLUMNS]
    # Every span group of every doc as rows (start, end, label, kb_id, id),
    # words included; bounds across the batch.
    groups = [
        [(key, group.name, dict(group.attrs), span_rows(group)) for key, group in doc.spans.items()] for doc in docs
    ]
    ents = batch_entity_rows(docs, ent_rows, doc_starts)
    ent_bounds = ents[:, :2].astype(numpy.int64)
    ent_doc = numpy.searchsorted(doc_starts, ent_bounds[:, 0], side="right") - 1
    cut = _token_starts(docs, groups, table, doc_starts, spans_key, ent_bounds, keep_words, component)
    aligned = cut[ent_bounds[:, 0]] & cut[ent_bounds[:, 1]]
    # new_index[i]: the merged token that holds token i, counted across the
    # batch; doc k's own numbering subtracts new_index[doc_starts[k]].
    new_index = numpy.cumsum(cut) - 1
    new_starts = new_index[doc_starts]  # merged tokens before each doc, then their total
    n_new = numpy.diff(new_starts)
    unaligned_docs = numpy.bincount(ent_doc[~aligned], minlength=len(docs))
    changed = (n_new != lengths) | (unaligned_docs > 0)
    char_start = table[:, _IDX].astype(numpy.int64)
    char_end = char_start + table[:, _LENGTH].astype(numpy.int64)
    # under keep_words the characters of unaligned entities become "O" (their
    # entities move to the group)
    unaligned = ents[~aligned]
    outside = (
        numpy.cumsum(
            numpy.bincount(ent_bounds[~aligned, 0], minlength=n_all + 1)
            - numpy.bincount(ent_bounds[~aligned, 1], minlength=n_all + 1)
        )[:n_all]
        > 0
    )
    ent_rows[outside] = (_IOB_O, 0, 0, 0)
    token_starts = numpy.flatnonzero(cut[:n_all])  # first character token of each merged token
    token_start = char_start[token_starts]
    token_end = char_end[numpy.append(token_starts[1:], n_all) - 1] if n_all else char_end[:0]
    out = list(docs)
    merged_docs = numpy.flatnonzero(changed).tolist()
    for k in merged_docs:
        doc, first = docs[k], int(doc_starts[k])
        starts = numpy.append(token_starts[new_starts[k] : new_starts[k + 1]], doc_starts[k + 1]) - first
        if via_retokenizer or doc.has_annotation("DEP"):
            merged = _merge_in_place(doc, starts)
        else:
            merged = _merge_into_new_doc(doc, starts, table[first : first + len(doc)])
        merged.from_array(_ENT_ATTRS, numpy.ascontiguousarray(ent_rows[first + starts[:-1]]))  # type: ignore[arg-type]
        for key, name, attrs, rows in groups[k]:
            rows[:, :2] = new_index[rows[:, :2].astype(numpy.int64) + first] - new_starts[k]
            merged.spans[key] = span_group(merged, name, attrs, rows)
        out[k] = merged
    if keep_words:
        _write_unaligned(
            out,
            unaligned,
            ent_doc[~aligned],
            doc_starts,
            new_index,
            new_starts,
            char_start,
            char_end,
            unaligned_ents_key,
        )
    _check_entities(
        docs,
        out,
        merged_docs,
        ents[aligned],
        ent_doc[aligned],
        doc_starts,
        new_starts,
        char_start,
        char_end,
        token_start,
        token_end,
        component,
    )
    return out


def _write_unaligned(
    out: List[Doc],
    unaligned: numpy.ndarray,
    unaligned_doc: numpy.ndarray,
    doc_starts: numpy.ndarray,
    new_index: numpy.ndarray,
    new_starts: numpy.ndarray,
    char_start: numpy.ndarray,
    char_end: numpy.ndarray,
    key: str,
) -> None:
    """Under ``keep_words``: each doc's entities that do not line up with its
    merged tokens, as the span group ``key`` over the tokens they touch, with
    their exact character offsets (an empty group where all line up)."""
    bounds = unaligned[:, :2].astype(numpy.int64)
    moved = unaligned.copy()
    moved[:, 0] = new_index[bounds[:, 0]] - new_starts[unaligned_doc]
    moved[:, 1] = new_index[bounds[:, 1] - 1] + 1 - new_starts[unaligned_doc]
    offsets = numpy.stack([char_start[bounds[:, 0]], char_end[bounds[:, 1] - 1]], axis=1) if len(bounds) else bounds
    split = numpy.searchsorted(unaligned_doc, numpy.arange(len(out) + 1))
    for k, doc in enumerate(out):
        a, b = split[k], split[k + 1]
        doc.spans[key] = span_group(doc, key, {CHAR_OFFSETS: offsets[a:b].tolist()}, moved[a:b])


def _check_entities(
    docs: Sequence[Doc],
    out: List[Doc],
    merged_docs: List[int],
    aligned: numpy.ndarray,
    aligned_doc: numpy.ndarray,
    doc_starts: numpy.ndarray,
    new_starts: numpy.ndarray,
    char_start: numpy.ndarray,
    char_end: numpy.ndarray,
    token_start: numpy.ndarray,
    token_end: numpy.ndarray,
    component: str,
) -> None:
    """The merged docs' entities are those that lined up, at the same
    character offsets (a guard: the arrays above are built to keep them)."""
    if not merged_docs:
        return
    merged = [out[k] for k in merged_docs]
    firsts = new_starts[merged_docs]
    rows, local_starts = batch_table(merged, _ENT_ATTRS)
    after = batch_entity_rows(merged, rows, local_starts)
    # back to the batch's merged-token numbering
    after_doc = numpy.searchsorted(local_starts, after[:, 0].astype(numpy.int64), side="right") - 1
    shift = (firsts - local_starts[:-1])[after_doc]
    after_offsets = with_char_offsets(after, token_start, token_end, shift)
    keep = numpy.isin(aligned_doc, merged_docs)
    before_offsets = with_char_offsets(aligned[keep], char_start, char_end)
    if not numpy.array_equal(after_offsets, before_offsets):  # pragma: no cover
        k = merged_docs[0]
        raise RuntimeError(f"[{component}] merging words changed the entities of {docs[k].text[:30]!r}")


def _check_doc(doc: Doc, spans_key: str, keep_words: bool, unaligned_ents_key: str, component: str) -> None:
    if spans_key not in doc.spans:
        raise MergeWordsError(
            f"[{component}] doc.spans[{spans_key!r}] is missing; the component needs the predicted "
            f"words there. Put it after the word segmenter (crf_tagger with scheme 'bmes') and give "
            f"both the same spans_key (have: {sorted(doc.spans.keys())})"
        )
    if keep_words and unaligned_ents_key in doc.spans:
        raise MergeWordsError(
            f"[{component}] doc.spans[{unaligned_ents_key!r}] already exists; under entity_policy "
            f"'keep_words' the component writes that group. Choose another unaligned_ents_key"
        )


def _token_starts(
    docs: Sequence[Doc],
    groups: List[List[Tuple[str, str, dict, numpy.ndarray]]],
    table: numpy.ndarray,
    doc_starts: numpy.ndarray,
    spans_key: str,
    ent_bounds: numpy.ndarray,
    keep_words: bool,
    component: str,
) -> numpy.ndarray:
    """``cut[i]``: a merged token starts at token ``i`` of the batch (every
    doc's first token, and ``cut[n]`` at the end of the batch, included). A
    word is one token unless a space, an entity edge (except under
    ``keep_words``) or another span group's edge cuts it."""
    n = int(doc_starts[-1])
    words: List[numpy.ndarray] = []
    others: List[numpy.ndarray] = []
    for first, doc_groups in zip(doc_starts.tolist(), groups):
        for key, _, _, rows in doc_groups:
            (words if key == spans_key else others).append(rows[:, :2].astype(numpy.int64) + first)
    words_all = numpy.concatenate(words)
    words_all = words_all[words_all[:, 1] > words_all[:, 0]]  # an empty word covers nothing
    # docs are disjoint runs of tokens, so sorting across the batch sorts each doc's words
    order = numpy.argsort(words_all[:, 0], kind="stable")
    starts_sorted, ends_sorted = words_all[order, 0], words_all[order, 1]
    if len(order) > 1:
        overlap = numpy.flatnonzero(starts_sorted[1:] < numpy.maximum.accumulate(ends_sorted)[:-1])
        if len(overlap):
            k = int(numpy.searchsorted(doc_starts, starts_sorted[overlap[0] + 1], side="right")) - 1
            _raise_overlap(docs[k], spans_key, component)
    cut = numpy.zeros(n + 1, dtype=bool)
    cut[doc_starts] = True
    if not keep_words:
        cut[ent_bounds.ravel()] = True
    for bounds in others:
        cut[bounds.ravel()] = True
    if n:
        # inner[i]: token i continues the word of token i - 1.
        # (bincount: numpy.add.at costs microseconds per call even on a few words)
        steps = numpy.bincount(starts_sorted + 1, minlength=n + 1) - numpy.bincount(ends_sorted, minlength=n + 1)
        inner = numpy.cumsum(steps[:n]) > 0
        layout = table[:, [_SPACY, _IS_SPACE]].astype(bool)
        space_before = numpy.zeros(n, dtype=bool)
        space_before[1:] = layout[:-1, 0] | layout[:-1, 1]  # a doc's first token is cut anyway
        cut[:n] |= ~inner | space_before | layout[:, 1]
    return cut


def _raise_overlap(doc: Doc, spans_key: str, component: str) -> None:
    """Name the first token that two word spans share (in the group's order)."""
    owner = [-1] * len(doc)
    for w, span in enumerate(doc.spans[spans_key]):
        for i in range(span.start, span.end):
            if owner[i] != -1:
                raise MergeWordsError(
                    f"[{component}] word spans in doc.spans[{spans_key!r}] overlap at token {i} "
                    f"({doc[i].text!r}, char {doc[i].idx}) of the doc {doc.text[:30]!r}; words must not overlap"
                )
            owner[i] = w
    raise AssertionError("no overlap found")  # pragma: no cover


def _merge_in_place(doc: Doc, starts: numpy.ndarray) -> Doc:
    """spaCy's way: ``Retokenizer.merge`` per merged token (quadratic)."""
    with doc.retokenize() as retokenizer:
        for s, e in zip(starts.tolist(), starts[1:].tolist()):
            if e - s > 1:
                retokenizer.merge(doc[s:e])
    return doc


def _merge_into_new_doc(doc: Doc, starts: numpy.ndarray, table: numpy.ndarray) -> Doc:
    """One linear pass: a new ``Doc`` from the words, with what
    ``Retokenizer.merge`` would keep carried over (entities and span groups are
    set by the caller). ``table``: the doc's ``_ATTRS`` array."""
    vocab = doc.vocab
    first, last = starts[:-1], starts[1:] - 1
    bounds = starts.tolist()
    # (doc.text would build a Token object per character)
    strings = vocab.strings
    chars = [strings[orth] for orth in table[:, _ORTH].tolist()]
    words = ["".join(chars[s:e]) if e - s > 1 else chars[s] for s, e in zip(bounds, bounds[1:])]
    merged = Doc(vocab, words=words, spaces=table[last, _SPACY].astype(bool).tolist())
    char_rows = table[:, _TOKEN_COLUMNS]
    rows = numpy.ascontiguousarray(char_rows[first])
    # Retokenizer.merge: a merged token has no norm of its own, its lemma is
    # its characters' lemmas joined (no whitespace inside a merged token), and
    # a merged word without a vector gets the mean of its characters' vectors.
    multi = numpy.flatnonzero(last > first).tolist()
    rows[multi, _TOKEN_ATTRS.index(NORM)] = 0
    if char_rows[:, _TOKEN_ATTRS.index(LEMMA)].any():
        rows[multi, _TOKEN_ATTRS.index(LEMMA)] = [
            vocab.strings.add("".join(t.lemma_ for t in doc[bounds[j] : bounds[j + 1]])) for j in multi
        ]
    if vocab.vectors_length:
        for j in multi:
            if not vocab.get_vector(words[j]).any():
                vocab.set_vector(words[j], doc[bounds[j] : bounds[j + 1]].vector)
    merged.from_array(_TOKEN_ATTRS, rows)  # type: ignore[arg-type]  # an int array; thinc's Ints2d is nominal
    if doc.tensor is not None and getattr(doc.tensor, "size", 0) != 0:
        tensor = doc.tensor
        merged.tensor = tensor[last] if isinstance(tensor, numpy.ndarray) else tensor[_to_xp(tensor, last)]
    else:
        merged.tensor = doc.tensor
    merged.user_data = dict(doc.user_data)
    merged.cats = dict(doc.cats)
    merged.user_hooks = dict(doc.user_hooks)
    merged.user_token_hooks = dict(doc.user_token_hooks)
    merged.user_span_hooks = dict(doc.user_span_hooks)
    merged.has_unknown_spaces = doc.has_unknown_spaces
    copy_doc_private_fields(doc, merged)
    merged.sentiment = doc.sentiment
    merged.noun_chunks_iterator = doc.noun_chunks_iterator  # type: ignore[attr-defined]  # not in Doc's stub
    return merged


def _to_xp(array, index: numpy.ndarray):
    """``index`` on the device of ``array`` (a GPU tensor takes a GPU index)."""
    from thinc.api import get_array_module

    return get_array_module(array).asarray(index)
