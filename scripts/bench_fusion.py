"""The context fusion layer's cost: training steps and prediction, with and without it, side by side.

    python scripts/bench_fusion.py CONFIG --texts DEV.spacy [--texts ...] [--variants off,64x1,128x1]
        [--window 1] [--steps 10] [--warmup 2] [--repeats 3] [--output bench.json]
        [--paths.train_words ... spacy overrides]

One pipeline per variant from the same config, seed and overrides (``init_nlp``,
as ``spacy train`` builds it: scripts/bench_train_step.py's setup). ``off`` is
the config as it is; ``WxD`` puts ``spacy_crf.ContextFusion.v1`` of width W and
depth D (``--window``) on every ``spacy_crf.CRFTagger.v1`` head. The variants
take the same batches in turn, in an order that rotates from batch to batch,
and then the same prediction passes (``nlp.pipe`` over the texts of the
``--texts`` files, batch 128) in rotating order, so that a shared machine's
noise falls on all of them alike.

Prints per variant the median seconds per training step and its ratio to the
first variant (median of the per-batch ratios), the seconds per 1,000
characters at prediction and its ratio, and the fusion layers' own seconds
(forward and backward, every head) as a share of the step and of the
prediction: that share is measured inside one run, so it needs no second
variant to be read.
"""

import argparse
import json
import statistics
import time
from itertools import islice
from pathlib import Path
from typing import Any, Dict, List

from bench_train_step import training_setup
from spacy.cli._util import parse_config_overrides
from spacy.tokens import DocBin
from spacy.util import load_config

from spacy_crf.hardware import hardware
from spacy_crf.ml.context_fusion import REF

ARCHITECTURE = "spacy_crf.CRFTagger.v1"


def fusion_overrides(config: Path, variant: str, window: int) -> Dict[str, Any]:
    """The overrides of ``variant`` (``off`` or ``WxD``): the layer on every CRFTagger head."""
    if variant == "off":
        return {}
    try:
        width, depth = (int(part) for part in variant.split("x"))
    except ValueError:
        raise SystemExit(f"variant {variant!r}: give off or WIDTHxDEPTH, e.g. 64x1") from None
    layer = {"@layers": "spacy_crf.ContextFusion.v1", "width": width, "depth": depth, "window": window}
    components = load_config(config, interpolate=False)["components"]
    heads = [name for name, block in components.items() if block.get("model", {}).get("@architectures") == ARCHITECTURE]
    if not heads:
        raise SystemExit(f"{config}: no component has a {ARCHITECTURE} model")
    return {f"components.{name}.model.fusion": layer for name in heads}


def time_fusion(nlp) -> List[float]:
    """Wrap every fusion layer's forward and backprop with a timer; returns the list its seconds are added to."""
    spent = [0.0]
    for _, pipe in nlp.pipeline:
        model = getattr(pipe, "model", None)
        if model is None or not model.has_ref(REF):
            continue
        layer = model.get_ref(REF)

        def timed(model, X, is_train, forward=layer._func):
            start = time.perf_counter()
            Y, backprop = forward(model, X, is_train)
            spent[0] += time.perf_counter() - start

            def timed_backprop(dY):
                start = time.perf_counter()
                dX = backprop(dY)
                spent[0] += time.perf_counter() - start
                return dX

            return Y, timed_backprop

        layer._func = timed
    return spent


def rotated(names: List[str], i: int) -> List[str]:
    return names[i % len(names) :] + names[: i % len(names)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", type=Path)
    p.add_argument("--texts", type=Path, action="append", required=True, help="a .spacy file of prediction texts")
    p.add_argument("--variants", default="off,64x1,128x1")
    p.add_argument("--window", type=int, default=1)
    p.add_argument("--steps", type=int, default=10, help="timed training steps per variant")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per variant first")
    p.add_argument("--repeats", type=int, default=3, help="timed prediction passes per variant")
    p.add_argument("--output", type=Path)
    args, rest = p.parse_known_args()
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    if args.steps <= 0 or args.warmup < 0 or args.repeats <= 0 or not names or len(set(names)) != len(names):
        raise SystemExit("--steps and --repeats must be > 0, --warmup >= 0, --variants distinct names")
    overrides = parse_config_overrides(rest)
    setups, spent = {}, {}
    for name in names:
        nlp, optimizer, batches, dropout, _ = training_setup(
            args.config, {**overrides, **fusion_overrides(args.config, name, args.window)}
        )
        setups[name] = (nlp, optimizer, dropout)
        spent[name] = time_fusion(nlp)
    stream = list(islice(batches, args.warmup + args.steps))  # the last variant's: the same for all
    step_s: Dict[str, List[float]] = {name: [] for name in names}
    step_fusion_s: Dict[str, float] = {name: 0.0 for name in names}
    for i, batch in enumerate(stream):
        for name in rotated(names, i):
            nlp, optimizer, dropout = setups[name]
            spent[name][0], start = 0.0, time.perf_counter()
            nlp.update(batch, drop=dropout, sgd=optimizer)
            if i >= args.warmup:
                step_s[name].append(time.perf_counter() - start)
                step_fusion_s[name] += spent[name][0]
        print(f"step {i + 1}/{len(stream)}" + ("" if i >= args.warmup else " (warm-up)"), flush=True)
    texts = [doc.text for path in args.texts for doc in DocBin().from_disk(path).get_docs(setups[names[0]][0].vocab)]
    chars = sum(len(t) for t in texts)
    pass_s: Dict[str, List[float]] = {name: [] for name in names}
    pass_fusion_s: Dict[str, float] = {name: 0.0 for name in names}
    for i in range(args.repeats + 1):  # the first pass warms up
        for name in rotated(names, i):
            nlp = setups[name][0]
            spent[name][0], start = 0.0, time.perf_counter()
            list(nlp.pipe(texts, batch_size=128))
            if i:
                pass_s[name].append(time.perf_counter() - start)
                pass_fusion_s[name] += spent[name][0]
    base, rows = names[0], {}
    for name in names:
        rows[name] = {
            "median_s_per_step": statistics.median(step_s[name]),
            "step_ratio": statistics.median(w / b for w, b in zip(step_s[name], step_s[base])),
            "fusion_share_of_step": step_fusion_s[name] / sum(step_s[name]),
            "s_per_1k_chars": 1000 * statistics.median(pass_s[name]) / chars,
            "predict_ratio": statistics.median(w / b for w, b in zip(pass_s[name], pass_s[base])),
            "fusion_share_of_predict": pass_fusion_s[name] / sum(pass_s[name]),
        }
    print(f"\n{args.steps} steps, {args.repeats} prediction passes of {len(texts)} texts ({chars:,} chars)")
    print(f"{'variant':<8} {'s/step':>7} {'x ' + base:>7} {'fusion':>7} {'s/1k ch':>8} {'x ' + base:>7} {'fusion':>7}")
    for name, r in rows.items():
        print(
            f"{name:<8} {r['median_s_per_step']:7.3f} {r['step_ratio']:7.3f} {100 * r['fusion_share_of_step']:6.2f}% "
            f"{r['s_per_1k_chars']:8.4f} {r['predict_ratio']:7.3f} {100 * r['fusion_share_of_predict']:6.2f}%"
        )
    if args.output:
        record = {"config": str(args.config), "overrides": rest, "window": args.window, "steps": args.steps}
        record.update({"texts": len(texts), "chars": chars, "variants": rows, "hardware": hardware()})
        args.output.write_text(json.dumps(record, indent=2) + "\n", encoding="utf8")


if __name__ == "__main__":
    main()
