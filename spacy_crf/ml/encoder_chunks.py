"""The transformer's encoder at prediction, over a bounded number of wordpieces per call.

spacy-transformers' ``TransformerModel`` cuts every doc into strided spans
and runs the encoder once over all the spans of a batch. A batch of
ordinary docs is bounded by the ``transformer`` component's
``max_batch_items``, but one long doc is never cut: all its spans go
through the encoder in one call, whose attention scores and feed-forward
activations for every span at once then set the peak memory, in proportion
to the doc's length (docs/speed.md, "Long docs", has the figures).

:func:`predict_in_chunks` runs the encoder over at most :data:`MAX_PIECES`
wordpieces (rows times padded length) per call and copies the outputs into
one. Each span is encoded on its own (attention within the span, layer
norms per piece), so the rows come out as from one call, to float rounding;
a batch within the bound is one call, exactly as before. :func:`install` puts it in front of every
transformer shim's ``predict`` (torch, quantized, ONNX Runtime and
OpenVINO encoders alike); training passes are not changed.
"""

from typing import Any, Callable

import torch
from thinc.types import ArgsKwargs

from .._compat import wrap_method

#: at most this many wordpieces (rows x padded length) per encoder call at
#: prediction; a batch within it is one call. Set it (before predicting) to
#: trade memory for fewer, larger calls.
MAX_PIECES = 16384


def predict_in_chunks(stock_predict: Callable, shim, inputs: ArgsKwargs) -> Any:
    """``stock_predict(shim, inputs)`` over consecutive rows of the encoder's
    inputs (``input_ids`` and the tensors of the same rows), at most
    :data:`MAX_PIECES` pieces per call, each output copied into one output
    for all the rows as it comes."""
    ids = inputs.kwargs.get("input_ids")
    if inputs.args or not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        return stock_predict(shim, inputs)
    n_rows, length = ids.shape
    per_call = max(1, MAX_PIECES // max(1, length))
    if n_rows <= per_call:
        return stock_predict(shim, inputs)
    joined = None
    for start in range(0, n_rows, per_call):
        rows = {
            name: value[start : start + per_call] if _is_rows(value, n_rows) else value
            for name, value in inputs.kwargs.items()
        }
        output = stock_predict(shim, ArgsKwargs(args=(), kwargs=rows))
        if joined is None:  # the whole output, allocated once: no second copy while joining
            joined = _allocate(output, n_rows)
        _fill(joined, output, start)
        del output
    return joined


def _is_rows(value: Any, n_rows: int) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == n_rows


def _allocate(output: Any, n_rows: int) -> Any:
    """An empty output like ``output`` (the encoder's output of the first
    rows) for ``n_rows`` rows: tensors, within tuples and ``ModelOutput``s."""
    if isinstance(output, torch.Tensor):
        return output.new_empty((n_rows, *output.shape[1:]))
    if isinstance(output, dict):  # a transformers ModelOutput (an OrderedDict) or a dict
        return type(output)(**{key: _allocate(value, n_rows) for key, value in output.items()})
    if isinstance(output, (tuple, list)):
        return type(output)(_allocate(value, n_rows) for value in output)
    if output is None:
        return None
    raise TypeError(f"Cannot run the encoder in chunks: it gives a {type(output).__name__}.")


def _fill(joined: Any, output: Any, start: int) -> None:
    """Copy ``output`` (the encoder's output of the rows from ``start``) into ``joined``."""
    if isinstance(joined, torch.Tensor):
        joined[start : start + output.shape[0]] = output
    elif isinstance(joined, dict):
        for key, value in joined.items():
            _fill(value, output[key], start)
    elif isinstance(joined, (tuple, list)):
        for value, part in zip(joined, output):
            _fill(value, part, start)


def install() -> None:
    """Make every transformer shim's ``predict`` :func:`predict_in_chunks`. Idempotent."""
    wrap_method("spacy_transformers.layers.hf_shim.HFShim", "predict", predict_in_chunks)
