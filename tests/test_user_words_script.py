"""project/crf_project/user_words.py: unseen dev words the segmenter splits,
added as user words, segmented before and after, on a small trained pipeline."""

from pathlib import Path

import pytest
import spacy
import srsly
import typer
from _configs import PROBE_WORDS
from conftest import load_script, write_probe_inputs
from spacy.tokens import DocBin
from typer.testing import CliRunner

SCRIPT = Path(__file__).resolve().parents[1] / "project" / "crf_project" / "user_words.py"


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return write_probe_inputs(tmp_path_factory.mktemp("user_words"))


def _load(inputs):
    nlp = spacy.load(inputs / "pipeline", exclude=["merge_words"])
    return nlp, list(DocBin().from_disk(inputs / "dev.spacy").get_docs(nlp.vocab))


def test_forced_unseen_words_are_whole_after_and_no_character_is_lost(script, inputs):
    nlp, refs = _load(inputs)
    iv = {w for words in PROBE_WORDS for w in words}
    result = script.demo(nlp, refs, iv, n_words=5)
    chosen = [row["word"] for row in result["words"]]
    assert chosen and set(chosen) <= {"王五", "那不勒斯"}  # the unseen words of the dev set
    for row in result["words"]:
        assert row["whole_before"] < row["occurrences"] == row["whole_after"]
        for sentence in row["sentences"]:
            assert row["word"] in sentence["after"].split("|")
            assert row["word"] not in sentence["before"].split("|")
            text = sentence["gold"].replace("|", "")
            assert sentence["before"].replace("|", "") == sentence["after"].replace("|", "") == text
    assert result["after"]["words_r"] >= result["before"]["words_r"]


def test_split_words_counts_boundaries_inside_a_word_only(script, inputs):
    nlp, _ = _load(inputs)
    ref = spacy.tokens.Doc(nlp.vocab, words=["那不勒斯", "很", "美"], spaces=[False] * 3)
    joined = {(0, 5), (5, 6)}  # 那不勒斯很|美: joined to a neighbour, not split
    assert script.split_words([ref], [joined], None) == {}
    split = {(0, 2), (2, 4), (4, 5), (5, 6)}
    assert script.split_words([ref], [split], None) == {"那不勒斯": 1}
    assert script.split_words([ref], [split], {"那不勒斯"}) == {}


def test_cli_prints_before_and_after_and_writes_json(script, inputs, tmp_path):
    app = typer.Typer()
    app.command()(script.main)
    out = tmp_path / "user_words.json"
    result = CliRunner().invoke(
        app,
        [
            str(inputs / "pipeline"),
            str(inputs / "dev.spacy"),
            "--words",
            str(inputs / "train.spacy"),
            "--mode",
            "prior",
            "--weight",
            "50",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "| word | occurrences | whole before | whole after |" in result.output
    assert "before " in result.output and "after  " in result.output
    saved = srsly.read_json(out)
    assert saved["mode"] == "prior" and saved["weight"] == 50.0
    assert all(row["whole_after"] == row["occurrences"] for row in saved["words"])
