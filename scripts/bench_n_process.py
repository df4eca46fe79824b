"""``nlp.pipe`` with one process and with two, and what the second one costs.

Run from the project folder:

    python ../scripts/bench_n_process.py PIPELINE corpus/sxu/dev.spacy corpus/msra/dev.spacy \\
        --limit 0 --repeats 2

With ``n_process > 1`` spaCy sends every doc from its worker to the parent
as ``Doc.to_bytes``, and the parent reads it back with ``Doc.from_bytes``.
The variants, in rotating order in each repeat, on the same texts:

* ``1 process``: ``nlp.pipe`` as loaded;
* ``2 processes, catalogue lookup``: srsly looking its msgpack hooks up
  through catalogue at every call, as it does on its own (before
  :func:`spacy_crf._compat.speed_up_msgpack_hooks`);
* ``2 processes``: with the hooks looked up once, as
  :func:`spacy_crf.enable_speed_ups` sets them (the shipped pipeline opts
  in from its config);
* ``2 processes, doc_cleaner``: also spaCy's ``doc_cleaner`` last, emptying
  ``doc._.trf_data`` and ``doc.tensor`` before the doc is sent, as
  ``spacy crf annotate`` does.

Each pass is timed from the first text in to the last doc out, worker
start-up included; ``nlp.pipe`` gets the texts in input order. The tokens,
entities and span groups of every doc are checked to be equal across the
variants. Also reported: ``Doc.to_bytes`` plus ``Doc.from_bytes`` per doc of
the pipeline's output under each lookup, in this process.
"""

import os
import statistics
import time
from typing import Any, Callable, Dict, List

import spacy
import torch
from bench_common import check_args, doc_view, finish, pipeline_texts_parser, read_texts
from spacy.tokens import Doc

from spacy_crf import _compat
from spacy_crf.hardware import hardware

VARIANTS = ("1 process", "2 processes, catalogue lookup", "2 processes", "2 processes, doc_cleaner")


def setup(nlp, variant: str) -> int:
    """Put ``nlp`` and srsly in the state of ``variant``; its ``n_process``."""
    if "catalogue" in variant:
        _compat.restore_msgpack_hooks()
    else:
        _compat.speed_up_msgpack_hooks()
    if "doc_cleaner" in variant and "doc_cleaner" not in nlp.pipe_names:
        nlp.add_pipe("doc_cleaner", config={"attrs": {"tensor": None, "_.trf_data": None}, "silent": True})
    if "doc_cleaner" not in variant and "doc_cleaner" in nlp.pipe_names:
        nlp.remove_pipe("doc_cleaner")
    return 1 if variant.startswith("1 ") else 2


def timed_pass(nlp, texts: List[str], n_process: int, batch_size: int, threads: int) -> Dict[str, Any]:
    # two processes on the cores: each worker gets its share as torch threads
    torch.set_num_threads(max(1, threads // n_process))
    try:
        start = time.perf_counter()
        docs = list(nlp.pipe(texts, batch_size=batch_size, n_process=n_process))
        seconds = time.perf_counter() - start
    finally:
        torch.set_num_threads(threads)
    return {"seconds": seconds, "docs": docs}


def bytes_round_trip(nlp, docs: List[Doc], lookup: Callable[[], None]) -> float:
    """Milliseconds per doc of ``to_bytes`` and ``from_bytes``, under ``lookup``."""
    lookup()
    start = time.perf_counter()
    for doc in docs:
        Doc(nlp.vocab).from_bytes(doc.to_bytes())
    return 1000 * (time.perf_counter() - start) / len(docs)


def table(result: Dict[str, Any]) -> str:
    rows = [f"{'variant':32} {'chars/s (each pass)':34} median   vs 1 process"]
    base = result["variants"]["1 process"]["median_chars_per_s"]
    for name, row in result["variants"].items():
        passes = ", ".join(f"{r:,.0f}" for r in row["chars_per_s"])
        median = row["median_chars_per_s"]
        rows.append(f"{name:32} {passes:34} {median:>7,.0f}  {median / base:.2f}x")
    rows.append(
        "Doc.to_bytes + from_bytes, ms per doc: "
        + ", ".join(f"{k} {v:.3f}" for k, v in result["bytes_ms_per_doc"].items())
    )
    return "\n".join(rows)


def main() -> None:
    parser = pipeline_texts_parser(__doc__, repeats=2, out="metrics/bench_n_process.json")
    args = parser.parse_args()
    check_args(parser, args, ("batch_size", "repeats", "threads"), [args.pipeline, *args.data], args.out)
    torch.set_num_threads(args.threads)
    # the workers fork after the fast tokenizer ran; without this it warns in each one
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    nlp = spacy.load(args.pipeline)
    texts = read_texts(args.data, args.limit or 10**9, nlp.vocab)
    n_chars = sum(map(len, texts))
    print(f"{len(texts):,} texts, {n_chars:,} characters, batch {args.batch_size}, {args.threads} threads")
    list(nlp.pipe(texts[: args.batch_size]))  # warm-up: lazy compilation and allocations
    rates: Dict[str, List[float]] = {v: [] for v in VARIANTS}
    reference = None
    for repeat in range(args.repeats):
        for k in range(len(VARIANTS)):
            variant = VARIANTS[(k + repeat) % len(VARIANTS)]
            n_process = setup(nlp, variant)
            run = timed_pass(nlp, texts, n_process, args.batch_size, args.threads)
            rates[variant].append(n_chars / run["seconds"])
            print(f"repeat {repeat + 1}, {variant}: {rates[variant][-1]:,.0f} chars/s", flush=True)
            got = [doc_view(doc) for doc in run["docs"]]
            if reference is None:
                reference = got
            elif got != reference:
                differ = sum(a != b for a, b in zip(got, reference))
                raise SystemExit(f"{variant}: {differ} docs differ from the first pass")
    setup(nlp, "1 process")
    sample = list(nlp.pipe(texts[:1000], batch_size=args.batch_size))
    bytes_ms = {
        "catalogue lookup": bytes_round_trip(nlp, sample, _compat.restore_msgpack_hooks),
        "fast lookup": bytes_round_trip(nlp, sample, _compat.speed_up_msgpack_hooks),
    }
    result = {
        "pipeline": str(args.pipeline),
        "texts": len(texts),
        "chars": n_chars,
        "batch_size": args.batch_size,
        "threads": args.threads,
        "variants": {
            v: {"chars_per_s": [round(r) for r in rates[v]], "median_chars_per_s": statistics.median(rates[v])}
            for v in VARIANTS
        },
        "bytes_ms_per_doc": bytes_ms,
        "outputs_equal": True,
        "hardware": hardware(),
    }
    finish(result, table, args.out)


if __name__ == "__main__":
    main()
