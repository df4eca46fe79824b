"""Training steps side by side: dense Adam, lazy rows, sparse gradients, frozen table.

    python scripts/bench_train_step.py CONFIG [--variants dense,lazy,sparse,frozen]
        [--steps 20] [--warmup 3] [--threads N] [--table embeddings.word_embeddings.weight]
        [--output bench.json] [--paths.train_words ... spacy overrides]

Builds one pipeline per variant from the same config and seed (``init_nlp``,
as ``spacy train`` does) and feeds them the same batches, one variant after
the other on each batch, in an order that rotates from batch to batch. Every
variant thus meets the machine's noise alike, which separate runs one after
the other do not (on a shared 2-core machine they differ by 10-20%). The
variants, for the encoder's word-embedding table (``--table``):

* ``dense``: thinc's Adam over the whole table;
* ``lazy``: ``spacy_crf.GroupedAdam.v1`` with ``lazy_rows`` (the dense gradient's
  non-zero rows only);
* ``sparse``: ``lazy`` plus ``spacy_crf.sparse_embeddings.v1`` (the backward pass
  yields the batch's rows only);
* ``frozen``: ``spacy_crf.freeze_parameters.v1`` (no gradient, no update: the
  speed limit of the other three, at a cost in accuracy);
* ``bf16``: ``sparse`` plus ``spacy_crf.cpu_autocast.v1`` (the encoder's forward
  pass in bfloat16; for CPUs with native bfloat16).

Prints, per variant, the median and mean wall seconds per step, the CPU
seconds per step of the process (every thread), the characters of training
text per second, and the median of the per-batch speed-up over the first
variant. The optimizer of a config that is not ``spacy_crf.GroupedAdam.v1``
cannot run ``lazy`` or ``sparse``.
"""

import argparse
import json
import statistics
import time
from itertools import islice
from pathlib import Path
from typing import Any, Dict, Iterator, List, Sequence, Tuple

import torch
from spacy import util
from spacy.cli._util import parse_config_overrides
from spacy.language import Language
from spacy.training.initialize import init_nlp

VARIANTS = ("dense", "lazy", "sparse", "frozen", "bf16")
TABLE = "embeddings.word_embeddings.weight"


def training_setup(
    config_path: Path,
    overrides: Dict[str, Any],
    *,
    freeze: Sequence[str] = (),
    sparse: Sequence[str] = (),
    autocast: str = "",
) -> Tuple[Language, Any, Any, float, List[str]]:
    """The pipeline, optimizer, training batches and dropout that ``spacy
    train`` would use, plus a line per parameter frozen or made sparse."""
    from spacy_crf.training.autocast import cpu_autocast
    from spacy_crf.training.freeze import freeze_parameters
    from spacy_crf.training.sparse_embeddings import sparse_embeddings

    config = util.load_config(config_path, overrides=overrides, interpolate=False)
    nlp = init_nlp(config)
    notes = []
    if freeze:
        notes.append("frozen: " + ", ".join(freeze_parameters(nlp, freeze)))
    if sparse:
        notes.append("sparse gradients: " + ", ".join(sparse_embeddings(nlp, sparse)))
    if autocast:
        notes.append(f"{autocast} autocast: " + ", ".join(cpu_autocast(nlp, autocast)))
    resolved = nlp.config.interpolate()
    T = util.registry.resolve(resolved["training"], schema=None)
    train_corpus = util.resolve_dot_names(resolved, [T["train_corpus"]])[0]
    return nlp, T["optimizer"], _epochs(nlp, train_corpus, T["batcher"]), T["dropout"], notes


def _epochs(nlp: Language, corpus, batcher) -> Iterator[List[Any]]:
    """Batches over as many passes of the corpus as asked for, as ``spacy train`` does."""
    while True:
        empty = True
        for batch in batcher(corpus(nlp)):
            empty = False
            yield batch
        if empty:
            raise SystemExit("the training corpus gave no batches")


def variant_setup(name: str, config_path: Path, overrides: Dict[str, Any], table: str):
    lazy = {**overrides, "training.optimizer.lazy_rows": [table]}
    if name == "dense":
        return training_setup(config_path, overrides)
    if name == "lazy":
        return training_setup(config_path, lazy)
    if name == "sparse":
        return training_setup(config_path, lazy, sparse=[table])
    if name == "frozen":
        return training_setup(config_path, overrides, freeze=[table])
    if name == "bf16":
        return training_setup(config_path, lazy, sparse=[table], autocast="bfloat16")
    raise SystemExit(f"unknown variant {name!r}; choose from {', '.join(VARIANTS)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", type=Path)
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--steps", type=int, default=20, help="timed steps per variant")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per variant first")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    p.add_argument("--table", default=TABLE, help="the embedding table's parameter name")
    p.add_argument("--output", type=Path)
    args, rest = p.parse_known_args()
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    if args.steps <= 0 or args.warmup < 0 or not names or len(set(names)) != len(names):
        raise SystemExit("--steps must be > 0, --warmup >= 0, --variants distinct names")
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = parse_config_overrides(rest)
    setups = {}
    for name in names:
        nlp, optimizer, batches, dropout, notes = variant_setup(name, args.config, overrides, args.table)
        setups[name] = (nlp, optimizer, dropout)
        for note in notes:
            print(f"[{name}] {note}")
    # One batch stream (the last variant's), shared, so every variant sees the same batches.
    stream = list(islice(batches, args.warmup + args.steps))
    wall = {name: [] for name in names}
    cpu = {name: [] for name in names}
    chars = 0
    for i, batch in enumerate(stream):
        timed = i >= args.warmup
        if timed:
            chars += sum(len(eg.reference.text) for eg in batch)
        for name in names[i % len(names) :] + names[: i % len(names)]:
            nlp, optimizer, dropout = setups[name]
            w0, c0 = time.perf_counter(), time.process_time()
            nlp.update(batch, drop=dropout, sgd=optimizer)
            if timed:
                wall[name].append(time.perf_counter() - w0)
                cpu[name].append(time.process_time() - c0)
        print(f"batch {i + 1}/{len(stream)}" + ("" if timed else " (warm-up)"), flush=True)
    base = names[0]
    rows = {}
    print(f"\n{args.steps} timed steps per variant, {chars:,} characters, torch threads {torch.get_num_threads()}")
    print(f"{'variant':<8} {'median s':>9} {'mean s':>8} {'CPU s':>7} {'chars/s':>8} {'x ' + base:>10}")
    for name in names:
        ratio = statistics.median(b / w for b, w in zip(wall[base], wall[name]))
        rows[name] = {
            "median_s_per_step": round(statistics.median(wall[name]), 4),
            "mean_s_per_step": round(statistics.mean(wall[name]), 4),
            "cpu_s_per_step": round(statistics.mean(cpu[name]), 4),
            "chars_per_s": round(chars / sum(wall[name]), 1),
            f"speedup_over_{base}": round(ratio, 3),
        }
        r = rows[name]
        print(
            f"{name:<8} {r['median_s_per_step']:9.3f} {r['mean_s_per_step']:8.3f} "
            f"{r['cpu_s_per_step']:7.3f} {r['chars_per_s']:8,.0f} {ratio:9.2f}x"
        )
    if args.output:
        args.output.write_text(
            json.dumps(
                {
                    "config": str(args.config),
                    "overrides": rest,
                    "table": args.table,
                    "steps": args.steps,
                    "warmup": args.warmup,
                    "chars": chars,
                    "torch_threads": torch.get_num_threads(),
                    "variants": rows,
                },
                indent=2,
            )
            + "\n",
            encoding="utf8",
        )


if __name__ == "__main__":
    main()
