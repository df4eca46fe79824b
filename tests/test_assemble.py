"""project/crf_project/assemble.py: segmenter + NER tagger (joint, or separately
trained) into one pipeline with crf_merge_words."""

import pytest
import spacy
from _configs import NER_DATA, PIPELINE_CFG, WORDS
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Config

from crf_project.assemble import assemble
from spacy_crf import _compat
from spacy_crf.doc_keys import NO_GOLD_WORDS
from spacy_crf.files import OutputPathError


def word_doc(vocab, words):
    return Doc(vocab, words=words, spaces=[False] * len(words))


def _train(nlp, examples, steps=15):
    from spacy_crf.training.optimizers import grouped_adam

    optimizer = nlp.initialize(lambda: examples, sgd=grouped_adam(1e-3, crf_lr_multiplier=100.0))
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer)
    return nlp


@pytest.fixture(scope="module")
def trained_dirs(tiny_bert_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("assemble")
    cfg = PIPELINE_CFG.replace("{name}", str(tiny_bert_dir))
    ner = spacy.util.load_model_from_config(Config().from_str(cfg), auto_fill=True, validate=True)
    ner_examples = [Example.from_dict(ner.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    _train(ner, ner_examples).to_disk(out / "ner")
    seg_cfg = Config().from_str(cfg.replace('scheme = "bioes"', 'scheme = "bmes"'))
    seg = spacy.util.load_model_from_config(seg_cfg, auto_fill=True, validate=True)
    seg_examples = [Example(seg.make_doc("".join(w)), word_doc(seg.vocab, w)) for w in WORDS]
    _train(seg, seg_examples).to_disk(out / "cws")
    return out


def test_assemble_one_pipeline(trained_dirs, tmp_path):
    nlp = assemble(trained_dirs / "cws", trained_dirs / "ner")
    assert nlp.meta["sources"][1]["path"] == str(trained_dirs / "ner")
    assert nlp.pipe_names == ["transformer", "segmenter", "crf_ner", "merge_words"]
    assert nlp.meta["name"] == "crf_pipeline" and "spacy-crf>=0.1.0,<0.2.0" in nlp.meta["requirements"]
    # the NER tagger owns its encoder copy: only the segmenter listens to the transformer
    assert nlp.get_pipe("transformer").listening_components == ["segmenter"]
    nlp.to_disk(tmp_path / "pipeline")
    _compat.restore_msgpack_hooks()
    loaded = spacy.load(tmp_path / "pipeline")
    # the shipped pipeline opts in to the process-wide speed-ups from its config
    assert loaded.config["nlp"]["after_pipeline_creation"] == {"@callbacks": "spacy_crf.speed_ups.v1"}
    assert _compat.msgpack_hooks_sped_up()
    texts = ["张三去上海", "我在北京工作", "今天天气好", ""]
    docs = list(loaded.pipe(texts, batch_size=2))
    with loaded.select_pipes(disable=["merge_words"]):
        unmerged = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in loaded.pipe(texts)]
    for text, doc, ents in zip(texts, docs, unmerged):
        assert doc.text == text
        assert [(e.start_char, e.end_char, e.label_) for e in doc.ents] == ents
        assert [t.text for t in doc] == [s.text for s in doc.spans["words"]]
    # the sourced NER tagger predicts what it predicted in its own pipeline
    ner = spacy.load(trained_dirs / "ner")
    assert unmerged == [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in ner.pipe(texts)]


def test_assemble_a_joint_model_keeps_one_encoder(tiny_bert_dir, trained_dirs, tmp_path):
    cfg = PIPELINE_CFG.replace("{name}", str(tiny_bert_dir)).replace(
        'pipeline = ["transformer", "crf_tagger"]', 'pipeline = ["transformer", "segmenter", "crf_tagger"]'
    )
    segmenter = (
        cfg[cfg.index("[components.crf_tagger]") :]
        .replace("crf_tagger]", "segmenter]")
        .replace("crf_tagger.model", "segmenter.model")
        .replace('scheme = "bioes"', 'scheme = "bmes"')
    )
    # trained as configs/joint.cfg scores it: OOV recall against a project file
    segmenter += (
        '\n[components.segmenter.scorer]\n@scorers = "spacy_crf.words_scorer.v2"\niv_words = "corpus/train.spacy"\n'
    )
    joint = spacy.util.load_model_from_config(Config().from_str(cfg + segmenter), auto_fill=True, validate=True)
    examples = [Example(joint.make_doc("".join(w)), word_doc(joint.vocab, w)) for w in WORDS]
    for text, ents in NER_DATA:
        eg = Example.from_dict(joint.make_doc(text), {"entities": ents})
        eg.reference.user_data[NO_GOLD_WORDS] = True
        examples.append(eg)
    _train(joint, examples).to_disk(tmp_path / "joint")

    nlp = assemble(tmp_path / "joint")
    assert nlp.pipe_names == ["transformer", "segmenter", "crf_ner", "merge_words"]
    # the shipped pipeline does not name the project's training words
    assert dict(nlp.config["components"]["segmenter"]["scorer"]) == {"@scorers": "spacy_crf.words_scorer.v1"}
    nlp.to_disk(tmp_path / "pipeline")
    assert "corpus/train.spacy" not in (tmp_path / "pipeline" / "config.cfg").read_text(encoding="utf8")
    assert sorted(nlp.get_pipe("transformer").listening_components) == ["crf_ner", "segmenter"]
    texts = ["张三去上海", "我在北京工作", ""]
    with nlp.select_pipes(disable=["merge_words"]):
        got = [([s.text for s in d.spans["words"]], [(e.text, e.label_) for e in d.ents]) for d in nlp.pipe(texts)]
    loaded = spacy.load(tmp_path / "joint")
    want = [([s.text for s in d.spans["words"]], [(e.text, e.label_) for e in d.ents]) for d in loaded.pipe(texts)]
    assert got == want
    with pytest.raises(ValueError, match="expected one crf_tagger with scheme bio or bioes"):
        assemble(trained_dirs / "cws")  # a segmentation model alone has no NER tagger


def _assemble_cli(args):
    import typer
    from typer.testing import CliRunner

    from crf_project.assemble import assemble_cli

    app = typer.Typer()
    app.command()(assemble_cli)
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result, " ".join(result.output.split())


def _tree(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_assemble_cli_never_writes_over_a_model_or_a_foreign_directory(trained_dirs, tmp_path):
    cws, ner = trained_dirs / "cws", trained_dirs / "ner"
    before = _tree(trained_dirs)
    for output in (cws, ner, trained_dirs, cws / ".." / "ner"):
        result, text = _assemble_cli([cws, output, "--ner", ner])
        assert result.exit_code == 1 and "would overwrite the input" in text, text
    assert _tree(trained_dirs) == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me", encoding="utf8")
    result, text = _assemble_cli([cws, mine, "--ner", ner])
    assert result.exit_code == 1 and "--force" in text
    assert _tree(mine) == ["notes.txt"]
    # an earlier pipeline is replaced without --force; a foreign directory with it
    result, text = _assemble_cli([cws, tmp_path / "pipeline", "--ner", ner])
    assert result.exit_code == 0, text
    result, text = _assemble_cli([cws, tmp_path / "pipeline", "--ner", ner, "--name", "second"])
    assert result.exit_code == 0, text
    assert spacy.load(tmp_path / "pipeline").meta["name"] == "second"
    result, text = _assemble_cli([cws, mine, "--ner", ner, "--force"])
    assert result.exit_code == 0 and "notes.txt" not in _tree(mine)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "pipeline"]


def test_an_interrupted_save_keeps_the_earlier_pipeline(trained_dirs, tmp_path, monkeypatch):
    from spacy.language import Language

    from crf_project.assemble import save_pipeline

    nlp = assemble(trained_dirs / "cws", trained_dirs / "ner")
    save_pipeline(nlp, tmp_path / "pipeline")
    before = _tree(tmp_path / "pipeline")
    real = Language.to_disk

    def to_disk(self, path, **kwargs):
        real(self, path, **kwargs)
        (path / "meta.json").write_text("{half", encoding="utf8")
        raise KeyboardInterrupt

    monkeypatch.setattr(Language, "to_disk", to_disk)
    with pytest.raises(KeyboardInterrupt):
        save_pipeline(nlp, tmp_path / "pipeline")
    assert _tree(tmp_path / "pipeline") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipeline"]
    assert spacy.load(tmp_path / "pipeline").pipe_names == nlp.pipe_names


@pytest.mark.parametrize("words", ["split", "keep_words", "respect_ents"])
def test_words_policy_is_saved_with_the_pipeline(trained_dirs, tmp_path, words):
    nlp = assemble(trained_dirs / "cws", trained_dirs / "ner", words=words)
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert loaded.meta["words_and_entities"] == words
    order = (
        ["transformer", "crf_ner", "segmenter", "merge_words"]
        if words == "respect_ents"
        else ["transformer", "segmenter", "crf_ner", "merge_words"]
    )
    assert loaded.pipe_names == order
    assert loaded.get_pipe("segmenter").cfg.get("respect_ents", False) == (words == "respect_ents")
    assert loaded.config["components"]["segmenter"]["respect_ents"] == (
        words == "respect_ents"
    )  # config.cfg says so too
    assert loaded.get_pipe("merge_words").entity_policy == ("keep_words" if words == "keep_words" else "split")
    texts = ["张三去上海", "我在北京工作", "北京大学在北京", ""]
    for text, doc in zip(texts, loaded.pipe(texts)):
        assert doc.text == text
        if words == "respect_ents":  # words never cross an entity: the merge has nothing to split
            bounds = {t.idx for t in doc} | {t.idx + len(t) for t in doc}
            assert all(e.start_char in bounds and e.end_char in bounds for e in doc.ents)
            assert [t.text for t in doc] == [s.text for s in doc.spans["words"]]
    with pytest.raises(ValueError, match="words must be one of"):
        assemble(trained_dirs / "cws", trained_dirs / "ner", words="merge")


def test_quantized_assembly(trained_dirs, tmp_path):
    from spacy_crf.encoders.quantize import is_quantized

    nlp = assemble(trained_dirs / "cws", trained_dirs / "ner", quantize="qint8")
    assert nlp.meta["quantized"] == "qint8"
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    encoders = [
        shim._model
        for _, pipe in loaded.components
        if hasattr(pipe, "model")
        for node in pipe.model.walk()
        for shim in node.shims
    ]
    assert encoders and all(is_quantized(m) for m in encoders)
    texts = ["张三去上海", "我在北京工作"]
    assert [[t.text for t in d] for d in loaded.pipe(texts)] == [[t.text for t in nlp(x)] for x in texts]
    with pytest.raises(
        ValueError,
        match="quantize must be one of none, qint8, float16, bfloat16, onnx, onnx-int8, openvino, openvino-int8",
    ):
        assemble(trained_dirs / "cws", trained_dirs / "ner", quantize="int4")
    bf16 = assemble(trained_dirs / "cws", trained_dirs / "ner", quantize="bfloat16")
    assert bf16.meta["quantized"] == "bfloat16"
    assert bf16.config["components"]["transformer"]["model"]["dtype"] == "bfloat16"


@pytest.mark.parametrize("quantize", ["onnx", "onnx-int8"])
def test_onnx_assembly_saves_the_graph_and_requires_the_onnx_extra(trained_dirs, tmp_path, quantize):
    from spacy_crf.encoders.onnx_backend import ONNX_ARCH, ONNX_TOK2VEC_ARCH, OnnxHFShim

    reference = assemble(trained_dirs / "cws", trained_dirs / "ner")
    nlp = assemble(trained_dirs / "cws", trained_dirs / "ner", quantize=quantize)
    assert nlp.meta["quantized"] == quantize
    assert nlp.meta["requirements"] == ["spacy-crf[onnx]>=0.1.0,<0.2.0"]
    assert reference.meta["requirements"] == ["spacy-crf>=0.1.0,<0.2.0"]
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    shims = [
        shim for _, pipe in loaded.components if hasattr(pipe, "model") for n in pipe.model.walk() for shim in n.shims
    ]
    # separate models: the NER encoder was copied into its tagger, and both are graphs
    assert len(shims) == 2 and all(isinstance(shim, OnnxHFShim) for shim in shims)
    archs = {block["@architectures"] for block in _blocks(loaded.config) if "@architectures" in block}
    assert {ONNX_ARCH, ONNX_TOK2VEC_ARCH} <= archs
    texts = ["张三去上海", "我在北京工作", "北京大学在北京", ""]
    got = [([t.text for t in d], [(e.start_char, e.end_char, e.label_) for e in d.ents]) for d in loaded.pipe(texts)]
    want = [
        ([t.text for t in d], [(e.start_char, e.end_char, e.label_) for e in d.ents]) for d in reference.pipe(texts)
    ]
    assert [d.text for d in loaded.pipe(texts)] == texts
    if quantize == "onnx":  # float32 predicts what torch does; int8 may move a tag of an untrained model
        assert got == want


def _blocks(cfg):
    if isinstance(cfg, dict):
        yield cfg
        for value in cfg.values():
            yield from _blocks(value)


def test_assembly_with_a_lexicon(trained_dirs, tmp_path):
    from crf_project.assemble import lexicon_weight_from

    words_file = tmp_path / "words.txt"
    words_file.write_text("今天天气\n工作日\n", encoding="utf-8")
    plain = assemble(trained_dirs / "cws", trained_dirs / "ner")
    assert plain.meta["lexicon"] is None and plain.get_pipe("segmenter").lexicon is None
    nlp = assemble(trained_dirs / "cws", trained_dirs / "ner", lexicon=words_file, lexicon_weight=50.0)
    assert nlp.meta["lexicon"] == {"file": "words.txt", "words": 2, "weight": 50.0}
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    seg = loaded.get_pipe("segmenter")
    assert seg.lexicon.words == {"今天天气", "工作日"} and seg.cfg["lexicon_weight"] == 50.0
    doc = loaded("今天天气好")
    assert doc.text == "今天天气好" and "今天天气" in [s.text for s in doc.spans["words"]]
    plain_doc = plain("今天天气好")
    assert "今天天气" not in [s.text for s in plain_doc.spans["words"]]  # the prior did it
    # weight 0 ships no lexicon
    assert (
        assemble(trained_dirs / "cws", trained_dirs / "ner", lexicon=words_file, lexicon_weight=0.0)
        .get_pipe("segmenter")
        .lexicon
        is None
    )
    # the CLI's weight: given, or the one lexicon_tune.py chose
    tuning = tmp_path / "lexicon.json"
    tuning.write_text('{"chosen": {"weight": 1.25, "words_f": 0.97}}', encoding="utf-8")
    assert lexicon_weight_from(words_file, None, tuning) == 1.25
    assert lexicon_weight_from(words_file, 2.0, None) == 2.0
    assert lexicon_weight_from(None, None, None) == 0.0
    for args, message in [
        ((words_file, None, None), "needs --lexicon-weight or --lexicon-tuning"),
        ((None, 1.0, None), "need --lexicon"),
        ((words_file, 1.0, tuning), "not both"),
        ((words_file, -1.0, None), "must be >= 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            lexicon_weight_from(*args)
    tuning.write_text('{"weights": []}', encoding="utf-8")
    with pytest.raises(ValueError, match="lexicon.json': no chosen weight"):
        lexicon_weight_from(words_file, None, tuning)


def run_bench_script(name: str, trained_dirs, tmp_path, monkeypatch, *options: str):
    """Run ``scripts/NAME`` on ``tmp_path/pipeline`` (the two trained heads
    assembled) and ``tmp_path/dev.spacy`` (three texts, 12 characters, one
    empty) with ``options``; the loaded script module."""
    from pathlib import Path

    from conftest import load_script
    from spacy.tokens import DocBin

    assemble(trained_dirs / "cws", trained_dirs / "ner").to_disk(tmp_path / "pipeline")
    texts = DocBin(docs=[spacy.blank("zh").make_doc(t) for t in ["张三去上海", "我在北京工作。", ""]])
    texts.to_disk(tmp_path / "dev.spacy")
    scripts = Path(__file__).resolve().parents[1] / "scripts"
    monkeypatch.syspath_prepend(str(scripts))
    script = load_script(scripts / name)
    monkeypatch.setattr("sys.argv", [name, str(tmp_path / "pipeline"), str(tmp_path / "dev.spacy"), *options])
    script.main()
    return script


def test_the_kernels_benchmark_compares_each_kernel_with_its_python_path(trained_dirs, tmp_path, capsys, monkeypatch):
    import json

    out = tmp_path / "k.json"
    script = run_bench_script(
        "bench_kernels.py", trained_dirs, tmp_path, monkeypatch, "--repeats", "2", "--out", str(out)
    )
    assert "| viterbi |" in capsys.readouterr().out
    record = json.loads(out.read_text(encoding="utf8"))
    assert record["chars"] == 12 and "viterbi" in record["per_1k_chars"]  # (this pipeline pools per head)
    assert all(v > 0 for ways in record["per_1k_chars"].values() for v in ways.values())
    # a kernel that gives another result than its Python path fails the run
    monkeypatch.setattr(script, "same", lambda a, b: False)
    with pytest.raises(SystemExit, match="different results"):
        script.main()


def test_the_crf_side_benchmark_times_each_step_after_the_encoder(trained_dirs, tmp_path, capsys, monkeypatch):
    import json

    options = ["--repeats", "2", "--output", str(tmp_path / "b.json")]
    script = run_bench_script("bench_crf_side.py", trained_dirs, tmp_path, monkeypatch, *options)
    out = capsys.readouterr().out
    assert "3 texts, 12 chars, 2 repeats" in out and "CRF side" in out
    record = json.loads((tmp_path / "b.json").read_text(encoding="utf8"))
    # the encoder ran once before timing: only the steps after it are timed
    assert list(record["per_1k_chars"]) == [
        "segmenter",
        "segmenter (no compiled kernels)",
        "segmenter (blis dense layers)",
        "segmenter (per-doc pooling)",
        "crf_ner",
        "crf_ner (own pooling)",
        "crf_ner (entities per token)",
        "crf_ner (no compiled kernels)",
        "crf_ner (blis dense layers)",
        "merge_words",
        "merge_words (per doc)",
    ]
    assert all(len(v) == 2 and all(x >= 0 for x in v) for v in record["per_1k_chars"].values())
    assert 0 < record["crf_side_share"] < 1 and record["encoder_per_1k_chars"] > 0
    assert list(record["inside_taggers"]) == ["dictionary match", "lexicon prior", "tag masks", "decoding"]
    assert record["inside_taggers"]["decoding"] > 0
    # the floor: the words and entities on the character docs, then the merged docs and theirs
    assert list(record["objects_alone_per_1k_chars"]) == ["in place", "new docs", "on the new docs"]
    assert all(value > 0 for value in record["objects_alone_per_1k_chars"].values())
    assert "the spaCy objects alone" in out
    # and the least work besides them, which with the objects bounds the CRF side from below
    least = record["least_work_per_1k_chars"]
    assert list(least) == ["texts", "dense products", "Viterbi"] and all(v > 0 for v in least.values())
    objects = record["objects_alone_per_1k_chars"]
    handed_on = objects["new docs"] + objects["on the new docs"]  # (the merge returns new docs)
    assert record["crf_side_at_least"] == pytest.approx(handed_on + sum(least.values()))
    assert "the least work besides them: texts" in out
    # the products through torch are printed beside the bound, not counted in it
    torch_products = record["dense_products_through_torch_per_1k_chars"]
    assert list(torch_products) == ["dense products, torch float32", "dense products, torch bfloat16"]
    assert all(v > 0 for v in torch_products.values()) and "dense products, torch bfloat16" in out
    # built alone, they must be the pipeline's output, or the floor is of something else
    with monkeypatch.context() as patch, pytest.raises(SystemExit, match="the spaCy objects built alone differ"):
        patch.setattr(script, "span_tables", lambda doc: [])  # (the words left out)
        script.main()
    # a merge whose batch path gave other docs than its per-doc calls stops the run
    from spacy_crf.pipeline.merge_words import MergeWords

    monkeypatch.setattr(MergeWords, "pipe", lambda self, docs, batch_size=128: iter(docs))
    with pytest.raises(SystemExit, match="merge_words: merge_words and merge_words .per doc. give different docs"):
        script.main()
    monkeypatch.undo()
    # the figures may not land on a data file: refused before the pipeline is loaded, the file intact
    before = (tmp_path / "dev.spacy").read_bytes()
    argv = [str(tmp_path / "pipeline"), str(tmp_path / "dev.spacy"), *options[:-1], str(tmp_path / "dev.spacy")]
    monkeypatch.setattr("sys.argv", ["bench_crf_side.py", *argv])
    with pytest.raises(OutputPathError):
        script.main()
    assert (tmp_path / "dev.spacy").read_bytes() == before


_FLOAT32 = {
    "components": {
        "transformer": {"model": {"precision": "float32"}},
        "crf_ner": {"model": {"tok2vec": {"precision": "float32"}}},
    }
}


@pytest.mark.parametrize("quantize", ["openvino", "openvino-int8"])
def test_openvino_assembly_saves_the_model_and_requires_the_openvino_extra(trained_dirs, tmp_path, quantize):
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    from spacy.tokens import DocBin

    from spacy_crf.encoders.openvino_backend import OPENVINO_ARCH, OPENVINO_TOK2VEC_ARCH, OpenVINOHFShim

    texts = ["张三去上海", "我在北京工作", "北京大学在北京", ""]
    blank = spacy.blank("zh")
    calibration = tmp_path / "train.spacy"
    DocBin(docs=[blank(t) for t in ["王五在南京读书", "上海的天气很好", "他们去了广州"]]).to_disk(calibration)
    # the calibration is unused by plain openvino (a project switches --quantize alone)
    nlp = assemble(
        trained_dirs / "cws", trained_dirs / "ner", quantize=quantize, calibration=[calibration], precision="bfloat16"
    )
    assert nlp.meta["quantized"] == quantize
    assert nlp.meta["requirements"] == ["spacy-crf[openvino]>=0.1.0,<0.2.0"]
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    shims = [
        shim for _, pipe in loaded.components if hasattr(pipe, "model") for n in pipe.model.walk() for shim in n.shims
    ]
    assert len(shims) == 2 and all(isinstance(shim, OpenVINOHFShim) for shim in shims)
    assert {shim.quantize for shim in shims} == {"int8" if quantize == "openvino-int8" else "none"}
    assert {shim.precision for shim in shims} == {"bfloat16"}
    archs = {block["@architectures"] for block in _blocks(loaded.config) if "@architectures" in block}
    assert {OPENVINO_ARCH, OPENVINO_TOK2VEC_ARCH} <= archs
    assert [d.text for d in loaded.pipe(texts)] == texts
    if quantize == "openvino":  # float32 predicts what torch does
        reference = assemble(trained_dirs / "cws", trained_dirs / "ner")
        loaded = spacy.load(tmp_path / "pipeline", config=_FLOAT32)
        got = [([t.text for t in d], [(e.start_char, e.label_) for e in d.ents]) for d in loaded.pipe(texts)]
        assert got == [([t.text for t in d], [(e.start_char, e.label_) for e in d.ents]) for d in reference.pipe(texts)]


def test_openvino_int8_calibration_errors(trained_dirs, tmp_path):
    with pytest.raises(ValueError, match="openvino-int8 needs --calibration"):
        assemble(trained_dirs / "cws", trained_dirs / "ner", quantize="openvino-int8")
    with pytest.raises(ValueError, match="Unknown OpenVINO precision 'fp16'"):
        assemble(trained_dirs / "cws", trained_dirs / "ner", quantize="onnx", precision="fp16")
    with pytest.raises(ValueError, match="--calibration-docs must be at least 1, got 0"):
        assemble(
            trained_dirs / "cws",
            trained_dirs / "ner",
            quantize="openvino-int8",
            calibration=[tmp_path],
            calibration_docs=0,
        )
    bad = tmp_path / "train.spacy"
    bad.write_text("not a DocBin", encoding="utf8")
    with pytest.raises(ValueError, match=r"--calibration '.*train.spacy': not a .spacy file"):
        assemble(trained_dirs / "cws", trained_dirs / "ner", quantize="openvino-int8", calibration=[bad])


def test_the_n_process_benchmark_compares_one_and_two_processes_on_equal_outputs(
    trained_dirs, tmp_path, capsys, monkeypatch
):
    import json

    from spacy_crf import _compat

    out = tmp_path / "n.json"
    script = run_bench_script(
        "bench_n_process.py", trained_dirs, tmp_path, monkeypatch, "--repeats", "1", "--out", str(out)
    )
    assert "3 texts, 12 characters" in capsys.readouterr().out
    record = json.loads(out.read_text(encoding="utf8"))
    assert list(record["variants"]) == list(script.VARIANTS) and record["outputs_equal"] is True
    assert all(len(v["chars_per_s"]) == 1 and v["median_chars_per_s"] > 0 for v in record["variants"].values())
    assert set(record["bytes_ms_per_doc"]) == {"catalogue lookup", "fast lookup"}
    assert isinstance(__import__("srsly").msgpack.msgpack_decoders.get_all, _compat._HookLookup)  # left as loaded


def test_a_pipeline_with_tagger_features_records_its_tagger_and_needs_onnx(tiny_tagger_dir):
    from _configs import crf_model_config

    from crf_project.assemble import _extras, _tagger_meta
    from spacy_crf.ml.tagger_folder import read_char_tagger

    nlp = spacy.blank("zh")
    features = {"@layers": "spacy_crf.TaggerFeatures.v1", "width": 4, "outputs": ["marginals"]}
    nlp.add_pipe("crf_ner", config={"model": crf_model_config(tagger_features=features)})
    examples = [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    tagger = read_char_tagger(tiny_tagger_dir)
    nlp.get_pipe("crf_ner").initialize(lambda: examples, nlp=nlp, tagger_features=tagger)
    meta = _tagger_meta(nlp)
    assert meta["name"] == "tiny" and meta["licence"] == "MIT" and meta["sha256"] == tagger.sha256
    assert meta["tags"] == len(tagger.tags) and meta["bytes"] == len(tagger.model)
    assert _tagger_meta(spacy.blank("zh")) is None
    assert _extras("openvino-int8", True) == "[onnx,openvino]" and _extras("none", True) == "[onnx]"
    assert _extras("onnx", True) == "[onnx]" and _extras("none", False) == ""
