"""int8 quantizations of a trained pipeline's ONNX encoder, side by side in one run.

    python scripts/bench_onnx_int8.py PIPELINE --calibration SXU_TRAIN.spacy MSRA_TRAIN.spacy \
        --dev SXU_DEV.spacy MSRA_DEV.spacy [--variants dynamic,static-minmax] \
        [--calibration-docs 400] [--dev-docs 512] [--repeats 3] [--out bench_onnx_int8.json]

PIPELINE is a float32 torch pipeline (``assemble --quantize none``). Its
encoder is exported to ONNX as ``export_pipeline`` does, then quantized in
each of these ways with ONNX Runtime's quantization tools:

* ``dynamic``: what ``export_pipeline(quantize="int8")`` ships: int8 weights
  (a scale per output column), activations quantized per batch at run time;
* ``dynamic-matmul``: the same, the embedding tables left in float32;
* ``dynamic-reduce-range``: 7-bit weights, which ONNX Runtime advises for
  the u8s8 kernels of CPUs without VNNI (their 16-bit sums can saturate);
* ``float32-fused`` / ``dynamic-fused``: ONNX Runtime's Python transformer
  fusions (``onnxruntime.transformers`` ``optimize_model``: fused attention,
  embeddings + layer norm, skip layer norms, bias + GELU) on the float32
  graph, alone and then quantized as ``dynamic`` (the quantizer turns the
  fused attention and embeddings into its int8 ``QAttention`` and
  ``QEmbedLayerNormalization``); the shipped graphs are unfused;
* ``openvino-int8`` / ``openvino-int8-bfloat16``: what
  ``export_openvino(quantize="int8")`` ships, OpenVINO with NNCF's static
  int8 calibrated on the same texts as the static variants below, the rest
  in float32 or in bfloat16 (where the CPU has it), run by OpenVINO;
* ``static-minmax`` / ``static-percentile`` / ``static-entropy``: static
  quantization (QOperator format, int8 weights per column, 7-bit weights as
  above): every MatMul's input range fixed beforehand, calibrated on the
  encoder's inputs for the first ``--calibration-docs`` texts of each
  training file, by the range seen, its 99.99th percentile, or the entropy
  criterion.

The inputs are those spacy-transformers feeds the encoder (its strided
spans, padded per batch), recorded from ``nlp.pipe`` over the texts. For
each variant, on the first ``--dev-docs`` texts of each dev file: the mean
absolute difference of its last hidden state from float32's (real pieces
only, not padding), its seconds for the dev batches (best and median pass
of ``--repeats``, the variants in a rotating order on every pass), the
ratio to float32, and the graph's size. The error of the hidden state is a
proxy; ``scripts/bench_pipeline_backends.py`` measures word and entity F for
the shipped backends.

Static quantization is worth shipping only where it beats dynamic, in speed
at no more error: run this on the target CPU (results: docs/results.md,
"int8 encoders: static and dynamic").
"""

import argparse
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy
import torch
from bench_common import check_args, encoder_of, finish, load_transformer_pipeline, read_texts

from spacy_crf.encoders.onnx_graph import _session, export_onnx, quantize_onnx, require_onnxruntime
from spacy_crf.encoders.openvino_backend import OpenVINOSession, openvino_ir, record_encoder_inputs
from spacy_crf.hardware import hardware

Batch = Dict[str, numpy.ndarray]
VARIANTS = (
    "dynamic",
    "dynamic-matmul",
    "dynamic-reduce-range",
    "float32-fused",
    "dynamic-fused",
    "openvino-int8",
    "openvino-int8-bfloat16",
    "static-minmax",
    "static-percentile",
    "static-entropy",
)
#: rows per calibration batch: ONNX Runtime's histogram calibrators stack the
#: batches, so every one has the same shape
CALIBRATION_ROWS = 16


def record_inputs(nlp, texts: List[str], batch_size: int) -> List[Batch]:
    """The encoder's inputs for ``texts``, batch by batch, as spacy-transformers
    feeds them during ``nlp.pipe``."""
    with nlp.select_pipes(enable=["transformer"]):
        return record_encoder_inputs(nlp, texts, batch_size)[id(encoder_of(nlp))]


def fixed_shape(batches: List[Batch], names: List[str], rows: int) -> List[Batch]:
    """``batches`` re-cut to ``rows`` sequences each (fewer, in one batch, if
    there are fewer), padded to the longest (attention mask 0); the last
    partial batch is dropped."""
    length = max(b["input_ids"].shape[1] for b in batches)
    stacked = {}
    for name in names:
        parts = []
        for batch in batches:
            part = numpy.zeros((batch[name].shape[0], length), dtype=numpy.int64)
            part[:, : batch[name].shape[1]] = batch[name]
            parts.append(part)
        stacked[name] = numpy.concatenate(parts)
    total = len(stacked[names[0]])
    rows = min(rows, total)
    return [{n: stacked[n][i : i + rows] for n in names} for i in range(0, total - rows + 1, rows)]


def fuse(source: str, target: str, config) -> None:
    """The float32 graph at ``source`` with ONNX Runtime's transformer fusions,
    written to ``target`` (the session still applies its own on top)."""
    from onnxruntime.transformers.optimizer import optimize_model

    model = optimize_model(
        source, model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size, opt_level=0
    )
    fused = {op: n for op, n in model.get_fused_operator_statistics().items() if n}
    print(f"fused: {fused or 'nothing'}", flush=True)
    model.save_model_to_file(target)


def quantizers(calibration: List[Batch], names: List[str], config) -> Dict[str, Callable[[str, str], None]]:
    """variant -> quantize(float_path, target_path)."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter(fixed_shape(calibration, names, CALIBRATION_ROWS))

        def get_next(self):
            return next(self.batches, None)

    def shipped(source: str, target: str) -> None:
        Path(target).write_bytes(quantize_onnx(Path(source).read_bytes()))

    def dynamic(**options) -> Callable[[str, str], None]:
        return lambda source, target: quantize_dynamic(
            source, target, weight_type=QuantType.QInt8, per_channel=True, **options
        )

    def fused_dynamic(source: str, target: str) -> None:
        fuse(source, target + ".fused", config)
        # the fused ops are outside ONNX's shape inference: their outputs' type is given
        dynamic(extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})(target + ".fused", target)

    def static(method, **extra) -> Callable[[str, str], None]:
        return lambda source, target: quantize_static(
            source,
            target,
            Reader(),
            quant_format=QuantFormat.QOperator,
            per_channel=True,
            reduce_range=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            calibrate_method=method,
            extra_options=extra,
        )

    return {
        "dynamic": shipped,
        "dynamic-matmul": dynamic(op_types_to_quantize=["MatMul"]),
        "dynamic-reduce-range": dynamic(reduce_range=True),
        "float32-fused": lambda source, target: fuse(source, target, config),
        "dynamic-fused": fused_dynamic,
        "static-minmax": static(CalibrationMethod.MinMax),
        "static-percentile": static(CalibrationMethod.Percentile, CalibPercentile=99.99),
        "static-entropy": static(CalibrationMethod.Entropy),
    }


def hidden_error(session, batches: List[Batch], names: List[str], reference: List[numpy.ndarray]) -> float:
    """Mean absolute difference from ``reference`` over the real (unpadded) pieces."""
    total, count = 0.0, 0
    for batch, ref in zip(batches, reference):
        out = session.run(None, {n: batch[n] for n in names})[0]
        mask = batch["attention_mask"].astype(bool)
        total += float(numpy.abs(out - ref)[mask].sum())
        count += int(mask.sum()) * ref.shape[-1]
    return total / max(count, 1)


def fused_attention(graph: bytes) -> bool:
    """Whether ``graph`` runs attention as one fused op (float32 or int8)."""
    import onnx

    return any(node.op_type in ("Attention", "QAttention") for node in onnx.load_from_string(graph).graph.node)


def bench(args: argparse.Namespace) -> Dict[str, Any]:
    require_onnxruntime()
    torch.set_num_threads(args.threads)
    nlp = load_transformer_pipeline(args.pipeline)
    shim = nlp.get_pipe("transformer").model.layers[0].shims[0]
    calibration = record_inputs(nlp, read_texts(args.calibration, args.calibration_docs, nlp.vocab), args.batch_size)
    dev = record_inputs(nlp, read_texts(args.dev, args.dev_docs, nlp.vocab), args.batch_size)
    pieces = sum(int(b["attention_mask"].sum()) for b in dev)
    print(f"calibration: {len(calibration)} batches; dev: {len(dev)} batches, {pieces:,} pieces", flush=True)
    graphs: Dict[str, bytes] = {"float32": export_onnx(shim._hfmodel.transformer, shim._hfmodel.tokenizer)}
    session = _session(graphs["float32"])
    names = [i.name for i in session.get_inputs()]
    make = quantizers(calibration, names, shim._hfmodel.transformer.config)
    seconds_to_quantize: Dict[str, float] = {}
    openvino: Dict[str, Any] = {}  # variant -> its OpenVINO session
    logging.disable(logging.WARNING)  # the quantizer's advice to preprocess, once per call
    try:
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "float32.onnx")
            Path(source).write_bytes(graphs["float32"])
            for variant in args.variants:
                start = time.perf_counter()
                if variant.startswith("openvino"):
                    ir = openvino_ir(graphs["float32"], "int8", calibration)
                    precision = "bfloat16" if variant.endswith("bfloat16") else "float32"
                    openvino[variant] = OpenVINOSession(*ir, precision)
                    graphs[variant] = ir[1]  # its weights: the size to report
                else:
                    target = os.path.join(tmp, f"{variant}.onnx")
                    make[variant](source, target)
                    graphs[variant] = Path(target).read_bytes()
                seconds_to_quantize[variant] = time.perf_counter() - start
                print(f"{variant}: quantized in {seconds_to_quantize[variant]:.0f} s", flush=True)
    finally:
        logging.disable(logging.NOTSET)
    sessions = {name: openvino.get(name) or _session(graph) for name, graph in graphs.items()}
    reference = [sessions["float32"].run(None, {n: b[n] for n in names})[0] for b in dev]
    passes: Dict[str, List[float]] = {name: [] for name in sessions}
    order = list(sessions)
    for repeat in range(args.repeats):
        for name in order[repeat % len(order) :] + order[: repeat % len(order)]:
            start = time.perf_counter()
            for batch in dev:
                sessions[name].run(None, {n: batch[n] for n in names})
            passes[name].append(time.perf_counter() - start)
        print(
            f"pass {repeat + 1}/{args.repeats}: " + ", ".join(f"{n} {passes[n][-1]:.2f} s" for n in order), flush=True
        )
    rows = []
    for name in order:
        best, median = min(passes[name]), statistics.median(passes[name])
        rows.append(
            {
                "variant": name,
                "mean_abs_error": 0.0 if name == "float32" else hidden_error(sessions[name], dev, names, reference),
                "best_s": best,
                "median_s": median,
                "speedup_best": min(passes["float32"]) / best,
                "speedup_median": statistics.median(passes["float32"]) / median,
                "pieces_per_s_best": pieces / best,
                "graph_mb": len(graphs[name]) / 1e6,
                "fused_attention": None if name in openvino else fused_attention(graphs[name]),
                "quantize_s": seconds_to_quantize.get(name, 0.0),
                "passes_s": passes[name],
            }
        )
    return {
        "pipeline": str(args.pipeline),
        "calibration": [str(p) for p in args.calibration],
        "calibration_docs": args.calibration_docs,
        "dev": [str(p) for p in args.dev],
        "dev_docs": args.dev_docs,
        "dev_batches": len(dev),
        "dev_pieces": pieces,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "repeats": args.repeats,
        "rows": rows,
        "hardware": hardware(),
    }


def table(result: Dict[str, Any]) -> str:
    lines = [
        "| encoder | mean abs error of the last hidden state | s best / median | vs float32 best / median | graph MB |",
        "|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['variant']} | {r['mean_abs_error']:.4f} | {r['best_s']:.2f} / {r['median_s']:.2f} "
            f"| {r['speedup_best']:.2f}x / {r['speedup_median']:.2f}x | {r['graph_mb']:.0f} |"
        )
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("pipeline", type=Path, help="A float32 torch pipeline directory")
    p.add_argument("--calibration", type=Path, nargs="+", required=True, help="Training .spacy files")
    p.add_argument("--dev", type=Path, nargs="+", required=True, help="Dev .spacy files")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    p.add_argument("--calibration-docs", type=int, default=400, help="Texts of each training file")
    p.add_argument("--dev-docs", type=int, default=512, help="Texts of each dev file")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=Path("bench_onnx_int8.json"))
    args = p.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown or not args.variants:
        p.error(f"--variants: unknown {', '.join(unknown) or '(none given)'} (known: {', '.join(VARIANTS)})")
    check_args(
        p,
        args,
        ("calibration_docs", "dev_docs", "batch_size", "repeats", "threads"),
        [args.pipeline, *args.calibration, *args.dev],
        args.out,
    )
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    finish(bench(args), table, args.out)


if __name__ == "__main__":
    main()
