"""Optimizers with per-parameter-group learning-rate multipliers.

thinc's ``Optimizer.__call__`` accepts ``lr_scale``, but neither
``Model.finish_update`` nor ``PyTorchShim.finish_update`` passes one, and
scaling gradients instead does nothing under Adam (it normalises gradient
scale away). So the optimizer itself decides the scale, from the parameter's
key ``(node_id, param_name)``: each group is a list of glob patterns matched
against ``param_name``. No global state is involved: the CRF layers name
their parameters ``crf_transitions``, ``crf_start``, ``crf_end`` and
``crf_emission_W``/``crf_emission_b``, and transformer parameters keep their
Hugging Face names (``encoder.layer.3.attention.self.query.weight``).

Decoupled weight decay (``L2_is_weight_decay``): thinc multiplies it by
``lr_scale``, so a 1000x CRF group would also decay 1000 times as fast and its
transitions would be pulled to zero. By default the decay is *not*
multiplied; ``scale_weight_decay = true`` restores thinc's behaviour.

Lazy rows (``lazy_rows``): an embedding table's gradient is dense in memory
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
import math
import re
from fnmatch import fnmatchcase
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy
from thinc.api import Optimizer
from thinc.backends import get_array_ops
from thinc.optimizers import ADAM_DEFAULTS, SGD_DEFAULTS, FloatOrSeq
from thinc.types import FloatsXd
from spacy.util import registry

CRF_GROUP = "crf"
CRF_PATTERNS = ("crf_transitions", "crf_start", "crf_end")
EMISSION_PATTERNS = ("crf_emission_*",)
# Hugging Face BERT-style layer names; other architectures can pass their own.
DEFAULT_LAYER_PATTERN = r"(?:^|\.)(?:encoder\.)?layers?\.(\d+)\."

KeyT = Tuple[int, str]


class ParamGroupError(ValueError):
    pass


# Hyperparameters a schedule may drive, with their (exclusive) upper bound: a
# NaN or inf turns every weight into NaN, a negative value trains backwards
# (a negative learn_rate climbs the loss, a negative grad_clip flips the
# clipped gradient); checked at construction and after every schedule step.
_CHECKED_SETTINGS = {"learn_rate": math.inf, "L2": math.inf, "grad_clip": math.inf, "b1": 1.0, "b2": 1.0,
                     "eps": math.inf}


def _check_finite(name: str, value: float, context: str = "") -> None:
    try:
        finite = math.isfinite(float(value))
    except (TypeError, ValueError):
        raise ParamGroupError(f"{name} must be a number, got {value!r}{context}.") from None
    if not finite:
        raise ParamGroupError(
            f"{name} must be finite, got {value}{context}: a non-finite value would "
            "turn the weights into NaN."
        )


class ParamGroup:
    """A named set of parameter-name patterns sharing a learning-rate multiplier."""

    def __init__(self, name: str, patterns: Sequence[str], lr_multiplier: float):
        if isinstance(patterns, str):
            raise ParamGroupError(f"Parameter group {name!r}: `patterns` must be a list of glob "
                                  f"patterns, got the string {patterns!r}.")
        if not patterns:
            raise ParamGroupError(f"Parameter group {name!r} has no patterns.")
        _check_finite(f"Parameter group {name!r}: lr_multiplier", lr_multiplier)
        if not lr_multiplier > 0:
            raise ParamGroupError(f"Parameter group {name!r}: lr_multiplier must be > 0, got {lr_multiplier}.")
        self.name = name
        self.patterns = tuple(patterns)
        self.lr_multiplier = float(lr_multiplier)

    def matches(self, param_name: str) -> bool:
        return any(fnmatchcase(param_name, p) for p in self.patterns)

    def __repr__(self) -> str:
        return f"ParamGroup({self.name!r}, {list(self.patterns)}, x{self.lr_multiplier:g})"


def build_param_groups(
    param_groups: Optional[Mapping[str, Mapping]] = None,
    crf_lr_multiplier: float = 1.0,
    crf_includes_emissions: bool = False,
) -> List[ParamGroup]:
    """Groups in priority order: the config's own groups first, then ``crf``."""
    groups = []
    for name, spec in (param_groups or {}).items():
        unknown = set(spec) - {"patterns", "lr_multiplier"}
        if unknown or "patterns" not in spec:
            raise ParamGroupError(
                f"Parameter group {name!r} must have `patterns` (list of globs) and "
                f"optionally `lr_multiplier`; got keys {sorted(spec)}."
            )
        groups.append(ParamGroup(name, spec["patterns"], spec.get("lr_multiplier", 1.0)))
    if CRF_GROUP not in {g.name for g in groups}:
        patterns = CRF_PATTERNS + (EMISSION_PATTERNS if crf_includes_emissions else ())
        groups.append(ParamGroup(CRF_GROUP, patterns, crf_lr_multiplier))
    return groups


class GroupedOptimizer(Optimizer):
    """A thinc ``Optimizer`` whose learning rate is scaled per parameter group.

    The effective scale of a parameter is ``lr_scale`` (from the caller) x the
    multiplier of the first group whose pattern matches its name x the
    layer-wise decay factor, if enabled. Everything else, schedules,
    gradient clipping, L2, parameter averaging, is thinc's.
    """

    def __init__(
        self,
        learn_rate: FloatOrSeq,
        *,
        groups: Sequence[ParamGroup] = (),
        scale_weight_decay: bool = False,
        layer_lr_decay: float = 1.0,
        num_layers: Optional[int] = None,
        layer_pattern: str = DEFAULT_LAYER_PATTERN,
        lazy_rows: Sequence[str] = (),
        **kwargs,
    ):
        super().__init__(learn_rate, **kwargs)
        self._check_settings()
        if isinstance(lazy_rows, str):
            raise ParamGroupError(
                f"lazy_rows must be a list of glob patterns, got the string {lazy_rows!r}."
            )
        if lazy_rows and not (self.b1 > 0 and self.b2 > 0 and not self.use_radam):
            raise ParamGroupError(
                "lazy_rows is an Adam feature (the rows of the batch get Adam's update, "
                "the others keep their moments): it needs beta1 > 0 and beta2 > 0."
            )
        if lazy_rows and self.L2 != 0 and not self.L2_is_weight_decay:
            raise ParamGroupError(
                "lazy_rows needs L2_is_weight_decay = true (or L2 = 0): L2 added to the "
                "gradient makes every row's gradient non-zero, so no row could be skipped."
            )
        self.lazy_rows = tuple(lazy_rows)
        if not 0 < layer_lr_decay <= 1:
            raise ParamGroupError(f"layer_lr_decay must be in (0, 1], got {layer_lr_decay}.")
        if layer_lr_decay != 1 and not num_layers:
            raise ParamGroupError(
                "layer_lr_decay needs num_layers (the encoder's layer count): the "
                "top layer gets the full learning rate, layer i gets "
                "layer_lr_decay ** (num_layers - 1 - i), embeddings "
                "layer_lr_decay ** num_layers."
            )
        self.groups = list(groups)
        self.scale_weight_decay = scale_weight_decay
        self.layer_lr_decay = layer_lr_decay
        self.num_layers = num_layers
        self.layer_pattern = re.compile(layer_pattern)
        self._scales: Dict[str, Tuple[Optional[str], float]] = {}

    def _check_settings(self) -> None:
        for name, upper in _CHECKED_SETTINGS.items():
            where, value = " (a value of its schedule)" if name in self.schedules else "", getattr(self, name)
            _check_finite(name, value, where)
            if not 0 <= value < upper:
                bound = ">= 0" + (f" and < {upper:g}" if upper < math.inf else "")
                raise ParamGroupError(f"{name} must be {bound}, got {value}{where}: it would train the wrong way.")

    def step_schedules(self) -> None:
        super().step_schedules()
        if self.schedules:
            self._check_settings()

    def group_of(self, param_name: str) -> Tuple[Optional[str], float]:
        """The group name (None if ungrouped) and total multiplier of a parameter."""
        if param_name not in self._scales:
            group = next((g for g in self.groups if g.matches(param_name)), None)
            scale = group.lr_multiplier if group else 1.0
            scale *= self._layer_factor(param_name)
            self._scales[param_name] = (group.name if group else None, scale)
        return self._scales[param_name]

    def _layer_factor(self, param_name: str) -> float:
        if self.layer_lr_decay == 1.0:
            return 1.0
        match = self.layer_pattern.search(param_name)
        if match:
            depth = self.num_layers - 1 - int(match.group(1))
            return self.layer_lr_decay ** max(depth, 0)
        if "embeddings" in param_name:
            return self.layer_lr_decay ** self.num_layers
        return 1.0

    def __call__(
        self,
        key: KeyT,
        weights: FloatsXd,
        gradient: FloatsXd,
        *,
        lr_scale: float = 1.0,
    ):
        _, group_scale = self.group_of(key[1])
        scale = lr_scale * group_scale
        decoupled = self.L2 != 0 and self.L2_is_weight_decay
        if self.is_lazy(key[1], weights):
            return self._lazy_update(key, weights, gradient, *self._lazy_scales(key, lr_scale))
        if group_scale == 1.0 or not decoupled or self.scale_weight_decay:
            return super().__call__(key, weights, gradient, lr_scale=scale)
        # thinc would decay by lr * scale * L2: apply the update without decay,
        # then decay with the caller's scale only.
        L2 = self.L2
        self.L2 = 0.0
        try:
            weights, gradient = super().__call__(key, weights, gradient, lr_scale=scale)
        finally:
            self.L2 = L2
        weights -= lr_scale * self.learn_rate * L2 * weights
        return weights, gradient

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
        nonzero = row_gradient.any(axis=1)
        self._update_rows(
            key, weights, rows[nonzero], row_gradient[nonzero], *self._lazy_scales(key, lr_scale)
        )
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
                weights[rows].ravel(), row_grad.ravel(), mom1[rows].ravel(),
                mom2[rows].ravel(), self.b1, self.b2, self.eps, lr * scale,
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


@registry.optimizers("spacy_crf.GroupedAdam.v1")
def grouped_adam(
    learn_rate: FloatOrSeq = ADAM_DEFAULTS["learn_rate"],
    *,
    crf_lr_multiplier: float = 1.0,
    crf_includes_emissions: bool = False,
    param_groups: Optional[Dict[str, Dict[str, Union[List[str], float]]]] = None,
    scale_weight_decay: bool = False,
    layer_lr_decay: float = 1.0,
    num_layers: Optional[int] = None,
    L2: FloatOrSeq = ADAM_DEFAULTS["L2"],
    beta1: FloatOrSeq = ADAM_DEFAULTS["beta1"],
    beta2: FloatOrSeq = ADAM_DEFAULTS["beta2"],
    eps: FloatOrSeq = ADAM_DEFAULTS["eps"],
    grad_clip: FloatOrSeq = ADAM_DEFAULTS["grad_clip"],
    L2_is_weight_decay: bool = True,
    use_averages: bool = True,
    lazy_rows: Sequence[str] = (),
) -> GroupedOptimizer:
    """Adam (thinc's ``Adam.v1`` settings) with learning-rate groups.

    crf_lr_multiplier: learning-rate multiplier of the CRF parameters
        (transitions, start, end), e.g. 100 or 1000 when fine-tuning a
        pretrained encoder at 2e-5.
    crf_includes_emissions: also put the emission (output) layer in ``crf``.
    param_groups: further groups, ``{name: {"patterns": [...], "lr_multiplier": x}}``;
        they take precedence over ``crf`` (first match wins).
    scale_weight_decay: multiply decoupled weight decay by the group multiplier
        (thinc's behaviour); default False.
    layer_lr_decay, num_layers: layer-wise learning-rate decay for the
        transformer's layers.
    lazy_rows: glob patterns of 2-D tables (e.g.
        ``["embeddings.word_embeddings.weight"]``) whose Adam update covers only
        the rows with a non-zero gradient; see the module docstring.
    """
    return GroupedOptimizer(
        learn_rate,
        groups=build_param_groups(param_groups, crf_lr_multiplier, crf_includes_emissions),
        scale_weight_decay=scale_weight_decay,
        layer_lr_decay=layer_lr_decay,
        num_layers=num_layers,
        L2=L2,
        beta1=beta1,
        beta2=beta2,
        eps=eps,
        grad_clip=grad_clip,
        L2_is_weight_decay=L2_is_weight_decay,
        use_averages=use_averages,
        use_radam=False,
        lazy_rows=lazy_rows,
    )


@registry.optimizers("spacy_crf.GroupedSGD.v1")
def grouped_sgd(
    learn_rate: FloatOrSeq,
    *,
    crf_lr_multiplier: float = 1.0,
    crf_includes_emissions: bool = False,
    param_groups: Optional[Dict[str, Dict[str, Union[List[str], float]]]] = None,
    scale_weight_decay: bool = False,
    layer_lr_decay: float = 1.0,
    num_layers: Optional[int] = None,
    L2: FloatOrSeq = SGD_DEFAULTS["L2"],
    grad_clip: FloatOrSeq = SGD_DEFAULTS["grad_clip"],
    L2_is_weight_decay: bool = True,
    use_averages: bool = True,
) -> GroupedOptimizer:
    """Plain SGD (thinc's ``SGD.v1`` settings) with learning-rate groups."""
    return GroupedOptimizer(
        learn_rate,
        groups=build_param_groups(param_groups, crf_lr_multiplier, crf_includes_emissions),
        scale_weight_decay=scale_weight_decay,
        layer_lr_decay=layer_lr_decay,
        num_layers=num_layers,
        L2=L2,
        grad_clip=grad_clip,
        L2_is_weight_decay=L2_is_weight_decay,
        beta1=0.0,
        beta2=0.0,
        use_averages=use_averages,
    )
