"""How far a pipeline's speed is from what this CPU's matrix units allow: a roofline.

    python scripts/roofline.py PIPELINE DATA.spacy [DATA.spacy ...] [--limit 1000] [--batch-size 128]
        [--repeats 3] [--threads 2] [--target 20000] [--out roofline.json]

Runs the pipeline as ``spacy crf speed`` does (``--limit`` texts of each
file, batches of ``--batch-size`` in length-sorted buffers of 8 batches,
each component timed) with the encoder's forward calls timed as well and
their input shapes recorded, and measures this machine's matrix-multiply
peak with ``--threads`` threads: float32 (torch) and int8 (ONNX Runtime's
``MatMulInteger``, u8 x s8, what dynamic int8 runs), each on the encoder's
own GEMM shapes. From the Hugging Face config it counts the encoder's
multiply-adds: the dense layers (Q, K, V, output, both feed-forward layers)
over every position of every padded row, and attention's two products.

Prints where a pipeline's 1,000 characters go (encoder forward, the rest of
the transformer component, the tokenizer, the CRF side), the FLOP rate the
encoder reaches, and ceilings: the chars/s of the encoder and of the whole
pipeline if the encoder's dense layers ran at the measured float32 or int8
peak and took nothing else (attention, layer norms, GELU, quantization
left out: the ceiling is optimistic), with the rest as measured. For
``--target`` it says how much time per 1,000 characters the encoder would
have left after the rest, and the GEMM rate that would take.
"""

import argparse
import time
from typing import Any, Dict, List, Tuple

import numpy
import torch
from bench_common import (
    check_args,
    encoder_of,
    finish,
    load_transformer_pipeline,
    pipeline_texts_parser,
    read_texts,
)

from spacy_crf.cli.speed import component_seconds
from spacy_crf.hardware import hardware

#: rows of the GEMMs timed for the peaks: a batch of about 4,000 positions,
#: as spacy-transformers' max_batch_items makes them
PEAK_ROWS = 4096
SORT_BUFFER = 8


def dims(config) -> Tuple[int, int, int]:
    """(layers, hidden width, feed-forward width) of a BERT-like config."""
    return config.num_hidden_layers, config.hidden_size, config.intermediate_size


def gemm_shapes(config) -> List[Tuple[int, int, int]]:
    """(k, m, count per layer) of the dense layers of one encoder layer."""
    _, hidden, inner = dims(config)
    return [(hidden, hidden, 4), (hidden, inner, 1), (inner, hidden, 1)]


def flops(config, shapes: List[Tuple[int, int, int]]) -> Dict[str, float]:
    """Floating-point operations (2 per multiply-add) of the encoder over
    batches of shape (rows, padded length) with ``real`` unpadded positions."""
    layers, hidden, inner = dims(config)
    dense_per_position = 2 * layers * (4 * hidden * hidden + 2 * hidden * inner)
    positions = sum(rows * length for rows, length, _ in shapes)
    real = sum(r for _, _, r in shapes)
    return {
        "dense": dense_per_position * positions,
        "dense_real_positions": dense_per_position * real,
        # Q K^T and softmax(.) V: 2 x length x hidden multiply-adds per position and layer
        "attention": sum(2 * 2 * layers * rows * length * length * hidden for rows, length, _ in shapes),
        "positions": positions,
        "real_positions": real,
    }


def float32_peak(config, repeats: int) -> float:
    """Best float32 GEMM rate (FLOP/s) over the encoder's shapes, weighted by their work."""
    total_flop, total_s = 0.0, 0.0
    for k, m, count in gemm_shapes(config):
        a, b = torch.randn(PEAK_ROWS, k), torch.randn(k, m)
        for _ in range(2):
            a @ b
        best = min(_timed(lambda a=a, b=b: a @ b) for _ in range(repeats))
        total_flop += count * 2 * PEAK_ROWS * k * m
        total_s += count * best
    return total_flop / total_s


def int8_peak(config, repeats: int, threads: int) -> float:
    """Best u8 x s8 -> s32 GEMM rate (OP/s) of ONNX Runtime over the encoder's shapes."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rng = numpy.random.default_rng(0)
    total_op, total_s = 0.0, 0.0
    for k, m, count in gemm_shapes(config):
        weights = numpy_helper.from_array(rng.integers(-127, 128, (k, m)).astype(numpy.int8), "B")
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["A", "B"], ["Y"])],
            "gemm",
            [helper.make_tensor_value_info("A", TensorProto.UINT8, [PEAK_ROWS, k])],
            [helper.make_tensor_value_info("Y", TensorProto.INT32, [PEAK_ROWS, m])],
            [weights],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feed = {"A": rng.integers(0, 256, (PEAK_ROWS, k)).astype(numpy.uint8)}
        for _ in range(2):
            session.run(None, feed)
        best = min(_timed(lambda s=session, f=feed: s.run(None, f)) for _ in range(repeats))
        total_op += count * 2 * PEAK_ROWS * k * m
        total_s += count * best
    return total_op / total_s


def _timed(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def timed_pipeline(
    nlp, texts: List[str], batch_size: int
) -> Tuple[Dict[str, float], float, List[Tuple[int, int, int]]]:
    """Seconds per component, seconds inside the encoder's forward calls, and
    each call's (rows, padded length, real positions)."""
    encoder = encoder_of(nlp)
    forward = encoder.forward
    shapes: List[Tuple[int, int, int]] = []
    inside = [0.0]

    def timed_forward(*args, **kwargs):
        start = time.perf_counter()
        try:
            return forward(*args, **kwargs)
        finally:
            inside[0] += time.perf_counter() - start
            mask = kwargs.get("attention_mask")
            ids = kwargs["input_ids"]
            real = int(mask.sum()) if mask is not None else ids.numel()
            shapes.append((int(ids.shape[0]), int(ids.shape[1]), real))

    encoder.forward = timed_forward
    try:
        seconds = component_seconds(nlp, texts, batch_size, sort_buffer=SORT_BUFFER)
    finally:
        del encoder.forward  # the instance attribute: the class's forward again
    return seconds, inside[0], shapes


def per_1k(seconds: float, chars: int) -> float:
    return 1000 * seconds / chars


def analyse(args: argparse.Namespace) -> Dict[str, Any]:
    torch.set_num_threads(args.threads)
    nlp = load_transformer_pipeline(args.pipeline)
    config = encoder_of(nlp).config
    texts = read_texts(args.data, args.limit, nlp.vocab)
    chars = sum(map(len, texts))
    component_seconds(nlp, texts[: args.batch_size], args.batch_size)  # warm-up: sessions, matchers
    passes = [timed_pipeline(nlp, texts, args.batch_size) for _ in range(args.repeats)]
    # the pass of median total time (the machine's noise falls on all parts alike)
    seconds, encoder_s, shapes = sorted(passes, key=lambda p: sum(p[0].values()))[len(passes) // 2]
    work = flops(config, shapes)
    crf_side = sum(s for name, s in seconds.items() if name not in ("tokenizer", "transformer"))
    split = {
        "encoder forward": per_1k(encoder_s, chars),
        "rest of the transformer component": per_1k(seconds["transformer"] - encoder_s, chars),
        "tokenizer": per_1k(seconds["tokenizer"], chars),
        "CRF side (" + ", ".join(n for n in seconds if n not in ("tokenizer", "transformer")) + ")": per_1k(
            crf_side, chars
        ),
    }
    pipeline_s = sum(split.values())
    rest_s = pipeline_s - split["encoder forward"]
    dense_flop_per_1k = work["dense"] / chars * 1000  # dense FLOP per 1,000 characters
    peaks = {"float32": float32_peak(config, args.repeats), "int8": int8_peak(config, args.repeats, args.threads)}
    ceilings = {}
    for name, peak in peaks.items():
        encoder_at_peak = dense_flop_per_1k / peak
        ceilings[name] = {
            "peak_op_per_s": peak,
            "encoder_s_per_1k_chars": encoder_at_peak,
            "encoder_chars_per_s": 1000 / encoder_at_peak,
            "pipeline_chars_per_s": 1000 / (encoder_at_peak + rest_s),
        }
    target_s = 1000 / args.target
    left = target_s - rest_s
    return {
        "pipeline": str(args.pipeline),
        "data": [str(p) for p in args.data],
        "texts": len(texts),
        "chars": chars,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "repeats": args.repeats,
        "encoder": {"layers": dims(config)[0], "hidden": dims(config)[1], "inner": dims(config)[2]},
        "flop": work,
        "pieces_per_char": work["real_positions"] / chars,
        "padded_share": 1 - work["real_positions"] / work["positions"],
        "s_per_1k_chars": split,
        "pipeline_chars_per_s": 1000 / pipeline_s,
        "encoder_dense_flop_per_s": work["dense"] / encoder_s,
        "ceilings": ceilings,
        "target": {
            "chars_per_s": args.target,
            "s_per_1k_chars": target_s,
            "left_for_encoder_s_per_1k": left,
            "dense_op_per_s_needed": dense_flop_per_1k / left if left > 0 else None,
        },
        "hardware": hardware(),
    }


def report(result: Dict[str, Any]) -> str:
    lines = [
        f"{result['texts']:,} texts, {result['chars']:,} characters; {result['pieces_per_char']:.3f} pieces a "
        f"character, {100 * result['padded_share']:.1f}% of the encoder's positions padding; encoder "
        f"{result['encoder']['layers']} x {result['encoder']['hidden']} (feed-forward {result['encoder']['inner']})",
        "",
        "| part | s per 1,000 characters | share |",
        "|---|---|---|",
    ]
    total = sum(result["s_per_1k_chars"].values())
    for part, s in result["s_per_1k_chars"].items():
        lines.append(f"| {part} | {s:.4f} | {100 * s / total:.1f}% |")
    lines.append(f"| whole pipeline | {total:.4f} ({result['pipeline_chars_per_s']:,.0f} chars/s) | 100% |")
    flop = result["flop"]
    lines += [
        "",
        f"Encoder: {flop['dense'] / result['chars'] / 1e6:.2f} MFLOP of dense layers and "
        f"{flop['attention'] / result['chars'] / 1e6:.2f} MFLOP of attention per character (padding included); "
        f"its forward calls ran the dense layers at {result['encoder_dense_flop_per_s'] / 1e9:.0f} GFLOP/s.",
        "",
        "| dense layers at this CPU's measured GEMM peak | peak | encoder alone, chars/s | pipeline, chars/s (the rest as measured) |",
        "|---|---|---|---|",
    ]
    for name, c in result["ceilings"].items():
        lines.append(
            f"| {name} | {c['peak_op_per_s'] / 1e9:.0f} G{'FL' if name == 'float32' else ''}OP/s "
            f"| {c['encoder_chars_per_s']:,.0f} | {c['pipeline_chars_per_s']:,.0f} |"
        )
    target = result["target"]
    needed = target["dense_op_per_s_needed"]
    lines += [
        "",
        f"Target {target['chars_per_s']:,.0f} chars/s = {target['s_per_1k_chars']:.4f} s per 1,000 characters; "
        f"the rest of the pipeline leaves {target['left_for_encoder_s_per_1k']:.4f} for the encoder, "
        + (
            f"which needs its dense layers at {needed / 1e9:.0f} GOP/s."
            if needed
            else "nothing: the rest alone is over the target."
        ),
    ]
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = pipeline_texts_parser(__doc__, repeats=3, out="roofline.json")
    p.add_argument("--target", type=float, default=20000.0, help="chars/s to size the encoder for")
    args = p.parse_args(argv)
    check_args(p, args, ("limit", "batch_size", "repeats", "threads", "target"), [args.pipeline, *args.data], args.out)
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    finish(analyse(args), report, args.out)


if __name__ == "__main__":
    main()
