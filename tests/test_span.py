"""The GlobalPointer span head's maths (spacy_crf.ml.span_model): scores, RoPE, the
multilabel categorical cross-entropy checked by enumerating cells, its
gradient, decoding, and the projection layer's parameters."""

import math

import numpy
import pytest
import torch
from thinc.api import noop

from spacy_crf.ml import span_model as span
from spacy_crf.ml.span_model import NEGATIVE, POSITIVE, UNKNOWN
from spacy_crf.training.optimizers import grouped_adam


def head(n_labels=2, width=4, rope=True):
    model = span.build_span_pointer(noop(), nO=n_labels, width=width, rope=rope)
    return model


def brute_rope(vector, position):
    out = list(vector)
    d = len(vector)
    for m in range(d // 2):
        angle = position * span.ROPE_BASE ** (-2 * m / d)
        a, b = vector[2 * m], vector[2 * m + 1]
        out[2 * m] = a * math.cos(angle) - b * math.sin(angle)
        out[2 * m + 1] = a * math.sin(angle) + b * math.cos(angle)
    return out


def brute_score(projection, i, j, label, n_labels, width, rope):
    q = [float(x) for x in projection[i, label * width : (label + 1) * width]]
    offset = n_labels * width + label * width
    k = [float(x) for x in projection[j, offset : offset + width]]
    if rope:
        q, k = brute_rope(q, i), brute_rope(k, j)
    return sum(a * b for a, b in zip(q, k)) / math.sqrt(width)


def brute_loss(projections, gold, n_labels, width, rope, max_length):
    """Enumerate the cells: per doc and label, log(1 + Σ_neg e^s) + log(1 + Σ_pos e^-s)."""
    total = 0.0
    for projection, cells in zip(projections, gold):
        if cells is None:
            continue
        n = len(projection)
        for label in range(n_labels):
            neg = pos = 0.0
            for i in range(n):
                for j in range(i, n):
                    if max_length and j - i >= max_length:
                        continue
                    s = brute_score(projection, i, j, label, n_labels, width, rope)
                    if cells[label, i, j] == POSITIVE:
                        pos += math.exp(-s)
                    elif cells[label, i, j] == NEGATIVE:
                        neg += math.exp(s)
            total += math.log(1 + neg) + math.log(1 + pos)
    return total


def random_case(lengths, n_labels=2, width=4, seed=0):
    rng = numpy.random.RandomState(seed)
    projections = [rng.normal(0, 1, (n, 2 * n_labels * width)).astype("f") for n in lengths]
    gold = [rng.choice([POSITIVE, NEGATIVE, NEGATIVE, UNKNOWN], size=(n_labels, n, n)).astype("int8") for n in lengths]
    return projections, gold


@pytest.mark.parametrize("rope", [True, False])
@pytest.mark.parametrize("max_length", [0, 2])
def test_loss_matches_enumerating_the_cells(rope, max_length):
    projections, gold = random_case([3, 1, 4, 0, 2])
    gold[2] = None  # a doc without gold contributes nothing
    model = head(rope=rope)
    loss, _ = span.span_loss(model, projections, gold, max_length)
    assert loss == pytest.approx(brute_loss(projections, gold, 2, 4, rope, max_length), rel=1e-5)


def test_loss_gradient_matches_finite_differences():
    projections, gold = random_case([3, 2], n_labels=1, width=2, seed=1)
    projections = [p.astype("float64") for p in projections]
    model = head(n_labels=1, width=2)
    _, grads = span.span_loss(model, [p.astype("f") for p in projections], gold)
    eps = 1e-4
    for doc, projection in enumerate(projections):
        for index in numpy.ndindex(projection.shape):
            plus = [p.copy() for p in projections]
            minus = [p.copy() for p in projections]
            plus[doc][index] += eps
            minus[doc][index] -= eps
            numeric = (brute_loss(plus, gold, 1, 2, True, 0) - brute_loss(minus, gold, 1, 2, True, 0)) / (2 * eps)
            assert grads[doc][index] == pytest.approx(numeric, rel=1e-3, abs=1e-4)
    # a doc without gold gets no gradient
    _, grads = span.span_loss(model, [p.astype("f") for p in projections], [gold[0], None])
    assert not grads[1].any()


def test_scores_match_brute_force_and_rope_sees_only_relative_position():
    projections, _ = random_case([4], n_labels=2, width=4, seed=2)
    table = span.all_scores(head(), projections)[0]
    assert table.shape == (2, 4, 4)
    for label in range(2):
        for i in range(4):
            for j in range(i, 4):
                assert table[label, i, j] == pytest.approx(
                    brute_score(projections[0], i, j, label, 2, 4, True), rel=1e-4, abs=1e-5
                )
    same = numpy.tile(projections[0][:1], (5, 1))  # every token alike: scores depend on j - i only
    table = span.all_scores(head(), [same])[0]
    assert numpy.allclose(table[0, 0, 2], [table[0, 1, 3], table[0, 2, 4]], atol=1e-5)
    assert not numpy.isclose(table[0, 0, 1], table[0, 0, 3])
    flat = span.all_scores(head(rope=False), [same])[0]
    assert numpy.allclose(flat[0], flat[0, 0, 0])


def test_valid_cells_and_loss_with_only_unknown_or_empty():
    cells = span.valid_cells([3, 1], 3, max_length=2)
    assert cells[0].int().tolist() == [[1, 1, 0], [0, 1, 1], [0, 0, 1]]
    assert cells[1].int().tolist() == [[1, 0, 0], [0, 0, 0], [0, 0, 0]]
    model = head()
    loss, grads = span.span_loss(model, [numpy.zeros((0, 16), dtype="f")], [None])
    assert loss == 0.0 and grads[0].shape == (0, 16)
    projections, gold = random_case([2])
    loss, grads = span.span_loss(model, projections, [numpy.full_like(gold[0], UNKNOWN)])
    assert loss == 0.0 and not grads[0].any()


def test_predict_spans_thresholds_and_orders_best_first():
    projections, _ = random_case([4, 0, 1], seed=3)
    model = head()
    tables = span.all_scores(model, projections)
    for max_length in (0, 2):
        preds = span.predict_spans(model, projections, max_length=max_length, threshold=0.0)
        assert preds[1] == []
        for table, found in zip([tables[0], tables[2]], [preds[0], preds[2]]):
            expected = {
                (i, j + 1, l)
                for l, i, j in zip(*numpy.nonzero(table > 0))
                if j >= i and (not max_length or j - i < max_length)
            }
            assert {(s, e, l) for s, e, l, _ in found} == expected
            assert [p[3] for p in found] == sorted((p[3] for p in found), reverse=True)
            assert all(table[l, s, e - 1] == pytest.approx(score) for s, e, l, score in found)
    assert span.predict_spans(model, projections, threshold=1e9) == [[], [], []]


@pytest.mark.parametrize("rope", [True, False])
@pytest.mark.parametrize("max_length", [0, 3])
def test_a_long_doc_is_scored_in_blocks_with_the_same_predictions(rope, max_length):
    # a cell budget far below the batch's table: every doc alone, 1-2 start rows a block
    projections, _ = random_case([9, 0, 2, 7], seed=5)
    model = head(rope=rope)
    whole = span.predict_spans(model, projections, max_length=max_length, threshold=-0.2)
    blocks = span.predict_spans(model, projections, max_length=max_length, threshold=-0.2, max_cells=30)
    assert [len(p) for p in whole] == [len(p) for p in blocks] and sum(map(len, whole)) > 20
    for a, b in zip(whole, blocks):
        assert [p[:3] for p in a] == [p[:3] for p in b]
        numpy.testing.assert_allclose([p[3] for p in a], [p[3] for p in b], rtol=1e-5, atol=1e-6)


def test_projection_layer_backprop_and_parameter_names():
    rng = numpy.random.RandomState(4)
    model = span.SpanProjection(nO=2, width=3)
    X = [rng.normal(size=(3, 5)).astype("f"), rng.normal(size=(2, 5)).astype("f")]
    model.initialize(X=X)
    assert model.param_names == ("span_start_W", "span_start_b", "span_end_W", "span_end_b")
    Y, backprop = model.begin_update(X)
    assert [y.shape for y in Y] == [(3, 12), (2, 12)]
    flat_X = numpy.concatenate(X)
    W = numpy.concatenate([model.get_param("span_start_W"), model.get_param("span_end_W")])
    b = numpy.concatenate([model.get_param("span_start_b"), model.get_param("span_end_b")])
    assert numpy.allclose(numpy.concatenate(Y), flat_X @ W.T + b, atol=1e-5)
    dY = [rng.normal(size=y.shape).astype("f") for y in Y]
    dX = backprop(dY)
    flat_dY = numpy.concatenate(dY)
    assert numpy.allclose(numpy.concatenate(dX), flat_dY @ W, atol=1e-4)
    assert numpy.allclose(model.get_grad("span_start_W"), flat_dY[:, :6].T @ flat_X, atol=1e-4)
    assert numpy.allclose(model.get_grad("span_end_b"), flat_dY[:, 6:].sum(axis=0), atol=1e-4)
    optimizer = grouped_adam(1e-3, param_groups={"span": {"patterns": ["span_*"], "lr_multiplier": 10.0}})
    assert {optimizer.group_of(name) for name in model.param_names} == {("span", 10.0)}


def test_rope_needs_an_even_width():
    with pytest.raises(ValueError, match="width must be even"):
        span.build_span_pointer(noop(), width=5)
    span.build_span_pointer(noop(), width=5, rope=False)
    assert torch.is_tensor(span.rope(torch.zeros(1, 2, 1, 4)))


@pytest.mark.parametrize("max_length", [0, 3])
def test_max_spans_keeps_the_best_predictions_of_each_doc(max_length):
    projections, _ = random_case([9, 0, 2, 7], seed=5)
    model = head()
    every = span.predict_spans(model, projections, max_length=max_length, threshold=-1e9)
    caps = [5, 5, 0, 4]
    for max_cells in (span.MAX_CELLS, 30):  # the whole batch at once, and each doc in blocks
        capped = span.predict_spans(
            model, projections, max_length=max_length, threshold=-1e9, max_cells=max_cells, max_spans=caps
        )
        for cap, all_preds, kept in zip(caps, every, capped):
            expected = all_preds[:cap] if cap else all_preds
            assert [p[:3] for p in kept] == [p[:3] for p in expected]
