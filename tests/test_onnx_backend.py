"""ONNX Runtime inference of the transformer encoder (spacy_crf.encoders.onnx_backend):
float32 predicts as torch does, through to_disk / spacy.load and in other
processes; int8 runs and predicts close; training through it is a clear error."""

import importlib.metadata
import json
import subprocess
import sys

import numpy
import pytest
import spacy
import torch

pytest.importorskip("onnxruntime")
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

from spacy_crf.encoders.onnx_backend import (  # noqa: E402
    ONNX_ARCH,
    ONNX_TOK2VEC_ARCH,
    OnnxEncoder,
    OnnxTrainingError,
    export_pipeline,
)
from spacy_crf.encoders.quantize import quantize_pipeline  # noqa: E402


@pytest.fixture(scope="module")
def float_dir(tiny_bert_dir, tmp_path_factory):
    """A torch pipeline trained a little (so its tags are not all one), on disk."""
    return trained_float_pipeline(tiny_bert_dir, tmp_path_factory.mktemp("float") / "pipeline")


@pytest.fixture(scope="module")
def onnx_dir(float_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("onnx") / "pipeline"
    export_pipeline(spacy.load(float_dir)).to_disk(path)
    return path


def test_float32_onnx_pipeline_predicts_as_torch(float_dir):
    hidden_t, tags_t, ents_t = outputs(spacy.load(float_dir))
    nlp = export_pipeline(spacy.load(float_dir))
    assert all(isinstance(e, OnnxEncoder) and e.quantize == "none" for e in encoders(nlp))
    assert nlp.config["components"]["transformer"]["model"]["@architectures"] == ONNX_ARCH
    hidden_o, tags_o, ents_o = outputs(nlp)
    assert len(set(sum(tags_t, []))) > 1  # the torch tagger is not trivially constant
    assert tags_o == tags_t and ents_o == ents_t
    assert max_diff(hidden_t, hidden_o) < 1e-4
    # the doc keeps what torch gives it: last hidden state and pooler output
    doc_t, doc_o = spacy.load(float_dir)(TEXTS[0]), nlp(TEXTS[0])
    assert len(doc_o._.trf_data.tensors) == len(doc_t._.trf_data.tensors) == 2


def test_to_disk_and_load_give_the_onnx_pipeline_back(float_dir, onnx_dir, tmp_path):
    before = outputs(export_pipeline(spacy.load(float_dir)))
    cfg = (onnx_dir / "config.cfg").read_text(encoding="utf8")
    assert ONNX_ARCH in cfg and 'quantize = "none"' in cfg
    loaded = spacy.load(onnx_dir)
    assert all(isinstance(e, OnnxEncoder) for e in encoders(loaded))
    after = outputs(loaded)
    assert after[1:] == before[1:] and max_diff(before[0], after[0]) < 1e-6
    loaded.to_disk(tmp_path / "again")  # a loaded ONNX pipeline saves and loads the same
    assert outputs(spacy.load(tmp_path / "again"))[1:] == before[1:]


def test_a_graph_damaged_on_disk_is_an_error_at_load(onnx_dir, tmp_path):
    import shutil

    from spacy_crf.encoders.onnx_graph import DIGEST

    (encoder,) = encoders(spacy.load(onnx_dir))
    state = encoder.state_dict()
    assert len(state[DIGEST]) == 32
    # one byte of the weights changed inside the saved file: the graph still
    # parses and runs (with other numbers), the digest does not match
    shutil.copytree(onnx_dir, tmp_path / "p")
    model = tmp_path / "p" / "transformer" / "model"
    data = bytearray(model.read_bytes())
    at = data.find(encoder.onnx_bytes[-4096:-4000])
    assert at > 0
    data[at] ^= 0xFF
    model.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="saved ONNX encoder is damaged: its [0-9,]+ bytes do not match the SHA-256"):
        spacy.load(tmp_path / "p")
    # a graph saved before digests (no entry) loads as it did
    del state[DIGEST]
    OnnxEncoder(encoder.config).load_state_dict(state)


def test_a_truncated_or_missing_graph_file_is_named_at_load(onnx_dir, tmp_path):
    copy = assert_a_damaged_encoder_file_is_named_at_load(onnx_dir, tmp_path, "ONNX")
    assert outputs(spacy.load(copy))[1:] == outputs(spacy.load(onnx_dir))[1:]  # whole again: loads


def test_truncated_graph_bytes_name_the_component_at_load(onnx_dir):
    assert_damaged_encoder_bytes_are_named_at_load(onnx_dir, "ONNX")


def test_loading_on_a_gpu_device_says_so_not_that_the_file_is_damaged(onnx_dir, monkeypatch):
    assert_a_gpu_device_is_named_at_load_not_a_damaged_file(onnx_dir, monkeypatch, "ONNX")


def test_without_onnxruntime_loading_fails_saying_what_to_install(onnx_dir, monkeypatch):
    # not at the first prediction: the pipeline is of no use without it
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ImportError, match=r"The ONNX encoder needs onnxruntime.*: pip install onnxruntime") as error:
        spacy.load(onnx_dir)
    assert "\n" not in str(error.value)


def test_n_process_2_and_a_fresh_process_match(onnx_dir, tmp_path):
    nlp = spacy.load(onnx_dir)
    _, _, ents = outputs(nlp)
    nlp(TEXTS[0])  # a session started before the workers fork
    multi = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in nlp.pipe(TEXTS, n_process=2, batch_size=2)]
    assert multi == ents
    installed = {e.name for e in importlib.metadata.entry_points(group="spacy_architectures")}
    if ONNX_ARCH not in installed:
        pytest.skip("the installed package metadata predates the ONNX entry points (reinstall the package)")
    script = (
        "import json, sys, spacy\n"
        "docs = list(spacy.load(sys.argv[1]).pipe(json.loads(sys.argv[2])))\n"
        "print(json.dumps([[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in docs]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(onnx_dir), json.dumps(TEXTS)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert [[tuple(e) for e in d] for d in json.loads(result.stdout.splitlines()[-1])] == ents


def test_a_forked_process_starts_its_own_session(onnx_dir):
    nlp = spacy.load(onnx_dir)
    _, _, ents = outputs(nlp)
    forked_child_ents(nlp, ents)
    assert outputs(nlp)[2] == ents  # and the parent starts a new one


def test_copies_start_their_own_session(onnx_dir):
    import copy
    import pickle

    nlp = spacy.load(onnx_dir)
    nlp(TEXTS[0])
    (encoder,) = encoders(nlp)
    for other in (copy.deepcopy(encoder), pickle.loads(pickle.dumps(encoder))):
        assert not other.session_started and other.onnx_bytes == encoder.onnx_bytes
        ids = torch.tensor([[2, 7, 9, 3]])
        args = (ids, torch.ones_like(ids))
        assert torch.equal(other(*args).last_hidden_state, encoder(*args).last_hidden_state)


def test_training_an_onnx_encoder_is_a_clear_error(onnx_dir):
    nlp = spacy.load(onnx_dir)
    with pytest.raises(OnnxTrainingError, match="inference-only"):
        nlp.update(examples(nlp))
    with pytest.raises(OnnxTrainingError, match="inference-only"):
        nlp.get_pipe("transformer").update(examples(nlp))
    # heads still train over it when it is frozen and annotating
    losses = {}
    nlp.update(
        examples(nlp), sgd=nlp.resume_training(), losses=losses, exclude=["transformer"], annotates=["transformer"]
    )
    assert numpy.isfinite(losses["crf_tagger"])


def test_int8_onnx_runs_and_predicts_close_to_torch(float_dir, tmp_path):
    import onnx

    hidden_t, tags_t, _ = outputs(spacy.load(float_dir))
    nlp = export_pipeline(spacy.load(float_dir), quantize="int8")
    (encoder,) = encoders(nlp)
    ops = {node.op_type for node in onnx.load_model_from_string(encoder.onnx_bytes).graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul"}, sorted(ops)
    hidden_q, tags_q, _ = outputs(nlp)
    for t, q in zip(hidden_t, hidden_q):
        if t is not None:
            assert numpy.abs(t - q).max() < 0.1 * numpy.abs(t).max()
    assert numpy.mean(numpy.equal(sum(tags_t, []), sum(tags_q, []))) >= 0.9
    nlp.to_disk(tmp_path / "int8")
    assert 'quantize = "int8"' in (tmp_path / "int8" / "config.cfg").read_text(encoding="utf8")
    assert outputs(spacy.load(tmp_path / "int8"))[1] == tags_q


def test_transformer_copied_by_replace_listeners(float_dir, tmp_path):
    nlp = spacy.load(float_dir)
    nlp.replace_listeners("transformer", "crf_tagger", ["model.tok2vec"])
    export_pipeline(nlp)
    tok2vec_cfg = nlp.config["components"]["crf_tagger"]["model"]["tok2vec"]
    assert tok2vec_cfg["@architectures"] == ONNX_TOK2VEC_ARCH and tok2vec_cfg["quantize"] == "none"
    assert len(encoders(nlp)) == 2 and all(isinstance(e, OnnxEncoder) for e in encoders(nlp))
    with nlp.select_pipes(disable=["transformer"]):  # the tagger runs its own copy
        before = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in nlp.pipe(TEXTS)]
    nlp.to_disk(tmp_path / "onnx")
    loaded = spacy.load(tmp_path / "onnx")
    with loaded.select_pipes(disable=["transformer"]):
        after = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in loaded.pipe(TEXTS)]
    assert after == before


def test_initialize_exports_the_model_named_in_the_config(tiny_bert_dir):
    nlp = export_pipeline(make_nlp(tiny_bert_dir))
    nlp.initialize(lambda: examples(nlp))
    assert all(isinstance(e, OnnxEncoder) and e.onnx_bytes for e in encoders(nlp))
    assert len(list(nlp.pipe(TEXTS))) == len(TEXTS)


def test_exporting_twice_and_bad_arguments(float_dir, onnx_dir):
    nlp = spacy.load(onnx_dir)
    cfg = nlp.config.to_str()
    assert export_pipeline(nlp) is nlp and nlp.config.to_str() == cfg  # a no-op
    with pytest.raises(ValueError, match="already exported to ONNX with quantize='none'"):
        export_pipeline(nlp, quantize="int8")
    with pytest.raises(ValueError, match="Unknown ONNX quantization 'qint8'"):
        export_pipeline(spacy.load(float_dir), quantize="qint8")
    with pytest.raises(TypeError):
        export_pipeline(spacy.load(float_dir), "int8")  # keyword only
    with pytest.raises(ValueError, match="No spacy-transformers transformer"):
        export_pipeline(spacy.blank("zh"))
    torch_int8 = quantize_pipeline(spacy.load(float_dir))
    with pytest.raises(ValueError, match="quantized with torch"):
        export_pipeline(torch_int8)
    assert "Onnx" not in torch_int8.config.to_str()  # nothing changed


def test_loading_torch_weights_into_the_onnx_architecture_is_a_clear_error(float_dir, tmp_path):
    import shutil

    shutil.copytree(float_dir, tmp_path / "p")
    cfg = tmp_path / "p" / "config.cfg"
    cfg.write_text(
        cfg.read_text(encoding="utf8").replace("spacy-transformers.TransformerModel.v3", ONNX_ARCH), encoding="utf8"
    )
    with pytest.raises(ValueError, match="saved with another encoder"):
        spacy.load(tmp_path / "p")


def test_the_backend_benchmark_runs_and_records_the_machine(tmp_path, monkeypatch):
    from conftest import ROOT, load_script

    script = load_script(ROOT / "scripts" / "bench_encoder_backends.py")
    out = tmp_path / "bench.json"
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "bench",
            "--texts",
            "4",
            "--repeats",
            "1",
            "--layers",
            "1",
            "--hidden",
            "32",
            "--heads",
            "2",
            "--threads",
            "1",
            "--out",
            str(out),
        ],
    )
    threads = torch.get_num_threads()
    try:
        script.main()
    finally:
        torch.set_num_threads(threads)  # the script sets them for the process
    record = json.loads(out.read_text(encoding="utf8"))
    assert [r["backend"] for r in record["rows"]] == ["torch-float32", "torch-int8", "onnx-float32", "onnx-int8"]
    assert record["hardware"]["cpu_count"] and record["rows"][0]["pipeline_best_ratio"] == 1.0
    assert record["rows"][2]["tags_equal"] == 1.0 and record["rows"][2]["max_abs_hidden_diff"] < 1e-4
    monkeypatch.setattr(sys, "argv", ["bench", "--backends", "torch-float32,onnx-int4"])
    with pytest.raises(SystemExit, match="unknown \\['onnx-int4'\\]"):
        script.main()


def test_the_dev_set_backend_benchmark_scores_and_times_each_backend(float_dir, tmp_path, monkeypatch):
    from conftest import ROOT, load_script
    from spacy.tokens import Doc, DocBin

    script = load_script(ROOT / "scripts" / "bench_pipeline_backends.py")
    nlp = spacy.load(float_dir)
    refs = [eg.reference for eg in examples(nlp)]
    words = [Doc(nlp.vocab, words=["张三", "去", "北京", "工作"], spaces=[False] * 4)]
    DocBin(docs=refs).to_disk(tmp_path / "ents.spacy")
    DocBin(docs=words).to_disk(tmp_path / "words.spacy")
    out = tmp_path / "bench.json"
    argv = ["bench", str(float_dir), "--words", str(tmp_path / "words.spacy"), "--ents", str(tmp_path / "ents.spacy")]
    argv += ["--dictionary", str(tmp_path / "words.spacy"), "--backends", "torch-float32,onnx-float32,onnx-int8"]
    monkeypatch.setattr(sys, "argv", argv + ["--repeats", "2", "--threads", "1", "--out", str(out)])
    threads = torch.get_num_threads()
    try:
        script.main()
    finally:
        torch.set_num_threads(threads)  # the script sets them for the process
    record = json.loads(out.read_text(encoding="utf8"))
    rows = record["backends"]
    assert list(rows) == ["torch-float32", "onnx-float32", "onnx-int8"]
    assert record["dev_docs"] == {"words": 1, "ents": len(refs)}
    # float32 ONNX gives the same words and entities as torch, hence the same scores
    assert rows["onnx-float32"]["differing_docs"] == 0 and rows["torch-float32"]["differing_docs"] == 0
    assert rows["onnx-float32"]["ents_f"] == rows["torch-float32"]["ents_f"]
    assert rows["torch-float32"]["speed_ratio_median"] == 1.0 and len(rows["onnx-int8"]["seconds"]) == 2
    assert 0 < rows["torch-float32"]["crf_side_share"] < 1
    assert set(rows["torch-float32"]["ms_per_1k_chars"]) == {"tokenizer", "transformer", "crf_tagger"}
    # timed as `spacy crf speed` times: length-sorted within its default buffer
    assert record["sort_buffer"] == 8
    for bad in (["--backends", "onnx-int4"], ["--sort-buffer", "-1"]):
        monkeypatch.setattr(sys, "argv", argv[:6] + bad)
        with pytest.raises(SystemExit):
            script.main()


def test_the_int8_benchmark_compares_static_and_dynamic_quantization(float_dir, tmp_path, monkeypatch):
    from conftest import ROOT, load_script
    from spacy.tokens import DocBin

    script = load_script(ROOT / "scripts" / "bench_onnx_int8.py")
    nlp = spacy.load(float_dir)
    DocBin(docs=[nlp.make_doc(t) for t in TEXTS[:4] * 3]).to_disk(tmp_path / "train.spacy")
    DocBin(docs=[nlp.make_doc(t) for t in TEXTS]).to_disk(tmp_path / "dev.spacy")
    out = tmp_path / "int8.json"
    argv = [
        "bench",
        str(float_dir),
        "--calibration",
        str(tmp_path / "train.spacy"),
        "--dev",
        str(tmp_path / "dev.spacy"),
    ]
    argv += ["--batch-size", "2", "--repeats", "2", "--threads", "1", "--out", str(out)]
    threads = torch.get_num_threads()
    try:
        script.main(argv[1:])
    finally:
        torch.set_num_threads(threads)  # the script sets them for the process
    record = json.loads(out.read_text(encoding="utf8"))
    rows = {r["variant"]: r for r in record["rows"]}
    assert list(rows) == ["float32", *script.VARIANTS]
    assert rows["float32"]["mean_abs_error"] == 0 and rows["float32"]["speedup_best"] == 1.0
    # every int8 variant moves the hidden state, but not far (the encoder's
    # hidden states are layer-normed, of the order of 1); the fused float32 graph
    # computes the same up to rounding
    for name in script.VARIANTS:
        error = rows[name]["mean_abs_error"]
        if name == "float32-fused":
            assert 0 <= error < 1e-4, error
        else:
            assert 0 < error < 0.5, (name, error)
        assert len(rows[name]["passes_s"]) == 2
    assert [n for n, r in rows.items() if r["fused_attention"]] == ["float32-fused", "dynamic-fused"]
    assert [n for n, r in rows.items() if r["fused_attention"] is None] == ["openvino-int8", "openvino-int8-bfloat16"]
    # the embedding table stays float32 in dynamic-matmul, so its graph is larger
    assert rows["dynamic-matmul"]["graph_mb"] > rows["dynamic"]["graph_mb"]
    assert record["dev_pieces"] > 0 and record["dev_batches"] == 3 and "hardware" in record
    with pytest.raises(SystemExit):
        script.main(argv[1:6] + ["--variants", "static-int4"])
    with pytest.raises(SystemExit):
        script.main(argv[1:6] + ["--repeats", "0"])
    with pytest.raises(SystemExit):  # the output would overwrite an input
        script.main(argv[1:6] + ["--out", str(tmp_path / "dev.spacy")])
    assert (tmp_path / "dev.spacy").stat().st_size > 0


@pytest.mark.parametrize("backend", ["torch", "onnx"])
def test_the_roofline_splits_the_time_and_counts_the_encoders_work(float_dir, onnx_dir, tmp_path, backend):
    from conftest import ROOT, load_script
    from spacy.tokens import DocBin

    script = load_script(ROOT / "scripts" / "roofline.py")
    pipeline = float_dir if backend == "torch" else onnx_dir
    nlp = spacy.load(pipeline)
    DocBin(docs=[nlp.make_doc(t) for t in TEXTS * 3]).to_disk(tmp_path / "dev.spacy")
    out = tmp_path / "roofline.json"
    threads = torch.get_num_threads()
    try:
        script.main(
            [str(pipeline), str(tmp_path / "dev.spacy"), "--batch-size", "4", "--repeats", "2"]
            + ["--threads", "1", "--target", "1e9", "--out", str(out)]
        )
    finally:
        torch.set_num_threads(threads)
    record = json.loads(out.read_text(encoding="utf8"))
    config = script.encoder_of(nlp).config
    layers, hidden, inner = config.num_hidden_layers, config.hidden_size, config.intermediate_size
    flop = record["flop"]
    # every real piece passes through every dense layer once; padding only adds
    per_position = 2 * layers * (4 * hidden * hidden + 2 * hidden * inner)
    assert flop["dense"] == per_position * flop["positions"] >= flop["dense_real_positions"] > 0
    assert flop["dense_real_positions"] == per_position * flop["real_positions"]
    assert record["chars"] == 3 * sum(map(len, TEXTS)) and record["pieces_per_char"] > 0.5
    split = record["s_per_1k_chars"]
    assert list(split)[:3] == ["encoder forward", "rest of the transformer component", "tokenizer"]
    assert all(s >= 0 for s in split.values()) and split["encoder forward"] > 0
    for name in ("float32", "int8"):
        ceiling = record["ceilings"][name]
        assert ceiling["peak_op_per_s"] > 1e8
        assert ceiling["encoder_chars_per_s"] > ceiling["pipeline_chars_per_s"] > 0
    # a target no CPU reaches leaves the encoder nothing
    assert record["target"]["left_for_encoder_s_per_1k"] < 0 and record["target"]["dense_op_per_s_needed"] is None
    assert "hardware" in record
