"""Train the encoder's forward pass in bfloat16 on CPU (autocast), for speed.

thinc's PyTorch shim has mixed precision for CUDA only (``torch.autocast("cuda")``
with gradient scaling). A CPU with native bfloat16 arithmetic (AVX512-BF16 or
AMX) runs the encoder's matrix products faster in bfloat16 (figures: docs/results.md,
"Training speed"); this callback gives every torch shim of the pipeline that CPU autocast:

- only the forward pass of a training update runs under autocast; backprop
  runs outside it, as torch requires, and autocast keeps layer norms and
  softmaxes in float32;
- weights, gradients and the optimizer stay float32. bfloat16 has float32's
  exponent range, so there is no gradient scaling;
- outputs leave the shim as float32 (the CRF and the listeners are float32);
- ``predict`` stays float32, so the dev scores seen in training are those of
  the saved model;
- nothing is saved: the trained pipeline loads and runs in float32 (or as
  ``spacy_crf.encoders.quantize`` makes it).

In a training config::

    [initialize.before_init]
    @callbacks = "spacy_crf.cpu_autocast.v1"
    dtype = "auto"

``dtype = "auto"`` (the recipe's) autocasts to bfloat16 where torch runs
bfloat16 natively on this CPU (:func:`spacy_crf._compat.cpu_runs_bfloat16_natively`:
AVX-512 or AMX) and on CPU ops, and otherwise leaves training in float32,
saying so: on an AVX2-only CPU torch computes bfloat16 products in a
reference loop, and a training step took 17x as long as in float32.
``dtype = "bfloat16"`` autocasts wherever it runs, and warns on such a CPU.
On a GPU, use spacy-transformers' ``mixed_precision`` instead; ``bfloat16``
refuses GPU ops, ``auto`` does nothing there.
"""

import warnings
from typing import Any, Callable, Dict, List, Optional

import torch
from spacy.language import Language
from spacy.util import registry
from thinc.api import ArgsKwargs, get_current_ops
from wasabi import msg

from .._compat import cpu_runs_bfloat16_natively, mix_in, torch_shims, uses_mixed_precision

DTYPES: Dict[str, torch.dtype] = {"bfloat16": torch.bfloat16}
#: dtype settings: a dtype of DTYPES, or "auto" (bfloat16 where the CPU runs it natively)
SETTINGS = ("auto", *DTYPES)


def resolve_dtype(dtype: str) -> Optional[str]:
    """The dtype ``dtype`` autocasts to on this machine: ``dtype`` itself,
    or for "auto" "bfloat16" on CPU ops with native bfloat16, else None (float32)."""
    if dtype not in SETTINGS:
        raise ValueError(f"spacy_crf.cpu_autocast.v1: dtype must be one of {', '.join(SETTINGS)}, not {dtype!r}")
    if dtype != "auto":
        return dtype
    if get_current_ops().device_type != "cpu" or not cpu_runs_bfloat16_natively():
        return None
    return "bfloat16"


class CPUAutocastShim:
    """Mixed into a torch shim's class: ``begin_update`` under CPU autocast."""

    autocast_dtype: torch.dtype = torch.bfloat16

    def begin_update(self, inputs: ArgsKwargs):
        with torch.autocast("cpu", dtype=self.autocast_dtype):
            output, backprop = super().begin_update(inputs)  # type: ignore[misc]  # mixed into a PyTorchShim
        # The cast is part of the graph, so the float32 gradient flows back through it.
        return as_float32(output), backprop


def as_float32(output: Any) -> Any:
    """``output`` with every low-precision floating tensor cast to float32, in
    tensors, tuples, lists and dict-likes (a Hugging Face ``ModelOutput``,
    whose item and attribute are set together)."""
    if isinstance(output, torch.Tensor):
        if output.is_floating_point() and output.dtype != torch.float32:
            return output.float()
        return output
    if isinstance(output, (tuple, list)):
        return type(output)(as_float32(item) for item in output)
    if isinstance(output, dict):
        for key in list(output.keys()):
            output[key] = as_float32(output[key])
        return output
    return output


def cpu_autocast(nlp: Language, dtype: str = "bfloat16") -> List[str]:
    """Give every torch shim in ``nlp``'s components CPU autocast to ``dtype`` in
    training updates. Returns the names of the components that have one
    (none when "auto" leaves training in float32).

    Raises ``ValueError`` for an unknown dtype, on GPU ops (bfloat16), for a
    shim with CUDA mixed precision, and when no component has a torch shim.
    """
    who = "spacy_crf.cpu_autocast.v1"
    resolved = resolve_dtype(dtype)
    if resolved is None:
        msg.info(f"{who}: dtype auto: training stays float32 ({_why_not()})")
        return []
    ops = get_current_ops()
    if ops.device_type != "cpu":
        raise ValueError(
            f"{who}: the pipeline runs on {ops.device_type} ({type(ops).__name__}); CPU autocast is "
            "for CPU training. On a GPU, set mixed_precision = true in the transformer's model."
        )
    shims = list(torch_shims(nlp, built=False))  # a before_init callback: not built yet
    for name, shim in shims:
        if uses_mixed_precision(shim):
            raise ValueError(
                f"{who}: {name}'s transformer has mixed_precision = true (CUDA autocast "
                "with gradient scaling); use one or the other."
            )
    if not shims:
        raise ValueError(f"{who}: no component of the pipeline has a PyTorch model to autocast.")
    if dtype != "auto" and not cpu_runs_bfloat16_natively():
        warnings.warn(
            f"{who}: dtype {dtype!r} on a CPU without native bfloat16 (no AVX-512 or AMX): torch computes "
            'it in a reference loop, many times slower than float32. Use dtype = "auto" or leave the callback out.',
            stacklevel=2,
        )
    for _, shim in shims:
        mix_in(shim, CPUAutocastShim)
        shim.autocast_dtype = DTYPES[resolved]  # type: ignore[attr-defined]  # CPUAutocastShim's, mixed in above
    return sorted({name for name, _ in shims})


@registry.callbacks("spacy_crf.cpu_autocast.v1")
def make_cpu_autocast(dtype: str = "bfloat16") -> Callable[[Language], Language]:
    """An ``[initialize.before_init]`` (or ``after_init``) callback that trains
    every torch model of the pipeline under CPU autocast (see the module docstring).
    ``dtype``: "bfloat16", or "auto" (bfloat16 where this CPU runs it natively)."""
    if dtype not in SETTINGS:
        raise ValueError(f"spacy_crf.cpu_autocast.v1: dtype must be one of {', '.join(SETTINGS)}, not {dtype!r}")

    def callback(nlp: Language) -> Language:
        cpu_autocast(nlp, dtype)
        return nlp

    return callback


def _why_not() -> str:
    if get_current_ops().device_type != "cpu":
        return "CPU autocast is for CPUs; on a GPU, spacy-transformers' mixed_precision"
    return "torch has no native bfloat16 on this CPU: no AVX-512 or AMX"
