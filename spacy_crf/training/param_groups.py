"""Parameter groups: learning-rate multipliers by parameter name, and the
checks of the optimizer settings.

thinc's ``Optimizer.__call__`` accepts ``lr_scale``, but neither
``Model.finish_update`` nor ``PyTorchShim.finish_update`` passes one, and
scaling gradients instead does nothing under Adam (it normalises gradient
scale away). So the optimizer itself decides the scale, from the parameter's
key ``(node_id, param_name)``: each group is a list of glob patterns matched
against ``param_name``. No global state is involved: the CRF layers name
their parameters ``crf_transitions``, ``crf_start``, ``crf_end`` and
``crf_emission_W``/``crf_emission_b`` (and ``lexicon_projection_W``/``_b``
and the context fusion layer's ``fusion_*``, grouped with the emissions),
and transformer parameters keep their Hugging Face names
(``encoder.layer.3.attention.self.query.weight``).

Decoupled weight decay (``L2_is_weight_decay``): thinc multiplies it by
``lr_scale``, so a 1000x CRF group would also decay 1000 times as fast and its
transitions would be pulled to zero. By default the decay is *not*
multiplied; ``scale_weight_decay = true`` restores thinc's behaviour.
"""

import math
from fnmatch import fnmatchcase
from typing import List, Mapping, Optional, Sequence, Tuple

CRF_GROUP = "crf"
CRF_PATTERNS = ("crf_transitions", "crf_start", "crf_end")
# The output layers trained from scratch: the emissions, and what feeds them
# and learns as fast as they do: the projection of the lexicon features
# (spacy_crf.ml.lexicon_features) and the context fusion layer
# (spacy_crf.ml.context_fusion). crf_includes_emissions moves them all into
# `crf`; without it they train at the base rate, the encoder's.
EMISSION_PATTERNS = ("crf_emission_*", "lexicon_projection_*", "fusion_*")
# Hugging Face BERT-style layer names; other architectures can pass their own.
DEFAULT_LAYER_PATTERN = r"(?:^|\.)(?:encoder\.)?layers?\.(\d+)\."

KeyT = Tuple[int, str]


class ParamGroupError(ValueError):
    pass


# Hyperparameters a schedule may drive, with their (exclusive) upper bound: a
# NaN or inf turns every weight into NaN, a negative value trains backwards
# (a negative learn_rate climbs the loss, a negative grad_clip flips the
# clipped gradient); checked at construction and after every schedule step.
_CHECKED_SETTINGS = {
    "learn_rate": math.inf,
    "L2": math.inf,
    "grad_clip": math.inf,
    "b1": 1.0,
    "b2": 1.0,
    "eps": math.inf,
}


def _check_finite(name: str, value: float, context: str = "") -> None:
    try:
        finite = math.isfinite(float(value))
    except (TypeError, ValueError):
        raise ParamGroupError(f"{name} must be a number, got {value!r}{context}.") from None
    if not finite:
        raise ParamGroupError(
            f"{name} must be finite, got {value}{context}: a non-finite value would turn the weights into NaN."
        )


class ParamGroup:
    """A named set of parameter-name patterns sharing a learning-rate multiplier."""

    def __init__(self, name: str, patterns: Sequence[str], lr_multiplier: float):
        if isinstance(patterns, str):
            raise ParamGroupError(
                f"Parameter group {name!r}: `patterns` must be a list of glob patterns, got the string {patterns!r}."
            )
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
