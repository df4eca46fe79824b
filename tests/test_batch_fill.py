"""scripts/batch_fill.py: the padded positions of the encoder's batches, per batcher."""

import math
from pathlib import Path

import pytest
import spacy
from _configs import write_ner_training_files
from conftest import CHARS, load_script
from spacy.tokens import DocBin

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "batch_fill.py"


@pytest.fixture(scope="module")
def batch_fill():
    return load_script(SCRIPT)


@pytest.fixture
def mixed_lengths(tiny_bert_dir, tmp_path):
    """The tiny training config over 24 docs whose lengths alternate short and long."""
    config, _ = write_ner_training_files(tiny_bert_dir, tmp_path)
    nlp = spacy.blank("zh")
    lengths = [2, 30, 4, 25, 3, 40, 5, 18] * 3
    texts = ["".join(CHARS[(i + j) % len(CHARS)] for j in range(n)) for i, n in enumerate(lengths)]
    DocBin(docs=[nlp.make_doc(t) for t in texts]).to_disk(tmp_path / "mixed.spacy")
    overrides = {"paths.train": str(tmp_path / "mixed.spacy"), "paths.dev": str(tmp_path / "mixed.spacy")}
    return config, overrides, texts


def test_every_batcher_sees_every_doc_and_sorting_fills_the_padding(batch_fill, mixed_lengths):
    config, overrides, texts = mixed_lengths
    results = batch_fill.measure(config, overrides, ["config", "words:60", "padded:60"], n_docs=100)
    for result in results.values():
        assert result["docs"] == len(texts)
        assert result["chars"] == sum(map(len, texts))
        assert 0 < result["wordpieces"] <= result["padded_positions"]
    # the config's own batcher: spacy.batch_by_sequence.v1, 2 docs a batch, corpus order
    assert results["config"]["batches"] == math.ceil(len(texts) / 2)
    # the same wordpieces whatever the batching; only the padding differs
    assert len({r["wordpieces"] for r in results.values()}) == 1
    assert results["padded:60"]["fill"] > results["words:60"]["fill"]
    assert results["padded:60"]["fill"] > 0.8


def test_a_bad_batcher_spec_is_refused_with_the_forms_it_takes(batch_fill):
    for spec in ("words", "padded:0", "tokens:100", "words:ten"):
        with pytest.raises(SystemExit, match="expected 'config', 'words:SIZE' or 'padded:SIZE'"):
            batch_fill.make_batcher(spec, None)
