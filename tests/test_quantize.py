"""int8 dynamic quantization of the transformer encoder (spacy_crf.encoders.quantize):
in memory, through to_disk / spacy.load, in a fresh process, with n_process=2,
and for a transformer copied into a component by replace_listeners."""

import subprocess
import sys

import numpy
import pytest
import spacy
import torch
from _backends import (
    TEXTS,
    assert_a_damaged_encoder_file_is_named_at_load,
    assert_a_gpu_device_is_named_at_load_not_a_damaged_file,
    assert_damaged_encoder_bytes_are_named_at_load,
    encoders,
    examples,
    make_nlp,
    outputs,
    trained_float_pipeline,
)
from thinc.api import ConfigValidationError

from spacy_crf.encoders.quantize import (
    QUANTIZED_ARCH,
    QUANTIZED_TOK2VEC_ARCH,
    QuantizedTrainingError,
    is_quantized,
    quantize_pipeline,
)


@pytest.fixture(scope="module")
def float_dir(tiny_bert_dir, tmp_path_factory):
    """A float pipeline trained a little (so its tags are not all one), on disk."""
    return trained_float_pipeline(tiny_bert_dir, tmp_path_factory.mktemp("float") / "pipeline")


@pytest.fixture(scope="module")
def int8_dir(float_dir, tmp_path_factory):
    nlp = quantize_pipeline(spacy.load(float_dir))
    path = tmp_path_factory.mktemp("int8") / "pipeline"
    nlp.to_disk(path)
    return path


def assert_same_outputs(a, b):
    (hidden_a, tags_a, ents_a), (hidden_b, tags_b, ents_b) = a, b
    assert ents_a == ents_b
    assert tags_a == tags_b
    for x, y in zip(hidden_a, hidden_b):
        assert (x is None and y is None) or numpy.array_equal(x, y)


def test_linear_layers_become_dynamic_quantized_and_predict_close_to_float(float_dir):
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    fp32 = spacy.load(float_dir)
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in encoders(fp32)[0].modules())
    int8 = quantize_pipeline(spacy.load(float_dir))
    (encoder,) = encoders(int8)
    assert is_quantized(encoder)
    assert sum(isinstance(m, DynamicLinear) for m in encoder.modules()) == n_linear > 0
    assert not any(type(m) is torch.nn.Linear for m in encoder.modules())
    weight = next(m for m in encoder.modules() if isinstance(m, DynamicLinear)).weight()
    assert weight.dtype == torch.qint8 and weight.qscheme() == torch.per_channel_affine  # a scale per row
    assert int8.config["components"]["transformer"]["model"]["@architectures"] == QUANTIZED_ARCH
    assert int8.config["components"]["transformer"]["model"]["dtype"] == "qint8"

    hidden_f, tags_f, _ = outputs(fp32)
    hidden_q, tags_q, _ = outputs(int8)
    for f, q in zip(hidden_f, hidden_q):
        if f is not None:
            assert numpy.abs(f - q).max() < 0.1 * numpy.abs(f).max()
    flat_f, flat_q = sum(tags_f, []), sum(tags_q, [])
    assert len(set(flat_f)) > 1  # the float tagger is not trivially constant
    assert numpy.mean(numpy.equal(flat_f, flat_q)) >= 0.9


def test_to_disk_and_load_give_the_in_memory_quantized_pipeline(float_dir, tmp_path):
    int8 = quantize_pipeline(spacy.load(float_dir))
    before = outputs(int8)
    int8.to_disk(tmp_path / "int8")
    cfg = (tmp_path / "int8" / "config.cfg").read_text(encoding="utf8")
    assert QUANTIZED_ARCH in cfg and 'dtype = "qint8"' in cfg
    loaded = spacy.load(tmp_path / "int8")
    assert all(is_quantized(e) for e in encoders(loaded))
    assert_same_outputs(outputs(loaded), before)
    # and once more: a loaded quantized pipeline saves and loads the same
    loaded.to_disk(tmp_path / "again")
    assert_same_outputs(outputs(spacy.load(tmp_path / "again")), before)


def test_a_truncated_or_missing_weights_file_is_named_at_load(int8_dir, tmp_path):
    copy = assert_a_damaged_encoder_file_is_named_at_load(int8_dir, tmp_path, "quantized")
    assert_same_outputs(outputs(spacy.load(copy)), outputs(spacy.load(int8_dir)))  # whole again: loads


def test_truncated_weights_bytes_name_the_component_at_load(int8_dir):
    assert_damaged_encoder_bytes_are_named_at_load(int8_dir, "quantized")


def test_loading_on_a_gpu_device_says_so_not_that_the_file_is_damaged(int8_dir, monkeypatch):
    assert_a_gpu_device_is_named_at_load_not_a_damaged_file(int8_dir, monkeypatch, "quantized")


def _edited_copy(source, path, old, new):
    import shutil

    shutil.copytree(source, path)
    cfg = path / "config.cfg"
    text = cfg.read_text(encoding="utf8")
    assert old in text
    cfg.write_text(text.replace(old, new), encoding="utf8")
    return path


@pytest.mark.parametrize(
    "source,old,new,found",
    [
        # float weights: were a "truncated or damaged" file (a KeyError in the quantized layers)
        ("float", '"spacy-transformers.TransformerModel.v3"', f'"{QUANTIZED_ARCH}"\ndtype = "qint8"', "float32 linear"),
        # were loaded with strict=False into random layers, or with other embeddings, silently
        ("int8", 'dtype = "qint8"', 'dtype = "bfloat16"', "qint8 linear"),
        ("int8", 'dtype = "qint8"', 'dtype = "float16"', "qint8 linear"),
        ("int8", "embeddings = false", "embeddings = true", "float32 embeddings"),
    ],
    ids=["float-weights", "int8-as-bfloat16", "int8-as-float16", "float-embeddings"],
)
def test_weights_of_another_encoder_under_the_quantized_architecture_are_named_at_load(
    float_dir, int8_dir, tmp_path, source, old, new, found
):
    path = _edited_copy(float_dir if source == "float" else int8_dir, tmp_path / "p", old, new)
    named = r"^Cannot load the quantized encoder of component 'transformer' from '.*transformer.model': expected "
    with pytest.raises(ValueError, match=named + f".*found .*{found}.*saved with another encoder") as error:
        spacy.load(path)
    assert "\n" not in str(error.value)
    # and through nlp.from_bytes, into a pipeline quantized otherwise
    if source == "float":
        with pytest.raises(
            ValueError, match=r"^Cannot load the quantized encoder of component 'transformer' from bytes"
        ):
            spacy.load(int8_dir).from_bytes(spacy.load(float_dir).to_bytes())


def test_quantized_weights_under_the_float_architecture_are_refused_by_spacys_config_check(int8_dir, tmp_path):
    # the float architecture takes no dtype: spaCy's config check, before any weights are read
    path = _edited_copy(int8_dir, tmp_path / "p", f'"{QUANTIZED_ARCH}"', '"spacy-transformers.TransformerModel.v3"')
    with pytest.raises(ConfigValidationError, match="dtype"):
        spacy.load(path)


def test_quantized_encoder_is_smaller_on_disk(float_dir, int8_dir):
    size_f = (float_dir / "transformer" / "model").stat().st_size
    size_q = (int8_dir / "transformer" / "model").stat().st_size
    assert size_q < 0.8 * size_f


def test_fresh_process_and_n_process_2_match(int8_dir, tmp_path):
    """A new interpreter finds the quantized architecture through the entry
    points alone (as `spacy package` + install does), and two worker
    processes predict what one does."""
    nlp = spacy.load(int8_dir)
    _, tags, ents = outputs(nlp)
    script = (
        "import json, sys, spacy\n"
        "nlp = spacy.load(sys.argv[1])\n"
        "docs = list(nlp.pipe(json.loads(sys.argv[2])))\n"
        "print(json.dumps([[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in docs]))\n"
    )
    import json

    result = subprocess.run(
        [sys.executable, "-c", script, str(int8_dir), json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # not the source tree: installed metadata
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert [[tuple(e) for e in d] for d in json.loads(result.stdout.splitlines()[-1])] == ents
    multi = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in nlp.pipe(TEXTS, n_process=2, batch_size=2)]
    assert multi == ents


def test_training_a_quantized_encoder_is_a_clear_error(float_dir):
    nlp = quantize_pipeline(spacy.load(float_dir))
    with pytest.raises(QuantizedTrainingError, match="inference-only"):
        nlp.update(examples(nlp))
    with pytest.raises(QuantizedTrainingError, match="inference-only"):
        nlp.get_pipe("transformer").update(examples(nlp))
    shim = nlp.get_pipe("transformer").model.layers[0].shims[0]
    with pytest.raises(
        QuantizedTrainingError, match=r"is dynamically quantized \(qint8\) and is inference-only.*quantize_pipeline"
    ):
        shim.finish_update(None)
    with pytest.raises(ValueError, match=r"is dynamically quantized \(qint8\): it runs on CPU only"):
        shim.to_device("gpu", 0)


def test_heads_still_train_over_a_frozen_annotating_quantized_encoder(float_dir):
    nlp = quantize_pipeline(spacy.load(float_dir))
    optimizer = nlp.resume_training()
    losses = {}
    for _ in range(3):
        nlp.update(examples(nlp), sgd=optimizer, losses=losses, exclude=["transformer"], annotates=["transformer"])
    assert numpy.isfinite(losses["crf_tagger"]) and losses["crf_tagger"] > 0


@pytest.mark.parametrize("order", ["replace_then_quantize", "quantize_then_replace"])
def test_transformer_copied_by_replace_listeners(float_dir, tmp_path, order):
    nlp = spacy.load(float_dir)
    if order == "quantize_then_replace":
        quantize_pipeline(nlp)
        nlp.replace_listeners("transformer", "crf_tagger", ["model.tok2vec"])
    else:
        nlp.replace_listeners("transformer", "crf_tagger", ["model.tok2vec"])
        quantize_pipeline(nlp)
    tok2vec_cfg = nlp.config["components"]["crf_tagger"]["model"]["tok2vec"]
    assert tok2vec_cfg["@architectures"] == QUANTIZED_TOK2VEC_ARCH and tok2vec_cfg["dtype"] == "qint8"
    embedded = encoders(nlp)
    assert len(embedded) == 2 and all(is_quantized(e) for e in embedded)
    with nlp.select_pipes(disable=["transformer"]):  # the tagger runs its own copy
        before = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in nlp.pipe(TEXTS)]
    nlp.to_disk(tmp_path / "int8")
    loaded = spacy.load(tmp_path / "int8")
    assert len(encoders(loaded)) == 2 and all(is_quantized(e) for e in encoders(loaded))
    with loaded.select_pipes(disable=["transformer"]):
        after = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in loaded.pipe(TEXTS)]
    assert after == before
    with pytest.raises(QuantizedTrainingError):
        loaded.update(examples(loaded))


@pytest.mark.parametrize("dtype,embeddings", [("float16", False), ("qint8", True)])
def test_other_settings_round_trip(float_dir, int8_dir, tmp_path, dtype, embeddings):
    from torch.ao.nn.quantized import Embedding as QuantizedEmbedding

    nlp = quantize_pipeline(spacy.load(float_dir), dtype=dtype, embeddings=embeddings)
    before = outputs(nlp)
    nlp.to_disk(tmp_path / "q")
    loaded = spacy.load(tmp_path / "q")
    assert loaded.config["components"]["transformer"]["model"]["embeddings"] is embeddings
    (encoder,) = encoders(loaded)
    assert any(isinstance(m, QuantizedEmbedding) for m in encoder.modules()) is embeddings
    assert_same_outputs(outputs(loaded), before)
    if embeddings:
        size_linear_only = (int8_dir / "transformer" / "model").stat().st_size
        assert (tmp_path / "q" / "transformer" / "model").stat().st_size < size_linear_only
        hidden_f, tags_f, _ = outputs(spacy.load(float_dir))
        assert numpy.mean(numpy.equal(sum(tags_f, []), sum(before[1], []))) >= 0.9


def test_quantizing_twice_and_bad_arguments(float_dir, tiny_bert_dir):
    nlp = quantize_pipeline(spacy.load(float_dir))
    cfg = nlp.config.to_str()
    assert quantize_pipeline(nlp) is nlp and nlp.config.to_str() == cfg  # a no-op
    with pytest.raises(ValueError, match="already quantized"):
        quantize_pipeline(nlp, dtype="float16")
    with pytest.raises(ValueError, match="Unknown quantization dtype"):
        quantize_pipeline(spacy.load(float_dir), dtype="int4")
    with pytest.raises(ValueError, match="No spacy-transformers transformer"):
        quantize_pipeline(spacy.blank("zh"))


def test_quantize_before_initialize(tiny_bert_dir):
    """Quantizing a fresh pipeline: initialize loads the float weights from
    `name` and quantizes them."""
    nlp = quantize_pipeline(make_nlp(tiny_bert_dir))
    nlp.initialize(lambda: examples(nlp))
    assert all(is_quantized(e) for e in encoders(nlp))
    assert len(list(nlp.pipe(TEXTS))) == len(TEXTS)


def test_bfloat16_predicts_under_autocast_where_the_cpu_runs_it(float_dir, tmp_path, monkeypatch):
    import spacy_crf.encoders.quantize as quantize

    monkeypatch.setattr(quantize, "cpu_runs_bfloat16_natively", lambda: True)
    bf16 = quantize_pipeline(spacy.load(float_dir), dtype="bfloat16")
    (encoder,) = encoders(bf16)
    # nothing is stored in bfloat16: the weights stay those of the float pipeline
    assert not is_quantized(encoder) and all(p.dtype == torch.float32 for p in encoder.parameters())
    assert bf16.config["components"]["transformer"]["model"]["dtype"] == "bfloat16"
    hidden_f, tags_f, ents_f = outputs(spacy.load(float_dir))
    hidden_b, tags_b, ents_b = outputs(bf16)
    diffs = [numpy.abs(f - b).max() for f, b in zip(hidden_f, hidden_b) if f is not None]
    assert max(diffs) > 0  # the products ran in bfloat16
    assert all(b.dtype == numpy.float32 for b in hidden_b if b is not None)
    for f, b in zip(hidden_f, hidden_b):
        if f is not None:
            assert numpy.abs(f - b).max() < 0.1 * numpy.abs(f).max()
    assert numpy.mean(numpy.equal(sum(tags_f, []), sum(tags_b, []))) >= 0.9
    bf16.to_disk(tmp_path / "bf16")
    assert_same_outputs(outputs(spacy.load(tmp_path / "bf16")), (hidden_b, tags_b, ents_b))
    with pytest.raises(QuantizedTrainingError, match="bfloat16"):
        bf16.update(examples(bf16))


def test_bfloat16_predicts_in_float32_and_says_so_where_the_cpu_lacks_it(float_dir, monkeypatch):
    import spacy_crf.encoders.quantize as quantize

    monkeypatch.setattr(quantize, "cpu_runs_bfloat16_natively", lambda: False)
    with pytest.warns(UserWarning, match="this CPU does not, so it predicts in float32"):
        bf16 = quantize_pipeline(spacy.load(float_dir), dtype="bfloat16")
    assert_same_outputs(outputs(bf16), outputs(spacy.load(float_dir)))
