"""A lexicon as a decoding prior of a bmes segmenter (spacy_crf.pipeline.lexicon and
CRFTagger.set_lexicon): where it matches, what it adds to the emissions,
that it changes decoding only, and that it is saved with the pipe."""

import pickle
import random
import time

import numpy
import pytest
import spacy
from _configs import NER_DATA, WORDS, crf_model_config
from conftest import segmentation_examples, trained_segmenter
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Config

from spacy_crf.ml.lexicon_match import TaggedLexicon
from spacy_crf.pipeline.lexicon import MAX_WORD_LENGTH, Lexicon, read_lexicon

SEG_WORDS = WORDS + [["李四", "住", "广州"], ["上海", "很", "大"], ["去", "北京"]]
BMES = ["B", "M", "E", "S"]


def seg_examples(nlp):
    return segmentation_examples(nlp, SEG_WORDS)


@pytest.fixture(scope="module")
def segmenter_nlp():
    nlp = trained_segmenter(SEG_WORDS)
    assert words(nlp("张三去上海")) == ["张三", "去", "上海"]
    return nlp


def words(doc):
    return [s.text for s in doc.spans["words"]]


@pytest.fixture
def nlp(segmenter_nlp):
    segmenter_nlp.get_pipe("segmenter").set_lexicon(None)
    yield segmenter_nlp
    segmenter_nlp.get_pipe("segmenter").set_lexicon(None)


# --- matching and the prior ------------------------------------------------------


def test_matches_every_occurrence_of_two_or_more_characters():
    nlp = spacy.blank("zh")
    lexicon = Lexicon(["上海", "海市", "上海市", "市", "不在文中"])
    assert len(lexicon) == 4 and "市" not in lexicon  # one character: no prior to give
    assert lexicon.matches(nlp.make_doc("去上海市")) == [(1, 3), (1, 4), (2, 4)]  # overlaps included
    assert lexicon.matches(nlp.make_doc("")) == []


def test_matches_never_cross_whitespace():
    nlp = spacy.blank("zh")
    lexicon = Lexicon(["上海", "海市"])
    doc = nlp.make_doc("上 海市")
    assert [t.text for t in doc] == ["上", "海", "市"] and doc[0].whitespace_ == " "
    assert lexicon.matches(doc) == [(1, 3)]
    doc = Doc(nlp.vocab, words=["上", "  ", "海", "市"], spaces=[False] * 4)  # a space token
    assert lexicon.matches(doc) == [(2, 4)]
    assert len(Lexicon(["上 海", "上\t海"])) == 0  # whitespace inside a word: never matchable


def _reference_matches(lexicon, doc):
    # the definition, one substring at a time (quadratic: small docs only)
    found = []
    for start in range(len(doc)):
        for end in range(start + lexicon.min_tokens, len(doc) + 1):
            span = doc[start:end]
            if any(t.is_space for t in span) or any(t.whitespace_ for t in span[:-1]):
                break
            if span.text in lexicon:
                found.append((start, end))
    return found


RANDOM_CHARS = "上海市长江大桥一二"


def _random_lexicon(rng):
    words = {"".join(rng.choice(RANDOM_CHARS) for _ in range(rng.randint(2, 5))) for _ in range(40)}
    return Lexicon(words | {"上海", "海市", "上海市长"})


def _random_doc(rng, vocab):
    """Up to 25 tokens of one or two characters, some of them spaces, some with a trailing space."""
    tokens = [
        "".join(rng.choice(RANDOM_CHARS) for _ in range(rng.choice([1, 1, 1, 2]))) for _ in range(rng.randint(0, 25))
    ]
    tokens = [t if rng.random() > 0.05 else " " for t in tokens]  # space tokens
    return Doc(vocab, words=tokens, spaces=[rng.random() < 0.1 for _ in tokens])


def test_matches_agree_with_the_definition_on_random_docs():
    rng = random.Random(0)
    lexicon = _random_lexicon(rng)
    vocab = spacy.blank("zh").vocab
    for _ in range(200):
        doc = _random_doc(rng, vocab)
        assert lexicon.matches(doc) == _reference_matches(lexicon, doc), doc.text


def test_batch_emission_biases_equal_each_docs_bias_on_random_docs():
    rng = random.Random(1)
    lexicon = _random_lexicon(rng)
    vocab = spacy.blank("zh").vocab
    tags = ["E", "B", "S", "M"]  # any order: columns follow the tags
    for case in range(50):
        docs = [_random_doc(rng, vocab) for _ in range(rng.randint(1, 8))]
        weight = rng.choice([0.3, 1.0, 2.5])
        batch = lexicon.emission_biases(docs, tags, weight)
        assert len(batch) == len(docs)
        for doc, bias in zip(docs, batch):
            numpy.testing.assert_array_equal(bias, lexicon.emission_bias(doc, tags, weight), err_msg=str(case))
    assert lexicon.emission_biases([], tags, 1.0) == []


def test_matches_only_on_token_boundaries_and_outside_the_basic_plane():
    vocab = spacy.blank("zh").vocab
    doc = Doc(vocab, words=["上海", "市", "𠀀", "𠀁"], spaces=[False] * 4)
    lexicon = Lexicon(["海市", "上海市", "𠀀𠀁", "市𠀀"])
    assert lexicon.matches(doc) == [(0, 2), (1, 3), (2, 4)]  # "海市" starts inside a token


def test_a_tagged_dictionary_matches_single_characters_and_longer_words_as_defined():
    """Single characters (one-token matches) and longer words, dictionaries of
    only one kind, characters outside the basic plane."""
    vocab = spacy.blank("zh").vocab
    doc = Doc(vocab, words=["上海", "市", "𠀀", "😀", "市"], spaces=[False, False, False, True, False])
    for words in (["市", "𠀀", "😀", "上海"], ["市", "𠀀"], ["上海", "𠀀😀"], ["上海市", "市"]):
        lexicon = TaggedLexicon((w, 1.0, "n") for w in words)
        assert lexicon.matches(doc) == _reference_matches(lexicon, doc), words


def test_a_long_word_in_the_lexicon_does_not_make_matching_quadratic():
    # one entry of MAX_WORD_LENGTH characters used to make each start scan to the
    # end of the doc (100,000 characters: 60 s for a 4,000-character doc)
    lexicon = Lexicon(["上海", "甲" * MAX_WORD_LENGTH])
    doc = spacy.blank("zh").make_doc("甲" * 20_000 + "上海")
    started = time.perf_counter()
    found = lexicon.matches(doc)
    assert time.perf_counter() - started < 5.0
    assert found[-1] == (20_000, 20_002) and len(found) == 20_000 - MAX_WORD_LENGTH + 1 + 1


def test_the_word_list_is_sorted_distinct_and_free_of_any_unicode_whitespace():
    # (the checks run over the whole list at once; each rule is pinned here)
    words = ["海市", "上海", "上海", "上\u3000海", "北\u00a0京", "京\x1f城", "南", "", "天\x00津"]
    lexicon = Lexicon(words)
    assert lexicon.word_list == ("上海", "天\x00津", "海市") and lexicon.words == set(lexicon.word_list)
    assert TaggedLexicon([(w, 1.0, "n") for w in words]).word_list == ("上海", "南", "天\x00津", "海市")
    assert Lexicon(["乙丙", "甲乙"]).word_list == ("乙丙", "甲乙")  # already sorted: kept
    assert Lexicon([]).word_list == () and Lexicon([]).max_length == 0
    with pytest.raises(ValueError, match=r"a word must be a string, got 7"):
        Lexicon(["上海", 7, None])
    with pytest.raises(ValueError, match=r"a word must be a string, got b"):
        Lexicon(iter(["上海", b"\xe4"]))


def test_an_absurdly_long_lexicon_entry_is_refused_with_its_length():
    with pytest.raises(ValueError, match=r"100,000 characters, more than the 100"):
        Lexicon(["上海", "甲" * 100_000])


def test_a_lexicon_survives_pickling_for_worker_processes():
    lexicon = Lexicon(["上海", "海市"])
    doc = spacy.blank("zh").make_doc("上海市")
    assert lexicon.matches(doc) == [(0, 2), (1, 3)]  # builds the automaton
    copy = pickle.loads(pickle.dumps(lexicon))
    assert copy.words == lexicon.words and copy.matches(doc) == [(0, 2), (1, 3)]


def test_emission_bias_adds_b_m_e_per_occurrence():
    nlp = spacy.blank("zh")
    doc = nlp.make_doc("去上海市")
    bias = Lexicon(["上海市", "海市"]).emission_bias(doc, BMES, 2.0)
    assert bias.dtype == numpy.float32 and bias.shape == (4, 4)
    expected = numpy.zeros((4, 4), dtype="f")
    expected[1, 0] += 2  # 上海市: B 上, M 海, E 市
    expected[2, 1] += 2
    expected[3, 2] += 2
    expected[2, 0] += 2  # 海市: B 海, E 市
    expected[3, 2] += 2
    numpy.testing.assert_array_equal(bias, expected)
    with pytest.raises(ValueError, match="needs the bmes scheme"):
        Lexicon(["上海"]).emission_bias(doc, ["B-LOC", "I-LOC", "O"], 1.0)


def test_read_lexicon(tmp_path):
    path = tmp_path / "dict.txt"
    path.write_text("\ufeff上海市 3 ns\n\n海市 2\n去\n", encoding="utf-8")  # jieba's format, a BOM
    assert read_lexicon(path) == ["上海市", "海市", "去"]
    bad = tmp_path / "bad.txt"
    bad.write_bytes("上海\n".encode("utf-8") + b"\xff\xfe x\n")
    with pytest.raises(ValueError, match=r"bad.txt', line 2: not UTF-8"):
        read_lexicon(bad)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n", encoding="utf-8")
    with pytest.raises(ValueError, match="empty.txt': no words"):
        read_lexicon(empty)
    with pytest.raises(ValueError, match="missing.txt': no such file"):
        read_lexicon(tmp_path / "missing.txt")


# --- the segmenter with a lexicon -----------------------------------------------


def test_lexicon_keeps_its_words_whole(nlp):
    segmenter = nlp.get_pipe("segmenter")
    segmenter.set_lexicon(["去上海"], weight=0.0)
    assert words(nlp("张三去上海")) == ["张三", "去", "上海"]  # weight 0: the model's own words
    segmenter.set_lexicon(["去上海"], weight=50.0)
    doc = nlp("张三去上海")
    assert doc.text == "张三去上海"
    assert words(doc) == ["张三", "去上海"]
    assert words(nlp("我在北京工作")) == ["我", "在", "北京", "工作"]  # no match: unchanged
    marginals = segmenter.predict_marginals([nlp.make_doc("张三去上海")])[0]
    assert marginals[2].argmax() == 0  # 去 is B: the confidences see the prior too
    segmenter.set_lexicon(None)
    assert words(nlp("张三去上海")) == ["张三", "去", "上海"]
    assert segmenter.cfg["lexicon_size"] == 0 and segmenter.lexicon is None


def test_emission_scores_are_the_model_plus_the_prior(nlp):
    segmenter = nlp.get_pipe("segmenter")
    docs = [nlp.make_doc("张三去上海"), nlp.make_doc("我在北京")]
    plain = segmenter.model.predict(docs)
    segmenter.set_lexicon(["去上海", "北京"], weight=1.5)
    shifted = segmenter.emission_scores(docs)
    for doc, before, after in zip(docs, plain, shifted):
        # (after - before would round: the scores are float32)
        numpy.testing.assert_array_equal(after, before + segmenter.lexicon.emission_bias(doc, segmenter.tags, 1.5))


def test_training_never_sees_the_prior(nlp):
    segmenter = nlp.get_pipe("segmenter")
    examples = seg_examples(nlp)
    without = segmenter.update(examples, sgd=None, losses={})[segmenter.name]
    segmenter.set_lexicon(["去上海", "张三去"], weight=50.0)
    with_lexicon = segmenter.update(examples, sgd=None, losses={})[segmenter.name]
    assert with_lexicon == pytest.approx(without)


def test_bad_lexicon_settings_are_refused(nlp):
    segmenter = nlp.get_pipe("segmenter")
    with pytest.raises(ValueError, match=r"\[segmenter\] lexicon_weight must be a finite number >= 0"):
        segmenter.set_lexicon(["上海"], weight=-1)
    with pytest.raises(ValueError, match=r"\[segmenter\] lexicon_weight must be a finite number >= 0"):
        segmenter.set_lexicon(["上海"], weight=float("nan"))
    with pytest.raises(ValueError, match="no word of two or more characters"):
        segmenter.set_lexicon(["上", "海"])
    ner = spacy.blank("zh").add_pipe("crf_ner", config={"model": crf_model_config()})
    with pytest.raises(ValueError, match="a lexicon applies to scheme 'bmes'"):
        ner.set_lexicon(["上海"])


def test_lexicon_is_saved_with_the_pipe(nlp, tmp_path):
    segmenter = nlp.get_pipe("segmenter")
    segmenter.set_lexicon(["去上海", "上海市"], weight=50.0)
    nlp.to_disk(tmp_path / "p")
    assert sorted(spacy.util.srsly.read_msgpack(tmp_path / "p" / "segmenter" / "lexicon")) == ["上海市", "去上海"]
    for loaded in (spacy.load(tmp_path / "p"), spacy.blank("zh").from_config(nlp.config).from_bytes(nlp.to_bytes())):
        seg = loaded.get_pipe("segmenter")
        assert seg.cfg["lexicon_weight"] == 50.0 and seg.lexicon.words == {"去上海", "上海市"}
        assert words(loaded("张三去上海")) == ["张三", "去上海"]
    # saved without a lexicon: none on load, and no stale file read
    segmenter.set_lexicon(None)
    nlp.to_disk(tmp_path / "q")
    assert not (tmp_path / "q" / "segmenter" / "lexicon").exists()
    assert spacy.load(tmp_path / "q").get_pipe("segmenter").lexicon is None


def test_a_missing_lexicon_file_is_named(nlp, tmp_path):
    nlp.get_pipe("segmenter").set_lexicon(["去上海"], weight=1.0)
    nlp.to_disk(tmp_path / "p")
    (tmp_path / "p" / "segmenter" / "lexicon").unlink()
    with pytest.raises(
        ValueError, match=r"\[segmenter\] cannot load directory .*segmenter.*lexicon of 1 words.*missing"
    ):
        spacy.load(tmp_path / "p")


def test_initialize_reads_the_lexicon_from_the_config(tmp_path):
    path = tmp_path / "dict.txt"
    path.write_text("去上海 5 v\n上海市 3 ns\n", encoding="utf-8")
    config = Config().from_str(f"""
[nlp]
lang = "zh"
pipeline = ["segmenter"]

[components]

[components.segmenter]
factory = "crf_segmenter"

[initialize]

[initialize.components]

[initialize.components.segmenter]
lexicon_weight = 2.5

[initialize.components.segmenter.lexicon]
@readers = "spacy_crf.read_lexicon.v1"
path = "{path.as_posix()}"
""")
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    nlp.initialize(lambda: seg_examples(nlp))
    segmenter = nlp.get_pipe("segmenter")
    assert segmenter.lexicon.words == {"去上海", "上海市"} and segmenter.cfg["lexicon_weight"] == 2.5
    ner_nlp = spacy.blank("zh")
    ner_nlp.add_pipe("crf_ner", config={"model": crf_model_config()})
    examples = [Example.from_dict(ner_nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    with pytest.raises(ValueError, match=r"\[crf_ner\] a lexicon applies to scheme 'bmes'.*initialize: lexicon"):
        ner_nlp.get_pipe("crf_ner").initialize(lambda: examples, lexicon=["上海"])


# --- lexicon settings checked at load ------------------------------------------------


def _edit_cfg(path, **changes):
    import json

    cfg = json.loads((path / "cfg").read_text(encoding="utf8"))
    cfg.update(changes)
    (path / "cfg").write_text(json.dumps(cfg), encoding="utf8")


@pytest.mark.parametrize("weight", [-3, "high", None, True])
def test_a_bad_lexicon_weight_in_the_cfg_fails_at_load_time(nlp, tmp_path, weight):
    nlp.get_pipe("segmenter").set_lexicon(["去上海"], weight=1.0)
    nlp.to_disk(tmp_path / "p")
    _edit_cfg(tmp_path / "p" / "segmenter", lexicon_weight=weight)
    with pytest.raises(
        ValueError,
        match=r"\[segmenter\] cannot load directory '.*p.segmenter': its cfg's "
        r"lexicon_weight must be a finite number >= 0, got",
    ):
        spacy.load(tmp_path / "p")


@pytest.mark.parametrize("size", ["3", -1, 1.5, True])
def test_a_bad_lexicon_size_in_the_cfg_fails_at_load_time(nlp, tmp_path, size):
    nlp.get_pipe("segmenter").set_lexicon(["去上海"], weight=1.0)
    nlp.to_disk(tmp_path / "p")
    _edit_cfg(tmp_path / "p" / "segmenter", lexicon_size=size)
    with pytest.raises(
        ValueError, match=r"\[segmenter\] cannot load directory .*lexicon_size must be a whole number >= 0"
    ):
        spacy.load(tmp_path / "p")


def test_lexicon_size_0_with_a_lexicon_file_fails_at_load_time(nlp, tmp_path):
    nlp.get_pipe("segmenter").set_lexicon(["去上海", "上海市"], weight=1.0)
    nlp.to_disk(tmp_path / "p")
    _edit_cfg(tmp_path / "p" / "segmenter", lexicon_size=0)
    with pytest.raises(
        ValueError,
        match=r"\[segmenter\] cannot load directory .*lexicon_size 0\), but the lexicon "
        r"file '.*p.segmenter.lexicon' holds 2 words",
    ):
        spacy.load(tmp_path / "p")
    data = spacy.util.srsly.msgpack_loads(nlp.get_pipe("segmenter").to_bytes())
    data["cfg"] = spacy.util.srsly.json_dumps({**spacy.util.srsly.json_loads(data["cfg"]), "lexicon_size": 0})
    other = spacy.blank("zh").from_config(nlp.config).get_pipe("segmenter")
    with pytest.raises(ValueError, match=r"cannot load bytes: .*the lexicon in the bytes holds 2 words"):
        other.from_bytes(spacy.util.srsly.msgpack_dumps(data))


def test_saving_without_a_lexicon_over_a_save_with_one_removes_the_file(nlp, tmp_path):
    nlp.get_pipe("segmenter").set_lexicon(["去上海"], weight=1.0)
    nlp.to_disk(tmp_path / "p")
    nlp.get_pipe("segmenter").set_lexicon(None)
    nlp.to_disk(tmp_path / "p")
    assert not (tmp_path / "p" / "segmenter" / "lexicon").exists()
    assert spacy.load(tmp_path / "p").get_pipe("segmenter").lexicon is None
