"""Fitting a CRF head's temperature: its span confidences at a temperature
``T`` (the emissions, transitions and start/end scores divided by ``T``
before the forward-backward, as the pipe does with its ``temperature``), and
the 1-D search for the ``T`` that makes them best calibrated on a set of dev
docs.

The search minimises an objective of the span confidences against their
correctness: ``"nll"`` (default), the mean log loss of "this span is right"
with the confidence as its probability, smooth in ``T`` and a proper
scoring rule; or ``"ece"``, the expected calibration error itself (what is
reported, but a step function of ``T`` that follows the bins' noise). It
tries a log-spaced grid of ``T`` over ``[T_MIN, T_MAX]``, then narrows the
best grid point's neighbourhood by golden-section search on ``log T``.
"""

import math
from typing import Any, Callable, Dict, List, Tuple

import numpy

from ..ml import tagger_model as crf_model
from ..pipeline.confidence import check_temperature
from ..util import batch_by_length
from .collect import HeadSet
from .measure import DEFAULT_BINS, expected_calibration_error, log_loss

OBJECTIVES = ("nll", "ece")
T_MIN, T_MAX = 0.05, 20.0
GRID = 25
GOLDEN_STEPS = 20
#: padded tokens per forward-backward batch
MAX_ITEMS = 1 << 16


def check_objective(objective: str) -> str:
    if objective not in OBJECTIVES:
        raise ValueError(f"the objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    return objective


def confidences(head: HeadSet, temperature: float) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """``(confidences, correct)`` of every predicted span of ``head``'s docs at
    ``temperature``; spans without a confidence (no token, or a tag the
    tagger does not have) are left out."""
    t = check_temperature(head.name, temperature)
    tagger: Any = head.tagger
    out: List[numpy.ndarray] = [numpy.zeros(0)] * len(head.docs)
    for indices in batch_by_length([len(d.scores) for d in head.docs], MAX_ITEMS):
        sub = [head.docs[i] for i in indices]
        scores: List[Any] = [d.scores for d in sub]
        marginals = crf_model.marginals(tagger.model, scores, tagger.constraints, [d.mask for d in sub], t)
        for i, doc, m in zip(indices, sub, marginals):
            out[i] = doc.rows.confidences(tagger.model.ops.to_numpy(m))
    conf = numpy.concatenate(out) if out else numpy.zeros(0)
    correct = numpy.concatenate([d.correct for d in head.docs]) if head.docs else numpy.zeros(0, dtype=bool)
    keep = numpy.isfinite(conf)
    return numpy.clip(conf[keep], 0.0, 1.0), correct[keep]


def objective_function(head: HeadSet, objective: str = "nll", n_bins: int = DEFAULT_BINS) -> Callable[[float], float]:
    """``T -> objective`` of ``head``'s span confidences at ``T``."""
    check_objective(objective)

    def value(t: float) -> float:
        conf, correct = confidences(head, t)
        return log_loss(conf, correct) if objective == "nll" else expected_calibration_error(conf, correct, n_bins)

    return value


def minimise(f: Callable[[float], float], low: float = T_MIN, high: float = T_MAX) -> Tuple[float, List[list]]:
    """The ``T`` in ``[low, high]`` with the smallest ``f(T)``: a log-spaced
    grid, then golden-section search between the best point's neighbours.
    Returns ``T`` and every ``[T, f(T)]`` tried, in order."""
    tried: Dict[float, float] = {}

    def at(log_t: float) -> float:
        t = math.exp(log_t)
        if t not in tried:
            value = f(t)
            tried[t] = value if math.isfinite(value) else math.inf
        return tried[t]

    grid = numpy.linspace(math.log(low), math.log(high), GRID)
    values = [at(float(x)) for x in grid]
    best = int(numpy.argmin(values))
    a, b = float(grid[max(best - 1, 0)]), float(grid[min(best + 1, GRID - 1)])
    ratio = (math.sqrt(5) - 1) / 2
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    for _ in range(GOLDEN_STEPS):
        if at(c) <= at(d):
            b, d = d, c
            c = b - ratio * (b - a)
        else:
            a, c = c, d
            d = a + ratio * (b - a)
    t_best = min(tried, key=lambda t: (tried[t], abs(math.log(t))))
    return t_best, [[t, v] for t, v in tried.items()]


def fit_temperature(head: HeadSet, objective: str = "nll", n_bins: int = DEFAULT_BINS) -> Tuple[float, List[list]]:
    """The temperature that minimises ``objective`` on ``head``'s docs, and the search's points."""
    if head.n_spans == 0:
        raise ValueError(f"[{head.name}] no predicted {head.kind} in the fitting docs: nothing to fit a temperature on")
    return minimise(objective_function(head, objective, n_bins))
