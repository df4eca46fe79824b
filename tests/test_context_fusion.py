"""The context fusion layer (spacy_crf.ContextFusion.v1, CRFTagger.v1's fusion):
its shapes and gradient, docs kept apart, the switch in the architecture and
its errors, its learning-rate group, training and saving, and configs/joint.cfg
with the layer on both heads (lazy rows and CPU autocast as the recipe has them)."""

from pathlib import Path

import numpy
import pytest
import spacy
from _configs import NER_DATA, SMALL_TOK2VEC, crf_model_config, joint_recipe_overrides, write_ner_training_files
from conftest import load_script
from spacy.training import Example
from thinc.api import Linear, NumpyOps

from spacy_crf.ml.context_fusion import CONV_W, IN_W, REF, ContextFusion
from spacy_crf.ml.tagger_model import build_crf_tagger
from spacy_crf.training.optimizers import grouped_adam

ROOT = Path(__file__).resolve().parent.parent
FUSION = {"@layers": "spacy_crf.ContextFusion.v1", "width": 8, "depth": 2, "window": 1}


def _features(lengths, width=5, seed=0):
    rng = numpy.random.default_rng(seed)
    return [rng.normal(size=(n, width)).astype("f") for n in lengths]


def _layer(Xs, seed=0, **settings):
    layer = ContextFusion(**{"width": 6, "depth": 2, "window": 1, "maxout_pieces": 2, **settings})
    layer.initialize(X=Xs)
    rng = numpy.random.default_rng(seed)  # away from the initial zeros and ones, so every term counts
    for name in layer.param_names:
        value = layer.get_param(name)
        layer.set_param(name, value + rng.normal(size=value.shape).astype("f") * 0.3)
    return layer


def test_the_output_is_the_features_and_their_mix_per_doc():
    Xs = _features([4, 0, 7, 1])
    layer = _layer(Xs, width=6)
    Ys = layer.predict(Xs)
    assert [Y.shape for Y in Ys] == [(4, 11), (0, 11), (7, 11), (1, 11)]
    for X, Y in zip(Xs, Ys):
        numpy.testing.assert_array_equal(Y[:, :5], X)
    assert layer.get_dim("nO") == 11
    assert [Y.shape for Y in layer.predict([])] == []
    assert [Y.shape for Y in layer.predict(_features([0, 0]))] == [(0, 11), (0, 11)]


def test_a_doc_mixes_with_its_own_neighbours_only():
    Xs = _features([5, 1, 3, 6])
    layer = _layer(Xs, window=2)
    together = layer.predict(Xs)
    for X, Y in zip(Xs, together):
        numpy.testing.assert_allclose(layer.predict([X])[0], Y, atol=1e-5)
    # and it does mix: changing one token moves its neighbours' rows, not those two blocks away
    changed = [x.copy() for x in Xs]
    changed[3][0] += 1.0
    moved = numpy.abs(layer.predict(changed)[3] - together[3]).max(axis=1)
    assert moved[1] > 1e-3 and moved[2] > 1e-3  # depth 2, window 2: up to 4 away
    assert numpy.all(moved[5:] == 0)


def _loss(layer, Xs, R):
    return float(sum((Y.astype("float64") * r).sum() for Y, r in zip(layer.predict(Xs), R)))


@pytest.mark.parametrize("settings", [{}, {"window": 2, "maxout_pieces": 3, "depth": 1}])
def test_the_gradient_matches_finite_differences(settings):
    # in float64 (the layer's maths take either), where a step small enough
    # for the maxouts' kinks and the norms' curvature is still exact
    Xs = [X.astype("float64") for X in _features([4, 0, 3, 1])]
    layer = _layer(Xs, **settings)
    for name in layer.param_names:
        layer.set_param(name, layer.get_param(name).astype("float64"))
    R = [numpy.random.default_rng(1).normal(size=(len(X), 11)) for X in Xs]
    _, backprop = layer.begin_update(Xs)
    dXs = backprop(R)
    eps, rng = 1e-5, numpy.random.default_rng(2)

    def numeric(array, j):  # the loss's derivative in array.flat[j] (the array is the layer's own)
        value = array.flat[j]
        array.flat[j] = value + eps
        up = _loss(layer, Xs, R)
        array.flat[j] = value - eps
        down = _loss(layer, Xs, R)
        array.flat[j] = value
        return (up - down) / (2 * eps)

    for i, X in enumerate(Xs):
        for j in range(X.size):
            assert dXs[i].flat[j] == pytest.approx(numeric(X, j), abs=1e-4, rel=1e-3), (i, j)
    for name in layer.param_names:
        param, grad = layer.get_param(name), layer.get_grad(name)
        for j in rng.choice(param.size, size=min(param.size, 25), replace=False):
            assert grad.flat[j] == pytest.approx(numeric(param, j), abs=1e-4, rel=1e-3), (name, j)


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"width": 0}, "width must be a whole number >= 1, got 0"),
        ({"depth": 1.5}, "crf_ner.model.fusion -> depth.*1.5 is not"),  # spaCy's check of the signature
        ({"window": 0}, "window must be a whole number >= 1, got 0"),
        ({"window": True}, "fusion -> window.*True is not"),
        ({"maxout_pieces": 0}, "maxout_pieces must be a whole number >= 1, got 0"),
        ({"kind": "bilstm"}, "kind must be one of 'conv', got 'bilstm'"),
    ],
)
def test_bad_settings_are_one_line_errors_from_the_config(settings, message):
    nlp = spacy.blank("zh")
    config = {"model": crf_model_config(fusion={**FUSION, **settings})}
    with pytest.raises(ValueError, match=r"(?s)spacy_crf\.ContextFusion\.v1.*" + message):
        nlp.add_pipe("crf_ner", config=config)


def test_settings_are_checked_for_python_callers_too():
    with pytest.raises(ValueError, match="window must be a whole number >= 1, got True"):
        ContextFusion(window=True)
    with pytest.raises(ValueError, match="width must be a whole number >= 1, got '8'"):
        ContextFusion(width="8")


def test_a_layer_of_another_kind_is_refused():
    tok2vec = spacy.registry.resolve({"t": SMALL_TOK2VEC})["t"]
    with pytest.raises(ValueError, match="fusion is a 'linear' layer, not ContextFusion"):
        build_crf_tagger(tok2vec, fusion=Linear(4))


def test_the_config_without_the_setting_builds_the_model_of_before():
    def names(model):
        return [node.name for node in model.walk()]

    nlp = spacy.blank("zh")
    before = nlp.add_pipe("crf_ner", name="before", config={"model": crf_model_config()}).model
    off = nlp.add_pipe("crf_ner", name="off", config={"model": crf_model_config(fusion=None)}).model
    on = nlp.add_pipe("crf_ner", name="on", config={"model": crf_model_config(fusion=FUSION)}).model
    assert nlp.config["components"]["before"]["model"]["fusion"] is None  # the default fills in
    assert names(off) == names(before) and REF not in names(before) and not before.has_ref(REF)
    first, *rest = [layer.name for layer in before.layers]
    assert on.has_ref(REF) and [layer.name for layer in on.layers] == [first, REF, *rest]
    examples = [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    nlp.initialize(lambda: examples)
    width = SMALL_TOK2VEC["width"]
    assert on.get_ref("emissions").get_dim("nI") == width + FUSION["width"]
    assert before.get_ref("emissions").get_dim("nI") == width


def test_the_layer_learns_at_the_emissions_rate():
    for name in (IN_W, CONV_W, "fusion_norm_G"):
        together = grouped_adam(1e-3, crf_lr_multiplier=100, crf_includes_emissions=True)
        assert together.group_of(name) == together.group_of("crf_emission_W") == ("crf", 100.0)
        apart = grouped_adam(1e-3, crf_lr_multiplier=100)  # configs/joint.cfg: the base rate, the encoder's
        assert apart.group_of(name) == apart.group_of("crf_emission_W") == (None, 1.0)


def test_a_head_trains_with_the_layer_and_saves_it(tmp_path):
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_ner", config={"model": crf_model_config(fusion=FUSION)})
    examples = [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    optimizer = nlp.initialize(lambda: examples, sgd=grouped_adam(1e-2, crf_lr_multiplier=10))
    layer = nlp.get_pipe("crf_ner").model.get_ref(REF)
    before = {name: layer.get_param(name).copy() for name in layer.param_names}
    losses = [nlp.update(examples, sgd=optimizer, losses={})["crf_ner"] for _ in range(12)]
    assert losses[-1] < 0.5 * losses[0], losses
    for name in layer.param_names:
        assert not numpy.allclose(before[name], layer.get_param(name)), name
    texts = [t for t, _ in NER_DATA] + ["", "张三在北京", "A"]
    docs = [nlp.make_doc(t) for t in texts]
    expected = nlp.get_pipe("crf_ner").model.predict(docs)
    ents = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in nlp.pipe(texts)]
    nlp.to_disk(tmp_path / "nlp")
    for loaded in (spacy.load(tmp_path / "nlp"), spacy.blank("zh").from_config(nlp.config).from_bytes(nlp.to_bytes())):
        model = loaded.get_pipe("crf_ner").model
        assert model.get_ref(REF).get_dim("nI") == SMALL_TOK2VEC["width"]
        for a, b in zip(model.predict([loaded.make_doc(t) for t in texts]), expected):
            numpy.testing.assert_array_equal(a, b)
        assert [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in loaded.pipe(texts)] == ents


def test_the_joint_recipe_trains_with_the_layer_on_both_heads(tiny_bert_dir, tiny_tagger_dir, tmp_path):
    """configs/joint.cfg as it is (lexicon and tagger features, lazy rows,
    autocast) with the layer given by overrides, as the ablation runs it."""
    from spacy.cli.train import train

    (tmp_path / "dict.txt").write_text("张三 50 nr\n上海 900 ns\n北京 800 ns\n工作 500 vn\n", encoding="utf8")
    overrides = {
        **joint_recipe_overrides(tmp_path, tiny_bert_dir, tmp_path / "dict.txt", tiny_tagger_dir),
        "components.segmenter.model.fusion": FUSION,
        "components.crf_ner.model.fusion": FUSION,
    }
    train(ROOT / "configs" / "joint.cfg", tmp_path / "out", overrides=overrides)
    trained = spacy.load(tmp_path / "out" / "model-last")
    assert trained.config["training"]["optimizer"]["lazy_rows"] == ["embeddings.word_embeddings.weight"]
    assert trained.config["initialize"]["before_init"]["@callbacks"] == "spacy_crf.cpu_autocast.v1"
    init = NumpyOps().xp  # the layer's initial values: glorot W, zero b, unit gain
    for name in ("segmenter", "crf_ner"):
        layer = trained.get_pipe(name).model.get_ref(REF)
        assert trained.config["components"][name]["model"]["fusion"]["width"] == 8
        assert layer.get_dim("nI") == 32 + 32 + 32  # tiny BERT | lexicon | tagger features
        assert not init.allclose(layer.get_param("fusion_norm_G"), 1.0)  # trained
        assert all(init.isfinite(layer.get_param(p)).all() for p in layer.param_names)
    doc = trained("张三去上海工作")
    assert doc.text == "张三去上海工作"


def test_the_cost_benchmark_times_the_layer_beside_the_model_without_it(tiny_bert_dir, tmp_path, monkeypatch, capsys):
    import json
    import sys

    config, corpus = write_ner_training_files(tiny_bert_dir, tmp_path)
    bench = load_script(ROOT / "scripts" / "bench_fusion.py")
    assert bench.fusion_overrides(config, "8x2", 1) == {
        "components.crf_tagger.model.fusion": {**FUSION, "width": 8, "depth": 2}
    }
    with pytest.raises(SystemExit, match="WIDTHxDEPTH"):
        bench.fusion_overrides(config, "wide", 1)
    args = ["--texts", str(corpus), "--variants", "off,8x1", "--steps", "1", "--warmup", "0", "--repeats", "1"]
    args += ["--output", str(tmp_path / "bench.json"), "--paths.train", str(corpus), "--paths.dev", str(corpus)]
    monkeypatch.setattr(sys, "argv", ["bench_fusion.py", str(config), *args])
    bench.main()
    variants = json.loads((tmp_path / "bench.json").read_text())["variants"]
    assert list(variants) == ["off", "8x1"]
    assert variants["off"]["fusion_share_of_step"] == variants["off"]["fusion_share_of_predict"] == 0
    assert 0 < variants["8x1"]["fusion_share_of_step"] < 1 and 0 < variants["8x1"]["fusion_share_of_predict"] < 1
    assert variants["off"]["step_ratio"] == variants["off"]["predict_ratio"] == 1
    assert "8x1" in capsys.readouterr().out
