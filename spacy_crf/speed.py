"""Throughput of a whole pipeline (e.g. the packaged zh_crf_pipeline) with nlp.pipe.

    python -m spacy_crf.speed project/pipeline project/corpus/sxu/dev.spacy project/corpus/msra/dev.spacy
    python -m spacy_crf.speed zh_crf_pipeline DEV.spacy --limit 1000 --batch-sizes 32,128 --n-process 1,2 --output speed.json

Texts are the raw texts of the docs in the given ``.spacy`` files (the first
``--limit`` of each), in file order, as a user would feed them. Every setting
gets one untimed warm-up batch, then the median chars/s over ``--repeats``
passes. A per-component breakdown (seconds per 1,000 characters, one process)
shows where the time goes: each component is timed on the docs the previous
ones produced, with the same batch size.
"""
import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Dict, List

import srsly
import spacy
from spacy.language import Language
from spacy.tokens import DocBin
from spacy.util import minibatch
from wasabi import msg

from .evaluate import hardware


def load_texts(paths: List[str], limit: int) -> List[str]:
    vocab = spacy.blank("zh").vocab
    texts: List[str] = []
    for path in paths:
        docs = DocBin().from_disk(path).get_docs(vocab)
        for i, doc in enumerate(docs):
            if limit and i >= limit:
                break
            texts.append(doc.text)
    return texts


def chars_per_second(nlp: Language, texts: List[str], batch_size: int, n_process: int, repeats: int) -> float:
    list(nlp.pipe(texts[:batch_size], batch_size=batch_size))  # warm-up: lazy init, allocations
    n_chars = sum(map(len, texts))
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _doc in nlp.pipe(texts, batch_size=batch_size, n_process=n_process):
            pass
        rates.append(n_chars / (time.perf_counter() - start))
    return statistics.median(rates)


def component_seconds(nlp: Language, texts: List[str], batch_size: int) -> Dict[str, float]:
    """Seconds spent in the tokenizer and in each pipe, over all ``texts``."""
    seconds = {"tokenizer": 0.0, **{name: 0.0 for name in nlp.pipe_names}}
    for batch in minibatch(texts, size=batch_size):
        start = time.perf_counter()
        docs = [nlp.make_doc(text) for text in batch]
        seconds["tokenizer"] += time.perf_counter() - start
        for name, proc in nlp.pipeline:
            start = time.perf_counter()
            docs = list(proc.pipe(docs, batch_size=batch_size)) if hasattr(proc, "pipe") else [proc(d) for d in docs]
            seconds[name] += time.perf_counter() - start
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pipeline", help="a pipeline directory or an installed package name")
    parser.add_argument("data", nargs="+", help=".spacy files whose texts are processed")
    parser.add_argument("--limit", type=int, default=1000, help="docs per file (0: all)")
    parser.add_argument("--batch-sizes", default="32,128")
    parser.add_argument("--n-process", default="1,2")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default="", help="write the figures to this JSON file")
    args = parser.parse_args()
    # n_process > 1 forks after the fast tokenizer was used; without this it warns per child
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    nlp = spacy.load(args.pipeline)
    texts = load_texts(args.data, args.limit)
    n_chars = sum(map(len, texts))
    msg.info(f"{args.pipeline}: {nlp.pipe_names}; {len(texts)} texts, {n_chars:,} chars "
             f"(mean {n_chars / max(len(texts), 1):.1f} per text)")
    runs = []
    for n_process in [int(n) for n in args.n_process.split(",")]:
        for batch_size in [int(b) for b in args.batch_sizes.split(",")]:
            rate = chars_per_second(nlp, texts, batch_size, n_process, args.repeats)
            runs.append({"n_process": n_process, "batch_size": batch_size, "chars_per_s": round(rate, 1)})
            msg.text(f"n_process={n_process} batch_size={batch_size}: {rate:,.0f} chars/s")
    msg.table([(r["n_process"], r["batch_size"], f"{r['chars_per_s']:,.0f}") for r in runs],
              header=("n_process", "batch_size", "chars/s"), divider=True)
    batch_size = int(args.batch_sizes.split(",")[-1])
    seconds = component_seconds(nlp, texts, batch_size)
    total = sum(seconds.values())
    msg.table([(name, f"{s / n_chars * 1000:.3f}", f"{100 * s / total:.1f}%") for name, s in seconds.items()],
              header=("component", "s per 1k chars", "share"), divider=True)
    if args.output:
        srsly.write_json(args.output, {
            "pipeline": args.pipeline, "components": nlp.pipe_names, "data": args.data, "texts": len(texts),
            "chars": n_chars, "repeats": args.repeats, "runs": runs,
            "seconds_per_1k_chars": {name: round(s / n_chars * 1000, 4) for name, s in seconds.items()},
            "hardware": hardware(),
        })
        msg.good(f"Wrote {args.output}")


if __name__ == "__main__":
    main()
