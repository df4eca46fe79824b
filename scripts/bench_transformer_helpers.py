"""The transformer component with spacy-transformers' own alignment and tokenization helpers
against this package's (``spacy_crf.ml.fast_align``), side by side in one run.

    python scripts/bench_transformer_helpers.py PIPELINE DATA.spacy [DATA.spacy ...] [--limit 1000]
        [--batch-size 128] [--repeats 5] [--threads 2] [--out bench_transformer_helpers.json]

Runs the pipeline's ``transformer`` component alone over the first
``--limit`` texts of each file (in length-sorted buffers of 8 batches, as
``spacy crf speed`` does), ``--repeats`` times with each set of helpers in
a rotating order, and reports each one's best and median seconds per 1,000
characters and the time spent in the helpers themselves. Every pass's
alignments, piece strings and encoder outputs must be equal, else it exits 1.
"""

import argparse
import statistics
import sys
import time
from collections import Counter
from typing import Any, Dict, List

import numpy
import torch
from bench_common import check_args, finish, load_transformer_pipeline, pipeline_texts_parser, read_texts, timed
from spacy_transformers.layers import transformer_model

from spacy_crf._compat import stock_transformer_helper
from spacy_crf.batching import pipe_sorted
from spacy_crf.hardware import hardware
from spacy_crf.ml import fast_align

HELPERS = ("get_alignment_via_offset_mapping", "huggingface_tokenize")
VARIANTS = {
    "spacy-transformers": {name: stock_transformer_helper(name) for name in HELPERS},
    "fast_align": {
        "get_alignment_via_offset_mapping": fast_align.align_by_offsets,
        "huggingface_tokenize": fast_align.huggingface_tokenize,
    },
}


def one_pass(nlp, texts: List[str], batch_size: int, helpers: Dict[str, Any]):
    """(seconds, seconds inside each helper, the docs' transformer data)."""
    inside: Counter = Counter()

    for name, function in helpers.items():
        setattr(transformer_model, name, timed(inside, name, function))
    try:
        with nlp.select_pipes(enable=["transformer"]):
            start = time.perf_counter()
            data = [doc._.trf_data for doc in pipe_sorted(nlp, texts, batch_size=batch_size)]
            seconds = time.perf_counter() - start
    finally:
        fast_align.install()  # this package's helpers back in place
    return seconds, dict(inside), data


def same(a, b) -> bool:
    return (
        numpy.array_equal(a.align.data, b.align.data)
        and numpy.array_equal(a.align.lengths, b.align.lengths)
        and a.wordpieces.strings == b.wordpieces.strings
        and all(numpy.array_equal(x, y) for x, y in zip(a.tensors, b.tensors))
    )


def bench(args: argparse.Namespace) -> Dict[str, Any]:
    torch.set_num_threads(args.threads)
    nlp = load_transformer_pipeline(args.pipeline)
    texts = read_texts(args.data, args.limit, nlp.vocab)
    chars = sum(map(len, texts))
    one_pass(nlp, texts[: args.batch_size], args.batch_size, VARIANTS["fast_align"])  # warm-up
    names = list(VARIANTS)
    seconds: Dict[str, List[float]] = {n: [] for n in names}
    helper_seconds: Dict[str, List[Dict[str, float]]] = {n: [] for n in names}
    reference = None
    for repeat in range(args.repeats):
        for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
            s, inside, data = one_pass(nlp, texts, args.batch_size, VARIANTS[name])
            seconds[name].append(s)
            helper_seconds[name].append(inside)
            if reference is None:
                reference = data
            elif not all(same(a, b) for a, b in zip(data, reference)):
                sys.exit(f"{name}: the transformer data differ from the first pass's")
        print(f"pass {repeat + 1}/{args.repeats}: " + ", ".join(f"{n} {seconds[n][-1]:.2f} s" for n in names))
    rows = {}
    for name in names:
        rows[name] = {
            "s_per_1k_chars_best": 1000 * min(seconds[name]) / chars,
            "s_per_1k_chars_median": 1000 * statistics.median(seconds[name]) / chars,
            "helpers_s_per_1k_chars_median": {
                h: 1000 * statistics.median(p.get(h, 0.0) for p in helper_seconds[name]) / chars for h in HELPERS
            },
            "seconds": seconds[name],
        }
    return {
        "pipeline": str(args.pipeline),
        "data": [str(p) for p in args.data],
        "texts": len(texts),
        "chars": chars,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "repeats": args.repeats,
        "variants": rows,
        "hardware": hardware(),
    }


def table(result: Dict[str, Any]) -> str:
    lines = [
        "| helpers | transformer s per 1k chars, best / median | alignment | tokenization (median) |",
        "|---|---|---|---|",
    ]
    for name, row in result["variants"].items():
        helpers = row["helpers_s_per_1k_chars_median"]
        lines.append(
            f"| {name} | {row['s_per_1k_chars_best']:.4f} / {row['s_per_1k_chars_median']:.4f} "
            f"| {helpers['get_alignment_via_offset_mapping']:.4f} | {helpers['huggingface_tokenize']:.4f} |"
        )
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    p = pipeline_texts_parser(__doc__, repeats=5, out="bench_transformer_helpers.json")
    args = p.parse_args(argv)
    check_args(p, args, ("limit", "batch_size", "repeats", "threads"), [args.pipeline, *args.data], args.out)
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    finish(bench(args), table, args.out)


if __name__ == "__main__":
    main()
