import numpy
import pytest
from spacy.util import registry
from thinc.api import Config, chain

from spacy_crf.ml.tagger_model import CRF, Emissions
from spacy_crf.training.optimizers import (
    GroupedOptimizer,
    ParamGroupError,
    build_param_groups,
    grouped_adam,
    grouped_sgd,
)


def _model(nO=4, nI=3):
    model = chain(Emissions(nO=nO, nI=nI), CRF(nO=nO))
    model.initialize()
    return model


def _set_grads(model, value=0.5):
    for node in model.walk():
        for name in node.param_names:
            node.inc_grad(name, numpy.full(node.get_param(name).shape, value, dtype="f"))


def _params(model):
    return {(node.name, name): node.get_param(name).copy() for node in model.walk() for name in node.param_names}


def _one_step(optimizer, value=0.5):
    model = _model()
    before = _params(model)
    _set_grads(model, value)
    model.finish_update(optimizer)
    after = _params(model)
    return {k: after[k] - before[k] for k in before}


def test_sgd_crf_update_is_exactly_multiplier_times():
    base = _one_step(grouped_sgd(0.1, crf_lr_multiplier=1.0, grad_clip=0.0, use_averages=False))
    scaled = _one_step(grouped_sgd(0.1, crf_lr_multiplier=100.0, grad_clip=0.0, use_averages=False))
    for key in base:
        expected = base[key] * (100.0 if key[1].startswith("crf_") and "emission" not in key[1] else 1.0)
        numpy.testing.assert_allclose(scaled[key], expected, rtol=1e-5)
        assert numpy.abs(base[key]).min() > 0  # every parameter moved


def test_adam_first_step_ratio_is_about_the_multiplier():
    base = _one_step(grouped_adam(1e-4, crf_lr_multiplier=1.0, use_averages=False))
    scaled = _one_step(grouped_adam(1e-4, crf_lr_multiplier=1000.0, use_averages=False))
    ratio = numpy.abs(scaled[("crf", "crf_transitions")]).mean() / numpy.abs(base[("crf", "crf_transitions")]).mean()
    assert 900 < ratio < 1100
    # non-CRF parameters are untouched by the multiplier
    numpy.testing.assert_allclose(
        scaled[("crf_emissions", "crf_emission_W")], base[("crf_emissions", "crf_emission_W")], rtol=1e-3
    )


def test_emissions_join_the_group_on_request():
    base = _one_step(grouped_sgd(0.1, grad_clip=0.0, use_averages=False))
    scaled = _one_step(
        grouped_sgd(0.1, crf_lr_multiplier=10.0, crf_includes_emissions=True, grad_clip=0.0, use_averages=False)
    )
    numpy.testing.assert_allclose(
        scaled[("crf_emissions", "crf_emission_W")], 10 * base[("crf_emissions", "crf_emission_W")], rtol=1e-5
    )


def test_weight_decay_is_not_multiplied_by_default():
    def decayed(scale_weight_decay):
        opt = grouped_sgd(
            0.1,
            crf_lr_multiplier=100.0,
            L2=0.01,
            grad_clip=0.0,
            use_averages=False,
            scale_weight_decay=scale_weight_decay,
        )
        w = numpy.ones(3, dtype="f")
        new, _ = opt((1, "crf_transitions"), w.copy(), numpy.zeros(3, dtype="f"))
        return 1 - new[0]

    assert decayed(False) == pytest.approx(0.1 * 0.01, rel=1e-4)
    assert decayed(True) == pytest.approx(100 * 0.1 * 0.01, rel=1e-4)


def test_custom_groups_and_layer_decay():
    opt = grouped_adam(
        1e-3,
        crf_lr_multiplier=100,
        num_layers=4,
        layer_lr_decay=0.5,
        param_groups={"head": {"patterns": ["pooler.*"], "lr_multiplier": 3.0}},
    )
    assert opt.group_of("crf_transitions") == ("crf", 100.0)
    assert opt.group_of("pooler.dense.weight") == ("head", 3.0)
    assert opt.group_of("encoder.layer.3.output.dense.weight") == (None, 1.0)
    assert opt.group_of("encoder.layer.1.output.dense.weight") == (None, 0.25)
    assert opt.group_of("embeddings.word_embeddings.weight") == (None, 0.5**4)
    assert opt.group_of("W") == (None, 1.0)


def test_bad_groups_are_reported():
    with pytest.raises(ParamGroupError, match="must have `patterns`"):
        build_param_groups({"x": {"lr_multiplier": 2}})
    with pytest.raises(ParamGroupError, match="list of glob"):
        build_param_groups({"x": {"patterns": "crf_*"}})
    with pytest.raises(ParamGroupError, match="num_layers"):
        grouped_adam(1e-3, layer_lr_decay=0.9)


CFG = """
[training]
[training.optimizer]
@optimizers = "spacy_crf.GroupedAdam.v1"
crf_lr_multiplier = 250.0
L2 = 0.01
grad_clip = 1.0
use_averages = true

[training.optimizer.learn_rate]
@schedules = "warmup_linear.v1"
warmup_steps = 2
total_steps = 10
initial_rate = 0.001

[training.optimizer.param_groups]

[training.optimizer.param_groups.top]
patterns = ["encoder.layer.11.*"]
lr_multiplier = 2.0
"""


def test_config_round_trip_and_schedules():
    config = Config().from_str(CFG)
    config = Config().from_str(config.to_str())
    opt = registry.resolve(config)["training"]["optimizer"]
    assert isinstance(opt, GroupedOptimizer)
    assert opt.group_of("crf_transitions") == ("crf", 250.0)
    assert opt.group_of("encoder.layer.11.x") == ("top", 2.0)
    assert opt.averages is not None and opt.L2 == 0.01
    rates = []
    for _ in range(4):
        rates.append(opt.learn_rate)
        opt.step_schedules()
    assert rates[0] < rates[1] < rates[2]  # warm-up still drives the base rate
    w = numpy.ones(2, dtype="f")
    opt((7, "crf_transitions"), w, numpy.ones(2, dtype="f"))
    assert (7, "crf_transitions") in opt.averages


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_settings_are_rejected_at_construction(bad):
    with pytest.raises(ParamGroupError, match="learn_rate must be finite"):
        grouped_adam(bad)
    with pytest.raises(ParamGroupError, match="learn_rate must be finite"):
        grouped_sgd(bad)
    with pytest.raises(ParamGroupError, match="lr_multiplier must be finite"):
        grouped_adam(1e-3, crf_lr_multiplier=bad)
    with pytest.raises(ParamGroupError, match="lr_multiplier must be finite"):
        grouped_adam(1e-3, param_groups={"pooler": {"patterns": ["pooler.*"], "lr_multiplier": bad}})
    with pytest.raises(ParamGroupError, match="layer_lr_decay"):
        grouped_adam(1e-3, layer_lr_decay=bad, num_layers=2)
    with pytest.raises(ParamGroupError, match="L2 must be finite"):
        grouped_adam(1e-3, L2=bad)


def test_non_finite_schedule_value_is_rejected_before_it_reaches_the_weights():
    optimizer = grouped_adam(iter([1e-3, 1e-3, float("nan")]))
    model = _model()
    _set_grads(model)
    model.finish_update(optimizer)
    optimizer.step_schedules()  # 1e-3: fine
    before = _params(model)
    with pytest.raises(ParamGroupError, match=r"learn_rate must be finite, got nan \(a value of its schedule\)"):
        optimizer.step_schedules()
    assert all(numpy.isfinite(v).all() for v in _params(model).values())
    assert all((before[k] == v).all() for k, v in _params(model).items())


def test_non_finite_learn_rate_in_a_config_is_a_config_error():
    config = Config().from_str(
        """
        [optimizer]
        @optimizers = "spacy_crf.GroupedAdam.v1"
        learn_rate = 1e-3
        crf_lr_multiplier = Infinity
        """
    )
    with pytest.raises(ParamGroupError, match="crf.*lr_multiplier must be finite"):
        registry.resolve(config)


@pytest.mark.parametrize("make", [grouped_adam, grouped_sgd])
def test_a_negative_learn_rate_is_refused_like_nan(make):
    with pytest.raises(ParamGroupError, match=r"learn_rate must be >= 0, got -0.001"):
        make(-0.001)
    with pytest.raises(ParamGroupError, match=r"L2 must be >= 0, got -0.01"):
        make(1e-3, L2=-0.01)
    with pytest.raises(ParamGroupError, match=r"grad_clip must be >= 0, got -1"):
        make(1e-3, grad_clip=-1.0)
    with pytest.raises(ParamGroupError, match=r"crf.*lr_multiplier must be > 0, got -100"):
        make(1e-3, crf_lr_multiplier=-100.0)
    with pytest.raises(ParamGroupError, match=r"span.*lr_multiplier must be > 0, got -2"):
        make(1e-3, param_groups={"span": {"patterns": ["span_*"], "lr_multiplier": -2.0}})
    assert make(0.0).learn_rate == 0.0  # a warm-up may start at 0


def test_betas_must_be_below_one():
    with pytest.raises(ParamGroupError, match=r"b1 must be >= 0 and < 1, got 1"):
        grouped_adam(1e-3, beta1=1.0)
    with pytest.raises(ParamGroupError, match=r"b2 must be >= 0 and < 1, got -0.5"):
        grouped_adam(1e-3, beta2=-0.5)


def test_a_negative_schedule_value_is_refused_when_it_is_read():
    optimizer = grouped_adam(iter([1e-3, -1e-3]))
    model = _model()
    _set_grads(model)
    model.finish_update(optimizer)
    before = _params(model)
    with pytest.raises(ParamGroupError, match=r"learn_rate must be >= 0, got -0.001 \(a value of its schedule\)"):
        optimizer.step_schedules()
    assert all((before[k] == v).all() for k, v in _params(model).items())
    with pytest.raises(ParamGroupError, match=r"learn_rate must be >= 0, got -0.001 \(a value of its schedule\)"):
        grouped_sgd(iter([-1e-3]))


def test_a_negative_learn_rate_in_a_config_is_a_config_error():
    config = Config().from_str("""
        [optimizer]
        @optimizers = "spacy_crf.GroupedAdam.v1"
        learn_rate = -0.001
        """)
    with pytest.raises(ParamGroupError, match="learn_rate must be >= 0"):
        registry.resolve(config)
