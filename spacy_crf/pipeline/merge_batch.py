"""The merge of ``crf_merge_words`` (:mod:`.merge_words`, whose docstring
gives the rules), over a batch of docs at once.

On short docs the per-doc work is a few dozen small numpy calls, each costing
microseconds whatever its size. :func:`merge_docs` reads each doc's token
arrays in one ``to_array`` call, lays the batch end to end, and computes the
token cuts, the entities, the index maps, the merged tokens' texts (slices
of the batch's text) and attribute rows, the span groups' new offsets and
the entity guard once for the whole batch. What stays per doc is building
the merged ``Doc`` from its words with one ``from_array`` (or with spaCy's
retokenizer, for a parsed doc) and its span groups.
"""

from typing import Dict, List, Sequence, Tuple

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
from .span_arrays import batch_entity_rows, batch_table, span_group, span_tables, whitespace_cuts, with_char_offsets

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
# the entity columns of _merged_rows' rows, after the token attributes
_ENT_COLUMNS_OF_ROWS = list(range(len(_TOKEN_ATTRS), len(_TOKEN_ATTRS) + len(_ENT_ATTRS)))


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
    groups = [span_tables(doc) for doc in docs]
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
    token_stops = numpy.append(token_starts[1:], n_all)  # one past its last
    token_start = char_start[token_starts]
    token_end = char_end[token_stops - 1] if n_all else char_end[:0]
    out = list(docs)
    merged_docs = numpy.flatnonzero(changed).tolist()
    in_place = {k for k in merged_docs if via_retokenizer or docs[k].has_annotation("DEP")}
    if len(in_place) < len(merged_docs):  # some docs are built new
        words = _batch_words(docs[0].vocab.strings, table, token_starts, token_stops)
        spaces = (table[token_stops - 1, _SPACY] != 0).tolist()
        attrs, rows = _merged_rows(docs[0].vocab, table, ent_rows, token_starts, token_stops)
    group_rows = _moved_groups(groups, merged_docs, doc_starts, new_index, new_starts)
    for k in merged_docs:
        doc, a, b = docs[k], int(new_starts[k]), int(new_starts[k + 1])
        if k in in_place:
            merged = _merge_in_place(doc, numpy.append(token_starts[a:b], doc_starts[k + 1]) - doc_starts[k])
            merged.from_array(_ENT_ATTRS, numpy.ascontiguousarray(ent_rows[token_starts[a:b]]))  # type: ignore[arg-type]
        else:
            merged = Doc(doc.vocab, words=words[a:b], spaces=spaces[a:b])
            merged.from_array(attrs, rows[a:b])  # type: ignore[arg-type]  # an int array; thinc's Ints2d is nominal
            _carry_over(doc, merged, token_stops[a:b], int(doc_starts[k]))
            if doc.vocab.vectors_length:
                _carry_vectors(doc, merged, token_starts[a:b] - doc_starts[k])
        for key, name, group_attrs, moved in group_rows[k]:
            merged.spans[key] = span_group(merged, name, group_attrs, moved)
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
        # (across a doc boundary the rule looks at another doc's last token: a doc's first token is cut anyway)
        cut[:n] |= ~inner | whitespace_cuts(table[:, _SPACY], table[:, _IS_SPACE])
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


def _batch_words(strings, table: numpy.ndarray, token_starts: numpy.ndarray, token_stops: numpy.ndarray) -> List[str]:
    """The text of each merged token of the batch: its characters' texts
    joined, as slices of the batch's text (one string lookup per distinct
    character; ``doc.text`` would build a Token object per character)."""
    distinct, which = numpy.unique(table[:, _ORTH], return_inverse=True)
    texts = numpy.array([strings[orth] for orth in distinct.tolist()], dtype=object)
    text = "".join(texts[which.reshape(-1)].tolist())
    offsets = numpy.zeros(len(table) + 1, dtype=numpy.int64)
    numpy.cumsum(table[:, _LENGTH], out=offsets[1:])
    return [text[a:b] for a, b in zip(offsets[token_starts].tolist(), offsets[token_stops].tolist())]


def _merged_rows(
    vocab, table: numpy.ndarray, ent_rows: numpy.ndarray, token_starts: numpy.ndarray, token_stops: numpy.ndarray
) -> Tuple[List[int], numpy.ndarray]:
    """The attributes and values a new doc's ``from_array`` takes, a row per
    merged token of the batch: what ``Retokenizer.merge`` gives a merged
    token (its first character's tag, POS, morphology and sentence start, no
    norm of its own, its characters' lemmas joined) and its entity
    annotation. Token attributes that no character of the batch has are left
    out: a new doc's tokens have none, and ``from_array`` adds a token's
    morphology to the vocab in Python, token by token."""
    char_rows = table[:, _TOKEN_COLUMNS]
    rows = numpy.concatenate([char_rows[token_starts], ent_rows[token_starts]], axis=1)
    multi = numpy.flatnonzero(token_stops - token_starts > 1)
    rows[multi, _TOKEN_ATTRS.index(NORM)] = 0
    lemma = _TOKEN_ATTRS.index(LEMMA)
    if char_rows[:, lemma].any():
        strings = vocab.strings
        lemmas = [strings[h] for h in char_rows[:, lemma].tolist()]
        bounds = zip(token_starts[multi].tolist(), token_stops[multi].tolist())
        rows[multi, lemma] = [strings.add("".join(lemmas[s:e])) for s, e in bounds]
    used = [i for i in range(len(_TOKEN_ATTRS)) if rows[:, i].any()] + _ENT_COLUMNS_OF_ROWS
    return [(_TOKEN_ATTRS + _ENT_ATTRS)[i] for i in used], numpy.ascontiguousarray(rows[:, used])


def _moved_groups(
    groups: List[List[Tuple[str, str, dict, numpy.ndarray]]],
    merged_docs: List[int],
    doc_starts: numpy.ndarray,
    new_index: numpy.ndarray,
    new_starts: numpy.ndarray,
) -> Dict[int, List[Tuple[str, str, dict, numpy.ndarray]]]:
    """The span groups of each merged doc with their token offsets moved to
    the merged tokens, all at once."""
    owners = [(k, group) for k in merged_docs for group in groups[k]]
    if not owners:
        return {k: [] for k in merged_docs}
    sizes = [len(group[3]) for _, group in owners]
    rows = numpy.concatenate([group[3] for _, group in owners])
    ks = numpy.repeat([k for k, _ in owners], sizes)
    bounds = rows[:, :2].astype(numpy.int64) + doc_starts[ks, None]
    rows[:, :2] = new_index[bounds] - new_starts[ks, None]
    moved: Dict[int, List[Tuple[str, str, dict, numpy.ndarray]]] = {k: [] for k in merged_docs}
    for (k, (key, name, attrs, _)), part in zip(owners, numpy.split(rows, numpy.cumsum(sizes)[:-1])):
        moved[k].append((key, name, attrs, part))
    return moved


def _carry_over(doc: Doc, merged: Doc, stops: numpy.ndarray, first: int) -> None:
    """What ``Retokenizer.merge`` keeps of the doc besides its tokens: the
    ``doc.tensor`` row of each merged token's last character (``stops - 1 -
    first``: ``stops`` count across the batch, whose doc starts at ``first``),
    the user data, categories, hooks and private fields."""
    if doc.tensor is not None and getattr(doc.tensor, "size", 0) != 0:
        tensor, last = doc.tensor, stops - 1 - first
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


def _carry_vectors(doc: Doc, merged: Doc, starts: numpy.ndarray) -> None:
    """As ``Retokenizer.merge``: a merged word without a vector gets the mean
    of its characters' vectors (``starts``: each merged token's first character)."""
    vocab = doc.vocab
    bounds = numpy.append(starts, len(doc)).tolist()
    for j, token in enumerate(merged):
        s, e = bounds[j], bounds[j + 1]
        if e - s > 1 and not vocab.get_vector(token.text).any():
            vocab.set_vector(token.text, doc[s:e].vector)


def _to_xp(array, index: numpy.ndarray):
    """``index`` on the device of ``array`` (a GPU tensor takes a GPU index)."""
    from thinc.api import get_array_module

    return get_array_module(array).asarray(index)
