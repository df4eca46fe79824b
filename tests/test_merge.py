"""crf_merge_words: predicted words (a span group over characters) become tokens."""

import os
import random
from typing import List, Set, Tuple

import numpy
import pytest
import spacy
from spacy.attrs import ENT_IOB, ENT_TYPE
from spacy.language import Language
from spacy.tokens import Doc, Span, SpanGroup

from spacy_crf.pipeline.merge_batch import MergeWordsError
from spacy_crf.pipeline.merge_words import (
    CHAR_OFFSETS,
    MergeWords,
    char_entities,
    merge_docs,
    merge_words,
)

LEXICON = ["北京大学", "北京", "大学生", "天安门", "我们", "iPhone", "New", "York", "👨\u200d👩\u200d👧"]


@Language.component("test_merge_fake_segmenter")
def fake_segmenter(doc: Doc) -> Doc:
    """Stands in for the BMES crf_tagger: greedy longest match against LEXICON
    over the non-whitespace tokens, single characters otherwise; written as
    the span group doc.spans["words"] without touching the tokens."""
    spans, i = [], 0
    while i < len(doc):
        if doc[i].is_space:
            i += 1
            continue
        for word in sorted(LEXICON, key=len, reverse=True):
            span = doc.char_span(doc[i].idx, doc[i].idx + len(word))
            if span is not None and span.text == word and span.start == i:
                spans.append(span)
                i = span.end
                break
        else:
            spans.append(doc[i : i + 1])
            i += 1
    doc.spans["words"] = spans
    doc.user_data["pid"] = os.getpid()
    return doc


@pytest.fixture(scope="module")
def nlp():
    return spacy.blank("zh")


def make(nlp, text, words, ents=(), key="words"):
    """A char-tokenized doc with word spans and entities given as char offsets."""
    doc = nlp.make_doc(text)
    doc.spans[key] = [doc.char_span(s, e, alignment_mode="strict") for s, e in words]
    doc.ents = [doc.char_span(s, e, label=label, alignment_mode="strict") for s, e, label in ents]
    return doc


def snapshot(doc):
    return (
        doc.text,
        [(e.start_char, e.end_char, e.label_, e.kb_id_) for e in doc.ents],
        {k: [(s.start_char, s.end_char, s.label_) for s in g] for k, g in doc.spans.items()},
    )


def tokens(doc):
    return [t.text for t in doc]


def assert_valid_groups(doc):
    """Every span of every group lines up with the tokens and its own text."""
    for group in doc.spans.values():
        for span in group:
            assert doc[span.start].idx == span.start_char
            assert doc[span.end - 1].idx + len(doc[span.end - 1]) == span.end_char
            assert span.text == doc.text[span.start_char : span.end_char]


def merged(doc, key="words"):
    """The merged doc's tokens; checks that text, entities and span groups
    (by char offsets) are unchanged and that the input doc is left alone."""
    before = snapshot(doc)
    input_tokens = tokens(doc)
    out = merge_words(doc, key)
    assert snapshot(out) == before
    assert snapshot(doc) == before and tokens(doc) == input_tokens
    assert_valid_groups(out)
    return tokens(out)


def old_merge_words(doc: Doc, spans_key: str = "words") -> Doc:
    """Reference oracle: the implementation before the linear rewrite, verbatim
    but for the error messages (retokenizes in place with Retokenizer.merge)."""
    n = len(doc)
    if n == 0:
        return doc
    owner = [-1] * n
    for w, span in enumerate(doc.spans[spans_key]):
        for i in range(span.start, span.end):
            assert owner[i] == -1
            owner[i] = w
    keep: Set[int] = set()
    for ent in doc.ents:
        keep.update((ent.start, ent.end))
    for key, group in doc.spans.items():
        if key != spans_key:
            for span in group:
                keep.update((span.start, span.end))
    ents_before = [(e.start_char, e.end_char, e.label_, e.kb_id_, e.id_) for e in doc.ents]
    groups_before = {
        key: (group.name, dict(group.attrs), [(s.start_char, s.end_char, s.label, s.kb_id, s.id) for s in group])
        for key, group in doc.spans.items()
    }
    merges: List[Tuple[int, int]] = []
    start = 0
    for i in range(1, n + 1):
        joins = (
            i < n
            and owner[i] != -1
            and owner[i] == owner[i - 1]
            and i not in keep
            and not doc[i - 1].whitespace_
            and not doc[i - 1].is_space
            and not doc[i].is_space
        )
        if not joins:
            if i - start > 1:
                merges.append((start, i))
            start = i
    if not merges:
        return doc
    with doc.retokenize() as retokenizer:
        for s, e in merges:
            retokenizer.merge(doc[s:e])

    def char_span(s, e, label, kb_id, span_id):
        return doc.char_span(s, e, label=label, kb_id=kb_id, span_id=span_id, alignment_mode="strict")

    for key, (name, attrs, spans) in groups_before.items():
        doc.spans[key] = SpanGroup(doc, name=name, attrs=attrs, spans=[char_span(*s) for s in spans])
    if [(e.start_char, e.end_char, e.label_, e.kb_id_, e.id_) for e in doc.ents] != ents_before:
        doc.set_ents([char_span(*e) for e in ents_before], default="unmodified")
    return doc


def token_view(doc):
    """Everything a token carries that merging could change."""
    return [
        (
            t.text,
            t.whitespace_,
            t.idx,
            t.tag_,
            t.pos_,
            str(t.morph),
            t.lemma_,
            t.norm_,
            t.is_sent_start,
            t.ent_iob_,
            t.ent_type_,
            t.ent_kb_id_,
            t.ent_id_,
            t.head.i,
            t.dep_,
        )
        for t in doc
    ]


def doc_view(doc):
    tensor = None if doc.tensor is None else numpy.asarray(doc.tensor).tolist()
    return (
        token_view(doc),
        [(e.start_char, e.end_char, e.label_, e.kb_id_, e.id_) for e in doc.ents],
        {
            k: (g.name, dict(g.attrs), [(s.start, s.end, s.label_, s.kb_id_, s.id_) for s in g])
            for k, g in doc.spans.items()
        },
        tensor,
        doc.user_data,
        doc.cats,
        [doc.has_annotation(a) for a in ("TAG", "POS", "MORPH", "LEMMA", "SENT_START", "ENT_IOB", "DEP")],
    )


def random_doc(nlp, rng, max_len=30, annotate=True):
    """Random text (CJK, Latin, emoji, spaces of several kinds), random word
    segmentation (possibly with gaps), random entities with KB and entity ids,
    a second span group, and random token annotation, tensor, user_data, cats."""
    alphabet = list("我们在北京工作ab1。") + [" ", "  ", "\u3000", "\n", "😀", "👨\u200d👩\u200d👧"]
    doc = nlp.make_doc("".join(rng.choice(alphabet) for _ in range(rng.randint(0, max_len))))
    words, i = [], 0
    while i < len(doc):
        n = rng.randint(1, 5)
        if rng.random() < 0.9:
            words.append(doc[i : min(i + n, len(doc))])
        i += n
    doc.spans["words"] = words
    ents, i = [], 0
    while i < len(doc):
        n = rng.randint(1, 4)
        if rng.random() < 0.3 and not doc[i].is_space:
            ents.append(
                Span(
                    doc,
                    i,
                    min(i + n, len(doc)),
                    label=rng.choice(["PER", "LOC"]),
                    kb_id=rng.choice(["", "Q1"]),
                    span_id=rng.choice(["", "id7"]),
                )
            )
        i += n
    doc.ents = ents
    if rng.random() < 0.5 and len(doc):
        s = rng.randrange(len(doc))
        e = rng.randint(s + 1, min(s + 4, len(doc)))
        doc.spans["mentions"] = SpanGroup(
            doc, name="mentions", attrs={"source": "rule"}, spans=[Span(doc, s, e, label="M", kb_id="Q2", span_id="m1")]
        )
    if annotate:
        for t in doc:
            if rng.random() < 0.8:
                t.tag_ = rng.choice(["NN", "VV", "PU"])
                t.pos_ = rng.choice(["NOUN", "VERB", "PUNCT"])
                t.set_morph(rng.choice(["", "Number=Sing"]))
                t.lemma_ = t.text.upper()
            if rng.random() < 0.2:
                t.norm_ = t.text + "!"
            if t.i and rng.random() < 0.2:
                t.is_sent_start = True
        doc.tensor = numpy.arange(len(doc) * 3, dtype="float32").reshape((len(doc), 3))
        doc.user_data["note"] = rng.random()
        doc.cats = {"POS": rng.random()}
    return doc


def test_words_become_tokens(nlp):
    doc = make(nlp, "我爱北京天安门", [(0, 1), (1, 2), (2, 4), (4, 7)])
    assert merged(doc) == ["我", "爱", "北京", "天安门"]
    out = merge_words(doc)
    assert [(s.start, s.end) for s in out.spans["words"]] == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_word_crossing_entity_start_and_end(nlp):
    # words 他 | 去北 | 京大学 ; entity 北京: both words cross a boundary of it
    doc = make(nlp, "他去北京大学", [(0, 1), (1, 3), (3, 6)], ents=[(2, 4, "LOC")])
    assert merged(doc) == ["他", "去", "北", "京", "大学"]
    out = merge_words(doc)
    assert [(e.text, e.label_) for e in out.ents] == [("北京", "LOC")]
    # the word span still covers its characters, now over two tokens
    assert [s.text for s in out.spans["words"]] == ["他", "去北", "京大学"]


def test_entity_inside_a_word_and_adjacent_entities(nlp):
    doc = make(nlp, "北京大学生", [(0, 5)], ents=[(0, 2, "LOC")])
    assert merged(doc) == ["北京", "大学生"]
    out = merge_words(doc)
    assert out.ents[0].text == "北京" and out[0].ent_iob_ == "B"
    doc = make(nlp, "张三李四来了", [(0, 4), (4, 6)], ents=[(0, 2, "PER"), (2, 4, "PER")])
    assert merged(doc) == ["张三", "李四", "来了"]
    assert [e.text for e in merge_words(doc).ents] == ["张三", "李四"]


def test_entity_ids_are_kept(nlp):
    doc = make(nlp, "在北京大学", [(0, 1), (1, 5)])
    doc.ents = [Span(doc, 1, 5, label="ORG", kb_id="Q16952", span_id="pku")]
    assert merged(doc) == ["在", "北京大学"]
    out = merge_words(doc)
    assert (out.ents[0].text, out.ents[0].kb_id_, out.ents[0].id_) == ("北京大学", "Q16952", "pku")


def test_whitespace_never_inside_a_word(nlp):
    # "New York": the tagger (wrongly) writes one word over a trailing space;
    # "你  好": a word over a whitespace token; whitespace tokens themselves stay.
    text = "New York 你  好\u3000们"
    doc = nlp.make_doc(text)
    doc.spans["words"] = [doc.char_span(0, 8), doc.char_span(9, 13), doc.char_span(14, 15)]
    assert merged(doc) == ["New", "York", "你", " ", "好", "\u3000", "们"]
    out = merge_words(doc)
    assert out.text == text
    assert [t.whitespace_ for t in out][:2] == [" ", " "]


def test_uncovered_tokens_stay(nlp):
    doc = make(nlp, "abc。。", [(0, 2)])
    assert merged(doc) == ["ab", "c", "。", "。"]


def test_emoji_and_latin(nlp):
    family = "👨\u200d👩\u200d👧"
    text = f"我用iPhone拍{family}😀"
    doc = nlp.make_doc(text)
    assert len(doc) == 2 + 6 + 1 + 5 + 1  # the char segmenter splits by code point
    doc.spans["words"] = [
        doc.char_span(0, 1),
        doc.char_span(1, 2),
        doc.char_span(2, 8),
        doc.char_span(8, 9),
        doc.char_span(9, 14),
        doc.char_span(14, 15),
    ]
    doc.ents = [doc.char_span(2, 8, label="PRODUCT")]
    assert merged(doc) == ["我", "用", "iPhone", "拍", family, "😀"]


def test_empty_doc(nlp):
    doc = nlp.make_doc("")
    doc.spans["words"] = []
    assert merged(doc) == []
    doc = nlp.make_doc("")
    doc.spans["words"] = []
    assert list(merge_words(doc, entity_policy="keep_words").spans["ents_chars"]) == []


def test_missing_group_overlaps_and_bad_config_are_errors(nlp):
    doc = nlp.make_doc("我们")
    with pytest.raises(MergeWordsError, match=r"\[merger\] doc.spans\['words'\] is missing"):
        merge_words(doc, "words", component="merger")
    doc.spans["words"] = [doc[0:2], doc[1:2]]
    with pytest.raises(MergeWordsError, match="overlap at token 1"):
        merge_words(doc)
    doc.spans["words"] = [doc[1:2], doc[0:2]]  # unsorted groups too
    with pytest.raises(MergeWordsError, match="overlap at token 1"):
        merge_words(doc)
    doc.spans["words"] = [doc[0:2]]
    with pytest.raises(MergeWordsError, match="unknown entity_policy 'merge'"):
        merge_words(doc, entity_policy="merge")
    with pytest.raises(MergeWordsError, match="must differ"):
        merge_words(doc, entity_policy="keep_words", unaligned_ents_key="words")
    doc.spans["ents_chars"] = []
    with pytest.raises(MergeWordsError, match=r"doc.spans\['ents_chars'\] already exists"):
        merge_words(doc, entity_policy="keep_words")


def test_other_span_groups_keep_their_boundaries(nlp):
    doc = make(nlp, "北京大学生活", [(0, 4), (4, 6)])
    doc.spans["mentions"] = [doc.char_span(0, 2, label="LOC"), doc.char_span(3, 5, label="X")]
    assert merged(doc) == ["北京", "大", "学", "生", "活"]
    out = merge_words(doc)
    assert [(s.text, s.label_) for s in out.spans["mentions"]] == [("北京", "LOC"), ("学生", "X")]


def test_empty_spans_in_other_groups_survive(nlp):
    # (the retokenizer-based implementation failed on an empty span at the end)
    doc = make(nlp, "北京大学", [(0, 4)])
    doc.spans["marks"] = [doc[2:2], doc[4:4]]
    out = merge_words(doc)
    assert tokens(out) == ["北京", "大学"]
    assert [(s.start, s.end, s.start_char, s.end_char) for s in out.spans["marks"]] == [(1, 1, 2, 2), (2, 2, 4, 4)]


def test_random_docs_keep_text_ents_and_groups(nlp):
    rng = random.Random(3)
    alphabet = list("我们在北京工作ab1。 ") + ["\u3000", "😀"]
    for _ in range(200):
        doc = nlp.make_doc("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25))))
        words, i = [], 0
        while i < len(doc):
            n = rng.randint(1, 4)
            words.append(doc[i : min(i + n, len(doc))])
            i += n
        doc.spans["words"] = words
        ents, i = [], 0
        while i < len(doc):
            n = rng.randint(1, 3)
            if rng.random() < 0.3 and not doc[i].is_space:
                ents.append(Span(doc, i, min(i + n, len(doc)), label=rng.choice(["A", "B"])))
            i += n
        doc.ents = ents
        # a token starts at character token i unless i continues the same word,
        # is not at a word/entity boundary and no whitespace is involved
        edges = {c for span in words + ents for c in (span.start_char, span.end_char)}
        owner = {i: w for w, span in enumerate(words) for i in range(span.start, span.end)}
        expected = {
            doc[i].idx
            for i in range(len(doc))
            if i == 0
            or owner[i] != owner[i - 1]
            or doc[i].idx in edges
            or doc[i - 1].whitespace_
            or doc[i - 1].is_space
            or doc[i].is_space
        }
        merged(doc)
        out = merge_words(doc)
        assert {t.idx for t in out} == expected
        assert all(t.is_space or not any(c.isspace() for c in t.text) for t in out)


def test_property_new_merge_equals_old_retokenizer_merge(nlp):
    """A few hundred random docs: the linear merge gives what the old
    Retokenizer.merge implementation gave, token attribute by attribute, and
    keeps text, entities (offsets, labels, KB ids, ids) and span groups."""
    rng = random.Random(11)
    for case in range(300):
        doc = random_doc(nlp, rng, annotate=case % 3 != 0)
        before = snapshot(doc)
        ents = [(e.start_char, e.end_char, e.label_, e.kb_id_, e.id_) for e in doc.ents]
        groups = {k: [(s.start_char, s.end_char, s.label_, s.kb_id_, s.id_) for s in g] for k, g in doc.spans.items()}
        oracle = old_merge_words(doc.copy())
        out = merge_words(doc)
        assert out.text == doc.text
        assert "".join(t.text_with_ws for t in out) == doc.text
        assert doc_view(out) == doc_view(oracle), (case, doc.text)
        assert [(e.start_char, e.end_char, e.label_, e.kb_id_, e.id_) for e in out.ents] == ents
        assert {
            k: [(s.start_char, s.end_char, s.label_, s.kb_id_, s.id_) for s in g] for k, g in out.spans.items()
        } == groups
        assert_valid_groups(out)
        assert snapshot(doc) == before  # the input doc is untouched
        assert merge_words(doc, via_retokenizer=True) is doc and doc_view(doc) == doc_view(oracle)


@pytest.mark.parametrize("policy", ["split", "keep_words"])
def test_property_entity_policies_lose_nothing(nlp, policy):
    rng = random.Random(5)
    for case in range(200):
        doc = random_doc(nlp, rng, annotate=False)
        ents = [(e.start_char, e.end_char, e.label_, e.kb_id_, e.id_) for e in doc.ents]
        in_place = merge_words(doc.copy(), entity_policy=policy, via_retokenizer=True)
        out = merge_words(doc, entity_policy=policy)
        assert doc_view(in_place) == doc_view(out)
        assert out.text == doc.text
        assert char_entities(out) == ents
        assert_valid_groups(out)
        if policy == "keep_words":
            assert [s.text for s in out.spans["words"]] == [s.text for s in doc.spans["words"]]
            # the tokens are what split gives without the entities' boundaries
            plain = doc.copy()
            plain.ents = []
            assert tokens(out) == tokens(merge_words(plain))


def parsed_doc(nlp):
    doc = Doc(nlp.vocab, words=list("我们在北京"), spaces=[False] * 5, heads=[1, 2, 2, 4, 2], deps=list("abRcd"))
    doc.spans["words"] = [doc[0:2], doc[2:3], doc[3:5]]
    doc.ents = [Span(doc, 3, 5, label="LOC")]
    return doc


@pytest.mark.parametrize("policy", ["split", "keep_words"])
def test_property_batch_merge_equals_merge_of_each_doc(nlp, policy):
    """Batches of random docs (empty ones, docs with nothing to merge and a
    parsed doc among them, at random places): merge_docs gives each doc what
    merge_words gives it alone, the unchanged docs as the same objects, and
    leaves the input docs as they were."""
    rng = random.Random(17)
    for case in range(60):
        batch = [random_doc(nlp, rng, annotate=rng.random() < 0.7) for _ in range(rng.randint(1, 12))]
        for _ in range(rng.randint(0, 2)):
            plain = rng.choice([make(nlp, "", []), make(nlp, "我们", [(0, 1), (1, 2)])])  # nothing to merge
            batch.insert(rng.randint(0, len(batch)), plain)
        if rng.random() < 0.3:
            batch.insert(rng.randint(0, len(batch)), parsed_doc(nlp))
        expected = [doc_view(merge_words(doc.copy(), entity_policy=policy)) for doc in batch]
        before = [snapshot(doc) for doc in batch]
        sizes = [len(doc) for doc in batch]
        out = merge_docs(batch, entity_policy=policy)
        assert [doc_view(doc) for doc in out] == expected, case
        for doc, result, view, n_tokens in zip(batch, out, before, sizes):
            if doc.has_annotation("DEP"):
                continue  # retokenized in place, as merge_words does
            if result is doc:  # nothing to merge (keep_words adds its empty group, as merge_words does)
                assert len(result) == n_tokens
            else:
                assert snapshot(doc) == view and len(doc) == n_tokens and len(result) < n_tokens


def test_pipe_merges_in_batches_as_call_does(nlp):
    rng = random.Random(23)
    docs = [random_doc(nlp, rng) for _ in range(40)]
    merger = MergeWords(entity_policy="keep_words")
    expected = [doc_view(merger(doc.copy())) for doc in docs]
    assert [doc_view(doc) for doc in merger.pipe(iter(docs), batch_size=7)] == expected
    assert merge_docs([]) == []


def test_batch_errors_name_the_doc(nlp):
    good = make(nlp, "北京", [(0, 2)])
    bad = make(nlp, "我们在", [(0, 2)])
    bad.spans["words"] = [bad[0:2], bad[1:3]]
    with pytest.raises(MergeWordsError, match=r"overlap at token 1 \('们', char 1\) of the doc '我们在'"):
        merge_docs([good, bad, good])
    del good.spans["words"]
    with pytest.raises(MergeWordsError, match=r"\[crf_merge_words\] doc.spans\['words'\] is missing"):
        merge_docs([make(nlp, "我们", [(0, 2)]), good])
    # An "I" token opening a doc, after a doc that ends inside an entity: laid
    # end to end it would look like the entity's continuation.
    first = make(nlp, "在北京", [(0, 1), (1, 3)], [(1, 3, "LOC")])
    stray = make(nlp, "我们", [(0, 2)])
    stray.from_array([ENT_IOB, ENT_TYPE], numpy.array([[1, first.vocab.strings["LOC"]], [1, 0]], dtype="uint64"))
    with pytest.raises(ValueError, match="E093"):
        merge_docs([first, stray])


POLICY_CASES = [
    # (text, words, entity, tokens under split, tokens under keep_words, entity aligned under keep_words)
    (
        "他去北京大学生活",
        [(0, 1), (1, 2), (2, 6), (6, 8)],
        (2, 4, "LOC"),
        ["他", "去", "北京", "大学", "生活"],
        ["他", "去", "北京大学", "生活"],
        False,
    ),  # inside a word
    (
        "他去北京大学",
        [(0, 1), (1, 3), (3, 6)],
        (2, 4, "LOC"),
        ["他", "去", "北", "京", "大学"],
        ["他", "去北", "京大学"],
        False,
    ),  # crossing two words
    (
        "他去北京大学",
        [(0, 1), (1, 2), (2, 6)],
        (2, 6, "ORG"),
        ["他", "去", "北京大学"],
        ["他", "去", "北京大学"],
        True,
    ),  # equal to a word
    (
        "我们 在北京大学 New York上学",
        [(0, 2), (3, 4), (4, 8), (9, 12), (13, 17), (17, 19)],
        (4, 6, "LOC"),
        ["我们", "在", "北京", "大学", "New", "York", "上学"],
        ["我们", "在", "北京大学", "New", "York", "上学"],
        False,
    ),  # nested, in a sentence with spaces
]


@pytest.mark.parametrize("text,words,ent,split_tokens,keep_tokens,aligned", POLICY_CASES)
def test_entity_policies(nlp, text, words, ent, split_tokens, keep_tokens, aligned):
    def doc_with_entity():
        doc = make(nlp, text, words)
        doc.ents = [doc.char_span(ent[0], ent[1], label=ent[2], kb_id="Q9", alignment_mode="strict")]
        return doc

    want = [(ent[0], ent[1], ent[2], "Q9", "")]
    out = merge_words(doc_with_entity(), entity_policy="split")
    assert (out.text, tokens(out)) == (text, split_tokens)
    assert [(e.start_char, e.end_char, e.label_, e.kb_id_, e.id_) for e in out.ents] == want
    assert "ents_chars" not in out.spans

    out = merge_words(doc_with_entity(), entity_policy="keep_words", unaligned_ents_key="ner_chars")
    assert (out.text, tokens(out)) == (text, keep_tokens)
    assert char_entities(out, "ner_chars") == want
    group = out.spans["ner_chars"]
    if aligned:
        assert [(e.start_char, e.end_char, e.label_) for e in out.ents] == [ent]
        assert list(group) == [] and group.attrs[CHAR_OFFSETS] == []
    else:
        assert list(out.ents) == [] and all(t.ent_iob_ == "O" for t in out)
        [span] = group
        assert group.attrs[CHAR_OFFSETS] == [[ent[0], ent[1]]]
        assert (span.label_, span.kb_id_) == (ent[2], "Q9")
        # the span covers the words the entity touches
        assert span.start_char <= ent[0] < ent[1] <= span.end_char
        assert text[ent[0] : ent[1]] in span.text
    assert_valid_groups(out)


def test_keep_words_keeps_aligned_entities_in_doc_ents(nlp):
    doc = make(nlp, "张三去北京大学", [(0, 2), (2, 3), (3, 7)], ents=[(0, 2, "PER"), (3, 5, "LOC")])
    out = merge_words(doc, entity_policy="keep_words")
    assert tokens(out) == ["张三", "去", "北京大学"]
    assert [(e.text, e.label_) for e in out.ents] == [("张三", "PER")]
    assert [(s.text, s.label_) for s in out.spans["ents_chars"]] == [("北京大学", "LOC")]
    assert char_entities(out) == [(0, 2, "PER", "", ""), (3, 5, "LOC", "", "")]
    assert [t.ent_iob_ for t in out] == ["B", "O", "O"]


def test_keep_words_still_keeps_other_groups_boundaries(nlp):
    doc = make(nlp, "北京大学生活", [(0, 4), (4, 6)], ents=[(1, 3, "LOC")])
    doc.spans["mentions"] = [doc.char_span(0, 2, label="M")]
    out = merge_words(doc, entity_policy="keep_words")
    assert tokens(out) == ["北京", "大学", "生活"]
    assert [(s.text, s.label_) for s in out.spans["mentions"]] == [("北京", "M")]
    assert char_entities(out) == [(1, 3, "LOC", "", "")] and list(out.ents) == []
    assert [s.text for s in out.spans["ents_chars"]] == ["北京大学"]


def test_carries_doc_level_data_and_extensions(nlp):
    if not Doc.has_extension("test_merge_payload"):
        Doc.set_extension("test_merge_payload", default=None)
    doc = make(nlp, "我们在北京", [(0, 2), (2, 3), (3, 5)])
    doc._.test_merge_payload = {"x": 1}
    doc.cats = {"news": 0.9}
    doc.user_hooks["has_vector"] = lambda d: True
    try:
        from spacy_transformers.data_classes import TransformerData
        from spacy_transformers.util import install_extensions
    except ImportError:  # pragma: no cover - spacy-transformers is a dependency
        TransformerData = None
    if TransformerData is not None:
        install_extensions()
        doc._.trf_data = TransformerData.empty()
    doc.tensor = numpy.arange(10, dtype="float32").reshape((5, 2))
    out = merge_words(doc)
    assert out is not doc and tokens(out) == ["我们", "在", "北京"]
    assert out._.test_merge_payload == {"x": 1} and out.cats == {"news": 0.9} and out.has_vector
    if TransformerData is not None:
        assert out._.trf_data is doc._.trf_data  # alignment still refers to the character tokens
    assert out.tensor.tolist() == [[2, 3], [4, 5], [8, 9]]  # each word keeps its last character's row


def test_vocab_vectors_as_retokenizer(nlp):
    vec_nlp = spacy.blank("zh")
    for i, char in enumerate("我们北京"):
        vec_nlp.vocab.set_vector(char, numpy.full((4,), i + 1, dtype="float32"))
    doc = make(vec_nlp, "我们在北京", [(0, 2), (2, 3), (3, 5)])
    oracle = old_merge_words(make(vec_nlp, "我们在北京", [(0, 2), (2, 3), (3, 5)]))
    out = merge_words(doc)
    assert [t.vector.tolist() for t in out] == [t.vector.tolist() for t in oracle]
    assert out[0].vector.tolist() == [1.5] * 4


def test_parsed_doc_is_retokenized_in_place(nlp):
    words = ["我", "们", "在", "北", "京"]

    def parsed():
        doc = Doc(nlp.vocab, words=words, spaces=[False] * 5, heads=[1, 2, 2, 4, 2], deps=["a", "b", "ROOT", "c", "d"])
        doc.spans["words"] = [doc[0:2], doc[2:3], doc[3:5]]
        doc.ents = [Span(doc, 3, 5, label="LOC")]
        return doc

    doc = parsed()
    out = merge_words(doc)
    assert out is doc and tokens(out) == ["我们", "在", "北京"]
    assert token_view(out) == token_view(old_merge_words(parsed()))
    assert [(t.head.i, t.dep_) for t in out] == [(1, "b"), (1, "ROOT"), (1, "d")]
    doc = parsed()
    doc.ents = [Span(doc, 1, 3, label="X")]  # 们在 crosses two words
    out = merge_words(doc, entity_policy="keep_words")
    assert out is doc and tokens(out) == ["我们", "在", "北京"] and list(out.ents) == []
    assert char_entities(out) == [(1, 3, "X", "", "")]


def fake_pipeline(config=None):
    nlp = spacy.blank("zh")
    nlp.add_pipe("test_merge_fake_segmenter")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns([{"label": "LOC", "pattern": "京大"}, {"label": "ORG", "pattern": "天安门"}])
    nlp.add_pipe("crf_merge_words", config=config or {})
    return nlp


TEXTS = ["我们在北京大学", "北京大学生去天安门", "New York 的 iPhone", "", "我们  我们"]
EXPECTED = [
    ["我们", "在", "北", "京大", "学"],
    ["北", "京大", "学", "生", "去", "天安门"],
    ["New", "York", "的", "iPhone"],
    [],
    ["我们", " ", "我们"],
]


def test_pipeline_to_disk_and_multiprocessing(tmp_path):
    nlp = fake_pipeline()
    assert nlp.get_pipe_config("crf_merge_words") == {
        "factory": "crf_merge_words",
        "spans_key": "words",
        "entity_policy": "split",
        "unaligned_ents_key": "ents_chars",
    }
    docs = list(nlp.pipe(TEXTS))
    assert [tokens(d) for d in docs] == EXPECTED
    assert [[(e.text, e.label_) for e in d.ents] for d in docs][:2] == [
        [("京大", "LOC")],
        [("京大", "LOC"), ("天安门", "ORG")],
    ]
    nlp.to_disk(tmp_path / "model")
    loaded = spacy.load(tmp_path / "model")
    assert loaded.pipe_names == ["test_merge_fake_segmenter", "entity_ruler", "crf_merge_words"]
    assert [snapshot(d) for d in loaded.pipe(TEXTS)] == [snapshot(d) for d in docs]
    parallel = list(loaded.pipe(TEXTS * 2, n_process=2, batch_size=2))
    assert [tokens(d) for d in parallel] == EXPECTED * 2
    assert [snapshot(d) for d in parallel] == [snapshot(d) for d in docs] * 2
    pids = {d.user_data["pid"] for d in parallel}
    assert len(pids) == 2 and os.getpid() not in pids  # really ran in two worker processes
    for doc in parallel:
        assert_valid_groups(doc)
    # contexts travel with the new docs
    tuples = nlp.pipe(zip(TEXTS[:2], "ab"), as_tuples=True)
    assert [(tokens(d), c) for d, c in tuples] == list(zip(EXPECTED[:2], "ab"))


def test_pipeline_keep_words_to_disk_and_multiprocessing(tmp_path):
    nlp = fake_pipeline({"entity_policy": "keep_words"})
    docs = list(nlp.pipe(TEXTS))
    assert [tokens(d) for d in docs][:2] == [["我们", "在", "北京大学"], ["北京大学", "生", "去", "天安门"]]
    assert [[(e.text, e.label_) for e in d.ents] for d in docs][:2] == [[], [("天安门", "ORG")]]
    assert [char_entities(d) for d in docs][:2] == [
        [(4, 6, "LOC", "", "")],
        [(1, 3, "LOC", "", ""), (6, 9, "ORG", "", "")],
    ]
    nlp.to_disk(tmp_path / "model")
    loaded = spacy.load(tmp_path / "model")
    assert loaded.get_pipe("crf_merge_words").entity_policy == "keep_words"
    parallel = list(loaded.pipe(TEXTS, n_process=2, batch_size=2))
    assert [(tokens(d), char_entities(d)) for d in parallel] == [(tokens(d), char_entities(d)) for d in docs]
    for doc in parallel:
        assert_valid_groups(doc)


def test_pipeline_without_segmenter_fails_clearly():
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_merge_words", name="merge", config={"spans_key": "cws"})
    with pytest.raises(MergeWordsError, match=r"\[merge\] doc.spans\['cws'\] is missing"):
        nlp("我们")
    with pytest.raises(MergeWordsError, match="unknown entity_policy"):
        nlp.add_pipe("crf_merge_words", name="merge2", config={"entity_policy": "entity"})
