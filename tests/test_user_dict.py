"""Issue 34 item 3, user dictionaries (spacy_crf.pipeline.user_dict): words and
gazetteer entities added to trained taggers at load time, forced through the
tag mask or as a prior; conflicts, whitespace, respect_ents, serialization
and the settings file."""

import json

import numpy
import pytest
import spacy
from _configs import NER_DATA, WORDS, crf_model_config
from conftest import trained_segmenter
from spacy.tokens import Doc, Span
from spacy.training import Example
from spacy.util import fix_random_seed, raise_error

from spacy_crf.annotate import AnnotateError, annotate, read_output
from spacy_crf.batching import pipe_sorted
from spacy_crf.pipeline.user_dict import UserDictConflict, UserEntry, read_user_dict

SEG_WORDS = WORDS + [["李四", "住", "广州"], ["上海", "很", "大"], ["去", "北京"]]


@pytest.fixture(scope="module")
def segmenter_nlp():
    fix_random_seed(0)  # module fixtures are set up before the per-test seed
    nlp = trained_segmenter(SEG_WORDS)
    # the tiny model cuts the unseen 中国 into characters: what a user word is for
    assert words(nlp("中国大学生"))[:2] == ["中", "国"]
    assert words(nlp("张三去上海")) == ["张三", "去", "上海"]
    return nlp


@pytest.fixture
def nlp(segmenter_nlp):
    segmenter = segmenter_nlp.get_pipe("segmenter")
    segmenter.user_dict.clear()
    segmenter.set_lexicon(None)
    segmenter.cfg["respect_ents"] = False
    yield segmenter_nlp
    segmenter.user_dict.clear()
    segmenter.set_lexicon(None)
    segmenter.cfg["respect_ents"] = False


@pytest.fixture(scope="module")
def ner_nlp():
    fix_random_seed(0)
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_ner", name="ner", config={"model": crf_model_config()})
    examples = [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(40):
        nlp.update(examples, sgd=optimizer)
    assert ents(nlp("张三去上海")) == [("张三", "PER"), ("上海", "LOC")]
    return nlp


@pytest.fixture
def ner(ner_nlp):
    ner_nlp.get_pipe("ner").user_dict.clear()
    yield ner_nlp
    ner_nlp.get_pipe("ner").user_dict.clear()


def words(doc):
    return [s.text for s in doc.spans["words"]]


def ents(doc):
    return [(e.text, e.label_) for e in doc.ents]


def split_point(nlp, text, word):
    """Whether ``word`` (once in ``text``) is one predicted word."""
    return word in words(nlp(text))


# --- segmenter: forced words ---------------------------------------------------------


def test_forced_words_are_never_split_even_where_the_model_splits_them(nlp):
    segmenter = nlp.get_pipe("segmenter")
    assert segmenter.add_user_words(["中国", "三去上"]) == 2
    doc = nlp("中国大学生")
    assert words(doc)[0] == "中国"
    doc = nlp("张三去上海")  # the model is sure of 张三|去|上海; the forced word overrides it
    assert words(doc) == ["张", "三去上", "海"]
    assert doc.text == "张三去上海" and "".join(words(doc)) == doc.text  # no character lost
    # a strong lexicon prior for a word crossing the forced one changes nothing
    segmenter.set_lexicon(["去上海"], weight=50.0)
    assert words(nlp("张三去上海")) == ["张", "三去上", "海"]
    assert segmenter.predict_marginals([nlp.make_doc("张三去上海")])[0][1:4].argmax(axis=1).tolist() == [0, 1, 2]
    segmenter.user_dict.remove(["三去上"])
    assert words(nlp("张三去上海")) == ["张三", "去上海"]  # the lexicon's word again


def test_a_forced_word_inside_a_longer_forced_word_gives_way(nlp):
    segmenter = nlp.get_pipe("segmenter")
    segmenter.add_user_words(["中国", "国大", "中国大学生"])  # 国大 crosses 中国, but both are inside the longest
    assert words(nlp("中国大学生")) == ["中国大学生"]
    with pytest.raises(UserDictConflict, match="'中国'.*'国大'"):  # no longer word around them here
        nlp("去中国大学")


def test_crossing_forced_words_are_an_error_naming_both_and_the_doc(nlp):
    segmenter = nlp.get_pipe("segmenter")
    segmenter.add_user_words(["中国大", "大学"])
    with pytest.raises(
        UserDictConflict,
        match=r"\[segmenter\] the forced user words '中国大' \(add_user_words\) "
        r"and '大学' \(add_user_words\) overlap in doc '我在中国大学', at "
        r"characters 2-5 and 4-6",
    ):
        nlp("我在中国大学")
    assert words(nlp("中国大")) == ["中国大"]  # no conflict where only one occurs
    segmenter.add_user_words(["大学"], mode="prior")  # one of them a prior: no conflict
    assert words(nlp("我在中国大学"))[-2:] == ["中国大", "学"]


def test_forced_words_never_cross_whitespace(nlp):
    segmenter = nlp.get_pipe("segmenter")
    segmenter.add_user_words(["大学", "学生"])
    doc = nlp("北京大 学生")
    assert doc.text == "北京大 学生"
    assert words(doc)[-1] == "学生" and "大学" not in words(doc)
    doc = nlp(Doc(nlp.vocab, words=["大", "  ", "学", "生"], spaces=[False] * 4))
    assert words(doc) == ["大", "学生"] and doc.text == "大  学生"


def test_with_respect_ents_an_entity_boundary_wins_over_a_forced_word(nlp):
    segmenter = nlp.get_pipe("segmenter")
    segmenter.cfg["respect_ents"] = True
    segmenter.add_user_words(["北京大学", "大学生"])
    doc = nlp.make_doc("北京大学生")
    doc.set_ents([Span(doc, 0, 2, label="LOC")])  # an NER before the segmenter found 北京
    doc = segmenter(doc)
    # 北京大学 would cross the entity's end: not forced; 大学生 crosses no entity boundary: forced
    assert words(doc) == ["北京", "大学生"]
    doc = nlp.make_doc("北京大学生")
    doc.set_ents([Span(doc, 0, 4, label="ORG")])
    assert words(segmenter(doc)) == ["北京大学", "生"]  # the entity is the forced word: both hold
    segmenter.cfg["respect_ents"] = False
    doc = nlp.make_doc("北京大学生")
    doc.set_ents([Span(doc, 0, 2, label="LOC")])
    with pytest.raises(UserDictConflict, match="'北京大学'.*'大学生'"):  # entities ignored: both forced
        segmenter(doc)


# --- segmenter: the prior -------------------------------------------------------------


def test_a_prior_word_adds_its_weight_to_the_lexicon_prior(nlp):
    segmenter = nlp.get_pipe("segmenter")
    docs = [nlp.make_doc("北京大学生"), nlp.make_doc("张三去上海")]
    plain = segmenter.model.predict(docs)
    segmenter.set_lexicon(["大学", "上海"], weight=1.0)
    segmenter.add_user_words(["大学"], mode="prior", weight=2.5)
    shifted = segmenter.emission_scores(docs)
    diff = shifted[0] - plain[0]  # 大学: lexicon 1 + user 2.5 on B at 大 and E at 学
    assert diff[2, 0] == pytest.approx(3.5) and diff[3, 2] == pytest.approx(3.5)
    assert numpy.count_nonzero(numpy.abs(diff) > 1e-6) == 2
    diff = shifted[1] - plain[1]  # 上海: the lexicon only
    assert diff[3, 0] == pytest.approx(1.0) and diff[4, 2] == pytest.approx(1.0)


def test_a_prior_word_tips_a_close_call_and_no_more(nlp):
    segmenter = nlp.get_pipe("segmenter")
    text = "中国大学生"

    def whole_at(weight):
        segmenter.add_user_words(["中国"], mode="prior", weight=weight)
        return split_point(nlp, text, "中国")

    assert not split_point(nlp, text, "中国")
    low, high = 1e-3, 64.0
    assert not whole_at(low) and whole_at(high)
    for _ in range(20):  # the weight at which the model's decision flips: its margin
        mid = (low + high) / 2
        low, high = (low, mid) if whole_at(mid) else (mid, high)
    margin = high
    assert 0.01 < margin < 64
    assert not whole_at(margin * 0.9)  # a soft bias: below the margin the model still decides
    assert whole_at(margin * 1.1)
    segmenter.add_user_words(["中国"], mode="prior", weight=margin * 1.1)
    assert words(nlp("张三去上海")) == ["张三", "去", "上海"]  # elsewhere nothing changes


def test_training_never_sees_the_user_dict(nlp):
    segmenter = nlp.get_pipe("segmenter")
    examples = [Example(nlp.make_doc("".join(w)), Doc(nlp.vocab, words=w, spaces=[False] * len(w))) for w in SEG_WORDS]
    without = segmenter.update(examples, sgd=None, losses={})[segmenter.name]
    segmenter.add_user_words(["三去上", "北京工"])
    segmenter.add_user_words(["天气好"], mode="prior", weight=50.0)
    assert segmenter.update(examples, sgd=None, losses={})[segmenter.name] == pytest.approx(without)


# --- entities ----------------------------------------------------------------------------


def test_forced_user_entities_are_decoded_as_preset_entities(ner):
    tagger = ner.get_pipe("ner")
    assert ("广州大学", "LOC") not in ents(ner("张三在广州大学"))  # the model: 广州 and a stray 学
    tagger.add_user_entities([("广州大学", "LOC"), ("三在", "PER")])
    doc = ner("张三在广州大学")
    assert ents(doc)[-2:] == [("三在", "PER"), ("广州大学", "LOC")]  # 三在 even cuts the model's 张三
    assert doc.text == "张三在广州大学"
    tagger.user_dict.clear()
    assert ents(ner("我在北京工作")) == [("北京", "LOC")]
    tagger.add_user_entities([("京", "LOC")])  # one character: found by its token
    assert ents(ner("我在北京工作")) == [("京", "LOC")]


def test_a_preset_entity_wins_over_a_forced_user_entity(ner):
    tagger = ner.get_pipe("ner")
    tagger.add_user_entities([("广州大学", "LOC")])
    doc = ner.make_doc("张三在广州大学")
    doc.set_ents([Span(doc, 3, 5, label="GPE")], default="missing")  # e.g. an entity_ruler: 广州
    doc = tagger(doc)
    assert ("广州", "GPE") in ents(doc) and ("广州大学", "LOC") not in ents(doc)


def test_bio_forced_entity_is_not_extended_by_the_next_token():
    nlp = spacy.blank("zh")
    tagger = nlp.add_pipe("crf_ner", name="ner", config={"model": crf_model_config(), "scheme": "bio"})
    examples = [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(20):
        nlp.update(examples, sgd=optimizer)
    tagger.add_user_entities([("李", "PER")])
    mask = tagger.tag_mask(nlp.make_doc("李四住广州"))
    tags = tagger.tags
    assert mask[0].tolist() == [t == "B-PER" for t in tags]
    assert not mask[1, tags.index("I-PER")] and mask[1, tags.index("B-PER")]
    assert ents(nlp("李四住广州"))[0] == ("李", "PER")


def test_crossing_forced_entities_are_an_error_naming_both(ner):
    tagger = ner.get_pipe("ner")
    tagger.add_user_entities([("广州大", "LOC"), ("大学", "PER")])
    with pytest.raises(
        UserDictConflict,
        match=r"\[ner\] the forced user entities '广州大' \(LOC\).*"
        r"'大学' \(PER\).*doc '去广州大学'",
    ):
        ner("去广州大学")


def test_a_prior_user_entity_biases_its_tags(ner):
    tagger = ner.get_pipe("ner")
    doc = ner.make_doc("他在广州大学")
    plain = tagger.model.predict([doc])[0]
    tagger.add_user_entities([("广州大学", "LOC")], mode="prior", weight=1.5)
    diff = tagger.emission_scores([doc])[0] - plain
    tags = tagger.tags
    expected = numpy.zeros_like(diff)
    for k, tag in zip(range(2, 6), ["B-LOC", "I-LOC", "I-LOC", "E-LOC"]):
        expected[k, tags.index(tag)] = 1.5
    numpy.testing.assert_allclose(diff, expected, atol=1e-6)
    tagger.add_user_entities([("广州大学", "LOC")], mode="prior", weight=50.0)
    assert ("广州大学", "LOC") in ents(ner("他在广州大学"))


def test_user_entities_with_a_label_the_tagger_lacks_are_refused(ner):
    tagger = ner.get_pipe("ner")
    with pytest.raises(
        ValueError,
        match=r"\[ner\] the user entity '广州大学' \(ORG\) \(add_user_entities\) has a "
        r"label this tagger does not predict; its labels are \['LOC', 'PER'\]",
    ):
        tagger.add_user_entities([("广州大学", "ORG")])
    assert len(tagger.user_dict) == 0


# --- the API's checks -------------------------------------------------------------------


def test_bad_user_entries_are_refused_with_clear_errors(nlp, ner):
    segmenter = nlp.get_pipe("segmenter")
    tagger = ner.get_pipe("ner")
    with pytest.raises(ValueError, match="'大 学' contains whitespace"):
        segmenter.add_user_words(["大 学"])
    with pytest.raises(ValueError, match="'大' has one character"):
        segmenter.add_user_words(["大"])
    with pytest.raises(ValueError, match="give a list of words, not one string"):
        segmenter.add_user_words("大学")
    with pytest.raises(ValueError, match="a weight applies to mode 'prior' only"):
        segmenter.add_user_words(["大学"], weight=2.0)
    with pytest.raises(ValueError, match="mode must be 'force' or 'prior', not 'hard'"):
        segmenter.add_user_words(["大学"], mode="hard")
    with pytest.raises(ValueError, match="the weight must be a finite number > 0, got -1.0"):
        segmenter.add_user_words(["大学"], mode="prior", weight=-1)
    with pytest.raises(ValueError, match=r"'大学' twice, differently"):
        tagger.add_user_entities([("大学", "LOC"), ("大学", "PER")])
    with pytest.raises(ValueError, match="user entities apply to an entity tagger.*add words with add_user_words"):
        segmenter.add_user_entities([("大学", "LOC")])
    with pytest.raises(ValueError, match="user words apply to a segmenter.*add entities with add_user_entities"):
        tagger.add_user_words(["大学"])
    with pytest.raises(ValueError, match=r"a \(text, label\) pair, got '大学'"):
        tagger.add_user_entities(["大学"])
    assert len(segmenter.user_dict) == 0 and len(tagger.user_dict) == 0
    segmenter.add_user_words(["大学"], mode="prior", weight=2.0)
    segmenter.add_user_words(["大学"])  # added again: replaced
    assert segmenter.user_dict.get("大学").mode == "force" and len(segmenter.user_dict) == 1


# --- serialization and the settings file -----------------------------------------------


def test_user_entries_are_saved_with_the_pipeline(nlp, tmp_path):
    segmenter = nlp.get_pipe("segmenter")
    segmenter.add_user_words(["中国"])
    segmenter.add_user_words(["学生"], mode="prior", weight=2.0)
    nlp.to_disk(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p")
    entries = {e.text: (e.mode, e.weight) for e in loaded.get_pipe("segmenter").user_dict}
    assert entries == {"中国": ("force", 0.0), "学生": ("prior", 2.0)}
    assert words(loaded("中国大学生"))[0] == "中国"
    copy = trained_segmenter(SEG_WORDS, updates=1).get_pipe("segmenter")
    copy.add_user_words(["北京"])  # loading replaces the saved entries
    copy.from_bytes(segmenter.to_bytes())
    assert sorted(e.text for e in copy.user_dict) == ["中国", "学生"]
    copy.from_bytes(segmenter.to_bytes(exclude=["user_dict"]))
    assert sorted(e.text for e in copy.user_dict) == []
    segmenter.user_dict.clear()
    nlp.to_disk(tmp_path / "p")  # over the first save: no stale entries
    assert len(spacy.load(tmp_path / "p").get_pipe("segmenter").user_dict) == 0
    (tmp_path / "p" / "segmenter" / "user_dict").unlink()  # a pipe saved before user dictionaries
    assert len(spacy.load(tmp_path / "p").get_pipe("segmenter").user_dict) == 0


def test_a_saved_entity_with_an_unknown_label_fails_at_load_naming_the_directory(ner, tmp_path):
    ner.get_pipe("ner").add_user_entities([("广州大学", "LOC")])
    ner.to_disk(tmp_path / "p")
    path = tmp_path / "p" / "ner" / "user_dict"
    path.write_text(path.read_text(encoding="utf8").replace("LOC", "ORG"), encoding="utf8")
    with pytest.raises(ValueError, match=r"'广州大学' \(ORG\) \(saved in directory '.*ner'\) has a label"):
        spacy.load(tmp_path / "p")


def test_the_user_dict_setting_reads_a_file_at_load_time(nlp, ner, tmp_path):
    nlp.to_disk(tmp_path / "seg")
    ner.to_disk(tmp_path / "ner")
    words_file = tmp_path / "words.txt"
    words_file.write_text("# my words\n中国\n学生 prior 2.5\n\n", encoding="utf8")
    loaded = spacy.load(tmp_path / "seg", config={"components": {"segmenter": {"user_dict": str(words_file)}}})
    entries = {e.text: (e.mode, e.weight, e.saved) for e in loaded.get_pipe("segmenter").user_dict}
    assert entries == {"中国": ("force", 0.0, False), "学生": ("prior", 2.5, False)}
    assert words(loaded("中国大学生"))[0] == "中国"
    loaded.get_pipe("segmenter").add_user_words(["上海"])
    loaded.to_disk(tmp_path / "seg2")  # the file's entries stay in the file: the setting reads them again
    words_file.write_text("中国\n", encoding="utf8")  # the saved config names the file: read again, as it is now
    again = spacy.load(tmp_path / "seg2")
    assert sorted(e.text for e in again.get_pipe("segmenter").user_dict) == ["上海", "中国"]
    without = spacy.load(tmp_path / "seg2", config={"components": {"segmenter": {"user_dict": None}}})
    assert [e.text for e in without.get_pipe("segmenter").user_dict] == ["上海"]
    ents_file = tmp_path / "ents.txt"
    ents_file.write_text("广州大学\tORG\n", encoding="utf8")
    with pytest.raises(ValueError, match=r"'广州大学' \(ORG\) \(user dictionary '.*ents.txt', line 1\) has a label"):
        spacy.load(tmp_path / "ner", config={"components": {"ner": {"user_dict": str(ents_file)}}})
    ents_file.write_text("广州大学\tLOC\tforce\n", encoding="utf8")
    loaded = spacy.load(tmp_path / "ner", config={"components": {"ner": {"user_dict": str(ents_file)}}})
    assert ("广州大学", "LOC") in ents(loaded("他在广州大学"))
    with pytest.raises(ValueError, match=r"missing.txt': no such file. The setting user_dict names it"):
        spacy.load(tmp_path / "seg", config={"components": {"segmenter": {"user_dict": str(tmp_path / "missing.txt")}}})


def test_user_dict_files_are_checked_naming_the_line(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text("\ufeff大学 force\n学生 prior 0.5\n", encoding="utf8")
    assert read_user_dict(path, "bmes") == [
        ("大学", None, "force", None, f"user dictionary {str(path)!r}, line 1"),
        ("学生", None, "prior", 0.5, f"user dictionary {str(path)!r}, line 2"),
    ]
    path.write_text("大学\n学生 3 n\n", encoding="utf8")  # jieba's "word freq tag": not this format
    with pytest.raises(ValueError, match=r"d.txt', line 2: expected WORD \[force\|prior \[WEIGHT\]\]"):
        read_user_dict(path, "bmes")
    path.write_text("广州大学 LOC prior x\n", encoding="utf8")
    with pytest.raises(ValueError, match=r"line 1: the weight 'x' is not a number"):
        read_user_dict(path, "bioes")
    path.write_text("广州大学\n", encoding="utf8")
    with pytest.raises(ValueError, match=r"line 1: '广州大学' has no label"):
        read_user_dict(path, "bioes")
    path.write_bytes(b"\xff\n")
    with pytest.raises(ValueError, match=r"line 1: not UTF-8"):
        read_user_dict(path, "bmes")


# --- conflicts in nlp.pipe and spacy crf annotate: one doc, one error -------------------------


def test_a_conflict_sends_its_one_doc_to_the_error_handler_and_the_batch_goes_on(nlp):
    segmenter = nlp.get_pipe("segmenter")
    segmenter.add_user_words(["上海市", "市长"])
    texts = ["张三去上海", "上海市长来了", "我在北京工作", "上海市很大"]
    seen = []
    nlp.set_error_handler(lambda name, proc, docs, e: seen.append((name, [d.text for d in docs], e)))
    try:
        docs = list(nlp.pipe(texts, batch_size=4))
        assert [(name, failed) for name, failed, _ in seen] == [("segmenter", ["上海市长来了"])]
        # length-sorted buffers give back what is left, in order (a buffer short of a doc included)
        assert [d.text for d in pipe_sorted(nlp, texts * 2, batch_size=2, buffer=1)] == [d.text for d in docs] * 2
    finally:
        nlp.set_error_handler(raise_error)
    assert [d.text for d in docs] == ["张三去上海", "我在北京工作", "上海市很大"]
    assert isinstance(seen[0][2], UserDictConflict) and "'上海市'" in str(seen[0][2]) and "'市长'" in str(seen[0][2])
    assert words(docs[2])[0] == "上海市"  # decoded as in a batch without the failing doc
    assert [words(d) for d in docs] == [words(nlp(t)) for t in ["张三去上海", "我在北京工作", "上海市很大"]]
    with pytest.raises(UserDictConflict, match="doc '上海市长来了'"):  # no handler: the error of that doc
        list(nlp.pipe(texts, batch_size=4))


@pytest.mark.parametrize("n_process", [1, 2])
def test_annotate_writes_one_error_per_conflicting_record_and_annotates_the_rest(nlp, tmp_path, n_process):
    nlp.get_pipe("segmenter").add_user_words(["上海市", "市长"])
    nlp.to_disk(tmp_path / "p")
    texts = ["张三去上海", "上海市长来了", "我在北京工作", "上海市长", "上海市很大"] * 2
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf8")
    summary = annotate(
        str(tmp_path / "p"), str(tmp_path / "in.txt"), str(tmp_path / "out"), on_error="skip", progress=False,
        n_process=n_process, batch_size=3,
    )  # fmt: skip
    assert summary["docs"] == 6 and summary["skipped"] == 4
    records = read_output(tmp_path / "out" / "in.jsonl")
    assert [r["text"] for r in records] == [t for t in texts if "市长" not in t]
    assert records[2]["words"][0] == [0, 3]  # 上海市, forced
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text(encoding="utf8").splitlines()]
    assert [e["line"] for e in errors] == [2, 4, 7, 9]
    assert all(
        e["reason"].startswith("[segmenter] the forced user words '上海市'") and "'市长'" in e["reason"] for e in errors
    )
    assert "doc '上海市长来了'" in errors[0]["reason"] and "doc '上海市长'" in errors[1]["reason"]
    with pytest.raises(AnnotateError, match=r"in.txt, line 2: \[segmenter\] the forced user words '上海市'"):
        annotate(str(tmp_path / "p"), str(tmp_path / "in.txt"), str(tmp_path / "out2"), progress=False)


# --- entries refused when they are added, saves that are whole or absent ------------------------


def test_entries_that_could_not_be_saved_or_matched_are_refused_when_added(nlp, ner):
    segmenter = nlp.get_pipe("segmenter")
    tagger = ner.get_pipe("ner")
    with pytest.raises(
        ValueError,
        match=r"^\[segmenter\] add_user_words: the user word '大\\ud800' is not valid Unicode: "
        r"a lone surrogate '\\ud800' at character 1\.$",
    ):
        segmenter.add_user_words(["中国", "大\ud800"])
    with pytest.raises(ValueError, match=r"the user entity '\\udfff广州' is not valid Unicode"):
        tagger.add_user_entities([("\udfff广州", "LOC")])
    with pytest.raises(ValueError, match=r"the user word '大大大大.*'\.\.\. has 101 characters, more than the 100"):
        segmenter.add_user_words(["大" * 101])
    assert len(segmenter.user_dict) == 0 and len(tagger.user_dict) == 0


def test_a_gazetteer_label_the_tagger_will_not_have_is_refused_when_added_or_at_initialize(tmp_path):
    nlp = spacy.blank("zh")
    tagger = nlp.add_pipe("crf_ner", name="ner", config={"model": crf_model_config()})
    examples = [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    with pytest.raises(ValueError, match=r"^\[ner\] the user entity '广州大学' \(ORG\) \(add_user_entities\): the "
                       r"tagger has no labels yet, so the label cannot be checked\. .*after nlp\.initialize\(\)"):  # fmt: skip
        tagger.add_user_entities([("广州大学", "ORG")])
    assert len(tagger.user_dict) == 0
    tagger.add_label("ORG")
    tagger.add_user_entities([("广州大学", "ORG")])  # a label it has: taken
    with pytest.raises(ValueError, match=r"'广州大学' \(ORG\) \(add_user_entities\) has a label this tagger does not "
                       r"predict; its labels are \['LOC', 'PER'\]"):  # fmt: skip
        tagger.initialize(lambda: examples, nlp=nlp, labels=["LOC", "PER"])  # the labels no longer hold it
    # the file form: read when the pipe is made, before any label; refused at initialize, naming the line
    (tmp_path / "ents.txt").write_text("广州\tLOC\n广州大学\tORG\n", encoding="utf8")
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_ner", name="ner", config={"model": crf_model_config(), "user_dict": str(tmp_path / "ents.txt")})
    examples = [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    with pytest.raises(ValueError, match=r"'广州大学' \(ORG\) \(user dictionary '.*ents.txt', line 2\) has a label"):
        nlp.initialize(lambda: examples)


def test_a_save_that_fails_leaves_the_components_folder_as_it_was_or_absent(nlp, tmp_path):
    segmenter = nlp.get_pipe("segmenter")
    segmenter.add_user_words(["中国"])
    nlp.to_disk(tmp_path / "p")
    saved = {p.name: p.read_bytes() for p in (tmp_path / "p" / "segmenter").iterdir()}
    # an entry put in past the checks of add_user_words (they refuse it): the save is refused, in one line
    segmenter.user_dict._update([UserEntry("大\ud800", None, "force", 0.0, "by hand", True)])
    for path in (tmp_path / "p", tmp_path / "q"):
        with pytest.raises(
            ValueError, match=r"^\[segmenter\] cannot save the user dictionary: the user entry '大\\ud800' is not valid"
        ):
            nlp.to_disk(path)
    assert {p.name: p.read_bytes() for p in (tmp_path / "p" / "segmenter").iterdir()} == saved  # as it was
    assert [e.text for e in spacy.load(tmp_path / "p").get_pipe("segmenter").user_dict] == ["中国"]
    assert not (tmp_path / "q" / "segmenter").exists()  # absent, not half written
    assert not [p for p in (tmp_path / "q").iterdir() if p.name.startswith(".")]
    with pytest.raises(ValueError, match=r"\[segmenter\] cannot load .*'cfg' file is missing"):
        spacy.load(tmp_path / "q")  # loud, not a pipeline without its user words
    # what a save leaves out is kept from the folder there was
    segmenter.user_dict.clear()
    segmenter.to_disk(tmp_path / "p" / "segmenter", exclude=["user_dict"])
    assert (tmp_path / "p" / "segmenter" / "user_dict").read_bytes() == saved["user_dict"]


def test_a_too_long_word_in_a_dictionary_file_is_refused_naming_the_file_and_line(nlp, tmp_path):
    nlp.to_disk(tmp_path / "seg")
    words_file = tmp_path / "words.txt"
    words_file.write_text("中国\n" + "大" * 1_000_000 + "\n", encoding="utf8")
    with pytest.raises(
        ValueError,
        match=r"^\[segmenter\] user dictionary '.*words.txt', line 2: the user word '大大大.*'\.\.\. has "
        r"1,000,000 characters, more than the 100 an entry may have\.$",
    ):
        spacy.load(tmp_path / "seg", config={"components": {"segmenter": {"user_dict": str(words_file)}}})
