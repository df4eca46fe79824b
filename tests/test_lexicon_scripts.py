"""project/crf_project/lexicon.py (the word list) and lexicon_tune.py (its
weight on dev), checked against independent scoring of a small trained
pipeline."""

from pathlib import Path

import pytest
import spacy
import srsly
from _configs import PROBE_WORDS as WORDS
from conftest import load_script, write_probe_inputs
from spacy.tokens import DocBin
from spacy.training import Example

from spacy_crf.pipeline.lexicon import Lexicon
from spacy_crf.pipeline.scorers import score_words

SCRIPTS = Path(__file__).resolve().parents[1] / "project" / "crf_project"


@pytest.fixture(scope="module")
def build():
    return load_script(SCRIPTS / "lexicon.py")


@pytest.fixture(scope="module")
def tune():
    return load_script(SCRIPTS / "lexicon_tune.py")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    path = write_probe_inputs(tmp_path_factory.mktemp("lexicon_tune"))
    (path / "words.txt").write_text("那不勒斯\n王五\n", encoding="utf-8")
    return path


def test_build_from_a_word_list(build, tmp_path):
    source = tmp_path / "my_dict.txt"
    source.write_text("上海市 3 ns\n市\n北京\n上 海\n北京\n", encoding="utf-8")
    meta = build.build(str(source), tmp_path / "lexicon")
    assert (tmp_path / "lexicon" / "words.txt").read_text(encoding="utf-8") == "上海市\n北京\n"
    assert meta["entries"] == 5 and meta["words"] == 2 and meta["max_length"] == 3  # "上 海" is two fields: "上"
    assert meta["source"] == "my_dict.txt" and len(meta["source_sha256"]) == 64
    assert srsly.read_json(tmp_path / "lexicon" / "meta.json") == meta
    # the source as it is, tags included, for the learned lexicon features
    assert (tmp_path / "lexicon" / "dict.txt").read_bytes() == source.read_bytes()


def test_words_the_training_words_contradict_are_dropped_from_the_prior(build, tmp_path):
    from spacy.tokens import Doc

    vocab = spacy.blank("zh").vocab
    train = [["一", "个", "人", "在", "上海市"], ["北京", "人"], ["一", "个"]]
    DocBin(docs=[Doc(vocab, words=w, spaces=[False] * len(w)) for w in train]).to_disk(tmp_path / "train.spacy")
    source = tmp_path / "my_dict.txt"
    source.write_text("一个 90 m\n上海市 3 ns\n上海 5 ns\n北京 8 ns\n广州 4 ns\n个 1 q\n", encoding="utf-8")
    meta = build.build(str(source), tmp_path / "lexicon", tmp_path / "train.spacy")
    # 一个 is in the text and never a word; 上海 only inside the word 上海市; 广州 never in the text: kept
    assert (tmp_path / "lexicon" / "dropped.txt").read_text(encoding="utf-8") == "一个\n上海\n"
    assert (tmp_path / "lexicon" / "words.txt").read_text(encoding="utf-8") == "上海市\n北京\n广州\n"
    assert (tmp_path / "lexicon" / "dict.txt").read_bytes() == source.read_bytes()  # the features' dictionary
    assert meta["dropped"] == 2 and meta["words"] == 3


def test_a_missing_contradicting_corpus_is_named_before_any_output(build, tmp_path):
    source = tmp_path / "my_dict.txt"
    source.write_text("一个 90 m\n", encoding="utf-8")
    with pytest.raises(ValueError, match="--contradicted-by .*nope.spacy.*no such file"):
        build.build(str(source), tmp_path / "lexicon", tmp_path / "nope.spacy")
    assert not (tmp_path / "lexicon").exists()


def test_build_from_jieba(build, tmp_path):
    meta = build.build("jieba", tmp_path / "lexicon")
    assert meta["source"] == "jieba" and meta["source_file"] == "dict.txt" and meta["source_version"] == "0.42.1"
    assert meta["words"] > 300_000
    words = set((tmp_path / "lexicon" / "words.txt").read_text(encoding="utf-8").split("\n")[:-1])
    assert len(words) == meta["words"] and {"得天独厚", "那不勒斯"} <= words


def test_every_weight_is_scored_as_the_model_is(tune, trained):
    nlp = spacy.load(trained / "pipeline", exclude=["merge_words"])
    refs = list(DocBin().from_disk(trained / "dev.spacy").get_docs(nlp.vocab))
    iv = {w for words in WORDS for w in words}
    lexicon = Lexicon(["那不勒斯", "王五"])
    result = tune.tune(nlp, refs, iv, lexicon, [0.0, 1e4], batch_size=3)
    rows = {row["weight"]: row for row in result["weights"]}
    own = score_words([Example(d, r) for d, r in zip(nlp.pipe(r.text for r in refs), refs)], iv_words=iv)
    assert {k: rows[0.0][k] for k in own} == own  # weight 0: the model alone
    # a huge weight: both lexicon words are found, as the pipe finds them with that lexicon
    segmenter = nlp.get_pipe("segmenter")
    segmenter.set_lexicon(lexicon, weight=1e4)
    with_lexicon = [Example(d, r) for d, r in zip(nlp.pipe(r.text for r in refs), refs)]
    assert {k: rows[1e4][k] for k in own} == score_words(with_lexicon, iv_words=iv)
    found = {s.text for eg in with_lexicon for s in eg.predicted.spans["words"]}
    assert {"那不勒斯", "王五"} <= found
    assert result["matches"] == 2
    assert result["chosen"] == max(result["weights"], key=lambda r: (r["words_f"], -r["weight"]))


def test_cli_writes_the_table_and_names_what_is_wrong(tune, trained, tmp_path, monkeypatch, capsys):
    argv = [
        "lexicon_tune.py",
        str(trained / "pipeline"),
        str(trained / "dev.spacy"),
        "--words",
        str(trained / "train.spacy"),
        "--lexicon",
        str(trained / "words.txt"),
        "--weights",
        "0,3,1",
        "--output",
        str(tmp_path / "lexicon.json"),
    ]
    monkeypatch.setattr("sys.argv", argv)
    tune.main()
    out = srsly.read_json(tmp_path / "lexicon.json")
    assert [row["weight"] for row in out["weights"]] == [0.0, 1.0, 3.0] and out["lexicon_words"] == 2
    assert "(chosen)" in (tmp_path / "lexicon.md").read_text(encoding="utf-8")
    assert "chosen weight:" in capsys.readouterr().out
    for bad, what in [
        (["--weights", "0,-1"], "--weights"),
        (["--weights", "x"], "--weights"),
        (["--lexicon", str(tmp_path / "none.txt")], "none.txt: no such file"),
    ]:
        monkeypatch.setattr("sys.argv", argv + bad)
        with pytest.raises(SystemExit):
            tune.main()
        assert what in capsys.readouterr().err
