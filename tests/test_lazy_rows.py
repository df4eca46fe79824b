"""GroupedAdam's ``lazy_rows``: Adam on the rows of an embedding table that have a gradient.

The rows of the batch must get exactly thinc's dense update; the other rows keep
their moments and only decay; a whole training step through spaCy must reach the
encoder's word-embedding table under its Hugging Face name.
"""

import numpy
import pytest
import spacy
from _configs import NER_DATA, PIPELINE_CFG
from spacy.training import Example
from spacy.util import registry
from thinc.api import Config

from spacy_crf.training.optimizers import GroupedOptimizer, ParamGroupError, grouped_adam

KEY = (7, "embeddings.word_embeddings.weight")
SETTINGS = dict(L2=0.01, grad_clip=0.5, use_averages=True)


def _run(optimizer, weights, gradients):
    """Apply each gradient in turn; returns the final weights."""
    weights = weights.copy()
    for gradient in gradients:
        weights, returned = optimizer(KEY, weights, gradient.copy())
        assert not returned.any(), "the gradient must be zeroed after the update"
    return weights


def _table(rng, n_rows=6, width=4):
    return rng.standard_normal((n_rows, width)).astype("f")


def test_every_row_with_a_gradient_gets_thincs_dense_update():
    rng = numpy.random.default_rng(0)
    weights = _table(rng)
    gradients = [_table(rng) for _ in range(3)]
    dense = grouped_adam(0.05, **SETTINGS)
    lazy = grouped_adam(0.05, lazy_rows=["embeddings.word_embeddings.*"], **SETTINGS)
    expected = _run(dense, weights, gradients)
    got = _run(lazy, weights, gradients)
    numpy.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)
    numpy.testing.assert_allclose(lazy.mom1[KEY], dense.mom1[KEY], rtol=1e-6)
    numpy.testing.assert_allclose(lazy.mom2[KEY], dense.mom2[KEY], rtol=1e-6)
    numpy.testing.assert_allclose(lazy.averages[KEY], dense.averages[KEY], rtol=1e-5, atol=1e-7)


def test_rows_without_a_gradient_keep_their_moments_and_only_decay():
    rng = numpy.random.default_rng(1)
    weights = _table(rng)
    first, second = numpy.zeros_like(weights), numpy.zeros_like(weights)
    first[[0, 1]] = _table(rng, 2)
    second[1] = _table(rng, 1)[0]
    lr, L2 = 0.05, 0.01
    dense = grouped_adam(lr, **SETTINGS)
    lazy = grouped_adam(lr, lazy_rows=["embeddings.word_embeddings.weight"], **SETTINGS)
    after_first = _run(lazy, weights, [first])
    mom1_after_first = lazy.mom1[KEY].reshape(weights.shape).copy()
    got = _run(lazy, after_first, [second])
    expected = _run(dense, weights, [first, second])
    # Row 1 has a gradient at both steps, rows 2-5 at none: thinc's update exactly
    # (zero moments do not move a row).
    numpy.testing.assert_allclose(got[1:], expected[1:], rtol=1e-5, atol=1e-7)
    # Row 0 has a gradient only at the first step: dense Adam keeps moving it by
    # its momentum, the lazy update only decays it.
    numpy.testing.assert_allclose(got[0], after_first[0] * (1 - lr * L2), rtol=1e-6)
    assert not numpy.allclose(got[0], expected[0], rtol=1e-4)
    numpy.testing.assert_array_equal(lazy.mom1[KEY].reshape(weights.shape)[0], mom1_after_first[0])


def test_clipping_uses_the_norm_of_the_whole_gradient():
    rng = numpy.random.default_rng(2)
    weights = _table(rng, n_rows=50)
    gradient = numpy.zeros_like(weights)
    gradient[[3, 17]] = 10 * _table(rng, 2)
    dense = grouped_adam(0.05, L2=0.0, grad_clip=1.0, use_averages=False)
    lazy = grouped_adam(0.05, L2=0.0, grad_clip=1.0, use_averages=False, lazy_rows=["*word_embeddings*"])
    _run(dense, weights, [gradient, gradient])
    _run(lazy, weights, [gradient, gradient])
    numpy.testing.assert_allclose(lazy.mom2[KEY], dense.mom2[KEY], rtol=1e-6)
    assert dense.mom2[KEY].max() < 1.0  # the clip did act


def test_other_parameters_take_the_dense_path():
    lazy = grouped_adam(0.05, lazy_rows=["embeddings.word_embeddings.weight"])
    table = numpy.zeros((3, 2), dtype="f")
    assert lazy.is_lazy("embeddings.word_embeddings.weight", table)
    assert not lazy.is_lazy("encoder.layer.0.output.dense.weight", table)
    assert not lazy.is_lazy("embeddings.word_embeddings.weight", numpy.zeros(3, dtype="f"))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(lazy_rows="embeddings.word_embeddings.weight"), "list of glob patterns"),
        (dict(lazy_rows=["x"], L2=0.01, L2_is_weight_decay=False), "L2_is_weight_decay"),
        (dict(lazy_rows=["x"], beta1=0.0), "beta1 > 0"),
    ],
)
def test_settings_that_cannot_be_lazy_are_refused(kwargs, message):
    with pytest.raises(ParamGroupError, match=message):
        grouped_adam(1e-3, **kwargs)


def test_sgd_cannot_be_lazy():
    with pytest.raises(ParamGroupError, match="Adam feature"):
        GroupedOptimizer(0.1, beta1=0.0, beta2=0.0, lazy_rows=["x"])


def test_lazy_rows_from_a_training_config():
    config = Config().from_str(
        """
[optimizer]
@optimizers = "spacy_crf.GroupedAdam.v1"
learn_rate = 0.001
lazy_rows = ["embeddings.word_embeddings.weight"]
"""
    )
    optimizer = registry.resolve(config)["optimizer"]
    assert optimizer.lazy_rows == ("embeddings.word_embeddings.weight",)


def test_a_training_step_updates_only_the_batchs_rows_of_the_encoder_table(tiny_bert_dir):
    text = PIPELINE_CFG.replace("{name}", str(tiny_bert_dir))
    nlp = spacy.util.load_model_from_config(Config().from_str(text), auto_fill=True, validate=True)
    examples = [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    optimizer = grouped_adam(1e-2, L2=0.0, lazy_rows=["embeddings.word_embeddings.weight"])
    nlp.initialize(lambda: examples, sgd=optimizer)
    lazy_calls = []
    lazy_update = optimizer._lazy_update
    optimizer._lazy_update = lambda key, *args: lazy_calls.append(key[1]) or lazy_update(key, *args)
    for _ in range(2):  # spacy-transformers applies a step's encoder update at the next step
        nlp.update(examples, sgd=optimizer)
    # Only the word-embedding table takes the lazy path (one encoder update so far).
    assert lazy_calls == ["embeddings.word_embeddings.weight"]
    keys = [key for key in optimizer.mom1 if key[1] == "embeddings.word_embeddings.weight"]
    trf = nlp.get_pipe("transformer").model
    hf = next(shim._model for node in trf.walk() for shim in node.shims)
    table = optimizer.mom1[keys[0]].reshape(hf.embeddings.word_embeddings.weight.shape)
    touched = set(numpy.flatnonzero(table.any(axis=1)).tolist())
    batch_ids = {i for t, _ in NER_DATA for i in trf.tokenizer(t)["input_ids"]}
    assert touched and touched <= batch_ids
    assert batch_ids - touched <= set(trf.tokenizer.all_special_ids)
    assert len(touched) < table.shape[0]


def test_the_benchmark_script_runs_and_checks_the_rows():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_optimizer.py"
    result = subprocess.run(
        [sys.executable, str(script), "--rows", "300", "--width", "8", "--touched", "20", "--repeats", "2"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    assert "dense (thinc)" in result.stdout and "lazy_rows" in result.stdout
