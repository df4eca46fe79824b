"""``spacy_crf.cpu_autocast.v1``: the encoder's forward pass in bfloat16 in training.

Training updates run the encoder's linear layers in bfloat16; ``predict``, the
weights, the gradients and the saved pipeline stay float32.
"""

import subprocess
import sys

import numpy
import pytest
import spacy
import torch
from _configs import write_ner_training_files
from conftest import hf_model, tiny_ner_pipeline
from spacy.util import fix_random_seed, registry
from thinc.api import Config

from spacy_crf._compat import cpu_runs_bfloat16_natively, torch_shims
from spacy_crf.training import autocast
from spacy_crf.training.autocast import CPUAutocastShim, as_float32, cpu_autocast

LAYER = "encoder.layer.0.attention.self.query"


def _record_dtypes(nlp):
    """The output dtype of one of the encoder's linear layers, at each call."""
    seen = []
    hf_model(nlp).get_submodule(LAYER).register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    return seen


def _train(tiny_bert_dir, autocast: bool, steps: int = 4):
    nlp, examples = tiny_ner_pipeline(tiny_bert_dir)
    optimizer = nlp.initialize(lambda: examples)
    if autocast:
        assert cpu_autocast(nlp) == ["transformer"]
    fix_random_seed(1)
    losses = [nlp.update(examples, sgd=optimizer, losses={})["crf_tagger"] for _ in range(steps)]
    return nlp, examples, losses


def test_updates_run_in_bfloat16_and_predict_in_float32(tiny_bert_dir):
    nlp, examples, _ = _train(tiny_bert_dir, autocast=True, steps=1)
    seen = _record_dtypes(nlp)
    nlp.update(examples, sgd=nlp.create_optimizer(), losses={})
    assert seen == [torch.bfloat16]
    seen.clear()
    list(nlp.pipe([eg.reference.text for eg in examples]))
    assert seen and set(seen) == {torch.float32}
    assert all(p.dtype == torch.float32 for p in hf_model(nlp).parameters())


def test_autocast_trains_the_encoder_close_to_float32(tiny_bert_dir):
    nlp32, _, losses32 = _train(tiny_bert_dir, autocast=False)
    nlp16, _, losses16 = _train(tiny_bert_dir, autocast=True)
    w32 = hf_model(nlp32).get_submodule(LAYER).weight.detach().numpy()
    w16 = hf_model(nlp16).get_submodule(LAYER).weight.detach().numpy()
    assert w16.dtype == numpy.float32
    # Not the float32 run, but near it: the gradient reached the encoder through the casts.
    assert not numpy.array_equal(w32, w16)
    assert numpy.abs(w32 - w16).max() < 0.05 * numpy.abs(w32).max()
    assert all(numpy.isfinite(losses16)) and losses16[-1] < losses16[0]
    assert losses16 == pytest.approx(losses32, rel=0.1)


def test_the_saved_pipeline_loads_in_float32_and_predicts_the_same(tiny_bert_dir, tmp_path):
    nlp, examples, _ = _train(tiny_bert_dir, autocast=True)
    texts = [eg.reference.text for eg in examples]
    before = [[(e.text, e.label_) for e in doc.ents] for doc in nlp.pipe(texts)]
    nlp.to_disk(tmp_path / "nlp")
    loaded = spacy.load(tmp_path / "nlp")
    assert not any(isinstance(shim, CPUAutocastShim) for _, shim in torch_shims(loaded))
    assert [[(e.text, e.label_) for e in doc.ents] for doc in loaded.pipe(texts)] == before


def test_outputs_leave_the_shim_as_float32():
    x = torch.ones(2, dtype=torch.bfloat16, requires_grad=True)
    out = as_float32({"a": x * 2, "b": (x, torch.ones(1, dtype=torch.long)), "c": None})
    assert out["a"].dtype == torch.float32 and out["b"][0].dtype == torch.float32
    assert out["b"][1].dtype == torch.long and out["c"] is None
    out["a"].sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_bad_settings_are_clear_errors(tiny_bert_dir):
    with pytest.raises(ValueError, match="dtype must be one of auto, bfloat16, not 'float16'"):
        registry.callbacks.get("spacy_crf.cpu_autocast.v1")(dtype="float16")
    nlp, _ = tiny_ner_pipeline(tiny_bert_dir)
    nlp.get_pipe("transformer").model.layers[0].shims[0]._mixed_precision = True  # before initialize
    with pytest.raises(ValueError, match="mixed_precision = true"):
        cpu_autocast(nlp)
    with pytest.raises(ValueError, match="no component of the pipeline has a PyTorch model"):
        cpu_autocast(spacy.blank("zh"))


def test_the_callback_composes_with_sparse_embeddings_in_spacy_train(tiny_bert_dir, tmp_path):
    """The overrides the project's train.py passes for --autocast and --lazy-embeddings."""
    config, corpus = write_ner_training_files(tiny_bert_dir, tmp_path)
    table = "embeddings.word_embeddings.weight"
    sparse = '{"@callbacks": "spacy_crf.sparse_embeddings.v1", "patterns": ["%s"]}' % table
    autocast = '{"@callbacks": "spacy_crf.cpu_autocast.v1", "dtype": "bfloat16"}'
    code = tmp_path / "check_shim.py"
    # A callback after training that fails the run unless both mixins are in place.
    code.write_text(
        "from spacy.util import registry\n"
        "from spacy_crf.training.autocast import CPUAutocastShim\n"
        "from spacy_crf.training.sparse_embeddings import SparseRowsShim\n"
        "@registry.callbacks('check_shim.v1')\n"
        "def make():\n"
        "    def check(nlp):\n"
        "        shim = nlp.get_pipe('transformer').model.layers[0].shims[0]\n"
        "        assert isinstance(shim, CPUAutocastShim) and isinstance(shim, SparseRowsShim), type(shim)\n"
        "        return nlp\n"
        "    return check\n"
    )
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
            "--code",
            str(code),
            "--training.optimizer.lazy_rows",
            f'["{table}"]',
            "--initialize.after_init",
            sparse,
            "--initialize.before_init",
            autocast,
            "--training.before_to_disk",
            '{"@callbacks": "check_shim.v1"}',
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    saved = Config().from_disk(tmp_path / "out" / "model-last" / "config.cfg", interpolate=False)
    assert saved["initialize"]["before_init"]["@callbacks"] == "spacy_crf.cpu_autocast.v1"
    assert spacy.load(tmp_path / "out" / "model-last").get_pipe("crf_tagger").labels == ("LOC", "PER")


@pytest.mark.parametrize("native", [True, False])
def test_auto_autocasts_only_where_the_cpu_runs_bfloat16_natively(tiny_bert_dir, monkeypatch, native):
    monkeypatch.setattr(autocast, "cpu_runs_bfloat16_natively", lambda: native)
    nlp, examples = tiny_ner_pipeline(tiny_bert_dir)
    optimizer = nlp.initialize(lambda: examples)
    assert cpu_autocast(nlp, "auto") == (["transformer"] if native else [])
    seen = _record_dtypes(nlp)
    nlp.update(examples, sgd=optimizer, losses={})
    assert seen == [torch.bfloat16 if native else torch.float32]


def test_bfloat16_on_a_cpu_without_it_warns_and_still_autocasts(tiny_bert_dir, monkeypatch):
    monkeypatch.setattr(autocast, "cpu_runs_bfloat16_natively", lambda: False)
    nlp, examples = tiny_ner_pipeline(tiny_bert_dir)
    nlp.initialize(lambda: examples)
    with pytest.warns(UserWarning, match="without native bfloat16"):
        assert cpu_autocast(nlp, "bfloat16") == ["transformer"]


def test_the_cpu_check_answers_from_torch():
    # torch's own dispatch: oneDNN runs bfloat16 matmuls given AVX-512 (BW/VL/DQ), AVX512-BF16 or AMX
    flags = set()
    try:
        with open("/proc/cpuinfo", encoding="utf8") as f:
            flags = set(next(line for line in f if line.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration):
        pytest.skip("no /proc/cpuinfo flags")
    avx512 = {"avx512bw", "avx512vl", "avx512dq"} <= flags or bool({"avx512_bf16", "amx_bf16"} & flags)
    assert cpu_runs_bfloat16_natively() == avx512
