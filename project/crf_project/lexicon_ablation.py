"""Lexicon ablation: no lexicon, the decoding prior, learned lexicon features, both; over seeds.

    python crf_project lexicon-ablation --out ROOT --lexicon ROOT/lexicon/words.txt \
        [--weights 0,0.5,1,1.5,2] [--eval-limit N] [--profile NAME]

The studies' ``lexicon-ablation`` workflow trains, per seed, into
``ROOT/training/lexicon_ablation/seed<N>/``:

* ``off``: the shipped recipe (configs/joint.cfg);
* ``features``: the same with ``spacy_crf.LexiconFeatures.v1`` on both heads
  (the lexicon step's tagged dictionary, ``lexicon_width`` of the workflow).

This script scores every model found there on the manifest's evaluation
splits: MSRA entities, and SXU words with the segmenter's decoding prior
(:mod:`spacy_crf.pipeline.lexicon`, the words of ``--lexicon``) at weight 0
and at the weight with the best word F among ``--weights``
(:func:`crf_project.lexicon_tune.tune`, as the ship project's
``lexicon-tune`` chooses it, on the same split). That gives four settings:

* ``none``: ``off``, weight 0;
* ``prior``: ``off``, the chosen weight;
* ``learned``: ``features``, weight 0;
* ``both``: ``features``, the chosen weight.

The prior biases the segmenter only, so a model's entity F is the same with
and without it. Writes ``ROOT/metrics/lexicon_ablation.json`` and ``.md``
(mean ± half-range over the seeds, the weights chosen, and each run's steps,
best step and training seconds, so that a reduced budget shows).
"""

from pathlib import Path
from typing import Dict, List, Sequence

import typer

from crf_project.compare_report import joined, per_seed, run_settings
from crf_project.evaluate import evaluate
from crf_project.lexicon_tune import DEFAULT_WEIGHTS, tune
from crf_project.oov_probes import load_inputs
from crf_project.results import write_table
from crf_project.script_cli import run_app, script_app
from crf_project.seed_report import cell, eval_limit_option, out_option, profile_option, report_inputs
from spacy_crf.files import write_json_atomic
from spacy_crf.pipeline.lexicon import Lexicon, read_lexicon

# (setting, trained model, with the prior, label)
SETTINGS = [
    ("none", "off", False, "no lexicon"),
    ("prior", "off", True, "decoding prior (weight tuned on the split)"),
    ("learned", "features", False, "learned lexicon features"),
    ("both", "features", True, "learned features + decoding prior"),
]
MODELS = ("off", "features")


def parse_weights(text: str) -> List[float]:
    """``--weights``: comma-separated weights >= 0; 0 (the model alone) is always scored."""
    try:
        weights = [float(w) for w in text.split(",") if w.strip()]
    except ValueError:
        raise typer.BadParameter(f"not a comma-separated list of numbers: {text!r}", param_hint="--weights") from None
    if any(not w >= 0 for w in weights):
        raise typer.BadParameter(f"weights must be >= 0, got {text!r}", param_hint="--weights")
    return sorted(set(weights) | {0.0})


def score_model(model: Path, manifest: Dict, lexicon, weights: Sequence[float], eval_limit: int) -> Dict:
    """SXU words at weight 0 and at the chosen weight, and MSRA entities, of one model."""
    sxu, msra = manifest["sxu"], manifest["msra"]
    nlp, refs, iv_words = load_inputs(str(model), Path(sxu["eval"]), Path(sxu["dictionary"]), eval_limit)
    tuned = tune(nlp, refs, iv_words, lexicon, weights)
    alone = next(row for row in tuned["weights"] if row["weight"] == 0)
    ents = evaluate("ner", model, Path(msra["eval"]), split=msra["eval_split"], limit=eval_limit)
    return {"words": {False: alone, True: tuned["chosen"]}, "ents": ents["scores"], "train": ents["train"]}


def ablation_table(results: Dict[str, Dict[str, Dict]], profile: str, splits: Dict[str, str]) -> str:
    """The Markdown table: one row per setting with a trained model in ``results``
    (model -> seed -> {words: {prior: scores}, ents, train, settings})."""
    rows = []
    for setting, model, prior, label in SETTINGS:
        runs = results.get(model, {})
        if not runs:
            continue
        seeds = sorted(runs)
        words = [runs[s]["words"][prior] for s in seeds]
        settings = [runs[s]["settings"] for s in seeds]
        train_s = [(runs[s].get("train") or {}).get("train_seconds") for s in seeds]
        chosen = per_seed([w["weight"] for w in words], "{:g}") if prior else "0"
        rows.append(
            f"| {setting}: {label} | {cell([w['words_f'] for w in words])} | "
            f"{cell([w.get('words_oov_recall') for w in words])} | "
            f"{cell([runs[s]['ents']['ents_f'] for s in seeds])} | {chosen} | {len(seeds)} ({', '.join(seeds)}) | "
            f"{joined([st['max_steps'] for st in settings])} | {per_seed([st['best_step'] for st in settings])} | "
            f"{per_seed(train_s, '{:,.0f}')} |"
        )
    return "\n".join(
        [
            f"Profile `{profile}`; SXU words on {splits['sxu']}, MSRA entities on {splits['msra']}; mean ± "
            "half-range over the seeds. `prior weight`: the decoding prior's weight per seed, chosen on the "
            "same split; `steps`, `best step` (where model-best was saved) and `train s` per run. "
            "Written by `spacy project run lexicon-ablation-report`.",
            "",
            "| setting | SXU word F | SXU OOV recall | MSRA entity F | prior weight | seeds | steps | best step | train s |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )


app = script_app()


@app.command(help=__doc__)
def lexicon_ablation_cli(
    out: str = out_option(),
    lexicon: Path = typer.Option(
        ..., "--lexicon", exists=True, dir_okay=False, help="the decoding prior's word list (the lexicon step's)"
    ),
    weights: str = typer.Option(
        ",".join(f"{w:g}" for w in DEFAULT_WEIGHTS), "--weights", help="prior weights to choose from (0 always)"
    ),
    eval_limit: int = eval_limit_option(),
    profile: str = profile_option(),
) -> None:
    candidates = parse_weights(weights)
    folder = Path(out) / "training" / "lexicon_ablation"
    manifest, seed_dirs = report_inputs(out, eval_limit, folder, "lexicon-ablation")
    prior = Lexicon(read_lexicon(lexicon))
    results: Dict[str, Dict[str, Dict]] = {}
    for seed_dir in seed_dirs:
        for model in MODELS:
            path = seed_dir / model / "model-best"
            if not path.exists():
                print(f"skip {seed_dir.name}/{model}: not trained")
                continue
            scored = score_model(path, manifest, prior, candidates, eval_limit)
            scored["settings"] = run_settings(seed_dir / model)
            results.setdefault(model, {})[seed_dir.name] = scored
            print(
                f"{seed_dir.name} {model}: words F {scored['words'][False]['words_f']:.4f} "
                f"(prior {scored['words'][True]['weight']:g}: {scored['words'][True]['words_f']:.4f}), "
                f"ents F {scored['ents']['ents_f']:.4f}"
            )
    splits = {c: manifest[c]["eval_split"] for c in ("sxu", "msra")}
    table = ablation_table(results, profile, splits)
    metrics = Path(out) / "metrics"
    metrics.mkdir(parents=True, exist_ok=True)
    payload = {
        "profile": profile,
        "eval_limit": eval_limit,
        "weights": candidates,
        "results": {
            model: {
                seed: {**run, "words": {"alone": run["words"][False], "chosen": run["words"][True]}}
                for seed, run in runs.items()
            }
            for model, runs in results.items()
        },
    }
    write_json_atomic(metrics / "lexicon_ablation.json", payload)
    write_table(metrics / "lexicon_ablation.md", table)
    print(table)


def main() -> None:
    run_app(app)
