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

from typing import Any, Dict, List, Tuple

import torch
from spacy.language import Language
from spacy.util import registry
from spacy_transformers.architectures import create_TransformerModel_v3, transformer_tok2vec_v3
from spacy_transformers.layers import TransformerModel
from spacy_transformers.layers.hf_shim import HFShim
from spacy_transformers.layers.transformer_model import set_pytorch_transformer
from thinc.api import Model

from .._compat import hf_shim_state, pipeline_nodes, set_grad_scaler, stock_replace_listener_cfg
from .onnx_graph import (
    QUANTIZE,
    OnnxEncoder,
    check_cpu,
    check_quantize,
    export_onnx,
    quantize_onnx,
    require_onnxruntime,
)
from .quantize import QUANTIZED_ARCH, QUANTIZED_TOK2VEC_ARCH, QuantizedHFShim

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
_REWRITES = {
    **{f"spacy-transformers.TransformerModel.v{v}": ONNX_ARCH for v in (1, 2, 3)},
    **{f"spacy-transformers.Tok2VecTransformer.v{v}": ONNX_TOK2VEC_ARCH for v in (1, 2, 3)},
}


class OnnxTrainingError(RuntimeError):
    """A training pass through an ONNX (inference-only) encoder."""


class _OnnxAutoModel:
    """Stands in for ``AutoModel`` in ``HFShim.from_bytes``: builds an empty
    ``OnnxEncoder`` for the saved graph to load into."""

    def __init__(self, quantize: str):
        self.quantize = quantize

    def from_config(self, config):
        return OnnxEncoder(config, quantize=self.quantize)


class OnnxHFShim(HFShim):
    """An ``HFShim`` whose model is an ``OnnxEncoder``; inference only."""

    def __init__(self, model, *, quantize: str = "none", **kwargs):
        check_quantize(quantize)
        kwargs["model_cls"] = _OnnxAutoModel(quantize)
        super().__init__(model, **kwargs)
        self.quantize = quantize
        if model.transformer is not None:
            self.set_onnx(model.transformer)

    def set_onnx(self, transformer: torch.nn.Module) -> None:
        """Export ``transformer`` (a Hugging Face model, or an ``OnnxEncoder``
        already) and make the result the shim's model."""
        check_cpu("Exporting a transformer to ONNX")
        if not isinstance(transformer, OnnxEncoder):
            onnx_bytes = export_onnx(transformer.to("cpu"), self._hfmodel.tokenizer)
            if self.quantize == "int8":
                onnx_bytes = quantize_onnx(onnx_bytes)
            transformer = OnnxEncoder(transformer.config, onnx_bytes, self.quantize)
        self._model = transformer
        self._hfmodel.transformer = transformer

    def begin_update(self, inputs):
        raise OnnxTrainingError(
            "This transformer runs in ONNX Runtime and is inference-only: it cannot be trained. Train the "
            "torch pipeline and export it afterwards (spacy_crf.encoders.onnx_backend.export_pipeline); to "
            "train other components on top of it, freeze it ([training] frozen_components and "
            "annotating_components)."
        )

    def finish_update(self, optimizer):
        self.begin_update(None)

    def to_device(self, device_type: str, device_id: int):
        if device_type != "cpu":
            raise ValueError("The ONNX encoder runs on CPU only.")
        super().to_device(device_type, device_id)

    def from_bytes(self, bytes_data):
        check_cpu("Loading an ONNX transformer")
        return super().from_bytes(bytes_data)


def _set_onnx_transformer(model: TransformerModel, hf_model) -> None:
    """``set_transformer`` of an ONNX ``TransformerModel``: what ``initialize``
    calls after loading the float model from ``name``."""
    set_pytorch_transformer(model, hf_model)
    shim = model.layers[0].shims[0]
    assert isinstance(shim, OnnxHFShim)
    shim.set_onnx(hf_model.transformer)


def _onnx_replace_listener_cfg(tok2vec_model_cfg, listener_model_cfg):
    """``replace_listeners`` writes this into the listening component's config."""
    result = stock_replace_listener_cfg(tok2vec_model_cfg, listener_model_cfg)
    if result["@architectures"] == "spacy-transformers.Tok2VecTransformer.v3":
        result["@architectures"] = ONNX_TOK2VEC_ARCH
    return result


def _check_exportable(model: TransformerModel, quantize: str) -> None:
    shim = model.layers[0].shims[0]
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
    wrapper = model.layers[0]
    shim = wrapper.shims[0]
    if isinstance(shim, OnnxHFShim):
        return
    assert isinstance(shim, HFShim), type(shim)
    state = hf_shim_state(shim)
    new = OnnxHFShim(
        state["model"],
        quantize=quantize,
        config=shim.cfg,
        optimizer=state["optimizer"],
        mixed_precision=state["mixed_precision"],
        grad_scaler_config={},  # a fresh dict: HFShim writes into it
        config_cls=shim.config_cls,
        tokenizer_cls=shim.tokenizer_cls,
    )
    set_grad_scaler(new, state["grad_scaler"])
    wrapper.shims[0] = new
    model.attrs["set_transformer"] = _set_onnx_transformer
    model.attrs["replace_listener_cfg"] = _onnx_replace_listener_cfg


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
    model = create_TransformerModel_v3(
        name, get_spans, tokenizer_config, transformer_config, mixed_precision, dict(grad_scaler_config)
    )
    _install_onnx_shim(model, check_quantize(quantize))
    return model


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
    model = transformer_tok2vec_v3(
        name,
        get_spans,
        tokenizer_config,
        pooling,
        grad_factor,
        transformer_config,
        mixed_precision,
        dict(grad_scaler_config),
    )
    for node in model.walk():
        if isinstance(node, TransformerModel):
            _install_onnx_shim(node, check_quantize(quantize))
    return model


def _transformer_blocks(cfg: Any, path: Tuple[str, ...] = ()) -> List[Tuple[Tuple[str, ...], Dict]]:
    """(path, block) of every config block naming a transformer architecture."""
    found = []
    if isinstance(cfg, dict):
        arch = cfg.get("@architectures")
        if arch in _REWRITES or arch in (ONNX_ARCH, ONNX_TOK2VEC_ARCH, QUANTIZED_ARCH, QUANTIZED_TOK2VEC_ARCH):
            found.append((path, cfg))
        for key, value in cfg.items():
            found.extend(_transformer_blocks(value, path + (key,)))
    return found


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
    check_cpu("export_pipeline")
    require_onnxruntime()
    by_component: Dict[str, List[TransformerModel]] = {}
    for name, node in pipeline_nodes(nlp, once=False):
        if isinstance(node, TransformerModel):
            by_component.setdefault(name, []).append(node)
    plan = []
    for name, models in by_component.items():
        blocks = _transformer_blocks(nlp.get_pipe_config(name))
        if len(blocks) != len(models):
            raise ValueError(
                f"Cannot export component {name!r} to ONNX: its model has {len(models)} transformer(s) but its "
                f"config names {len(blocks)} spacy-transformers TransformerModel/Tok2VecTransformer block(s) "
                f"({', '.join('.'.join(p) or '(root)' for p, _ in blocks) or 'none'}), so the saved config "
                "could not rebuild the ONNX model."
            )
        for model in models:  # before changing anything: all or nothing
            _check_exportable(model, quantize)
        plan.append((models, blocks))
    if not plan:
        raise ValueError(f"No spacy-transformers transformer found in the pipeline {nlp.pipe_names}.")
    for models, blocks in plan:
        for model in models:
            _install_onnx_shim(model, quantize)
        for _, block in blocks:
            if block["@architectures"] in _REWRITES:
                block["@architectures"] = _REWRITES[block["@architectures"]]
                block["quantize"] = quantize
    return nlp
