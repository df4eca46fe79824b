"""crf_merge_words: predicted words (a span group over characters) become tokens."""
import os
import random

import pytest
import spacy
from spacy.language import Language
from spacy.tokens import Doc, Span

from spacy_crf.merge import MergeWordsError, make_merge_words, merge_words  # noqa: F401 (registers the factory)

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
            spans.append(doc[i:i + 1])
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
            assert span.text == doc.text[span.start_char:span.end_char]


def merged(doc, key="words"):
    before = snapshot(doc)
    merge_words(doc, key)
    assert snapshot(doc) == before  # text, entities and span groups by char offsets
    assert_valid_groups(doc)
    return tokens(doc)


def test_words_become_tokens(nlp):
    doc = make(nlp, "我爱北京天安门", [(0, 1), (1, 2), (2, 4), (4, 7)])
    assert merged(doc) == ["我", "爱", "北京", "天安门"]
    assert [(s.start, s.end) for s in doc.spans["words"]] == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_word_crossing_entity_start_and_end(nlp):
    # words 他 | 去北 | 京大学 ; entity 北京: both words cross a boundary of it
    doc = make(nlp, "他去北京大学", [(0, 1), (1, 3), (3, 6)], ents=[(2, 4, "LOC")])
    assert merged(doc) == ["他", "去", "北", "京", "大学"]
    assert [(e.text, e.label_) for e in doc.ents] == [("北京", "LOC")]
    # the word span still covers its characters, now over two tokens
    assert [s.text for s in doc.spans["words"]] == ["他", "去北", "京大学"]


def test_entity_inside_a_word_and_adjacent_entities(nlp):
    doc = make(nlp, "北京大学生", [(0, 5)], ents=[(0, 2, "LOC")])
    assert merged(doc) == ["北京", "大学生"]
    assert doc.ents[0].text == "北京" and doc[0].ent_iob_ == "B"
    doc = make(nlp, "张三李四来了", [(0, 4), (4, 6)], ents=[(0, 2, "PER"), (2, 4, "PER")])
    assert merged(doc) == ["张三", "李四", "来了"]
    assert [e.text for e in doc.ents] == ["张三", "李四"]


def test_entity_ids_are_kept(nlp):
    doc = make(nlp, "在北京大学", [(0, 1), (1, 5)])
    doc.ents = [Span(doc, 1, 5, label="ORG", kb_id="Q16952")]
    assert merged(doc) == ["在", "北京大学"]
    assert (doc.ents[0].text, doc.ents[0].kb_id_) == ("北京大学", "Q16952")


def test_whitespace_never_inside_a_word(nlp):
    # "New York": the tagger (wrongly) writes one word over a trailing space;
    # "你  好": a word over a whitespace token; whitespace tokens themselves stay.
    text = "New York 你  好\u3000们"
    doc = nlp.make_doc(text)
    doc.spans["words"] = [doc.char_span(0, 8), doc.char_span(9, 13), doc.char_span(14, 15)]
    assert merged(doc) == ["New", "York", "你", " ", "好", "\u3000", "们"]
    assert doc.text == text
    assert [t.whitespace_ for t in doc][:2] == [" ", " "]


def test_uncovered_tokens_stay(nlp):
    doc = make(nlp, "abc。。", [(0, 2)])
    assert merged(doc) == ["ab", "c", "。", "。"]


def test_emoji_and_latin(nlp):
    family = "👨\u200d👩\u200d👧"
    text = f"我用iPhone拍{family}😀"
    doc = nlp.make_doc(text)
    assert len(doc) == 2 + 6 + 1 + 5 + 1  # the char segmenter splits by code point
    doc.spans["words"] = [doc.char_span(0, 1), doc.char_span(1, 2), doc.char_span(2, 8), doc.char_span(8, 9),
                          doc.char_span(9, 14), doc.char_span(14, 15)]
    doc.ents = [doc.char_span(2, 8, label="PRODUCT")]
    assert merged(doc) == ["我", "用", "iPhone", "拍", family, "😀"]


def test_empty_doc(nlp):
    doc = nlp.make_doc("")
    doc.spans["words"] = []
    assert merged(doc) == []


def test_missing_group_and_overlaps_are_errors(nlp):
    doc = nlp.make_doc("我们")
    with pytest.raises(MergeWordsError, match=r"\[merger\] doc.spans\['words'\] is missing"):
        merge_words(doc, "words", component="merger")
    doc.spans["words"] = [doc[0:2], doc[1:2]]
    with pytest.raises(MergeWordsError, match="overlap at token 1"):
        merge_words(doc)


def test_other_span_groups_keep_their_boundaries(nlp):
    doc = make(nlp, "北京大学生活", [(0, 4), (4, 6)])
    doc.spans["mentions"] = [doc.char_span(0, 2, label="LOC"), doc.char_span(3, 5, label="X")]
    assert merged(doc) == ["北京", "大", "学", "生", "活"]
    assert [(s.text, s.label_) for s in doc.spans["mentions"]] == [("北京", "LOC"), ("学生", "X")]


def test_random_docs_keep_text_ents_and_groups(nlp):
    rng = random.Random(3)
    alphabet = list("我们在北京工作ab1。 ") + ["\u3000", "😀"]
    for _ in range(200):
        doc = nlp.make_doc("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25))))
        words, i = [], 0
        while i < len(doc):
            n = rng.randint(1, 4)
            words.append(doc[i:min(i + n, len(doc))])
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
        assert {t.idx for t in doc} == expected
        assert all(t.is_space or not any(c.isspace() for c in t.text) for t in doc)


def fake_pipeline():
    nlp = spacy.blank("zh")
    nlp.add_pipe("test_merge_fake_segmenter")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns([{"label": "LOC", "pattern": "京大"}, {"label": "ORG", "pattern": "天安门"}])
    nlp.add_pipe("crf_merge_words")
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
    assert nlp.get_pipe_config("crf_merge_words") == {"factory": "crf_merge_words", "spans_key": "words"}
    docs = list(nlp.pipe(TEXTS))
    assert [tokens(d) for d in docs] == EXPECTED
    assert [[(e.text, e.label_) for e in d.ents] for d in docs][:2] == [[("京大", "LOC")], [("京大", "LOC"), ("天安门", "ORG")]]
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


def test_pipeline_without_segmenter_fails_clearly():
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_merge_words", name="merge", config={"spans_key": "cws"})
    with pytest.raises(MergeWordsError, match=r"\[merge\] doc.spans\['cws'\] is missing"):
        nlp("我们")
