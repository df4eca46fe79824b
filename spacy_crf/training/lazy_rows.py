"""Lazy rows (``lazy_rows`` of ``spacy_crf.GroupedAdam.v1``): an embedding table's gradient is dense in memory
but zero outside the rows of the batch's tokens (about 1,500 of the
encoder's 92,851 wordpieces per 1,000-character batch). thinc's Adam walks
every element of the table, its moments and the clipping norm each step
(``scripts/bench_optimizer.py`` times it; figures: docs/results.md,
"Training speed"). A
lazy parameter runs Adam on the rows whose gradient is non-zero only, as
PyTorch's ``SparseAdam`` and TensorFlow's ``LazyAdam`` do: the rows of the
batch get exactly thinc's update (same step count, bias
correction and clipping norm, since the zero rows add nothing to the norm);
the other rows keep their moments and are not moved by them, which is the
approximation. Decoupled weight decay and parameter averages still cover
every row, so they stay exact.
"""

from fnmatch import fnmatchcase
from typing import Optional, Sequence, Tuple

import numpy
from thinc.api import Optimizer
from thinc.backends import get_array_ops
from thinc.types import FloatsXd

from .param_groups import KeyT, ParamGroupError


class LazyRowsOptimizer(Optimizer):
    """thinc's Adam, plus a row-wise update for the tables in ``lazy_rows``
    (see the module docstring). ``group_of`` gives a parameter's
    learning-rate scale (:class:`~.optimizers.GroupedOptimizer`)."""

    lazy_rows: Sequence[str] = ()
    scale_weight_decay: bool = False

    def group_of(self, param_name: str) -> Tuple[Optional[str], float]:
        raise NotImplementedError

    def is_lazy(self, param_name: str, weights: FloatsXd) -> bool:
        """Whether a parameter gets the row-wise lazy update (a 2-D numpy table
        matching a ``lazy_rows`` pattern; others take thinc's dense path)."""
        return (
            bool(self.lazy_rows)
            and isinstance(weights, numpy.ndarray)
            and weights.ndim == 2
            and any(fnmatchcase(param_name, p) for p in self.lazy_rows)
        )

    def _lazy_update(
        self, key: KeyT, weights: FloatsXd, gradient: FloatsXd, scale: float, decay_scale: float
    ) -> Tuple[FloatsXd, FloatsXd]:
        """The lazy path of a dense gradient: the rows with a non-zero gradient."""
        rows = numpy.flatnonzero(gradient.any(axis=1))
        self._update_rows(key, weights, rows, gradient[rows], scale, decay_scale)
        gradient[rows] = 0
        return weights, gradient

    def update_rows(
        self,
        key: KeyT,
        weights: FloatsXd,
        rows: numpy.ndarray,
        row_gradient: FloatsXd,
        *,
        lr_scale: float = 1.0,
    ) -> FloatsXd:
        """The lazy update of a table from a sparse gradient, in place.

        weights: the table, shape (n_rows, width).
        rows: the distinct row indices that have a gradient, shape (n,).
        row_gradient: their gradient, shape (n, width); all-zero rows are skipped,
            as on the dense path, so both paths give the same result.

        ``spacy_crf.sparse_embeddings.v1`` calls this for a table with a sparse
        gradient whose name matches ``lazy_rows``.
        """
        if not self.is_lazy(key[1], weights):
            raise ParamGroupError(
                f"update_rows: {key[1]!r} is not a lazy table (a 2-D numpy array matching "
                f"lazy_rows {list(self.lazy_rows)})."
            )
        if row_gradient.shape != (len(rows), weights.shape[1]):
            raise ValueError(
                f"update_rows: {key[1]!r}: row_gradient has shape {row_gradient.shape}, "
                f"expected ({len(rows)}, {weights.shape[1]}) for {len(rows)} rows."
            )
        if len(numpy.unique(rows)) != len(rows):
            raise ValueError(f"update_rows: {key[1]!r}: rows must be distinct (sum the duplicates first).")
        nonzero: numpy.ndarray = row_gradient.any(axis=1)
        self._update_rows(key, weights, rows[nonzero], row_gradient[nonzero], *self._lazy_scales(key, lr_scale))
        return weights

    def _lazy_scales(self, key: KeyT, lr_scale: float) -> Tuple[float, float]:
        """The learning-rate scale of a lazy table and that of its weight decay
        (the caller's only, unless ``scale_weight_decay``)."""
        _, group_scale = self.group_of(key[1])
        scale = lr_scale * group_scale
        return scale, scale if self.scale_weight_decay else lr_scale

    def _update_rows(
        self,
        key: KeyT,
        weights: FloatsXd,
        rows: numpy.ndarray,
        row_grad: FloatsXd,
        scale: float,
        decay_scale: float,
    ) -> None:
        """thinc's ``Optimizer.__call__`` + ``_adam`` restricted to ``rows`` (see the
        module docstring); ``row_grad`` holds their gradient."""
        ops = get_array_ops(weights)
        self.nr_update[key] += 1
        nr_upd = self.nr_update[key]
        if key not in self.mom1:
            self.mom1[key] = ops.alloc1f(weights.size)
            self.mom2[key] = ops.alloc1f(weights.size)
        if rows.size:
            mom1 = self.mom1[key].reshape(weights.shape)
            mom2 = self.mom2[key].reshape(weights.shape)
            if self.grad_clip:
                row_grad = ops.clip_gradient(row_grad, self.grad_clip)
            fix1 = 1.0 - (self.b1**nr_upd)
            fix2 = 1.0 - (self.b2**nr_upd)
            lr = self.learn_rate * fix2**0.5 / fix1
            row_weights, _, row_mom1, row_mom2 = ops.adam(
                weights[rows].ravel(),
                row_grad.ravel(),
                mom1[rows].ravel(),
                mom2[rows].ravel(),
                self.b1,
                self.b2,
                self.eps,
                lr * scale,
            )
            width = weights.shape[1]
            weights[rows] = row_weights.reshape(-1, width)
            mom1[rows] = row_mom1.reshape(-1, width)
            mom2[rows] = row_mom2.reshape(-1, width)
        if self.L2 != 0:
            weights *= 1.0 - decay_scale * self.learn_rate * self.L2
        if self.averages is not None:
            if key not in self.averages:
                self.averages[key] = ops.alloc(weights.shape, dtype="float32")
            ops.update_averages(self.averages[key], weights, nr_upd)
