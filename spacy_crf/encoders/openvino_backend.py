"""OpenVINO inference for a pipeline's transformer encoder, on CPU.

    from spacy_crf.encoders.openvino_backend import export_openvino
    nlp = export_openvino(spacy.load("pipeline"))                    # float32
    nlp = export_openvino(spacy.load("pipeline"), quantize="int8",   # static int8
                          calibration=training_texts)
    nlp.to_disk("pipeline-openvino")   # spacy.load() gives the OpenVINO pipeline back

The encoder is exported to ONNX as in :mod:`.onnx_backend` and read into
OpenVINO. With ``quantize="int8"``, NNCF's post-training quantization then
makes it a static int8 model: every dense product's input range is fixed
beforehand from the encoder's inputs on ``calibration`` (texts run through
the float pipeline, as ``nlp.pipe`` feeds them), and its weights are int8
per output channel. On CPUs with int8 dot products (AVX-512 VNNI, AVX-VNNI,
AMX) this is the fastest encoder of the package; see docs/results.md.
``precision`` is OpenVINO's inference precision for what is not int8:
"float32", or "bfloat16" where the CPU runs it natively (float32 elsewhere).
It is a run-time setting in the config, not part of the saved model.

The pipeline's config names ``spacy_crf.OpenVINOTransformerModel.v1`` (and
``spacy_crf.OpenVINOTok2VecTransformer.v1`` for a transformer copied into a
component by ``nlp.replace_listeners``): spacy-transformers'
``TransformerModel.v3`` / ``Tok2VecTransformer.v3`` plus ``quantize`` and
``precision``. The OpenVINO model (IR) is saved where the torch weights
were; ``spacy.load`` needs ``openvino`` and nothing else. Exporting needs
``onnx`` and, for int8, ``nncf``: ``pip install spacy-crf[openvino]``.
Inference only, as the ONNX encoder.
"""

import os
import tempfile
import warnings
from typing import Dict, Iterable, List, Optional, Tuple

import numpy
import torch
from spacy.language import Language
from spacy.util import registry
from spacy_transformers.layers import TransformerModel
from thinc.api import Model

from .._compat import hf_shim_state, pipeline_nodes
from ..hardware import has_int8_dot_products
from .onnx_backend import EXPORTABLE_ARCHS, OnnxHFShim, set_exported_transformer
from .onnx_graph import DIGEST, OnnxEncoder, check_quantize, checked_states, digest_state, export_onnx, require
from .quantize import QuantizedHFShim
from .swap import (
    SavedEncoderError,
    build_tok2vec_transformer,
    build_transformer_model,
    check_cpu,
    plan_swap,
    rewrite_blocks,
    swap_hf_shim,
)

__all__ = [
    "OPENVINO_ARCH",
    "OPENVINO_TOK2VEC_ARCH",
    "PRECISIONS",
    "OpenVINOEncoder",
    "OpenVINOHFShim",
    "SlowInt8Warning",
    "export_openvino",
    "record_encoder_inputs",
]

OPENVINO_ARCH = "spacy_crf.OpenVINOTransformerModel.v1"
OPENVINO_TOK2VEC_ARCH = "spacy_crf.OpenVINOTok2VecTransformer.v1"
PRECISIONS = ("float32", "bfloat16")
_HINTS = {"float32": "f32", "bfloat16": "bf16"}
Batch = Dict[str, numpy.ndarray]


def _openvino():
    return require("openvino", "OpenVINO", "openvino")


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"Unknown OpenVINO precision {precision!r}: expected one of {list(PRECISIONS)}")
    return precision


def inference_hint(precision: str, capabilities: Iterable[str]) -> str:
    """OpenVINO's ``INFERENCE_PRECISION_HINT`` for ``precision`` on a CPU
    with ``capabilities`` (its ``OPTIMIZATION_CAPABILITIES``): bfloat16
    only where the CPU has it. Always explicit, because OpenVINO's own
    default on such a CPU is bfloat16, also for a float32 model."""
    return _HINTS[precision] if precision == "float32" or "BF16" in capabilities else "f32"


class SlowInt8Warning(UserWarning):
    """An int8 OpenVINO encoder on a CPU without int8 dot products."""


SLOW_INT8 = (
    "This pipeline's encoder is OpenVINO static int8, and this CPU has no int8 dot products "
    "(AVX-512 VNNI, AVX-VNNI or AMX): OpenVINO runs int8 here slower than float32. On such a CPU an "
    "encoder exported to ONNX Runtime int8 is the fastest (spacy_crf.encoders.onnx_backend.export_pipeline "
    'with quantize="int8", or the project\'s quantize var "onnx-int8"; see the Speed page of the docs).'
)


class _Port:
    def __init__(self, name: str):
        self.name = name


class OpenVINOSession:
    """A compiled OpenVINO model behind the three calls of an ONNX Runtime
    session that ``OnnxEncoder.forward`` makes."""

    def __init__(self, xml: bytes, weights: bytes, precision: str):
        ov = _openvino()
        core = ov.Core()
        hint = inference_hint(precision, core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
        config = {
            "INFERENCE_PRECISION_HINT": hint,
            "INFERENCE_NUM_THREADS": torch.get_num_threads(),
            "NUM_STREAMS": 1,  # one request at a time, as nlp.pipe sends them
            "PERFORMANCE_HINT": "LATENCY",
        }
        if "ENABLE_CPU_PINNING" in core.get_property("CPU", "SUPPORTED_PROPERTIES"):
            # OpenVINO pins its threads to cores by default (where the OS lets
            # it); like torch and ONNX Runtime, leave that to the OS, which
            # sees the other processes
            config["ENABLE_CPU_PINNING"] = False
        self.compiled = core.compile_model(core.read_model(xml, weights), "CPU", config)
        self.request = self.compiled.create_infer_request()
        self.inference_precision = hint

    def get_inputs(self) -> List[_Port]:
        return [_Port(port.get_any_name()) for port in self.compiled.inputs]

    def get_outputs(self) -> List[_Port]:
        return [_Port(port.get_any_name()) for port in self.compiled.outputs]

    def run(self, output_names: Optional[List[str]], feeds: Batch) -> List[numpy.ndarray]:
        result = self.request.infer(feeds)  # copies the outputs (the request reuses its buffers)
        return [result[port] for port in self.compiled.outputs]


class OpenVINOEncoder(OnnxEncoder):
    """An ``OnnxEncoder`` whose graph is an OpenVINO model (IR: ``xml`` and
    ``weights``), run by OpenVINO. Its state dict is the two as uint8 tensors."""

    def __init__(
        self,
        config,
        ir: Optional[Tuple[bytes, bytes]] = None,
        quantize: str = "none",
        precision: str = "float32",
    ):
        super().__init__(config, None, quantize)
        self.ir = ir
        self.precision = check_precision(precision)

    def session(self) -> OpenVINOSession:
        if self.ir is None:
            raise ValueError("This OpenVINO encoder holds no model yet: initialize or load the pipeline first.")
        if self._session is None:
            if self.quantize == "int8" and has_int8_dot_products() is False:
                warnings.warn(SlowInt8Warning(SLOW_INT8), stacklevel=2)
            self._session = OpenVINOSession(*self.ir, self.precision)
        return self._session

    def state_dict(self, *args, **kwargs) -> Dict[str, torch.Tensor]:  # type: ignore[override]
        xml, weights = self.ir or (b"", b"")
        return {
            "openvino_xml": torch.from_numpy(numpy.frombuffer(xml, dtype=numpy.uint8).copy()),
            "openvino_weights": torch.from_numpy(numpy.frombuffer(weights, dtype=numpy.uint8).copy()),
            DIGEST: digest_state(xml, weights),
        }

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        xml, weights = checked_states(state_dict, ("openvino_xml", "openvino_weights"), "OpenVINO")
        ir = (xml, weights)
        # saved before digests: parsing (milliseconds) checks the XML and the weights' ranges
        if DIGEST not in state_dict:
            try:
                _openvino().Core().read_model(*ir)
            except RuntimeError as e:
                raise SavedEncoderError(
                    f"The saved OpenVINO encoder is damaged ({len(ir[0]):,} bytes of XML, {len(ir[1]):,} of weights): "
                    f"{str(e).strip().splitlines()[-1][:200]}"
                ) from None
        self.ir = ir
        self._session = None


def export_ir(transformer: torch.nn.Module, tokenizer, quantize: str, calibration: Optional[List[Batch]]):
    """The OpenVINO model (xml, weights) of a Hugging Face model: float32, or
    static int8 calibrated on ``calibration`` (the encoder's inputs)."""
    return openvino_ir(export_onnx(transformer, tokenizer), quantize, calibration)


def openvino_ir(onnx_bytes: bytes, quantize: str, calibration: Optional[List[Batch]]) -> Tuple[bytes, bytes]:
    """:func:`export_ir` of an exported ONNX graph."""
    ov = _openvino()
    model = ov.Core().read_model(onnx_bytes)
    if quantize == "int8":
        if not calibration:
            raise ValueError(
                "Static int8 quantization for OpenVINO needs calibration texts: export the float pipeline with "
                "spacy_crf.encoders.openvino_backend.export_openvino(nlp, quantize='int8', calibration=texts)."
            )
        nncf = require("nncf", "OpenVINO", "openvino")
        names = {port.get_any_name() for port in model.inputs}
        feeds = [{n: v for n, v in batch.items() if n in names} for batch in calibration]
        model = nncf.quantize(model, nncf.Dataset(feeds), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(feeds))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "encoder.xml")
        # float32 weights as they are (OpenVINO stores float16 by default)
        ov.save_model(model, path, compress_to_fp16=False)
        with open(path, "rb") as xml, open(os.path.join(tmp, "encoder.bin"), "rb") as weights:
            return xml.read(), weights.read()


class OpenVINOHFShim(OnnxHFShim):
    """An ``HFShim`` whose model is an ``OpenVINOEncoder``; inference only.
    ``calibration``: the encoder's inputs for a static int8 export when the
    shim is made (not kept)."""

    runtime = "OpenVINO"
    runtime_module = "openvino"
    export_function = "spacy_crf.encoders.openvino_backend.export_openvino"
    kind = "OpenVINO"

    def __init__(
        self,
        model,
        *,
        quantize: str = "none",
        precision: str = "float32",
        calibration: Optional[List[Batch]] = None,
        **kwargs,
    ):
        self.precision = check_precision(precision)
        self.calibration = calibration
        super().__init__(model, quantize=quantize, **kwargs)
        self.calibration = None

    def empty_encoder(self, config) -> OpenVINOEncoder:
        return OpenVINOEncoder(config, quantize=self.quantize, precision=self.precision)

    def exported(self, transformer: torch.nn.Module) -> OpenVINOEncoder:
        ir = export_ir(transformer, self._hfmodel.tokenizer, self.quantize, self.calibration)
        return OpenVINOEncoder(transformer.config, ir, self.quantize, self.precision)


def _check_exportable(model: TransformerModel, quantize: str, precision: str) -> None:
    shim = model.layers[0].shims[0]
    if isinstance(shim, OpenVINOHFShim):
        if (shim.quantize, shim.precision) != (quantize, precision):
            raise ValueError(
                f"This transformer is already exported to OpenVINO with quantize={shim.quantize!r}, "
                f"precision={shim.precision!r}, not {quantize!r}, {precision!r}: export the torch pipeline again."
            )
    elif isinstance(shim, (OnnxHFShim, QuantizedHFShim)):
        raise ValueError(
            f"This transformer is already exported or quantized ({type(shim).__name__}): export the float "
            "torch pipeline to OpenVINO instead."
        )


def _install(model: TransformerModel, quantize: str, precision: str, calibration=None) -> None:
    """Make ``model`` (a spacy-transformers ``TransformerModel``) run in OpenVINO."""
    _check_exportable(model, quantize, precision)
    if isinstance(model.layers[0].shims[0], OpenVINOHFShim):
        return
    settings = {"quantize": quantize, "precision": precision, "calibration": calibration}
    swap_hf_shim(model, OpenVINOHFShim, settings, set_exported_transformer, OPENVINO_TOK2VEC_ARCH)


@registry.architectures(OPENVINO_ARCH)
def create_openvino_transformer_model(
    name: str,
    get_spans,
    tokenizer_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    transformer_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    mixed_precision: bool = False,
    grad_scaler_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    quantize: str = "none",
    precision: str = "float32",
) -> Model:
    """``spacy-transformers.TransformerModel.v3`` whose transformer runs as
    an OpenVINO model (``quantize``: "none" or "int8"; ``precision``:
    "float32" or "bfloat16"); inference only."""
    check_quantize(quantize)
    check_precision(precision)
    return build_transformer_model(
        name,
        get_spans,
        tokenizer_config,
        transformer_config,
        mixed_precision,
        grad_scaler_config,
        install=lambda model: _install(model, quantize, precision),
    )


@registry.architectures(OPENVINO_TOK2VEC_ARCH)
def create_openvino_tok2vec_transformer(
    name: str,
    get_spans,
    tokenizer_config: dict,
    pooling: Model,
    grad_factor: float = 1.0,
    transformer_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    mixed_precision: bool = False,
    grad_scaler_config: dict = {},  # noqa: B006 (spacy-transformers' defaults; never mutated)
    quantize: str = "none",
    precision: str = "float32",
) -> Model:
    """``spacy-transformers.Tok2VecTransformer.v3`` with its transformer run
    as in ``spacy_crf.OpenVINOTransformerModel.v1``; inference only."""
    check_quantize(quantize)
    check_precision(precision)
    return build_tok2vec_transformer(
        name,
        get_spans,
        tokenizer_config,
        pooling,
        grad_factor,
        transformer_config,
        mixed_precision,
        grad_scaler_config,
        install=lambda model: _install(model, quantize, precision),
    )


def record_encoder_inputs(nlp: Language, texts: Iterable[str], batch_size: int = 128) -> Dict[int, List[Batch]]:
    """What each transformer of ``nlp`` is fed while ``nlp.pipe`` runs over
    ``texts``, batch by batch: ``{id(Hugging Face model): [inputs, ...]}``."""
    recorded: Dict[int, List[Batch]] = {}
    models = []
    for _, node in pipeline_nodes(nlp):
        if isinstance(node, TransformerModel):
            hf_model = hf_shim_state(node.layers[0].shims[0])["model"].transformer  # type: ignore[attr-defined]
            if hf_model is not None and id(hf_model) not in recorded:
                recorded[id(hf_model)] = []
                models.append(hf_model)

    def recording(hf_model, batches):
        forward = hf_model.forward

        def call(*args, **kwargs):
            batches.append(
                {n: v.detach().cpu().numpy().astype(numpy.int64) for n, v in kwargs.items() if v is not None}
            )
            return forward(*args, **kwargs)

        return call

    for hf_model in models:
        hf_model.forward = recording(hf_model, recorded[id(hf_model)])
    try:
        for _ in nlp.pipe(texts, batch_size=batch_size):
            pass
    finally:
        for hf_model in models:
            del hf_model.forward  # the instance attribute: the class's forward again
    return recorded


def export_openvino(
    nlp: Language,
    *,
    quantize: str = "none",
    precision: str = "float32",
    calibration: Iterable[str] = (),
    batch_size: int = 128,
) -> Language:
    """Run every transformer encoder of ``nlp`` (in place) as an OpenVINO
    model, and rewrite the pipeline's config to the OpenVINO architectures so
    that ``nlp.to_disk`` / ``spacy.load`` (and ``spacy package``) give the
    same pipeline back, model included. Returns ``nlp``.

    quantize: "none" (float32 weights) or "int8" (static int8, calibrated on
        the encoders' inputs for ``calibration``, texts that ``nlp.pipe``
        runs in batches of ``batch_size``; a few hundred training texts).
    precision: what is not int8 runs in "float32", or in "bfloat16" where the
        CPU has it natively.

    Exporting an already exported pipeline with the same settings does nothing.
    """
    check_quantize(quantize)
    check_precision(precision)
    check_cpu("export_openvino", OpenVINOHFShim.kind)
    _openvino()
    require("onnx", "OpenVINO", "openvino")  # the export goes through ONNX
    if quantize == "int8":
        require("nncf", "OpenVINO", "openvino")  # before the calibration texts run
    archs = (*EXPORTABLE_ARCHS, OPENVINO_ARCH, OPENVINO_TOK2VEC_ARCH)
    plan = plan_swap(nlp, archs, "export component {name!r} to OpenVINO", "OpenVINO")
    for models, _ in plan:
        for model in models:  # before changing anything: all or nothing
            _check_exportable(model, quantize, precision)
    recorded: Dict[int, List[Batch]] = {}
    needs_export = any(not isinstance(m.layers[0].shims[0], OpenVINOHFShim) for models, _ in plan for m in models)
    if quantize == "int8" and needs_export:
        texts = [t for t in calibration if t.strip()]
        if not texts:
            raise ValueError("export_openvino(quantize='int8') needs calibration texts (a few hundred training texts)")
        recorded = record_encoder_inputs(nlp, texts, batch_size)
    for models, blocks in plan:
        for model in models:
            hf_model = hf_shim_state(model.layers[0].shims[0])["model"].transformer  # type: ignore[attr-defined]
            _install(model, quantize, precision, recorded.get(id(hf_model)))
        rewrite_blocks(
            blocks,
            {"model": OPENVINO_ARCH, "tok2vec": OPENVINO_TOK2VEC_ARCH},
            {"quantize": quantize, "precision": precision},
        )
    return nlp
