"""The CRF side of a pipeline alone: segmenter, NER tagger and merge, per 1,000 characters.

    python scripts/bench_crf_side.py PIPELINE DATA.spacy [DATA.spacy ...] [--limit 500] [--repeats 4]
        [--batch-size 128] [--output bench.json]

Runs the pipeline's transformer once over the first ``--limit`` texts of each
``.spacy`` file, then, ``--repeats`` times on fresh copies of those docs, the
CRF taggers and the merge step after it, each timed alone (wall clock: a
profiler inflates the per-call cost of spaCy's compiled code). The lexicon
prior's matcher is built before timing (once per process in real use). Prints
the median seconds per 1,000 characters of each step and of the CRF side as
a whole; ``spacy crf speed`` gives the whole pipeline's split.
"""

import argparse
import statistics
import time
from typing import Dict, List

import spacy
from spacy.tokens import Doc, DocBin

from spacy_crf.files import check_output_paths, write_json_atomic
from spacy_crf.hardware import hardware


def run_step(pipe, docs: List[Doc], batch_size: int) -> List[Doc]:
    """One pipeline step over ``docs``: its ``pipe`` where it has one, else a call per doc."""
    if hasattr(pipe, "pipe"):
        return list(pipe.pipe(docs, batch_size=batch_size))
    return [pipe(d) for d in docs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pipeline")
    parser.add_argument("data", nargs="+", help=".spacy files whose texts are timed")
    parser.add_argument("--limit", type=int, default=500, help="texts per file (0: all)")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--output", default=None, help="JSON file for the figures")
    args = parser.parse_args()
    # before the (slow) work: the figures may not land on the pipeline or a data file
    check_output_paths([args.pipeline, *args.data], [args.output])
    nlp = spacy.load(args.pipeline)
    texts: List[str] = []
    for path in args.data:
        docs = [d.text for d in DocBin().from_disk(path).get_docs(nlp.vocab)]
        texts += docs[: args.limit] if args.limit else docs
    n_chars = sum(map(len, texts))
    trf = [n for n in nlp.pipe_names if nlp.get_pipe_meta(n).factory == "transformer"]
    steps = [n for n in nlp.pipe_names if n not in trf]
    with nlp.select_pipes(enable=trf):
        encoded = list(nlp.pipe(texts, batch_size=args.batch_size))
    warm = [d.copy() for d in encoded[:50]]
    for name in steps:  # builds lazy state (the lexicon's matcher) before timing
        warm = run_step(nlp.get_pipe(name), warm, args.batch_size)
    per_1k: Dict[str, List[float]] = {name: [] for name in steps}
    for _ in range(args.repeats):
        docs = [d.copy() for d in encoded]
        for name in steps:
            pipe = nlp.get_pipe(name)
            start = time.perf_counter()
            docs = run_step(pipe, docs, args.batch_size)
            per_1k[name].append((time.perf_counter() - start) / n_chars * 1000)
    medians = {name: statistics.median(values) for name, values in per_1k.items()}
    print(f"{len(texts):,} texts, {n_chars:,} chars, {args.repeats} repeats; median s per 1,000 chars:")
    for name, value in medians.items():
        print(f"  {name:12s} {value:.4f}  {[round(v, 4) for v in per_1k[name]]}")
    print(f"  {'CRF side':12s} {sum(medians.values()):.4f}")
    if args.output:
        record = {"texts": len(texts), "chars": n_chars, "per_1k_chars": per_1k, "medians": medians}
        write_json_atomic(args.output, {**record, "hardware": hardware()})


if __name__ == "__main__":
    main()
