"""``spacy_crf.sparse_embeddings.v1``: sparse gradients of the encoder's word-embedding table.

Training with a sparse gradient and GroupedAdam's lazy rows must give the same
weights as the lazy update of the dense gradient; without a lazy optimizer the
gradient is made dense, with a warning, and the update is thinc's dense one.
"""

import warnings

import numpy
import pytest
import spacy
from _configs import NER_DATA, write_ner_training_files
from conftest import hf_model, tiny_ner_pipeline
from spacy.util import fix_random_seed, registry
from thinc.api import Config

from spacy_crf._compat import torch_shims
from spacy_crf.training.optimizers import grouped_adam
from spacy_crf.training.sparse_embeddings import SparseRowsShim, sparse_embeddings

TABLE = "embeddings.word_embeddings.weight"
LAYER = "encoder.layer.0.attention.self.query.weight"


def _train(tiny_bert_dir, *, sparse: bool, lazy: bool, steps: int = 3):
    nlp, examples = tiny_ner_pipeline(tiny_bert_dir)
    optimizer = grouped_adam(1e-2, L2=0.01, lazy_rows=[TABLE] if lazy else [])
    nlp.initialize(lambda: examples, sgd=optimizer)
    if sparse:
        assert sparse_embeddings(nlp, [TABLE]) == [f"transformer:{TABLE}"]
    fix_random_seed(1)
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer)
    return nlp, optimizer


def _weights(nlp, name):
    return dict(hf_model(nlp).named_parameters())[name].detach().numpy().copy()


def test_sparse_gradients_give_the_lazy_update_of_the_dense_gradient(tiny_bert_dir):
    dense_nlp, dense_opt = _train(tiny_bert_dir, sparse=False, lazy=True)
    sparse_nlp, sparse_opt = _train(tiny_bert_dir, sparse=True, lazy=True)
    hf = hf_model(sparse_nlp)
    assert hf.embeddings.word_embeddings.sparse
    assert isinstance(next(shim for _, shim in torch_shims(sparse_nlp)), SparseRowsShim)
    # spacy-transformers applies a step's encoder update at the next step: the
    # last step's gradient is still pending, and it is sparse.
    assert hf.embeddings.word_embeddings.weight.grad.is_sparse
    for name in (TABLE, LAYER):
        numpy.testing.assert_allclose(_weights(sparse_nlp, name), _weights(dense_nlp, name), rtol=1e-5, atol=1e-6)
    key = next(k for k in sparse_opt.mom1 if k[1] == TABLE)
    dense_key = next(k for k in dense_opt.mom1 if k[1] == TABLE)
    numpy.testing.assert_allclose(sparse_opt.mom2[key], dense_opt.mom2[dense_key], rtol=1e-5, atol=1e-12)
    assert sparse_opt.nr_update[key] == dense_opt.nr_update[dense_key] == 2


def test_the_sparse_path_calls_update_rows_with_the_batchs_rows(tiny_bert_dir):
    nlp, examples = tiny_ner_pipeline(tiny_bert_dir)
    optimizer = grouped_adam(1e-2, lazy_rows=[TABLE])
    nlp.initialize(lambda: examples, sgd=optimizer)
    sparse_embeddings(nlp, [TABLE])
    calls = []
    update_rows = optimizer.update_rows
    optimizer.update_rows = lambda key, w, rows, g, **kw: (
        calls.append(set(rows.tolist())) or update_rows(key, w, rows, g, **kw)
    )
    for _ in range(2):
        nlp.update(examples, sgd=optimizer)
    trf = nlp.get_pipe("transformer").model
    batch_ids = {i for t, _ in NER_DATA for i in trf.tokenizer(t)["input_ids"]}
    assert len(calls) == 1 and calls[0] and calls[0] <= batch_ids


def test_without_a_lazy_optimizer_the_gradient_is_made_dense_with_a_warning(tiny_bert_dir):
    dense_nlp, _ = _train(tiny_bert_dir, sparse=False, lazy=False)
    with pytest.warns(UserWarning, match="lazy_rows"):
        sparse_nlp, _ = _train(tiny_bert_dir, sparse=True, lazy=False)
    for name in (TABLE, LAYER):
        numpy.testing.assert_allclose(_weights(sparse_nlp, name), _weights(dense_nlp, name), rtol=1e-5, atol=1e-6)


def test_a_trained_pipeline_with_sparse_gradients_round_trips(tiny_bert_dir, tmp_path):
    nlp, _ = _train(tiny_bert_dir, sparse=True, lazy=True, steps=2)
    nlp.to_disk(tmp_path / "nlp")
    loaded = spacy.load(tmp_path / "nlp")
    text = NER_DATA[0][0]
    assert [(e.text, e.label_) for e in loaded(text).ents] == [(e.text, e.label_) for e in nlp(text).ents]
    numpy.testing.assert_array_equal(_weights(loaded, TABLE), _weights(nlp, TABLE))


@pytest.mark.parametrize(
    "patterns,message",
    [
        (TABLE, "list of glob patterns"),
        (["no.such.table*"], r"matches \['no.such.table\*'\]"),
        ([LAYER], "not the weight of a torch.nn.Embedding"),
    ],
)
def test_bad_patterns_are_refused_before_anything_changes(tiny_bert_dir, patterns, message):
    nlp, examples = tiny_ner_pipeline(tiny_bert_dir)
    nlp.initialize(lambda: examples)
    with pytest.raises(ValueError, match=message):
        sparse_embeddings(nlp, [TABLE] + patterns if isinstance(patterns, list) else patterns)
    assert not hf_model(nlp).embeddings.word_embeddings.sparse
    assert not any(isinstance(shim, SparseRowsShim) for _, shim in torch_shims(nlp))


def test_the_callback_from_a_training_config(tiny_bert_dir):
    config = Config().from_str(
        f"""
[after_init]
@callbacks = "spacy_crf.sparse_embeddings.v1"
patterns = ["{TABLE}"]
"""
    )
    after_init = registry.resolve(config)["after_init"]
    nlp, examples = tiny_ner_pipeline(tiny_bert_dir)
    nlp.initialize(lambda: examples)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert after_init(nlp) is nlp
    assert hf_model(nlp).embeddings.word_embeddings.sparse


@pytest.fixture
def train_config(tiny_bert_dir, tmp_path):
    return write_ner_training_files(tiny_bert_dir, tmp_path)


def test_spacy_train_takes_the_callback_and_lazy_rows_as_overrides(train_config, tmp_path):
    """The overrides the project's train.py passes (JSON values), through the real CLI."""
    import subprocess
    import sys

    config, corpus = train_config
    sparse = '{"@callbacks": "spacy_crf.sparse_embeddings.v1", "patterns": ["%s"]}' % TABLE
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spacy",
            "train",
            str(config),
            "--output",
            str(tmp_path / "out"),
            "--paths.train",
            str(corpus),
            "--paths.dev",
            str(corpus),
            "--training.optimizer.lazy_rows",
            f'["{TABLE}"]',
            "--initialize.after_init",
            sparse,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "lazy_rows" not in result.stderr  # no densifying warning
    saved = Config().from_disk(tmp_path / "out" / "model-last" / "config.cfg", interpolate=False)
    assert saved["initialize"]["after_init"]["@callbacks"] == "spacy_crf.sparse_embeddings.v1"
    assert spacy.load(tmp_path / "out" / "model-last").get_pipe("crf_tagger").labels == ("LOC", "PER")


def test_the_training_step_benchmark_runs_every_variant(train_config, tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    config, corpus = train_config
    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_train_step.py"
    result = subprocess.run(
        [
            sys.executable,
            str(script),
            str(config),
            "--steps",
            "2",
            "--warmup",
            "1",
            "--output",
            str(tmp_path / "bench.json"),
            "--paths.train",
            str(corpus),
            "--paths.dev",
            str(corpus),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "[sparse] sparse gradients: transformer:embeddings.word_embeddings.weight" in result.stdout
    variants = json.loads((tmp_path / "bench.json").read_text())["variants"]
    assert "[bf16] bfloat16 autocast: transformer" in result.stdout
    assert list(variants) == ["dense", "lazy", "sparse", "frozen", "bf16"]
    assert all(v["median_s_per_step"] > 0 for v in variants.values())
