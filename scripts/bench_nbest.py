"""Time n-best decoding against the 1-best decoding of the CRF side, side by side.

    python scripts/bench_nbest.py [--docs 128] [--min-length 20] [--max-length 200]
        [--ks 2,5,10] [--repeats 7] [--seed 0] [--kernels] [--out bench_nbest.json]

On random emission scores shaped like a tagger's batch (``--docs`` docs of
``--min-length`` to ``--max-length`` tokens, scaled as a trained tagger's),
random transitions, start and end scores and the scheme's constraints, for
``bmes`` (4 tags) and ``bioes`` over three labels (13 tags), it times in
turn, ``--repeats`` times:

* ``1-best``: what a tagger's ``predict`` decodes with,
  ``spacy_crf.ml.viterbi_numpy.decode`` (the compiled kernel where it is
  built);
* ``1-best numpy``: the same with the numpy search (``use_numpy``);
* ``k=K``: ``spacy_crf.ml.nbest.decode`` with each of ``--ks``, with the
  probabilities (as ``predict_nbest`` asks), and ``k=K paths``: without
  (the compiled n-best kernels where they are built);
* ``k=K numpy``: the same with the numpy list Viterbi (``use_numpy``), with
  the probabilities;
* with ``--kernels``, the compiled kernels alone on the batch's flat rows
  (where the time of the ways above goes): ``kernel 1-best``
  (``decode_flat``), ``kernel k=K`` (``nbest_flat``) and ``kernel log Z``
  (``log_partition_flat``); the rest of a way is its Python around them.

Each way's first path must be the 1-best path of every doc, else the script
exits 1. Reported per scheme: the median wall seconds per batch, tokens per
second, and each way's throughput as a share of the 1-best's (and of the
numpy search's); the median CPU seconds of the process are in the JSON
record too (on a machine shared with other work they move less than wall
time). The record names the CPU.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy
import torch
from bench_common import finish

from spacy_crf.files import check_output_paths
from spacy_crf.hardware import hardware
from spacy_crf.ml import crf, kernels, nbest, viterbi_numpy
from spacy_crf.ml.schemes import make_tags, transition_mask
from spacy_crf.util import check_number

SCHEMES = {"bmes": [], "bioes": ["LOC", "ORG", "PER"]}


def batch(rng, scheme: str, args) -> Dict[str, Any]:
    """Random emissions per doc and CRF scores for ``scheme``'s tags."""
    tags = make_tags(scheme, SCHEMES[scheme])
    num_tags = len(tags)
    lengths = rng.integers(args.min_length, args.max_length + 1, size=args.docs)
    scores = [(rng.normal(size=(n, num_tags)) * 4).astype(numpy.float32) for n in lengths]
    return {
        "scores": scores,
        "transitions": rng.normal(size=(num_tags, num_tags)).astype(numpy.float32),
        "start": rng.normal(size=num_tags).astype(numpy.float32),
        "end": rng.normal(size=num_tags).astype(numpy.float32),
        "constraints": transition_mask(scheme, tags),
        "tokens": int(lengths.sum()),
        "tags": num_tags,
    }


def ways(case: Dict[str, Any], ks: List[int]) -> Dict[str, Callable[[], List[numpy.ndarray]]]:
    """Each way to time, returning the first path of every doc."""
    crf = [case[name] for name in ("scores", "transitions", "start", "end")]
    constraints = case["constraints"]
    found: Dict[str, Callable[[], List[numpy.ndarray]]] = {
        "1-best": lambda: viterbi_numpy.decode(*crf, constraints),
        "1-best numpy": lambda: viterbi_numpy.decode(*crf, constraints, use_numpy=True),
    }
    for k in ks:
        found[f"k={k}"] = lambda k=k: [r.paths[0] for r in nbest.decode(*crf, k, constraints)]
        found[f"k={k} paths"] = lambda k=k: [
            r.paths[0] for r in nbest.decode(*crf, k, constraints, probabilities=False)
        ]
        found[f"k={k} numpy"] = lambda k=k: [r.paths[0] for r in nbest.decode(*crf, k, constraints, use_numpy=True)]
    return found


def kernel_ways(case: Dict[str, Any], ks: List[int]) -> Dict[str, Callable[[], Any]]:
    """The compiled kernels alone, on the batch as the ways above hand it to them."""
    allowed = case["constraints"]
    moves, start, end = (
        numpy.where(numpy.asarray(mask, dtype=bool), case[name], numpy.float32(crf.IMPOSSIBLE)).astype(numpy.float32)
        for mask, name in zip(allowed, ("transitions", "start", "end"))
    )
    flat = numpy.concatenate(case["scores"])
    offsets = numpy.concatenate([[0], numpy.cumsum([len(s) for s in case["scores"]])]).astype(numpy.int64)
    found: Dict[str, Callable[[], Any]] = {
        "kernel 1-best": lambda: kernels.decode_flat(flat, offsets, moves, start, end)
    }
    for k in ks:
        found[f"kernel k={k}"] = lambda k=k: kernels.nbest_flat(flat, offsets, moves, start, end, k)
    found["kernel log Z"] = lambda: kernels.log_partition_flat(flat, offsets, moves, start, end)
    return found


def time_scheme(case: Dict[str, Any], ks: List[int], repeats: int, with_kernels: bool = False) -> Dict[str, Any]:
    calls: Dict[str, Callable[[], Any]] = {**ways(case, ks)}
    for name in list(calls):  # warm up; every first path must be the 1-best path
        if name != "1-best" and any((a != b).any() for a, b in zip(calls[name](), calls["1-best"]())):
            sys.exit(f"{name}: a first path differs from the 1-best path")
    if with_kernels:
        calls.update(kernel_ways(case, ks))
    wall: Dict[str, List[float]] = {name: [] for name in calls}
    cpu: Dict[str, List[float]] = {name: [] for name in calls}
    names = list(calls)
    for repeat in range(repeats):
        for name in names[:: 1 if repeat % 2 == 0 else -1]:  # in turn, both directions
            start_wall, start_cpu = time.perf_counter(), time.process_time()
            calls[name]()
            wall[name].append(time.perf_counter() - start_wall)
            cpu[name].append(time.process_time() - start_cpu)
    median_wall = {name: statistics.median(values) for name, values in wall.items()}
    median_cpu = {name: statistics.median(values) for name, values in cpu.items()}
    return {
        "tags": case["tags"],
        "tokens": case["tokens"],
        "wall_s": median_wall,
        "cpu_s": median_cpu,
        "tokens_per_s": {name: case["tokens"] / s for name, s in median_wall.items()},
        "share_of_1best": {name: median_wall["1-best"] / s for name, s in median_wall.items()},
        "share_of_1best_numpy": {name: median_wall["1-best numpy"] / s for name, s in median_wall.items()},
        "cpu_share_of_1best": {name: median_cpu["1-best"] / s for name, s in median_cpu.items() if s > 0},
    }


def table(result: Dict[str, Any]) -> str:
    lines = [
        f"{result['docs']} docs of {result['min_length']}-{result['max_length']} tokens, "
        f"{result['repeats']} repeats, median per batch; CPU: {result['hardware']['cpu']}",
        "| scheme | way | ms | tokens/s | share of 1-best | share of 1-best numpy |",
        "|---|---|---|---|---|---|",
    ]
    for scheme, r in result["schemes"].items():
        for name, seconds in r["wall_s"].items():
            lines.append(
                f"| {scheme} ({r['tags']} tags) | {name} | {seconds * 1000:.2f} | {r['tokens_per_s'][name]:,.0f} "
                f"| {r['share_of_1best'][name]:.1%} | {r['share_of_1best_numpy'][name]:.1%} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=128)
    parser.add_argument("--min-length", type=int, default=20)
    parser.add_argument("--max-length", type=int, default=200)
    parser.add_argument("--ks", default="2,5,10", help="comma-separated k of the n-best ways")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kernels", action="store_true", help="also time the compiled kernels alone")
    parser.add_argument("--out", type=Path, default=Path("bench_nbest.json"))
    args = parser.parse_args()
    try:
        for name in ("docs", "min_length", "repeats"):
            check_number(f"--{name.replace('_', '-')}", getattr(args, name), minimum=1)
        check_number("--max-length", args.max_length, minimum=args.min_length)
        ks = [int(k) for k in args.ks.split(",")]
        for k in ks:
            nbest.check_k(k)
        check_output_paths([], [args.out])
    except ValueError as e:
        parser.error(str(e))
    torch.set_num_threads(1)  # (torch only runs where the scaled forward pass hands a row over)
    rng = numpy.random.default_rng(args.seed)
    result = {
        "docs": args.docs,
        "min_length": args.min_length,
        "max_length": args.max_length,
        "ks": ks,
        "repeats": args.repeats,
        "seed": args.seed,
        "schemes": {
            scheme: time_scheme(batch(rng, scheme, args), ks, args.repeats, args.kernels) for scheme in SCHEMES
        },
        "hardware": hardware(),
    }
    finish(result, table, args.out)


if __name__ == "__main__":
    main()
