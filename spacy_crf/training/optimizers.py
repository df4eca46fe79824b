"""Optimizers with per-parameter-group learning-rate multipliers
(``spacy_crf.GroupedAdam.v1``, ``spacy_crf.GroupedSGD.v1``).

thinc's ``Optimizer.__call__`` accepts ``lr_scale``, but neither
``Model.finish_update`` nor ``PyTorchShim.finish_update`` passes one, and
scaling gradients instead does nothing under Adam (it normalises gradient
scale away). So the optimizer itself decides the scale, from the parameter's
name: the groups are in :mod:`.param_groups`, the lazy row update of
embedding tables in :mod:`.lazy_rows`.
"""

import math
import re
from typing import Dict, List, Optional, Sequence, Tuple, Union

from spacy.util import registry
from thinc.optimizers import ADAM_DEFAULTS, SGD_DEFAULTS, FloatOrSeq
from thinc.types import FloatsXd

from .lazy_rows import LazyRowsOptimizer
from .param_groups import (
    _CHECKED_SETTINGS,
    DEFAULT_LAYER_PATTERN,
    KeyT,
    ParamGroup,
    ParamGroupError,
    _check_finite,
    build_param_groups,
)


class GroupedOptimizer(LazyRowsOptimizer):
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
            raise ParamGroupError(f"lazy_rows must be a list of glob patterns, got the string {lazy_rows!r}.")
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
        assert self.num_layers is not None  # required with a layer decay (checked in __init__)
        match = self.layer_pattern.search(param_name)
        if match:
            depth = self.num_layers - 1 - int(match.group(1))
            return self.layer_lr_decay ** max(depth, 0)
        if "embeddings" in param_name:
            return self.layer_lr_decay**self.num_layers
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
    crf_includes_emissions: also put the emission (output) layer in ``crf``,
        with the lexicon features' projection that feeds it.
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
