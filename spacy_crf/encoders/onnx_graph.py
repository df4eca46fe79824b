"""The ONNX graph of a Hugging Face encoder and the module that runs it.

``export_onnx`` traces the model as spacy-transformers calls it (batch and
sequence axes dynamic), ``quantize_onnx`` applies ONNX Runtime's dynamic int8
quantization, and ``OnnxEncoder`` stands in for the torch model: the same
call and outputs, computed by an ``onnxruntime.InferenceSession``, with the
graph as its state dict, with the SHA-256 of the graph beside it: a graph
damaged on disk (a byte changed in its weights) still parses and runs,
giving other numbers, so loading compares the digest.
``spacy_crf.encoders.onnx_backend`` puts it into a pipeline.

``export_onnx`` uses torch's TorchScript-based exporter (``dynamo=False``):
the newer ``torch.export``-based one needs ``onnxscript`` as well. torch
marks the TorchScript exporter deprecated; ``export_onnx`` is the one place
to change when it goes. The session's graph optimizations
(``ORT_ENABLE_ALL``) fuse bias + GELU and the dense layers' Gemms when it
starts. ONNX Runtime's Python fusion scripts (``onnxruntime.transformers``:
fused attention, embeddings + layer norm) were not faster on top of them
for this package's encoders on CPU (see docs/results.md), so the saved
graph is the plain export.
"""

import hashlib
import importlib
import inspect
import io
import logging
import os
import tempfile
import warnings
import weakref
from typing import Any, Dict, Optional, Tuple

import numpy
import torch
from transformers.modeling_outputs import BaseModelOutputWithPooling

from .swap import SavedEncoderError

QUANTIZE = ("none", "int8")
# 17 has LayerNormalization as one op; every ONNX Runtime this package allows runs it
OPSET = 17
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_OUTPUTS = ("last_hidden_state", "pooler_output")
#: the state dict entry with the SHA-256 of the encoder's saved bytes
DIGEST = "sha256"


def digest_state(*parts: bytes) -> torch.Tensor:
    """The :data:`DIGEST` entry of a state dict whose payload is ``parts``."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return torch.from_numpy(numpy.frombuffer(digest.digest(), dtype=numpy.uint8).copy())


def check_digest(state_dict, parts: Tuple[bytes, ...], what: str) -> None:
    """Raise if the payload ``parts`` of ``state_dict`` does not match the
    digest saved with it (a state saved before digests has none: not checked)."""
    saved = state_dict.get(DIGEST)
    if saved is not None and not torch.equal(saved, digest_state(*parts)):
        raise SavedEncoderError(
            f"The saved {what} encoder is damaged: its {sum(map(len, parts)):,} bytes do not match the "
            "SHA-256 saved with them. Copy or reinstall the pipeline again."
        )


def checked_states(state_dict, names: Tuple[str, ...], what: str) -> Tuple[bytes, ...]:
    """The payloads ``names`` of a saved ``what`` encoder's ``state_dict``,
    as bytes, checked against the digest saved with them."""
    if set(state_dict) - {DIGEST} != set(names):
        raise SavedEncoderError(
            f"Expected a saved {what} encoder (states {list(names)}), found {sorted(state_dict)[:5]}: was this "
            f"pipeline saved with another encoder (torch's?) but configured with an {what} architecture?"
        )
    parts = tuple(state_dict[name].numpy().tobytes() for name in names)
    check_digest(state_dict, parts, what)
    return parts


def check_quantize(quantize: str) -> str:
    if quantize not in QUANTIZE:
        raise ValueError(f"Unknown ONNX quantization {quantize!r}: expected one of {list(QUANTIZE)}")
    return quantize


def require(module: str, backend: str = "ONNX", extra: str = "onnx"):
    """``module`` imported, or a one-line error saying what to install (the
    module's package, or the extra that brings it)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        reason = " ".join(str(e).split())[:200]
        raise ImportError(
            f"The {backend} encoder needs {module}, which cannot be imported ({reason}): "
            f"pip install {module} (or pip install 'spacy-crf[{extra}]')"
        ) from None


def require_onnxruntime():
    return require("onnxruntime")


# --- export and quantization ----------------------------------------------------


class _Exported(torch.nn.Module):
    """The HF model called with keyword inputs and returning a tuple, as
    ``torch.onnx.export`` traces it."""

    def __init__(self, transformer: torch.nn.Module, input_names: Tuple[str, ...], output_names: Tuple[str, ...]):
        super().__init__()
        self.transformer = transformer
        self.input_names = input_names
        self.output_names = output_names

    def forward(self, *inputs):
        output = self.transformer(**dict(zip(self.input_names, inputs)))
        return tuple(output[name] for name in self.output_names)


def _input_names(transformer: torch.nn.Module, tokenizer) -> Tuple[str, ...]:
    """What spacy-transformers feeds the model: token type ids only where the
    tokenizer makes them and the model takes them."""
    takes = inspect.signature(transformer.forward).parameters
    gives = getattr(tokenizer, "model_input_names", _INPUTS) if tokenizer is not None else _INPUTS
    return tuple(n for n in _INPUTS if n in takes and (n != "token_type_ids" or n in gives))


def _dummy_inputs(config, names) -> Tuple[torch.Tensor, ...]:
    """Two sequences of 8 pieces, the second padded (so that the mask is traced
    as an input, not as a constant)."""
    ids = torch.arange(16, dtype=torch.long).reshape(2, 8) % config.vocab_size
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    return tuple({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}[n] for n in names)


def export_onnx(transformer: torch.nn.Module, tokenizer=None) -> bytes:
    """The ONNX graph (bytes) of a Hugging Face model, as spacy-transformers
    calls it: batch and sequence axes dynamic."""
    config = transformer.config
    if getattr(config, "output_hidden_states", False) or getattr(config, "output_attentions", False):
        raise ValueError(
            "The ONNX encoder gives the last hidden state (and pooler output) only, but this transformer's "
            "config asks for output_hidden_states/output_attentions: drop them from transformer_config."
        )
    require("onnx")  # torch.onnx.export writes the graph with it
    names = _input_names(transformer, tokenizer)
    dummy = _dummy_inputs(config, names)
    was_training = transformer.training
    transformer.eval()
    with torch.no_grad():
        probe = transformer(**dict(zip(names, dummy)))
    outputs = tuple(n for n in _OUTPUTS if probe.get(n) is not None)
    wrapper = _Exported(transformer, names, outputs).eval()
    axes = {n: {0: "batch", 1: "sequence"} for n in names + ("last_hidden_state",)}
    axes.update({n: {0: "batch"} for n in outputs if n != "last_hidden_state"})
    kwargs: Dict[str, Any] = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    buffer = io.BytesIO()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            # the tracer's notes on shapes and the TorchScript exporter's
            # deprecation: the graph is checked against torch by the tests
            warnings.simplefilter("ignore")
            # torch's stub says path only; the exporter writes to any binary file object
            torch.onnx.export(
                wrapper,
                dummy,
                buffer,  # type: ignore[arg-type]
                input_names=list(names),
                output_names=list(outputs),
                dynamic_axes=axes,
                opset_version=OPSET,
                do_constant_folding=True,
                **kwargs,
            )
    finally:
        transformer.train(was_training)
    return buffer.getvalue()


class _DropPreprocessingHint(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


def quantize_onnx(onnx_bytes: bytes) -> bytes:
    """``onnx_bytes`` with its MatMul weights int8 (a scale per output column)
    and activations quantized per batch: ONNX Runtime's dynamic quantization."""
    require_onnxruntime()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    hint = _DropPreprocessingHint()  # a one-line log on every call, about static quantization
    logging.getLogger().addFilter(hint)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            source, target = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "int8.onnx")
            with open(source, "wb") as f:
                f.write(onnx_bytes)
            quantize_dynamic(source, target, weight_type=QuantType.QInt8, per_channel=True)
            with open(target, "rb") as f:
                return f.read()
    finally:
        logging.getLogger().removeFilter(hint)


def _session(onnx_bytes: bytes):
    ort = require_onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(onnx_bytes, sess_options=options, providers=["CPUExecutionProvider"])


# --- the encoder that runs the graph --------------------------------------------


# Every live encoder, so that their sessions can be let go before a fork:
# ONNX Runtime's thread pools are not usable in a forked child, and an
# inherited session can crash the child when it is destroyed there
# (``nlp.pipe(n_process=2)`` forks on Linux). Each process starts its own.
_LIVE: "weakref.WeakSet[OnnxEncoder]" = weakref.WeakSet()


def _drop_sessions_before_fork() -> None:
    for encoder in list(_LIVE):
        encoder.drop_session()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_drop_sessions_before_fork)


class OnnxEncoder(torch.nn.Module):
    """Stands in for the Hugging Face model inside a transformer shim: the
    same config, call and outputs, computed by an ONNX Runtime session. Its
    state dict is the ONNX graph as one uint8 tensor, so spacy-transformers
    saves and loads it as it would torch weights."""

    def __init__(self, config, onnx_bytes: Optional[bytes] = None, quantize: str = "none"):
        super().__init__()
        self.config = config
        self.quantize = check_quantize(quantize)
        self.onnx_bytes = onnx_bytes
        self._session: Any = None
        _LIVE.add(self)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def session(self):
        """The ONNX Runtime session, started on first use."""
        if self.onnx_bytes is None:
            raise ValueError("This ONNX encoder holds no graph yet: initialize or load the pipeline first.")
        if self._session is None:
            self._session = _session(self.onnx_bytes)
        return self._session

    @property
    def session_started(self) -> bool:
        return self._session is not None

    def drop_session(self) -> None:
        """Let the session go; the next call starts a new one."""
        self._session = None

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **kwargs):
        if kwargs:
            raise ValueError(
                f"The ONNX encoder takes input_ids, attention_mask and token_type_ids, not {sorted(kwargs)}"
            )
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        if feeds["attention_mask"] is None:
            feeds["attention_mask"] = torch.ones_like(input_ids)
        session = self.session()
        names = [i.name for i in session.get_inputs()]
        if token_type_ids is not None and "token_type_ids" not in names and bool(token_type_ids.any()):
            raise ValueError("Non-zero token_type_ids given to an ONNX encoder exported without them.")
        if feeds["token_type_ids"] is None and "token_type_ids" in names:
            feeds["token_type_ids"] = torch.zeros_like(input_ids)
        if input_ids.numel() == 0:  # no pieces: ONNX Runtime's kernels want at least one
            return BaseModelOutputWithPooling(
                last_hidden_state=torch.zeros((*input_ids.shape, self.config.hidden_size), dtype=torch.float32)
            )
        arrays = {n: numpy.ascontiguousarray(feeds[n].detach().cpu().numpy(), dtype=numpy.int64) for n in names}
        values = session.run(None, arrays)
        output_names = [o.name for o in session.get_outputs()]
        return BaseModelOutputWithPooling(**{n: torch.from_numpy(v) for n, v in zip(output_names, values)})

    def state_dict(self, *args, **kwargs) -> Dict[str, torch.Tensor]:  # type: ignore[override]
        data = numpy.frombuffer(self.onnx_bytes or b"", dtype=numpy.uint8)
        return {"onnx": torch.from_numpy(data.copy()), DIGEST: digest_state(self.onnx_bytes or b"")}

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        (self.onnx_bytes,) = checked_states(state_dict, ("onnx",), "ONNX")
        self._session = None

    def __getstate__(self):
        # a session cannot be copied or pickled (copy.deepcopy in
        # replace_listeners, pickling for other processes): started again on use
        state = dict(self.__dict__)
        state["_session"] = None
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        _LIVE.add(self)
