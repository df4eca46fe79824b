"""Dynamic quantization of a pipeline's transformer encoder, for CPU inference.

    from spacy_crf.encoders.quantize import quantize_pipeline
    nlp = quantize_pipeline(spacy.load("pipeline"))   # dtype="qint8"
    nlp.to_disk("pipeline-int8")                      # spacy.load() gives the same
                                                      # predictions, int8 again

``quantize_pipeline`` replaces every ``torch.nn.Linear`` of the Hugging Face
model inside each spacy-transformers ``TransformerModel`` of the pipeline (the
shared ``transformer`` component, and any transformer copied into a component
by ``nlp.replace_listeners``) with a dynamically quantized one: weights stored
as int8 (or float16), activations quantized per batch. Layer norms and the CRF
heads stay float32; so do the embedding tables unless ``embeddings=True``,
which stores them as uint8 with a float scale and offset per row (weight-only:
most of a small encoder's size on disk is its word embeddings).

``dtype="bfloat16"`` quantizes nothing: the weights stay float32, and the
encoder's forward pass at prediction runs under CPU autocast to bfloat16
(matrix products in bfloat16, layer norms and softmaxes in float32, as in
training with ``spacy_crf.cpu_autocast.v1``), on a CPU where torch runs
bfloat16 natively (AVX-512 BF16 or AMX). Elsewhere it runs in float32 and
says so once at load: on an AVX2-only CPU bfloat16 products go through a
reference loop many times slower than float32.

How it survives ``nlp.to_disk`` / ``spacy.load`` / ``spacy package``:
spacy-transformers saves the encoder as its config plus a ``state_dict`` and
loads it by building a float model from the config and calling
``load_state_dict``. A quantized state dict holds packed int8 weights that a
float model cannot take. Instead of patching spacy-transformers, the
quantized encoder gets an architecture of its own, which ``quantize_pipeline``
writes into the pipeline's config (so ``config.cfg`` says what the weights
are):

* ``spacy_crf.QuantizedTransformerModel.v1``: the settings of
  ``spacy-transformers.TransformerModel.v3`` plus ``dtype`` and ``embeddings``;
* ``spacy_crf.QuantizedTok2VecTransformer.v1``: the settings of
  ``spacy-transformers.Tok2VecTransformer.v3`` plus the same two (what
  ``replace_listeners`` leaves in a component's config).

Both build the stock ``TransformerModel`` with a ``QuantizedHFShim``, which
quantizes a freshly built model before loading the saved state into it, and
quantizes any float model set into it (``nlp.initialize`` from ``name``).

The quantized encoder is inference-only: a training pass through it
(``nlp.update``, ``Transformer.update``, ``model.begin_update``) raises
``QuantizedTrainingError``. Heads can still be trained over it if the
transformer is frozen and annotating. It runs on CPU only.

Backend: ``torch.ao.quantization.quantize_dynamic`` (FBGEMM/oneDNN int8
kernels). PyTorch marks ``torch.ao.quantization`` as deprecated in favour of
``torchao``; it is still present and working in the torch versions this
package allows (< 2.15). The deprecation warnings it raises on every call are
silenced here because a user can do nothing about them; ``_quantize_module``
is the one place to change when moving to ``torchao``.
"""

import warnings
from io import BytesIO
from typing import Any, Dict, Tuple

import srsly
import torch
from spacy.language import Language
from spacy.util import registry
from spacy_transformers.layers import TransformerModel
from spacy_transformers.layers.transformer_model import set_pytorch_transformer
from thinc.api import Model
from transformers import AutoModel

from .._compat import cpu_runs_bfloat16_natively
from ..training.autocast import as_float32
from .swap import (
    TORCH_ARCHS,
    InferenceOnlyShim,
    SavedEncoderError,
    build_tok2vec_transformer,
    build_transformer_model,
    check_cpu,
    plan_swap,
    rewrite_blocks,
    swap_hf_shim,
)

QUANTIZED_ARCH = "spacy_crf.QuantizedTransformerModel.v1"
QUANTIZED_TOK2VEC_ARCH = "spacy_crf.QuantizedTok2VecTransformer.v1"
DTYPES = {"qint8": torch.qint8, "float16": torch.float16, "bfloat16": torch.bfloat16}
# the architectures a quantizable transformer's config block may name
QUANTIZABLE_ARCHS = (*TORCH_ARCHS, QUANTIZED_ARCH, QUANTIZED_TOK2VEC_ARCH)


class QuantizedTrainingError(RuntimeError):
    """A training pass through a quantized (inference-only) encoder."""


def _check_dtype(dtype: str) -> torch.dtype:
    if dtype not in DTYPES:
        raise ValueError(f"Unknown quantization dtype {dtype!r}: expected one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def _describe(dtype: str) -> str:
    return "set to predict in bfloat16" if dtype == "bfloat16" else f"dynamically quantized ({dtype})"


def _quantize_module(module: torch.nn.Module, dtype: str, embeddings: bool = False) -> torch.nn.Module:
    """Return ``module`` with every ``torch.nn.Linear`` dynamically quantized
    to ``dtype`` and, with ``embeddings``, every ``torch.nn.Embedding``
    weight-only quantized to uint8 (in place), in eval mode. The only call into
    the quantization backend."""
    from torch.ao.quantization import (
        float16_dynamic_qconfig,
        float_qparams_weight_only_qconfig,
        per_channel_dynamic_qconfig,
        quantize_dynamic,
    )

    _check_dtype(dtype)
    # int8 weights get one scale per output row: on the joint CWS + NER
    # pipeline that loses about half as much F as one scale per matrix, at the
    # same speed (activations are quantized per tensor, per batch, either way)
    spec: Dict[type, Any] = {}
    if dtype != "bfloat16":  # bfloat16 is autocast at prediction, not stored
        spec[torch.nn.Linear] = per_channel_dynamic_qconfig if dtype == "qint8" else float16_dynamic_qconfig
    if embeddings:
        spec[torch.nn.Embedding] = float_qparams_weight_only_qconfig
    module.eval()
    if not spec:
        return module
    with warnings.catch_warnings():
        # torch.ao.quantization and quantized tensor creation are deprecated
        # upstream (see the module docstring); nothing for a user to act on.
        warnings.filterwarnings("ignore", message=r".*torch\.ao\.quantization is deprecated.*")
        warnings.filterwarnings("ignore", message=r".*quantized tensor creation functions.*deprecated.*")
        return quantize_dynamic(module, spec, inplace=True)


def is_quantized(module: torch.nn.Module) -> bool:
    """Whether ``module`` holds dynamically quantized linear layers and no float ones."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

    kinds = {type(m) for m in module.modules()}
    return any(issubclass(k, DynamicLinear) for k in kinds) and torch.nn.Linear not in kinds


#: the linear layers' weights that each dtype saves ("float32": not quantized)
SAVED_LINEAR = {"qint8": "qint8", "float16": "float16", "bfloat16": "float32"}


def saved_as(state: Dict[str, Any]) -> Tuple[str, bool]:
    """What a saved encoder's state dict holds: its linear layers' weights
    ("qint8", "float16", or "float32" as a float encoder saves them) and
    whether its embedding tables are quantized (uint8)."""
    packed = {key[: -len(".dtype")]: value for key, value in state.items() if key.endswith("._packed_params.dtype")}
    linear = {str(value).replace("torch.", "") for key, value in packed.items() if f"{key}._packed_params" in state}
    embeddings = any(f"{key}._packed_weight" in state for key in packed)
    return "/".join(sorted(linear)) or "float32", embeddings


def _layers(linear: str, embeddings: bool) -> str:
    return f"{linear} linear layers and {'uint8' if embeddings else 'float32'} embeddings"


class _QuantizedAutoModel:
    """Stands in for ``AutoModel`` in ``HFShim.from_bytes``: the model it
    builds from a config is quantized, so the saved state loads into it."""

    def __init__(self, dtype: str, embeddings: bool):
        self.dtype = dtype
        self.embeddings = embeddings

    def from_config(self, config):
        return _quantize_module(AutoModel.from_config(config), self.dtype, self.embeddings)


class QuantizedHFShim(InferenceOnlyShim):
    """An ``HFShim`` whose model is dynamically quantized, or predicts under
    bfloat16 autocast; inference only."""

    training_error = QuantizedTrainingError
    kind = "quantized"

    def __init__(self, model, *, dtype: str = "qint8", embeddings: bool = False, **kwargs):
        _check_dtype(dtype)
        kwargs["model_cls"] = _QuantizedAutoModel(dtype, embeddings)
        super().__init__(model, **kwargs)
        self.dtype = dtype
        self.embeddings = embeddings
        self.autocast = dtype == "bfloat16" and cpu_runs_bfloat16_natively()
        if dtype == "bfloat16" and not self.autocast:
            warnings.warn(
                "This transformer predicts in bfloat16 where the CPU runs it natively (AVX-512 BF16 or AMX); "
                "this CPU does not, so it predicts in float32.",
                stacklevel=2,
            )
        if model.transformer is not None and not is_quantized(model.transformer):
            self.set_quantized(model.transformer)

    def description(self) -> str:
        return f"is {_describe(self.dtype)}"

    def how_to_train(self) -> str:
        return "Train the float pipeline and quantize it afterwards (spacy_crf.encoders.quantize.quantize_pipeline)"

    def predict(self, inputs):
        if not self.autocast:
            return super().predict(inputs)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return as_float32(super().predict(inputs))

    def set_quantized(self, transformer: torch.nn.Module) -> None:
        """Quantize ``transformer`` (a float or already quantized HF model) and
        make it the shim's model."""
        check_cpu("Quantizing a transformer", self.kind)
        transformer = transformer.to("cpu")
        if not is_quantized(transformer):
            transformer = _quantize_module(transformer, self.dtype, self.embeddings)
        self.use_encoder(transformer)

    def from_bytes(self, bytes_data):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r".*quantized tensor creation functions.*deprecated.*")
            warnings.filterwarnings("ignore", message=r".*TypedStorage is deprecated.*")  # torch.load of qtensors
            self._check_saved(bytes_data)
            return super().from_bytes(bytes_data)

    def _check_saved(self, bytes_data) -> None:
        """Refuse weights saved by another encoder: float weights fail in the
        quantized layers with a ``KeyError`` that reads as a damaged file, and
        weights that fit no layer load with strict=False (spacy-transformers'
        fallback) into random ones, with a warning at most. The state is read
        once more for this, which a load can afford."""
        msg = srsly.msgpack_loads(bytes_data)
        if not msg.get("config"):  # saved before initialize: no weights
            return
        found = saved_as(torch.load(BytesIO(msg["state"]), map_location="cpu"))
        expected = (SAVED_LINEAR[self.dtype], self.embeddings)
        if found != expected:
            raise SavedEncoderError(
                f"expected {_layers(*expected)} (dtype {self.dtype!r}, embeddings {self.embeddings}), found "
                f"{_layers(*found)}: was this pipeline saved with another encoder (a float one, or one "
                "quantized otherwise) but configured with these settings?"
            )


def _set_quantized_transformer(model: TransformerModel, hf_model) -> None:
    """``set_transformer`` of a quantized ``TransformerModel``: what
    ``initialize`` calls after loading the float model from ``name``."""
    set_pytorch_transformer(model, hf_model)
    shim = model.layers[0].shims[0]
    assert isinstance(shim, QuantizedHFShim)
    shim.set_quantized(hf_model.transformer)


def _install_quantized_shim(model: TransformerModel, dtype: str, embeddings: bool) -> None:
    """Make ``model`` (a spacy-transformers ``TransformerModel``) quantized."""
    shim = model.layers[0].shims[0]
    if isinstance(shim, QuantizedHFShim):
        if (shim.dtype, shim.embeddings) != (dtype, embeddings):
            raise ValueError(
                f"This transformer is already quantized (dtype={shim.dtype}, embeddings={shim.embeddings}), "
                f"not as asked (dtype={dtype}, embeddings={embeddings})."
            )
        return
    swap_hf_shim(
        model,
        QuantizedHFShim,
        {"dtype": dtype, "embeddings": embeddings},
        _set_quantized_transformer,
        QUANTIZED_TOK2VEC_ARCH,
    )


@registry.architectures(QUANTIZED_ARCH)
def create_quantized_transformer_model(
    name: str,
    get_spans,
    tokenizer_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    transformer_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    mixed_precision: bool = False,
    grad_scaler_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    dtype: str = "qint8",
    embeddings: bool = False,
) -> Model:
    """``spacy-transformers.TransformerModel.v3`` with its linear layers
    dynamically quantized to ``dtype`` ("qint8" or "float16"; "bfloat16":
    float32 weights, bfloat16 autocast at prediction) and, with
    ``embeddings``, its embedding tables stored as uint8; inference only."""
    return build_transformer_model(
        name,
        get_spans,
        tokenizer_config,
        transformer_config,
        mixed_precision,
        grad_scaler_config,
        install=lambda model: _install_quantized_shim(model, dtype, embeddings),
    )


@registry.architectures(QUANTIZED_TOK2VEC_ARCH)
def create_quantized_tok2vec_transformer(
    name: str,
    get_spans,
    tokenizer_config: dict,
    pooling: Model,
    grad_factor: float = 1.0,
    transformer_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    mixed_precision: bool = False,
    grad_scaler_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    dtype: str = "qint8",
    embeddings: bool = False,
) -> Model:
    """``spacy-transformers.Tok2VecTransformer.v3`` with its transformer
    quantized as in ``spacy_crf.QuantizedTransformerModel.v1``; inference only."""
    return build_tok2vec_transformer(
        name,
        get_spans,
        tokenizer_config,
        pooling,
        grad_factor,
        transformer_config,
        mixed_precision,
        grad_scaler_config,
        install=lambda model: _install_quantized_shim(model, dtype, embeddings),
    )


def quantize_pipeline(nlp: Language, dtype: str = "qint8", embeddings: bool = False) -> Language:
    """Dynamically quantize the linear layers of every transformer encoder in
    ``nlp`` (in place) for CPU inference, and rewrite the pipeline's config to
    the quantized architectures so that ``nlp.to_disk`` / ``spacy.load`` (and
    ``spacy package``) give the same quantized pipeline back. Returns ``nlp``.

    dtype: "qint8" (int8 weights with a scale per output row, activations
        quantized per batch),
        "float16" (float16 weights; faster than float32 on CPUs with fp16
        GEMM kernels and predicts the same, but torch saves these weights as
        float32, so the pipeline is no smaller on disk) or
        "bfloat16" (float32 weights; the forward pass under bfloat16
        autocast on CPUs that run bfloat16 natively, float32 elsewhere).
    embeddings: also store the encoder's embedding tables as uint8 (one float
        scale and offset per row), which shrinks a small encoder on disk
        several times over; off by default.

    Quantizing an already quantized pipeline with the same settings does nothing.
    The result is inference-only: training through its encoder raises
    ``QuantizedTrainingError``.
    """
    _check_dtype(dtype)
    check_cpu("quantize_pipeline", QuantizedHFShim.kind)
    plan = plan_swap(nlp, QUANTIZABLE_ARCHS, "quantize component {name!r}", "quantized")
    for models, blocks in plan:
        for model in models:
            _install_quantized_shim(model, dtype, embeddings)
        rewrite_blocks(
            blocks,
            {"model": QUANTIZED_ARCH, "tok2vec": QUANTIZED_TOK2VEC_ARCH},
            {"dtype": dtype, "embeddings": embeddings},
        )
    return nlp
