"""OpenVINO inference of the transformer encoder (spacy_crf.encoders.openvino_backend):
float32 predicts as torch does, through to_disk / spacy.load and in other
processes; static int8 is calibrated on texts, runs int8 and predicts close;
bfloat16 only where the CPU has it; misuse is a clear error."""

import shutil

import numpy
import pytest
import spacy

pytest.importorskip("openvino")
pytest.importorskip("onnx")

from _backends import (  # noqa: E402
    TEXTS,
    assert_a_damaged_encoder_file_is_named_at_load,
    assert_a_gpu_device_is_named_at_load_not_a_damaged_file,
    assert_damaged_encoder_bytes_are_named_at_load,
    encoders,
    examples,
    forked_child_ents,
    make_nlp,
    max_diff,
    outputs,
    trained_float_pipeline,
)

from spacy_crf.encoders.onnx_backend import OnnxTrainingError, export_pipeline  # noqa: E402
from spacy_crf.encoders.openvino_backend import (  # noqa: E402
    OPENVINO_ARCH,
    OPENVINO_TOK2VEC_ARCH,
    OpenVINOEncoder,
    export_openvino,
    inference_hint,
    record_encoder_inputs,
)

CALIBRATION = ["王五在南京大学读书", "上海的天气很好", "他们去了广州和深圳工作"] * 4


@pytest.fixture(scope="module")
def float_dir(tiny_bert_dir, tmp_path_factory):
    return trained_float_pipeline(tiny_bert_dir, tmp_path_factory.mktemp("float") / "pipeline")


@pytest.fixture(scope="module")
def openvino_dir(float_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("openvino") / "pipeline"
    export_openvino(spacy.load(float_dir)).to_disk(path)
    return path


@pytest.fixture(scope="module")
def int8_dir(float_dir, tmp_path_factory):
    pytest.importorskip("nncf")
    path = tmp_path_factory.mktemp("int8") / "pipeline"
    export_openvino(spacy.load(float_dir), quantize="int8", calibration=CALIBRATION).to_disk(path)
    return path


def test_float32_openvino_pipeline_predicts_as_torch(float_dir):
    hidden_t, tags_t, ents_t = outputs(spacy.load(float_dir))
    nlp = export_openvino(spacy.load(float_dir))
    (encoder,) = encoders(nlp)
    assert isinstance(encoder, OpenVINOEncoder) and (encoder.quantize, encoder.precision) == ("none", "float32")
    assert nlp.config["components"]["transformer"]["model"]["@architectures"] == OPENVINO_ARCH
    hidden_o, tags_o, ents_o = outputs(nlp)
    assert len(set(sum(tags_t, []))) > 1  # the torch tagger is not trivially constant
    assert tags_o == tags_t and ents_o == ents_t
    assert max_diff(hidden_t, hidden_o) < 1e-4
    # float32 is asked for explicitly: OpenVINO's own default is bfloat16 where the CPU has it
    assert encoder.session().inference_precision == "f32"
    # and the OS places its threads, as torch's and ONNX Runtime's (OpenVINO pins them by default)
    compiled = encoder.session().compiled
    assert "ENABLE_CPU_PINNING" not in compiled.get_property("SUPPORTED_PROPERTIES") or not compiled.get_property(
        "ENABLE_CPU_PINNING"
    )
    doc_t, doc_o = spacy.load(float_dir)(TEXTS[0]), nlp(TEXTS[0])
    assert len(doc_o._.trf_data.tensors) == len(doc_t._.trf_data.tensors) == 2  # pooler output kept


def test_to_disk_and_load_give_the_openvino_pipeline_back(float_dir, openvino_dir, tmp_path):
    before = outputs(spacy.load(float_dir))
    cfg = (openvino_dir / "config.cfg").read_text(encoding="utf8")
    assert OPENVINO_ARCH in cfg and 'quantize = "none"' in cfg and 'precision = "float32"' in cfg
    loaded = spacy.load(openvino_dir)
    assert all(isinstance(e, OpenVINOEncoder) for e in encoders(loaded))
    after = outputs(loaded)
    assert after[1:] == before[1:] and max_diff(before[0], after[0]) < 1e-4
    loaded.to_disk(tmp_path / "again")
    assert outputs(spacy.load(tmp_path / "again"))[1:] == before[1:]


def test_a_truncated_or_missing_model_file_is_named_at_load(openvino_dir, tmp_path):
    copy = assert_a_damaged_encoder_file_is_named_at_load(openvino_dir, tmp_path, "OpenVINO")
    assert outputs(spacy.load(copy))[1:] == outputs(spacy.load(openvino_dir))[1:]  # whole again: loads


def test_truncated_model_bytes_name_the_component_at_load(openvino_dir):
    assert_damaged_encoder_bytes_are_named_at_load(openvino_dir, "OpenVINO")


def test_loading_on_a_gpu_device_says_so_not_that_the_file_is_damaged(openvino_dir, monkeypatch):
    assert_a_gpu_device_is_named_at_load_not_a_damaged_file(openvino_dir, monkeypatch, "OpenVINO")


def test_without_openvino_loading_fails_saying_what_to_install(openvino_dir, monkeypatch):
    import sys

    # not at the first prediction: the pipeline is of no use without it
    monkeypatch.setitem(sys.modules, "openvino", None)
    with pytest.raises(ImportError, match=r"The OpenVINO encoder needs openvino.*: pip install openvino") as error:
        spacy.load(openvino_dir)
    assert "\n" not in str(error.value)


def test_the_precision_is_a_run_time_setting_of_the_config(openvino_dir):
    nlp = spacy.load(openvino_dir, config={"components": {"transformer": {"model": {"precision": "bfloat16"}}}})
    (encoder,) = encoders(nlp)
    assert encoder.precision == "bfloat16"
    import openvino

    capabilities = openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    assert encoder.session().inference_precision == ("bf16" if "BF16" in capabilities else "f32")
    assert outputs(nlp)[1] == outputs(spacy.load(openvino_dir))[1] or "BF16" in capabilities
    with pytest.raises(Exception, match="Unknown OpenVINO precision 'float16'"):
        spacy.load(openvino_dir, config={"components": {"transformer": {"model": {"precision": "float16"}}}})


def test_bfloat16_only_where_the_cpu_runs_it():
    assert inference_hint("bfloat16", ["FP32", "BF16", "INT8"]) == "bf16"
    assert inference_hint("bfloat16", ["FP32", "INT8"]) == "f32"
    assert inference_hint("float32", ["FP32", "BF16"]) == "f32"


def test_int8_is_calibrated_runs_int8_and_predicts_close(float_dir, int8_dir):
    hidden_t, tags_t, _ = outputs(spacy.load(float_dir))
    nlp = spacy.load(int8_dir)
    (encoder,) = encoders(nlp)
    assert encoder.quantize == "int8" and b"FakeQuantize" in encoder.ir[0]
    assert 'quantize = "int8"' in (int8_dir / "config.cfg").read_text(encoding="utf8")
    hidden_q, tags_q, _ = outputs(nlp)
    for t, q in zip(hidden_t, hidden_q):
        if t is not None:
            assert 0 < numpy.abs(t - q).max() < 0.1 * numpy.abs(t).max()
    assert numpy.mean(numpy.equal(sum(tags_t, []), sum(tags_q, []))) >= 0.9


def test_int8_on_a_cpu_without_int8_dot_products_says_what_is_faster(float_dir, openvino_dir, int8_dir, monkeypatch):
    import warnings

    from spacy_crf.encoders import openvino_backend

    def first_prediction(path):
        nlp = spacy.load(path)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            list(nlp.pipe(TEXTS[:2]))
        return [w for w in caught if issubclass(w.category, openvino_backend.SlowInt8Warning)]

    monkeypatch.setattr(openvino_backend, "has_int8_dot_products", lambda: False)
    (warning,) = first_prediction(int8_dir)
    assert "no int8 dot products" in str(warning.message) and "ONNX Runtime int8" in str(warning.message)
    assert first_prediction(openvino_dir) == []  # float32 runs as fast as it can anyway
    for answer in (True, None):  # with VNNI or AMX, or where the CPU's flags cannot be read
        monkeypatch.setattr(openvino_backend, "has_int8_dot_products", lambda answer=answer: answer)
        assert first_prediction(int8_dir) == []


def test_has_int8_dot_products_reads_the_cpu_flags(monkeypatch):
    from spacy_crf import hardware

    monkeypatch.setattr(hardware, "cpu_flags", lambda: ["fpu", "avx2", "avx512_vnni"])
    assert hardware.has_int8_dot_products() is True
    monkeypatch.setattr(hardware, "cpu_flags", lambda: ["fpu", "avx2", "fma"])
    assert hardware.has_int8_dot_products() is False
    monkeypatch.setattr(hardware, "cpu_flags", lambda: None)
    assert hardware.has_int8_dot_products() is None


def test_int8_needs_calibration_texts(float_dir, tiny_bert_dir):
    with pytest.raises(ValueError, match="needs calibration texts"):
        export_openvino(spacy.load(float_dir), quantize="int8")
    with pytest.raises(ValueError, match="needs calibration texts"):
        export_openvino(spacy.load(float_dir), quantize="int8", calibration=["", " "])
    # a config that names int8 cannot be initialized from the float model: nothing to calibrate on
    nlp = export_openvino(make_nlp(tiny_bert_dir))
    nlp.config["components"]["transformer"]["model"]["quantize"] = "int8"
    fresh = spacy.util.load_model_from_config(nlp.config, auto_fill=True)
    with pytest.raises(ValueError, match="needs calibration texts"):
        fresh.initialize(lambda: examples(fresh))


def test_record_encoder_inputs_gives_each_encoder_what_nlp_pipe_feeds_it(float_dir):
    nlp = spacy.load(float_dir)
    nlp.replace_listeners("transformer", "crf_tagger", ["model.tok2vec"])
    recorded = record_encoder_inputs(nlp, CALIBRATION, batch_size=4)
    assert len(recorded) == 2  # the transformer's and the tagger's copy
    for batches in recorded.values():
        assert len(batches) == 3 and {"input_ids", "attention_mask"} <= set(batches[0])
        assert sum(int(b["attention_mask"].sum()) > 0 for b in batches) == 3
    assert all("forward" not in vars(e) for e in encoders(nlp))  # the recording is undone


def test_transformer_copied_by_replace_listeners(float_dir, tmp_path):
    nlp = spacy.load(float_dir)
    nlp.replace_listeners("transformer", "crf_tagger", ["model.tok2vec"])
    with nlp.select_pipes(disable=["transformer"]):
        torch_ents = [[(e.start_char, e.end_char) for e in d.ents] for d in nlp.pipe(TEXTS)]
    export_openvino(nlp)
    tok2vec_cfg = nlp.config["components"]["crf_tagger"]["model"]["tok2vec"]
    assert tok2vec_cfg["@architectures"] == OPENVINO_TOK2VEC_ARCH and tok2vec_cfg["precision"] == "float32"
    nlp.to_disk(tmp_path / "ov")
    loaded = spacy.load(tmp_path / "ov")
    assert len(encoders(loaded)) == 2 and all(isinstance(e, OpenVINOEncoder) for e in encoders(loaded))
    with loaded.select_pipes(disable=["transformer"]):
        assert [[(e.start_char, e.end_char) for e in d.ents] for d in loaded.pipe(TEXTS)] == torch_ents


def test_other_processes_start_their_own_model(openvino_dir):
    nlp = spacy.load(openvino_dir)
    _, _, ents = outputs(nlp)
    forked_child_ents(nlp, ents)
    multi = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in nlp.pipe(TEXTS, n_process=2, batch_size=2)]
    assert multi == ents


def test_initialize_exports_the_model_named_in_the_config(tiny_bert_dir):
    nlp = export_openvino(make_nlp(tiny_bert_dir))
    nlp.initialize(lambda: examples(nlp))
    assert all(isinstance(e, OpenVINOEncoder) and e.ir for e in encoders(nlp))
    assert len(list(nlp.pipe(TEXTS))) == len(TEXTS)


def test_the_cpu_check_names_openvino(float_dir, openvino_dir, monkeypatch):
    # the message names the runtime the user asked for, not the ONNX graph it goes through
    import torch

    from spacy_crf.encoders import swap

    nlp, exported = spacy.load(float_dir), spacy.load(openvino_dir)
    shim = exported.get_pipe("transformer").model.layers[0].shims[0]
    (encoder,) = encoders(exported)
    monkeypatch.setattr(swap, "get_torch_default_device", lambda: torch.device("meta"))
    with pytest.raises(
        ValueError, match="export_openvino: OpenVINO encoders run on CPU only.*default torch device is meta"
    ):
        export_openvino(nlp)
    with pytest.raises(ValueError, match="Exporting a transformer to OpenVINO: OpenVINO encoders run on CPU only"):
        shim.set_encoder(encoder)
    with pytest.raises(ValueError, match="export_pipeline: ONNX encoders run on CPU only"):
        export_pipeline(nlp)


def test_misuse_is_a_clear_error(float_dir, openvino_dir, tmp_path):
    nlp = spacy.load(openvino_dir)
    cfg = nlp.config.to_str()
    assert export_openvino(nlp) is nlp and nlp.config.to_str() == cfg  # a no-op
    with pytest.raises(ValueError, match="already exported to OpenVINO with quantize='none'"):
        export_openvino(nlp, precision="bfloat16")
    with pytest.raises(ValueError, match="already runs in OpenVINO"):
        export_pipeline(nlp)
    with pytest.raises(ValueError, match="export the float torch pipeline to OpenVINO"):
        export_openvino(export_pipeline(spacy.load(float_dir)))
    with pytest.raises(ValueError, match="Unknown OpenVINO precision 'fp16'"):
        export_openvino(spacy.load(float_dir), precision="fp16")
    with pytest.raises(OnnxTrainingError, match="runs in OpenVINO and is inference-only.*export_openvino"):
        nlp.update(examples(nlp))
    with pytest.raises(ValueError, match="This transformer runs in OpenVINO: it runs on CPU only"):
        nlp.get_pipe("transformer").model.layers[0].shims[0].to_device("gpu", 0)
    shutil.copytree(float_dir, tmp_path / "p")
    path = tmp_path / "p" / "config.cfg"
    path.write_text(
        path.read_text(encoding="utf8").replace("spacy-transformers.TransformerModel.v3", OPENVINO_ARCH),
        encoding="utf8",
    )
    with pytest.raises(ValueError, match="saved with another encoder"):
        spacy.load(tmp_path / "p")
    # a damaged model is an error at load, not at the first prediction
    (encoder,) = encoders(spacy.load(openvino_dir))
    state = encoder.state_dict()
    state["openvino_weights"] = state["openvino_weights"][:1000]
    with pytest.raises(ValueError, match="saved OpenVINO encoder is damaged: its [0-9,]+ bytes do not match"):
        OpenVINOEncoder(encoder.config).load_state_dict(state)
    from spacy_crf.encoders.onnx_graph import DIGEST

    del state[DIGEST]  # saved before digests: the model is parsed at load
    with pytest.raises(ValueError, match="saved OpenVINO encoder is damaged .*bytes of XML"):
        OpenVINOEncoder(encoder.config).load_state_dict(state)
    # one changed byte of the weights still parses: the digest saved with them finds it
    state = encoder.state_dict()
    weights = state["openvino_weights"].clone()
    weights[len(weights) // 2] ^= 0xFF
    with pytest.raises(ValueError, match="saved OpenVINO encoder is damaged: its [0-9,]+ bytes do not match"):
        OpenVINOEncoder(encoder.config).load_state_dict({**state, "openvino_weights": weights})
    del state[DIGEST]  # saved before digests: loads as it did
    OpenVINOEncoder(encoder.config).load_state_dict(state)
