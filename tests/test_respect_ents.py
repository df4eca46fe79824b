"""Issue 15, joint decoding: a segmenter with ``respect_ents`` re-decodes its
CRF with every entity boundary as a forced word boundary, so that words never
cross an entity and ``crf_merge_words`` never has to split one."""

import numpy
import pytest
import spacy
from _configs import WORDS, pipeline_config
from conftest import trained_segmenter
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Config

from spacy_crf.ml.schemes import is_valid

SEG_WORDS = WORDS + [["李四", "住", "广州"], ["上海", "很", "大"]]


@pytest.fixture(scope="module")
def segmenter_nlp():
    nlp = trained_segmenter(SEG_WORDS)
    doc = nlp("张三去上海")
    assert [s.text for s in doc.spans["words"]] == ["张三", "去", "上海"]
    return nlp


def with_respect_ents(nlp, respect=True):
    nlp.get_pipe("segmenter").cfg["respect_ents"] = respect
    return nlp


def doc_with_ents(nlp, text, ents):
    doc = nlp.make_doc(text)
    doc.set_ents([doc.char_span(s, e, label=label) for s, e, label in ents], default="missing")
    return doc


def words(doc):
    return [(s.start_char, s.end_char) for s in doc.spans["words"]]


def assert_words_respect_ents(doc, text, ents):
    assert doc.text == text
    assert [(e.start_char, e.end_char, e.label_) for e in doc.ents] == ents  # no entity lost or moved
    spans = list(doc.spans["words"])
    starts = {s.start for s in spans}
    ends = {s.end for s in spans}
    for ent in doc.ents:
        assert ent.start in starts and ent.end in ends, (ent.text, [s.text for s in spans])
    covered = [i for s in spans for i in range(s.start, s.end)]
    assert covered == [t.i for t in doc if not t.is_space]  # every character in exactly one word


CASES = {
    "entity inside a word": ("张三去上海", [(3, 4, "LOC")]),
    "entity across two words": ("张三去上海", [(1, 3, "PER")]),
    "entity equal to a word": ("张三去上海", [(3, 5, "LOC")]),
    "entities in a sentence with spaces": (
        "张三 去上海\u3000李四住广州\n很大",
        [(1, 4, "PER"), (5, 6, "LOC"), (9, 12, "PER"), (13, 14, "LOC")],
    ),
    "one-character entities side by side": ("张三去上海", [(0, 1, "PER"), (1, 2, "PER"), (4, 5, "LOC")]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_words_follow_the_entity_boundaries(segmenter_nlp, case):
    text, ents = CASES[case]
    nlp = with_respect_ents(segmenter_nlp)
    try:
        doc = nlp(doc_with_ents(nlp, text, ents))
        assert_words_respect_ents(doc, text, ents)
        pipe = nlp.get_pipe("segmenter")
        ids = pipe.predict([doc])[0]
        assert is_valid("bmes", [pipe.tags[i] for i in ids])
    finally:
        with_respect_ents(segmenter_nlp, False)


def test_without_respect_ents_the_entities_are_ignored(segmenter_nlp):
    nlp = with_respect_ents(segmenter_nlp, False)
    plain = words(nlp("张三去上海"))
    assert words(nlp(doc_with_ents(nlp, "张三去上海", [(3, 4, "LOC")]))) == plain == [(0, 2), (2, 3), (3, 5)]
    nlp = with_respect_ents(segmenter_nlp)
    try:
        assert words(nlp(doc_with_ents(nlp, "张三去上海", [(3, 4, "LOC")]))) == [(0, 2), (2, 3), (3, 4), (4, 5)]
        assert words(nlp("张三去上海")) == plain  # no entities: nothing forced
    finally:
        with_respect_ents(segmenter_nlp, False)


def _ruler_pipeline(segmenter_nlp, respect):
    nlp = spacy.blank("zh")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns(
        [
            {"label": "LOC", "pattern": "上"},
            {"label": "PER", "pattern": "三去"},
            {"label": "LOC", "pattern": "广州"},
            {"label": "PER", "pattern": "四 住"},
        ]
    )
    nlp.add_pipe("segmenter", source=segmenter_nlp)
    nlp.get_pipe("segmenter").cfg["respect_ents"] = respect
    nlp.add_pipe("crf_merge_words", name="merge_words")
    return nlp


TEXTS = ["张三去上海", "李四住广州", "张三 去上海\u3000李四 住广州", "", "  ", "上上上", "今天天气好"] * 2


def _tokens_and_ents(doc):
    return [t.text for t in doc], [(e.start_char, e.end_char, e.label_) for e in doc.ents]


def test_through_nlp_pipe_with_an_entity_ruler_and_the_merge(segmenter_nlp):
    nlp = _ruler_pipeline(segmenter_nlp, respect=True)
    merge = nlp.get_pipe("merge_words")
    with nlp.select_pipes(disable=["merge_words"]):
        unmerged = [nlp(t) for t in TEXTS]
    for text, doc in zip(TEXTS, unmerged):
        assert_words_respect_ents(doc, text, [(e.start_char, e.end_char, e.label_) for e in doc.ents])
    assert [(e.start_char, e.end_char) for e in unmerged[2].ents] == [(1, 4), (4, 5), (8, 11), (11, 13)]
    single = [nlp(t) for t in TEXTS]
    for before, doc in zip(unmerged, single):
        # the merge only joins words into tokens: it has nothing to split
        assert [t.text for t in doc if not t.is_space] == [s.text for s in before.spans["words"]]
        assert [(e.start_char, e.end_char, e.label_) for e in doc.ents] == [
            (e.start_char, e.end_char, e.label_) for e in before.ents
        ]
    for batch_size in (1, 3, 50):
        assert [_tokens_and_ents(d) for d in nlp.pipe(TEXTS, batch_size=batch_size)] == [
            _tokens_and_ents(d) for d in single
        ]
    # without respect_ents the words cross the entities and the merge has to cut them
    split = _ruler_pipeline(segmenter_nlp, respect=False)
    with split.select_pipes(disable=["merge_words"]):
        crossing = split("张三去上海")
    assert [s.text for s in crossing.spans["words"]] == ["张三", "去", "上海"]
    assert merge.entity_policy == "split"


def test_respect_ents_is_a_segmenter_setting():
    nlp = spacy.blank("zh")
    seg = nlp.add_pipe("crf_segmenter", config={"respect_ents": True})
    assert seg.cfg["respect_ents"] is True
    assert nlp.get_pipe("crf_segmenter").cfg["respect_ents"]
    assert spacy.blank("zh").add_pipe("crf_segmenter").cfg["respect_ents"] is False
    with pytest.raises(ValueError, match=r"\[crf_ner\] respect_ents applies to scheme 'bmes'"):
        spacy.blank("zh").add_pipe("crf_ner", config={"respect_ents": True})


def test_ner_before_the_segmenter_on_one_shared_transformer(tiny_bert_dir, tmp_path):
    """transformer -> crf_ner -> segmenter (respect_ents), both listening to
    one transformer: trains, saves, loads, and the words follow the entities."""
    text = pipeline_config(
        [("crf_ner", "crf_ner", "bioes"), ("segmenter", "crf_segmenter", "")], name=str(tiny_bert_dir)
    )
    text = text.replace(
        '[components.segmenter]\nfactory = "crf_segmenter"\n',
        '[components.segmenter]\nfactory = "crf_segmenter"\nrespect_ents = true\n',
    )
    nlp = spacy.util.load_model_from_config(Config().from_str(text), auto_fill=True, validate=True)
    assert nlp.pipe_names == ["transformer", "crf_ner", "segmenter"]
    assert nlp.get_pipe("segmenter").cfg["respect_ents"] is True
    examples = []
    for w in SEG_WORDS:
        examples.append(Example(nlp.make_doc("".join(w)), Doc(nlp.vocab, words=w, spaces=[False] * len(w))))
    for t, ents in [("张三去上海", [(0, 2, "PER"), (3, 5, "LOC")]), ("李四住广州", [(0, 2, "PER"), (3, 5, "LOC")])]:
        examples.append(Example.from_dict(nlp.make_doc(t), {"entities": ents}))
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(3):
        losses = nlp.update(examples, sgd=optimizer)
    assert all(numpy.isfinite(v) for v in losses.values()) and set(losses) >= {"crf_ner", "segmenter"}
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.get_pipe("segmenter").cfg["respect_ents"] is True
    texts = ["张三去上海", "李四住广州工作", "张三 去上海"]
    single = [loaded(t) for t in texts]
    piped = list(loaded.pipe(texts, batch_size=2))
    for a, b in zip(single, piped):
        assert words(a) == words(b) and [(e.start, e.end, e.label_) for e in a.ents] == [
            (e.start, e.end, e.label_) for e in b.ents
        ]
        assert_words_respect_ents(b, b.text, [(e.start_char, e.end_char, e.label_) for e in b.ents])
