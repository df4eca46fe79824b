"""Time the dev evaluation of ``spacy train``, dev docs in stream order against shortest first.

Run from the repository root:

    python scripts/bench_dev_eval.py MODEL --words SXU_DEV.spacy --ents MSRA_DEV.spacy
        [--limit 1000] [--repeats 3] [--threads 2] [--output bench_dev_eval.json]

``spacy train`` scores ``nlp.evaluate(dev_corpus(nlp))`` at every
``eval_frequency`` steps: the dev stream in batches of ``nlp.batch_size``, in
the order the reader yields it. This reads the dev set as the shipped config
does (``spacy_crf.JointCorpus.v1``, ``balance = false``, the first
``--limit`` docs of each task), once with ``sort_by_length = false`` and once
with ``true``, and evaluates ``MODEL`` (a ``spacy train`` output such as
``training/joint/model-best``) on both, alternating the two orders for
``--repeats`` rounds. It prints wall seconds per evaluation (best and median)
and checks that every score is equal in both orders (it exits with status 1
if one differs).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import spacy
import torch

from spacy_crf.corpora import JointCorpus
from spacy_crf.files import check_output_paths, write_json_atomic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--words", type=Path, required=True, help="CWS dev .spacy")
    parser.add_argument("--ents", type=Path, required=True, help="NER dev .spacy")
    parser.add_argument("--limit", type=int, default=1000, help="dev docs per task (the config's corpora.dev.limit)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args()
    if args.output:  # before the slow part: never over an input
        check_output_paths([args.model, args.words, args.ents], [args.output])
    torch.set_num_threads(args.threads)
    nlp = spacy.load(args.model)
    orders = {}
    for name, ranked in (("stream order", False), ("shortest first", True)):
        corpus = JointCorpus(args.words, args.ents, limit=args.limit, balance=False, sort_by_length=ranked)
        orders[name] = list(corpus(nlp))
    chars = sum(len(eg.reference.text) for eg in orders["stream order"])
    print(f"{args.model}: {len(orders['stream order']):,} dev docs, {chars:,} characters, batch {nlp.batch_size}")
    seconds = {name: [] for name in orders}
    scores = {}
    for _ in range(args.repeats):
        for name, examples in orders.items():
            start = time.perf_counter()
            scores[name] = nlp.evaluate(examples)
            seconds[name].append(time.perf_counter() - start)
    base = statistics.median(seconds["stream order"])
    print("| dev order | best s | median s | chars/s (median) | speed-up |")
    print("|---|---|---|---|---|")
    for name, times in seconds.items():
        median = statistics.median(times)
        print(f"| {name} | {min(times):.2f} | {median:.2f} | {chars / median:,.0f} | {base / median:.2f}x |")
    keys = [k for k in scores["stream order"] if k.endswith(("_f", "_p", "_r", "_recall", "_acc"))]
    differing = [k for k in keys if scores["stream order"][k] != scores["shortest first"][k]]
    for key in ("words_f", "words_oov_recall", "ents_f"):
        if key in scores["stream order"]:
            print(
                f"{key}: {scores['stream order'][key]} (stream order), {scores['shortest first'][key]} (shortest first)"
            )
    print("scores equal in both orders" if not differing else f"scores differ: {differing}")
    if args.output:
        record = {"model": str(args.model), "docs": len(orders["stream order"]), "chars": chars, "seconds": seconds}
        record["scores"] = {name: {k: s[k] for k in keys} for name, s in scores.items()}
        write_json_atomic(args.output, record)
    sys.exit(1 if differing else 0)


if __name__ == "__main__":
    main()
