"""ONNX Runtime inference for a pipeline's transformer encoder, on CPU.

    from spacy_crf.encoders.onnx_backend import export_pipeline
    nlp = export_pipeline(spacy.load("pipeline"))                   # float32
    nlp = export_pipeline(spacy.load("pipeline"), quantize="int8")  # int8 weights
    nlp.to_disk("pipeline-onnx")       # spacy.load() gives the ONNX pipeline back

``export_pipeline`` exports the Hugging Face model inside every
spacy-transformers ``TransformerModel`` of the pipeline (the ``transformer``
component's, and any copied into a component by ``nlp.replace_listeners``)
with ``torch.onnx.export``: batch and sequence axes dynamic, the inputs
spacy-transformers feeds (``input_ids``, ``attention_mask``, and
``token_type_ids`` where the tokenizer makes them), the outputs it keeps
(``last_hidden_state``, and ``pooler_output`` where the model has a pooler).
With ``quantize="int8"`` ONNX Runtime's dynamic quantization follows. An
``OnnxEncoder`` then stands where the torch model was: same call, same
outputs, run by an ``onnxruntime.InferenceSession``. Tokenization, alignment
and everything after the encoder are unchanged.

As in ``spacy_crf.encoders.quantize``, the pipeline's config is rewritten to
architectures of this module, ``spacy_crf.OnnxTransformerModel.v1`` and
``spacy_crf.OnnxTok2VecTransformer.v1`` (spacy-transformers'
``TransformerModel.v3`` / ``Tok2VecTransformer.v3`` plus ``quantize``), whose
``OnnxHFShim`` saves the HF config and tokenizer as spacy-transformers does,
with the ONNX graph in place of the torch weights; ``spacy.load`` needs
nothing else. A float model set into it (``nlp.initialize`` from ``name``)
is exported on the spot.

Inference only: a training pass through the encoder raises
``OnnxTrainingError``. CPU only, with ``torch.get_num_threads()`` threads
(read when a process first runs the session). Needs ``onnx`` and
``onnxruntime``: ``pip install spacy-crf[onnx]``.
"""

from typing import Any, Callable

import torch
from spacy.language import Language
from spacy.util import registry
from spacy_transformers.layers import TransformerModel
from spacy_transformers.layers.hf_shim import HFShim
from spacy_transformers.layers.transformer_model import set_pytorch_transformer
from thinc.api import Model

from .onnx_graph import (
    QUANTIZE,
    OnnxEncoder,
    check_quantize,
    export_onnx,
    quantize_onnx,
    require,
    require_onnxruntime,
)
from .quantize import QUANTIZED_ARCH, QUANTIZED_TOK2VEC_ARCH, QuantizedHFShim
from .swap import (
    TORCH_ARCHS,
    InferenceOnlyShim,
    build_tok2vec_transformer,
    build_transformer_model,
    check_cpu,
    plan_swap,
    rewrite_blocks,
    swap_hf_shim,
)

__all__ = [
    "ONNX_ARCH",
    "ONNX_TOK2VEC_ARCH",
    "QUANTIZE",
    "OnnxEncoder",
    "OnnxHFShim",
    "OnnxTrainingError",
    "export_pipeline",
    "create_onnx_transformer_model",
    "create_onnx_tok2vec_transformer",
]

ONNX_ARCH = "spacy_crf.OnnxTransformerModel.v1"
ONNX_TOK2VEC_ARCH = "spacy_crf.OnnxTok2VecTransformer.v1"
# the architectures an exportable transformer's config block may name
EXPORTABLE_ARCHS = (*TORCH_ARCHS, ONNX_ARCH, ONNX_TOK2VEC_ARCH, QUANTIZED_ARCH, QUANTIZED_TOK2VEC_ARCH)


class OnnxTrainingError(RuntimeError):
    """A training pass through an ONNX (inference-only) encoder."""


class _EmptyEncoder:
    """Stands in for ``AutoModel`` in ``HFShim.from_bytes``: builds the
    shim's empty encoder for the saved graph to load into."""

    def __init__(self, build: Callable[[Any], torch.nn.Module]):
        self.build = build

    def from_config(self, config):
        return self.build(config)


class OnnxHFShim(InferenceOnlyShim):
    """An ``HFShim`` whose model is an ``OnnxEncoder``; inference only.
    Subclasses run the graph in another runtime (``runtime``, named in
    errors): they override ``empty_encoder`` and ``exported``."""

    runtime = "ONNX Runtime"
    #: the module that runs the encoder, required when the shim is built
    #: (at load), not at the first prediction
    runtime_module = "onnxruntime"
    export_function = "spacy_crf.encoders.onnx_backend.export_pipeline"
    training_error = OnnxTrainingError
    kind = "ONNX"

    def __init__(self, model, *, quantize: str = "none", **kwargs):
        self.quantize = check_quantize(quantize)
        require(self.runtime_module, self.kind, self.kind.lower())
        kwargs["model_cls"] = _EmptyEncoder(self.empty_encoder)
        super().__init__(model, **kwargs)
        if model.transformer is not None:
            self.set_encoder(model.transformer)

    def description(self) -> str:
        return f"runs in {self.runtime}"

    def how_to_train(self) -> str:
        return f"Train the torch pipeline and export it afterwards ({self.export_function})"

    def empty_encoder(self, config) -> OnnxEncoder:
        return OnnxEncoder(config, quantize=self.quantize)

    def exported(self, transformer: torch.nn.Module) -> OnnxEncoder:
        """``transformer`` (a Hugging Face model) as this shim's encoder."""
        onnx_bytes = export_onnx(transformer, self._hfmodel.tokenizer)
        if self.quantize == "int8":
            onnx_bytes = quantize_onnx(onnx_bytes)
        return OnnxEncoder(transformer.config, onnx_bytes, self.quantize)

    def set_encoder(self, transformer: torch.nn.Module) -> None:
        """Export ``transformer`` (a Hugging Face model, or this shim's kind
        of encoder already) and make the result the shim's model."""
        check_cpu(f"Exporting a transformer to {self.runtime}", self.kind)
        if not isinstance(transformer, OnnxEncoder):
            transformer = self.exported(transformer.to("cpu"))
        self.use_encoder(transformer)


def set_exported_transformer(model: TransformerModel, hf_model) -> None:
    """``set_transformer`` of an ONNX (or OpenVINO) ``TransformerModel``: what
    ``initialize`` calls after loading the float model from ``name``; the
    shim exports it as it does any float model."""
    set_pytorch_transformer(model, hf_model)
    shim = model.layers[0].shims[0]
    assert isinstance(shim, OnnxHFShim)
    shim.set_encoder(hf_model.transformer)


def _check_exportable(model: TransformerModel, quantize: str) -> None:
    shim = model.layers[0].shims[0]
    if isinstance(shim, OnnxHFShim) and type(shim) is not OnnxHFShim:
        raise ValueError(f"This transformer already runs in {shim.runtime}: export the torch pipeline to ONNX instead.")
    if isinstance(shim, OnnxHFShim) and shim.quantize != quantize:
        raise ValueError(
            f"This transformer is already exported to ONNX with quantize={shim.quantize!r}, "
            f"not {quantize!r}: export the torch pipeline again."
        )
    if isinstance(shim, QuantizedHFShim):
        raise ValueError(
            "This transformer is quantized with torch (spacy_crf.encoders.quantize): export the "
            "float pipeline to ONNX instead, with quantize='int8' for int8 weights."
        )
    assert isinstance(shim, HFShim), type(shim)


def _install_onnx_shim(model: TransformerModel, quantize: str) -> None:
    """Make ``model`` (a spacy-transformers ``TransformerModel``) run in ONNX Runtime."""
    _check_exportable(model, quantize)
    if isinstance(model.layers[0].shims[0], OnnxHFShim):
        return
    swap_hf_shim(model, OnnxHFShim, {"quantize": quantize}, set_exported_transformer, ONNX_TOK2VEC_ARCH)


@registry.architectures(ONNX_ARCH)
def create_onnx_transformer_model(
    name: str,
    get_spans,
    tokenizer_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    transformer_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    mixed_precision: bool = False,
    grad_scaler_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    quantize: str = "none",
) -> Model:
    """``spacy-transformers.TransformerModel.v3`` whose transformer runs as an
    ONNX graph in ONNX Runtime (``quantize``: "none" or "int8"); inference only."""
    check_quantize(quantize)
    return build_transformer_model(
        name,
        get_spans,
        tokenizer_config,
        transformer_config,
        mixed_precision,
        grad_scaler_config,
        install=lambda model: _install_onnx_shim(model, quantize),
    )


@registry.architectures(ONNX_TOK2VEC_ARCH)
def create_onnx_tok2vec_transformer(
    name: str,
    get_spans,
    tokenizer_config: dict,
    pooling: Model,
    grad_factor: float = 1.0,
    transformer_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    mixed_precision: bool = False,
    grad_scaler_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    quantize: str = "none",
) -> Model:
    """``spacy-transformers.Tok2VecTransformer.v3`` with its transformer run
    as in ``spacy_crf.OnnxTransformerModel.v1``; inference only."""
    check_quantize(quantize)
    return build_tok2vec_transformer(
        name,
        get_spans,
        tokenizer_config,
        pooling,
        grad_factor,
        transformer_config,
        mixed_precision,
        grad_scaler_config,
        install=lambda model: _install_onnx_shim(model, quantize),
    )


def export_pipeline(nlp: Language, *, quantize: str = "none") -> Language:
    """Run every transformer encoder of ``nlp`` (in place) as an ONNX graph in
    ONNX Runtime, and rewrite the pipeline's config to the ONNX architectures
    so that ``nlp.to_disk`` / ``spacy.load`` (and ``spacy package``) give the
    same ONNX pipeline back, graph included. Returns ``nlp``.

    quantize: "none" (float32: predicts as torch does, to rounding) or
        "int8" (ONNX Runtime's dynamic quantization: int8 MatMul weights with
        a scale per output column, activations quantized per batch).

    Exporting an already exported pipeline with the same setting does
    nothing. The result is inference-only: training through its encoder
    raises ``OnnxTrainingError``.
    """
    check_quantize(quantize)
    check_cpu("export_pipeline", OnnxHFShim.kind)
    require_onnxruntime()
    from .openvino_backend import OPENVINO_ARCH, OPENVINO_TOK2VEC_ARCH  # it builds on this module

    archs = (*EXPORTABLE_ARCHS, OPENVINO_ARCH, OPENVINO_TOK2VEC_ARCH)  # an OpenVINO pipeline: a clear error
    plan = plan_swap(nlp, archs, "export component {name!r} to ONNX", "ONNX")
    for models, _ in plan:
        for model in models:  # before changing anything: all or nothing
            _check_exportable(model, quantize)
    for models, blocks in plan:
        for model in models:
            _install_onnx_shim(model, quantize)
        rewrite_blocks(blocks, {"model": ONNX_ARCH, "tok2vec": ONNX_TOK2VEC_ARCH}, {"quantize": quantize})
    return nlp
