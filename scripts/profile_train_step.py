"""Where a training step's time goes: characters per second and a per-phase profile.

    python scripts/profile_train_step.py CONFIG [--steps 30] [--warmup 5] [--threads N]
        [--top 25] [--freeze 'embeddings.word_embeddings.*']
        [--sparse embeddings.word_embeddings.weight] [--output profile.json]
        [--paths.train_words ... spacy overrides]

Builds the pipeline exactly as ``spacy train`` does (``init_nlp`` on the
config with the overrides), then runs ``--warmup`` untimed and ``--steps``
timed updates on the training corpus's batches, under cProfile. It prints
the training throughput (characters of the batches per second) and the
cumulative seconds per step of the phases that matter for a transformer +
CRF model:

* encoder forward / backward (the Hugging Face model inside the torch shim);
* spacy-transformers' wordpiece alignment and the listeners' pooling;
* the CRF (loss, gradients) and the emission layers;
* the optimizer (Adam over every parameter, the embedding table included).

Phases overlap (the encoder's forward runs inside spacy-transformers'
forward), so their sum is not the step time; each row is "time spent
inside this phase".
"""

import argparse
import cProfile
import json
import pstats
import time
from itertools import islice
from pathlib import Path

import torch
from bench_train_step import training_setup
from spacy.cli._util import parse_config_overrides

# (phase, predicate over a pstats key (file, line, function)). A phase's time is
# the largest cumulative time among its matching functions when they nest
# (the outermost call includes the others), else their sum: see NESTED.
PHASES = [
    ("whole update (nlp.update)", lambda f, fn: fn == "update" and f.endswith("spacy/language.py")),
    ("encoder forward (HF model)", lambda f, fn: fn == "forward" and "transformers/models/" in f and "modeling_" in f),
    ("torch backward (autograd)", lambda f, fn: fn == "run_backward" or (fn == "backward" and "torch/autograd" in f)),
    (
        "spacy-transformers forward",
        lambda f, fn: fn == "forward" and "spacy_transformers/layers/transformer_model.py" in f,
    ),
    (
        "wordpiece alignment",
        lambda f, fn: (
            "spacy_transformers/align.py" in f
            and fn in ("get_alignment", "get_alignment_via_offset_mapping", "get_token_positions")
        ),
    ),
    (
        "listener pooling (trfs2arrays)",
        lambda f, fn: (
            fn in ("trfs2arrays", "backprop_trf_to_tensor")
            or (fn == "forward" and "spacy_transformers/layers/trfs2arrays.py" in f)
        ),
    ),
    ("CRF loss (get_loss)", lambda f, fn: fn == "get_loss" and "spacy_crf" in f),
    ("optimizer (all params)", lambda f, fn: fn == "__call__" and "optimizers.py" in f),
    ("torch shim finish_update", lambda f, fn: fn == "finish_update" and "thinc/shims/pytorch.py" in f),
    ("Adam maths", lambda f, fn: fn in ("_adam", "adam")),
    ("batching / reading docs", lambda f, fn: "spacy_crf/corpora" in f or fn == "minibatch_by_words"),
]
NESTED = {"encoder forward (HF model)", "torch backward (autograd)", "spacy-transformers forward"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", type=Path)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    p.add_argument("--top", type=int, default=0, help="also print the N functions with the most own time")
    p.add_argument(
        "--freeze",
        action="append",
        default=[],
        metavar="PATTERN",
        help="freeze encoder parameters matching this glob (spacy_crf.freeze_parameters.v1)",
    )
    p.add_argument(
        "--sparse",
        action="append",
        default=[],
        metavar="PATTERN",
        help="sparse gradients for embedding tables matching this glob "
        "(spacy_crf.sparse_embeddings.v1; pair it with the optimizer's lazy_rows)",
    )
    p.add_argument("--output", type=Path)
    args, rest = p.parse_known_args()
    if args.steps <= 0 or args.warmup < 0:
        raise SystemExit("--steps must be > 0 and --warmup >= 0")
    if args.threads:
        torch.set_num_threads(args.threads)
    nlp, optimizer, batches, dropout, notes = training_setup(
        args.config, parse_config_overrides(rest), freeze=args.freeze, sparse=args.sparse
    )
    for note in notes:
        print(note)

    for batch in islice(batches, args.warmup):
        nlp.update(batch, drop=dropout, sgd=optimizer)
    chars = 0
    profiler = cProfile.Profile()
    start = time.perf_counter()
    for batch in islice(batches, args.steps):
        chars += sum(len(eg.reference.text) for eg in batch)
        profiler.enable()
        nlp.update(batch, drop=dropout, sgd=optimizer)
        profiler.disable()
    seconds = time.perf_counter() - start
    stats = pstats.Stats(profiler)
    rows = []
    for phase, match in PHASES:
        times = [v[3] for (f, _, fn), v in stats.stats.items() if match(f, fn)]
        cumulative = max(times, default=0.0) if phase in NESTED else sum(times)
        rows.append((phase, cumulative / args.steps))
    per_step = seconds / args.steps
    print(
        f"{args.steps} steps, {chars:,} characters, {seconds:.1f} s: {chars / seconds:,.0f} chars/s, "
        f"{per_step:.3f} s/step, torch threads {torch.get_num_threads()}"
    )
    print(f"{'phase':<34} {'s/step':>8} {'share':>7}")
    for phase, s in rows:
        print(f"{phase:<34} {s:8.3f} {100 * s / per_step:6.1f}%")
    if args.top:
        stats.sort_stats("tottime").print_stats(args.top)
    if args.output:
        args.output.write_text(
            json.dumps(
                {
                    "config": str(args.config),
                    "overrides": rest,
                    "frozen": args.freeze,
                    "sparse": args.sparse,
                    "steps": args.steps,
                    "chars": chars,
                    "seconds": round(seconds, 2),
                    "chars_per_s": round(chars / seconds, 1),
                    "torch_threads": torch.get_num_threads(),
                    "phases_s_per_step": {phase: round(s, 4) for phase, s in rows},
                },
                indent=2,
            )
            + "\n",
            encoding="utf8",
        )


if __name__ == "__main__":
    main()
