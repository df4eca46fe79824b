"""Pipeline throughput measurement (``python -m spacy_crf.speed``)."""
import subprocess
import sys

import spacy
import srsly
from spacy.tokens import DocBin

from spacy_crf.speed import chars_per_second, component_seconds, load_texts


def _pipeline(tmp_path):
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_tagger", config={"scheme": "bmes"})
    nlp.initialize()
    path = tmp_path / "pipeline"
    nlp.to_disk(path)
    texts = ["张三去上海工作", "好", "我在北京", "今天天气很好。"]
    db = DocBin(docs=[nlp.make_doc(t) for t in texts])
    db.to_disk(tmp_path / "dev.spacy")
    return nlp, path, texts


def test_texts_timing_and_breakdown(tmp_path):
    nlp, _, texts = _pipeline(tmp_path)
    assert load_texts([str(tmp_path / "dev.spacy")], limit=0) == texts
    assert load_texts([str(tmp_path / "dev.spacy")] * 2, limit=2) == texts[:2] * 2
    assert chars_per_second(nlp, texts, batch_size=2, n_process=1, repeats=2) > 0
    seconds = component_seconds(nlp, texts, batch_size=2)
    assert list(seconds) == ["tokenizer", "crf_tagger"]
    assert all(s >= 0 for s in seconds.values())


def test_cli_writes_json(tmp_path):
    _, path, texts = _pipeline(tmp_path)
    out = tmp_path / "speed.json"
    subprocess.run([sys.executable, "-m", "spacy_crf.speed", str(path), str(tmp_path / "dev.spacy"),
                    "--batch-sizes", "2", "--n-process", "1", "--repeats", "1", "--output", str(out)], check=True)
    result = srsly.read_json(out)
    assert result["texts"] == len(texts) and result["chars"] == sum(map(len, texts))
    assert [(r["n_process"], r["batch_size"]) for r in result["runs"]] == [(1, 2)]
    assert result["runs"][0]["chars_per_s"] > 0
    assert set(result["seconds_per_1k_chars"]) == {"tokenizer", "crf_tagger"}
