"""The array paths of the CRF side (tags -> words, tags -> entities, entities
and span groups read for merging) against the plain implementations they
replace, on random docs and tags, edge cases included (whitespace tokens,
ill-formed tag sequences, entities crossing words, empty docs)."""

import random
from unittest import mock

import numpy
import pytest
import spacy
from spacy.attrs import ENT_ID, ENT_IOB, ENT_KB_ID, ENT_TYPE
from spacy.tokens import Span, SpanGroup

import spacy_crf
from spacy_crf import _compat
from spacy_crf.ml.schemes import BMES_TAGS, bmes_word_bounds, entity_bounds, make_tags, split_tag, tags_to_spans
from spacy_crf.pipeline import forced_tags, span_arrays
from spacy_crf.pipeline.crf_tagger import CRFTagger
from spacy_crf.pipeline.forced_tags import _set_ents_outside, write_entities
from spacy_crf.pipeline.span_arrays import entity_rows, span_group, span_rows, write_words

ENT_ATTRS = [ENT_IOB, ENT_TYPE, ENT_KB_ID, ENT_ID]
ALPHABET = list("我们在北京工作ab1。") + [" ", "  ", "\u3000", "\n", "😀"]


@pytest.fixture(scope="module")
def nlp():
    return spacy.blank("zh")


def random_text(rng: random.Random, max_len: int = 30) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, max_len)))


def test_bmes_word_bounds_equal_tags_to_spans_on_random_tags():
    rng = random.Random(0)
    for case in range(2000):
        n = rng.randint(0, 25)
        ids = numpy.array([rng.randrange(4) for _ in range(n)], dtype="int64")
        outside = numpy.array([rng.random() < 0.15 for _ in range(n)], dtype=bool)
        tags = [None if space else BMES_TAGS[i] for i, space in zip(ids.tolist(), outside.tolist())]
        starts, ends = bmes_word_bounds(ids, outside)
        assert list(zip(starts.tolist(), ends.tolist())) == [(s, e) for s, e, _ in tags_to_spans("bmes", tags)], case


def test_bmes_word_bounds_of_a_batch_equal_those_of_each_doc():
    """Docs laid end to end: each doc opens a word, and no word crosses into
    the next doc, whatever the last tag of the doc before (B, M or none)."""
    rng = random.Random(2)
    for case in range(500):
        lengths = [rng.randint(0, 8) for _ in range(rng.randint(1, 6))]
        ids = [numpy.array([rng.randrange(4) for _ in range(n)], dtype="int64") for n in lengths]
        outside = [numpy.array([rng.random() < 0.15 for _ in range(n)], dtype=bool) for n in lengths]
        doc_starts = numpy.concatenate([[0], numpy.cumsum(lengths)]).astype("int64")
        starts, ends = bmes_word_bounds(
            numpy.concatenate(ids), numpy.concatenate(outside).astype(bool), doc_starts[:-1]
        )
        expected = []
        for first, doc_ids, doc_outside in zip(doc_starts.tolist(), ids, outside):
            doc_starts_k, doc_ends_k = bmes_word_bounds(doc_ids, doc_outside)
            expected += [(s + first, e + first) for s, e in zip(doc_starts_k.tolist(), doc_ends_k.tolist())]
        assert list(zip(starts.tolist(), ends.tolist())) == expected, case


def test_write_words_of_a_batch_equal_tags_to_spans_of_each_doc(nlp):
    rng = random.Random(3)
    for case in range(100):
        docs = [nlp.make_doc(random_text(rng, 12)) for _ in range(rng.randint(1, 5))]
        ids = [numpy.array([rng.randrange(4) for _ in doc], dtype="int64") for doc in docs]
        write_words(docs, ids, "words")
        for doc, doc_ids in zip(docs, ids):
            tags = [None if token.is_space else BMES_TAGS[i] for token, i in zip(doc, doc_ids.tolist())]
            expected = [(s, e) for s, e, _ in tags_to_spans("bmes", tags)]
            assert [(span.start, span.end) for span in doc.spans["words"]] == expected, case
            assert doc.spans["words"].name == "words"


def test_write_words_refuses_tag_ids_that_do_not_fit_the_docs(nlp):
    docs = [nlp.make_doc("我们"), nlp.make_doc("北京")]
    with pytest.raises(ValueError, match="3 tag ids for 2 docs of 4 tokens"):
        write_words(docs, [numpy.zeros(2, dtype="int64"), numpy.zeros(1, dtype="int64")], "words")


def entity_arrays(doc):
    return doc.to_array(ENT_ATTRS).reshape((len(doc), 4)).tolist()


def test_entities_set_through_arrays_equal_set_ents(nlp):
    """Random BIOES tags (ill-formed ones too) over docs whose tokens already
    carry entity ids and KB ids: the same token annotation as set_ents."""
    rng = random.Random(1)
    tags = make_tags("bioes", ["PER", "LOC"])
    for case in range(300):
        doc = nlp.make_doc(random_text(rng))
        if len(doc):
            prior = numpy.array([[rng.choice([0, 2]), 0, rng.choice([0, 7]), rng.choice([0, 9])] for _ in doc])
            doc.from_array(ENT_ATTRS, prior.astype("uint64"))
        seq = [None if t.is_space else rng.choice(tags) for t in doc]
        spans = tags_to_spans("bioes", seq)
        expected = doc.copy()
        expected.set_ents([Span(expected, s, e, label=label) for s, e, label in spans], default="outside")
        _set_ents_outside(doc, spans)
        assert entity_arrays(doc) == entity_arrays(expected), case


def random_entity_rows(rng: random.Random, strings, n: int) -> numpy.ndarray:
    """ENT_IOB/TYPE/KB_ID/ID per token: entities (with KB ids and ids),
    blocked tokens (B without a label), missing and O tokens."""
    per, loc, kb, ent_id = (strings.add(s) for s in ("PER", "LOC", "Q5", "id6"))
    rows = []
    open_entity = False
    for _ in range(n):
        iob = rng.choice([0, 1, 2, 3, 3])
        if iob == 1 and not open_entity:
            iob = 3
        label = rng.choice([0, per, loc]) if iob in (1, 3) else 0
        rows.append([iob, label, rng.choice([0, kb]), rng.choice([0, ent_id])])
        open_entity = (iob == 3 and label != 0) or (iob == 1 and open_entity)
    return numpy.array(rows, dtype="uint64").reshape((n, 4))


def test_entity_rows_equal_doc_ents(nlp):
    rng = random.Random(2)
    for case in range(500):
        doc = nlp.make_doc(random_text(rng))
        rows = random_entity_rows(rng, nlp.vocab.strings, len(doc))
        doc.from_array(ENT_ATTRS, rows)
        expected = [[e.start, e.end, e.label, e.kb_id, e.id] for e in doc.ents]
        assert entity_rows(doc, doc.to_array(ENT_ATTRS).reshape((len(doc), 4))).tolist() == expected, case


def test_entity_rows_raise_spacys_error_for_a_stray_inside_token(nlp):
    doc = nlp.make_doc("我们在北京")
    doc.from_array(ENT_ATTRS, numpy.array([[2, 0, 0, 0], [1, 0, 0, 0]] + [[2, 0, 0, 0]] * 3, dtype="uint64"))
    with pytest.raises(ValueError, match="E093"):
        entity_rows(doc, doc.to_array(ENT_ATTRS).reshape((len(doc), 4)))


def test_span_rows_and_span_group_round_trip(nlp):
    doc = nlp.make_doc("我们在北京工作")
    spans = [Span(doc, 0, 2, label="A", kb_id="Q1", span_id="x"), Span(doc, 3, 3), Span(doc, 7, 7), Span(doc, 2, 5)]
    group = SpanGroup(doc, name="g", attrs={"k": [1]}, spans=spans)
    copy = span_group(doc, "g", {"k": [1]}, span_rows(group))
    assert [(s.start, s.end, s.start_char, s.end_char, s.label_, s.kb_id_, s.id_) for s in copy] == [
        (s.start, s.end, s.start_char, s.end_char, s.label_, s.kb_id_, s.id_) for s in spans
    ]
    assert copy.name == "g" and copy.attrs == {"k": [1]}


def spans_one_by_one(group):
    return [[s.start, s.end, s.label, s.kb_id, s.id] for s in group]


def test_span_rows_read_the_serialization_as_the_spans_say(nlp):
    """span_rows reads the group's bytes (no Span per span): the same rows as
    the spans give, for groups whose attrs msgpack needs hooks for, empty
    groups, and spans with huge hashes; a layout that does not check out
    against the first span falls back to the spans, and so does a process
    that did not opt in to the speed-ups (srsly's slow hook lookup)."""
    spacy_crf.enable_speed_ups()
    doc = nlp.make_doc("我们在北京工作 了")
    huge = next(label for label in (f"L{i}" for i in range(100)) if nlp.vocab.strings.add(label) >= 2**63)
    spans = [Span(doc, 0, 2, label="A", kb_id="Q1", span_id="x"), Span(doc, 3, 3), Span(doc, 2, 8, label=huge)]
    for attrs in ({}, {"vector": numpy.arange(3, dtype="float32"), 7: "int key"}):
        group = SpanGroup(doc, name="g", attrs=attrs, spans=spans)
        assert span_arrays._packed_rows(group) is not None  # the fast path is taken
        assert span_rows(group).tolist() == spans_one_by_one(group)
    assert span_rows(SpanGroup(doc, name="empty")).shape == (0, 5)
    group = SpanGroup(doc, name="g", spans=spans)
    swapped = numpy.dtype(
        [(name, span_arrays._PACKED_SPAN[name]) for name in ("kb_id", "id", "label", "end", "start", "chars")]
    )
    with mock.patch.object(span_arrays, "_PACKED_SPAN", swapped):
        assert span_arrays._packed_rows(group) is None
        assert span_rows(group).tolist() == spans_one_by_one(group)
    _compat.restore_msgpack_hooks()
    try:
        assert span_arrays._packed_rows(group) is None
        assert span_rows(group).tolist() == spans_one_by_one(group)
    finally:
        spacy_crf.enable_speed_ups()


def reference_set_annotations(pipe: CRFTagger, doc, ids) -> None:
    """The per-token implementation the array paths replace."""
    tags = pipe.tags
    seq = [None if t.is_space else tags[i] for t, i in zip(doc, ids)]
    if pipe.scheme == "bmes":
        key = pipe.cfg["spans_key"]
        doc.spans[key] = SpanGroup(doc, name=key, spans=[Span(doc, s, e) for s, e, _ in tags_to_spans("bmes", seq)])
    else:
        doc.set_ents([Span(doc, s, e, label=label) for s, e, label in tags_to_spans(pipe.scheme, seq)])


@pytest.mark.parametrize("scheme", ["bmes", "bio", "bioes"])
def test_set_annotations_equal_the_per_token_reference(nlp, scheme):
    """Random (also ill-formed) tag ids on random docs, empty ones included:
    the same words or entities as the per-token implementation."""
    pipe = CRFTagger(nlp.vocab, model=None, name="t", scheme=scheme, labels=[] if scheme == "bmes" else ["PER", "LOC"])
    rng = random.Random(3)
    for case in range(300):
        doc = nlp.make_doc(random_text(rng))
        ids = numpy.array([rng.randrange(len(pipe.tags)) for _ in doc], dtype="int64")
        expected = doc.copy()
        reference_set_annotations(pipe, expected, ids.tolist())
        pipe.set_annotations([doc], [ids])
        if scheme == "bmes":
            assert [(s.start, s.end) for s in doc.spans["words"]] == [(s.start, s.end) for s in expected.spans["words"]]
        else:
            assert entity_arrays(doc) == entity_arrays(expected), case


@pytest.mark.parametrize("scheme", ["bio", "bioes"])
def test_entities_of_a_batch_equal_those_of_each_doc(nlp, scheme):
    """set_annotations over a batch (entities read from the whole batch's
    tags at once) gives each doc what write_entities gives it alone: docs
    with KB ids and entity ids on their tokens, preset entities and blocked
    tokens (decoded around), whitespace and empty docs among them."""
    pipe = CRFTagger(nlp.vocab, model=None, name="t", scheme=scheme, labels=["PER", "LOC"])
    rng = random.Random(7)
    for case in range(150):
        docs = [nlp.make_doc(random_text(rng)) for _ in range(rng.randint(1, 8))]
        for doc in docs:
            if len(doc) and rng.random() < 0.4:
                doc.from_array(ENT_ATTRS, random_entity_rows(rng, nlp.vocab.strings, len(doc)))
        ids = [numpy.array([rng.randrange(len(pipe.tags)) for _ in doc], dtype="int64") for doc in docs]
        expected = [doc.copy() for doc in docs]
        for doc, tag_ids in zip(expected, ids):
            write_entities(doc, scheme, [None if t.is_space else pipe.tags[k] for t, k in zip(doc, tag_ids.tolist())])
        pipe.set_annotations(docs, ids)
        assert [entity_arrays(d) for d in docs] == [entity_arrays(d) for d in expected], case


def test_entity_bounds_equal_tags_to_spans_of_each_doc_on_random_tags():
    for scheme in ("bio", "bioes"):
        tags = make_tags(scheme, ["PER", "LOC", "ORG"])
        rng = random.Random(11)
        for case in range(1500):
            ids, outside, starts, expected = [], [], [], []
            for n in [rng.randint(0, 12) for _ in range(rng.randint(1, 5))]:
                doc_ids = [rng.randrange(len(tags)) for _ in range(n)]
                doc_outside = [rng.random() < 0.15 for _ in range(n)]
                seq = [None if o else tags[i] for i, o in zip(doc_ids, doc_outside)]
                expected += [(s + len(ids), e + len(ids), label) for s, e, label in tags_to_spans(scheme, seq)]
                starts.append(len(ids))
                ids += doc_ids
                outside += doc_outside
            found = entity_bounds(
                scheme, tags, numpy.array(ids, dtype="int64"), numpy.array(outside, dtype=bool), numpy.array(starts)
            )
            got = [(s, e, split_tag(tags[t])[1]) for s, e, t in zip(*(a.tolist() for a in found))]
            assert got == expected, (scheme, case)


def reference_emission_bias(n: int, tags, weight, matches) -> numpy.ndarray:
    """The per-occurrence loop that ``Lexicon.emission_bias`` replaces."""
    columns = {tag: i for i, tag in enumerate(tags)}
    bias = numpy.zeros((n, len(tags)), dtype="float32")
    for start, end in matches:
        bias[start, columns["B"]] += weight
        bias[start + 1 : end - 1, columns["M"]] += weight
        bias[end - 1, columns["E"]] += weight
    return bias


@pytest.mark.parametrize("weight", [1.0, 0.1, 1 / 3, 2.7, numpy.float64(0.7), numpy.float32(0.3)])
def test_lexicon_emission_bias_equals_the_per_occurrence_loop_bit_for_bit(nlp, weight):
    """Overlapping occurrences (the same token many times), one-token spans
    and docs without any: the same float32 values, bit for bit."""
    from spacy_crf.pipeline.lexicon import Lexicon

    rng = random.Random(4)
    lexicon = Lexicon(["北京", "京工", "我们在北京工作", "在北"])
    tags = ["S", "E", "B", "M"]  # any order of the model's tags
    for case in range(300):
        doc = nlp.make_doc("".join(rng.choice("我们在北京工作 ") for _ in range(rng.randint(0, 30))))
        matches = sorted((s, min(s + rng.randint(1, 8), len(doc))) for s in range(len(doc)) for _ in range(3))
        for spans in (lexicon.matches(doc), matches, []):
            expected = reference_emission_bias(len(doc), tags, weight, spans)
            got = lexicon.emission_bias(doc, tags, weight, matches=spans)
            assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes(), case
        assert (
            lexicon.emission_bias(doc, tags, weight).tobytes()
            == reference_emission_bias(len(doc), tags, weight, lexicon.matches(doc)).tobytes()
        )


@pytest.mark.parametrize("scheme", ["bmes", "bio", "bioes"])
@pytest.mark.parametrize("respect_ents", [False, True])
def test_tag_masks_of_a_batch_equal_those_of_each_doc(nlp, scheme, respect_ents):
    """Docs with and without whitespace, preset entities (of known and other
    labels) and blocked tokens, empty ones among them: the batch finds the
    docs that force nothing, the others take the per-doc path."""
    rng = random.Random(len(scheme) + respect_ents)
    labels = ["PER", "LOC"]
    tags = BMES_TAGS if scheme == "bmes" else make_tags(scheme, labels)
    docs = []
    for _ in range(200):
        doc = nlp.make_doc(random_text(rng) if rng.random() < 0.5 else "".join(rng.sample("我们在北京工作", 5)))
        free = [i for i, t in enumerate(doc) if not t.is_space]
        if free and rng.random() < 0.4:
            i = rng.choice(free)
            label = rng.choice(labels + ["ORG"])
            if rng.random() < 0.3:
                doc.set_ents([], blocked=[Span(doc, i, i + 1)], default="unmodified")
            else:
                doc.set_ents([Span(doc, i, i + 1, label=label)], default=rng.choice(["outside", "missing"]))
        docs.append(doc)
    for preset in (True, False):
        got = forced_tags.tag_masks(docs, scheme, tags, labels, preset=preset, respect_ents=respect_ents)
        for doc, mask in zip(docs, got):
            expected = forced_tags.tag_mask(doc, scheme, tags, labels, preset=preset, respect_ents=respect_ents)
            assert (mask is None) == (expected is None), doc.text
            if mask is not None:
                numpy.testing.assert_array_equal(mask, expected)
    # the cases the batch looks for all occur
    assert any(t.is_space for doc in docs for t in doc) and any(len(doc.ents) for doc in docs)
    assert any(forced_tags.tag_mask(doc, scheme, tags, labels) is None for doc in docs)
