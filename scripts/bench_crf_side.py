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
import json
import statistics
import time
from typing import Dict, List

import spacy
from spacy.tokens import DocBin

from spacy_crf.hardware import hardware


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pipeline")
    parser.add_argument("data", nargs="+", help=".spacy files whose texts are timed")
    parser.add_argument("--limit", type=int, default=500, help="texts per file (0: all)")
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--output", default=None, help="JSON file for the figures")
    args = parser.parse_args()
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
        pipe = nlp.get_pipe(name)
        warm = list(pipe.pipe(warm, batch_size=args.batch_size)) if hasattr(pipe, "pipe") else [pipe(d) for d in warm]
    per_1k: Dict[str, List[float]] = {name: [] for name in steps}
    for _ in range(args.repeats):
        docs = [d.copy() for d in encoded]
        for name in steps:
            pipe = nlp.get_pipe(name)
            start = time.perf_counter()
            if hasattr(pipe, "pipe"):
                docs = list(pipe.pipe(docs, batch_size=args.batch_size))
            else:
                docs = [pipe(d) for d in docs]
            per_1k[name].append((time.perf_counter() - start) / n_chars * 1000)
    medians = {name: statistics.median(values) for name, values in per_1k.items()}
    print(f"{len(texts):,} texts, {n_chars:,} chars, {args.repeats} repeats; median s per 1,000 chars:")
    for name, value in medians.items():
        print(f"  {name:12s} {value:.4f}  {[round(v, 4) for v in per_1k[name]]}")
    print(f"  {'CRF side':12s} {sum(medians.values()):.4f}")
    if args.output:
        record = {"texts": len(texts), "chars": n_chars, "per_1k_chars": per_1k, "medians": medians}
        with open(args.output, "w", encoding="utf8") as f:
            json.dump({**record, "hardware": hardware()}, f, indent=2)


if __name__ == "__main__":
    main()
