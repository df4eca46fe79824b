"""How well confidences are calibrated: the expected calibration error (ECE),
the reliability table it is read from, and the log loss a temperature is
fitted by.

A confidence ``c`` is calibrated when, of the predictions made with
confidence ``c``, a share ``c`` is correct. The ECE puts the predictions into
``n_bins`` equal-width bins of confidence over ``[0, 1]`` (bin ``b`` holds
``b / n <= c < (b + 1) / n``; a confidence of 1 goes to the last bin) and
sums, over the bins, the gap between the bin's accuracy and its mean
confidence, weighted by its share of the predictions:
``ECE = sum_b (n_b / N) |acc_b - conf_b|``. 0 is perfect, and a model that
says 0.9 and is right 80 % of the time scores 0.1.
"""

import math
from typing import Any, Dict, List, Tuple

import numpy

#: the bins of the reports, unless told otherwise
DEFAULT_BINS = 15


def check_bins(n_bins: Any) -> int:
    """``n_bins`` if a whole number >= 1, else ``ValueError``."""
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, numpy.integer)) or n_bins < 1:
        raise ValueError(f"the number of bins must be a whole number >= 1, got {n_bins!r}")
    return int(n_bins)


def _checked(confidences: Any, correct: Any) -> Tuple[numpy.ndarray, numpy.ndarray]:
    conf = numpy.asarray(confidences, dtype="float64").reshape(-1)
    hits = numpy.asarray(correct).reshape(-1)
    if conf.shape != hits.shape:
        raise ValueError(f"{len(conf)} confidences but {len(hits)} correct flags")
    if not numpy.isfinite(conf).all():
        raise ValueError(f"{int((~numpy.isfinite(conf)).sum())} confidences are NaN or infinite")
    if len(conf) and (conf.min() < -1e-6 or conf.max() > 1 + 1e-6):
        raise ValueError(f"confidences must lie in [0, 1], found {conf.min():g} to {conf.max():g}")
    return numpy.clip(conf, 0.0, 1.0), hits.astype(bool)


def bin_index(confidences: numpy.ndarray, n_bins: int) -> numpy.ndarray:
    """The bin of each confidence (module docstring)."""
    return numpy.minimum((confidences * n_bins).astype(numpy.int64), n_bins - 1)


def reliability(confidences: Any, correct: Any, n_bins: int = DEFAULT_BINS) -> Dict[str, Any]:
    """The reliability table: ``{"n", "accuracy", "confidence", "ece",
    "bins": [{"low", "high", "count", "confidence", "accuracy"}, ...]}``,
    every bin listed (an empty one with confidence and accuracy None);
    ``confidence`` is the mean confidence. An empty set has ECE 0."""
    n_bins = check_bins(n_bins)
    conf, hits = _checked(confidences, correct)
    index = bin_index(conf, n_bins)
    counts = numpy.bincount(index, minlength=n_bins)
    conf_sums = numpy.bincount(index, weights=conf, minlength=n_bins)
    hit_sums = numpy.bincount(index, weights=hits.astype("float64"), minlength=n_bins)
    bins: List[Dict[str, Any]] = []
    ece = 0.0
    for b in range(n_bins):
        n = int(counts[b])
        mean_conf = float(conf_sums[b] / n) if n else None
        accuracy = float(hit_sums[b] / n) if n else None
        if n:
            ece += n / len(conf) * abs(accuracy - mean_conf)  # type: ignore[operator]
        bins.append(
            {"low": b / n_bins, "high": (b + 1) / n_bins, "count": n, "confidence": mean_conf, "accuracy": accuracy}
        )
    return {
        "n": int(len(conf)),
        "accuracy": float(hits.mean()) if len(conf) else None,
        "confidence": float(conf.mean()) if len(conf) else None,
        "ece": float(ece),
        "bins": bins,
    }


def expected_calibration_error(confidences: Any, correct: Any, n_bins: int = DEFAULT_BINS) -> float:
    """The ECE of ``confidences`` (in [0, 1]) against the bool ``correct``."""
    return reliability(confidences, correct, n_bins)["ece"]


def log_loss(confidences: Any, correct: Any, eps: float = 1e-7) -> float:
    """Mean negative log-likelihood of ``correct`` with ``confidences`` as the
    probabilities of being correct (clipped to ``[eps, 1 - eps]``); NaN for an
    empty set."""
    conf, hits = _checked(confidences, correct)
    if not len(conf):
        return math.nan
    p = numpy.clip(conf, eps, 1 - eps)
    return float(-numpy.mean(numpy.where(hits, numpy.log(p), numpy.log1p(-p))))
