"""CRF versus softmax heads on the same encoder, data and budget, over seeds.

    python crf_project compare-report --out ROOT [--eval-limit N]

The `compare` workflow trains, per seed, into ``ROOT/training/compare/seed<N>/``:

* ``joint_crf``: the shipped model (configs/joint.cfg, CRF heads);
* ``joint_softmax``: the same model with ``use_crf = false``: the same
  emission layer, decoded by argmax instead of the CRF (the like-for-like head);
* ``cws_tagger``: spaCy's ``tagger`` on BMES tags (SXU only);
* ``ner_spacy``: spaCy's transition-based ``ner`` (MSRA only).

This script scores every trained model found there on the manifest's
evaluation split (SXU words, MSRA entities), writes
``ROOT/metrics/compare.json`` and ``compare.md`` (mean ± half-range over the
seeds found, and the seeds; ``crf_project results`` gathers it); ``compare.png`` plots the dev
curves scored while training (SXU word F, MSRA entity F) against the steps
each task got, per head and seed. Each row also says what the
runs were trained with (steps, peak learning rate, the step model-best came
from), so that a table from a reduced budget cannot pass for the default.
"""

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import srsly
from spacy.util import load_config

from crf_project.evaluate import evaluate
from crf_project.results import write_table
from crf_project.script_cli import run_app, script_app
from crf_project.seed_report import cell, eval_limit_option, out_option, profile_option, report_inputs
from spacy_crf.files import write_json_atomic
from spacy_crf.plots import finish_axes, save_figure, subplots

# (model dir, label, tasks it is scored on)
HEADS = [
    ("joint_crf", "CRF (crf_segmenter + crf_ner, joint)", ("cws", "ner")),
    ("joint_softmax", "softmax, same emission layer (use_crf = false, joint)", ("cws", "ner")),
    ("cws_tagger", "spaCy tagger on BMES tags", ("cws",)),
    ("ner_spacy", "spaCy ner (transition-based)", ("ner",)),
]
CORPUS = {"cws": "sxu", "ner": "msra"}
KEY = {"cws": "words_f", "ner": "ents_f"}
JOINT = {"joint_crf", "joint_softmax"}


def run_settings(run_dir: Path) -> Dict[str, Optional[float]]:
    """The budget of one training run: ``max_steps`` and peak ``learn_rate``
    from its model's config (overrides included), and ``best_step``, the
    evaluation with the highest score in ``train_log.jsonl`` (the one
    ``model-best`` was saved at; None without a log)."""
    training = load_config(run_dir / "model-best" / "config.cfg", interpolate=False)["training"]
    rate = training["optimizer"]["learn_rate"]
    log = run_dir / "train_log.jsonl"
    rows = [r for r in srsly.read_jsonl(log) if r.get("score") is not None] if log.exists() else []
    best = max(rows, key=lambda r: r["score"])["step"] if rows else None
    peak = rate.get("initial_rate") if isinstance(rate, dict) else rate
    return {
        "max_steps": training["max_steps"],
        "learn_rate": float(f"{peak:.6g}") if isinstance(peak, float) else peak,  # 3e-4, not 0.00030000000000000003
        "best_step": best,
    }


def joined(values: List, fmt: str = "{:,}") -> str:
    """The distinct values of a column, sorted, or a dash."""
    distinct = sorted({v for v in values if v is not None})
    return ", ".join(fmt.format(v) for v in distinct) or "–"


def per_seed(values: List, fmt: str = "{:,}") -> str:
    """One value per seed, in the seeds' order, a dash where there is none: runs of
    one head can differ (e.g. one trained beside another job)."""
    return ", ".join("–" if v is None else fmt.format(v) for v in values)


def compare_table(results: Dict[str, Dict[str, Dict[str, Dict]]], profile: str, splits: Dict[str, str]) -> str:
    """The Markdown table: one row per head found in ``results``
    (head -> task -> seed -> {scores, train, settings})."""
    rows = []
    for head, label, _ in HEADS:
        by_task = results.get(head, {})
        if not by_task:
            continue
        runs = {seed: run for by_seed in by_task.values() for seed, run in by_seed.items()}
        seeds = sorted(runs)
        cws = [r["scores"]["words_f"] for r in by_task.get("cws", {}).values()]
        oov = [r["scores"].get("words_oov_recall") for r in by_task.get("cws", {}).values()]
        ner = [r["scores"]["ents_f"] for r in by_task.get("ner", {}).values()]
        settings = [runs[s]["settings"] for s in seeds]
        train_s = [(runs[s].get("train") or {}).get("train_seconds") for s in seeds]
        rows.append(
            f"| {label} | {cell(cws)} | {cell(oov)} | {cell(ner)} | {len(seeds)} ({', '.join(seeds)}) | "
            f"{joined([st['max_steps'] for st in settings])} | "
            f"{joined([st['learn_rate'] for st in settings], '{:g}')} | "
            f"{per_seed([st['best_step'] for st in settings])} | {per_seed(train_s, '{:,.0f}')} |"
        )
    return "\n".join(
        [
            f"Profile `{profile}`; SXU word F on {splits['cws']}, MSRA entity F on {splits['ner']}; "
            "mean ± half-range over the seeds. `steps`: training steps of each run (a joint step mixes "
            "both tasks, so a joint model gets half of them per task); `best step`: where model-best "
            "was saved, and `train s`: wall seconds of training, per seed. "
            "Written by `spacy project run compare-report`.",
            "",
            "| head | SXU word F | SXU OOV recall | MSRA entity F | seeds | steps | peak lr | best step | train s |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )


def dev_curve(run_dir: Path, task: str, joint: bool) -> List[Tuple[float, float]]:
    """(steps of this task, dev F in percent) of every evaluation in a run's
    ``train_log.jsonl``. A joint step trains on both tasks' docs, so it counts
    as half a step of each: the baselines' x axis is comparable."""
    log = run_dir / "train_log.jsonl"
    if not log.exists():
        return []
    per_task = 0.5 if joint else 1.0
    return [
        (row["step"] * per_task, row["scores"][KEY[task]])
        for row in srsly.read_jsonl(log)
        if (row.get("scores") or {}).get(KEY[task]) is not None
    ]


def plot_curves(seed_dirs: List[Path], title: str, path: Path) -> None:
    """Two panels (SXU word F, MSRA entity F) of dev F against each task's
    steps: one colour per head, one line per seed."""
    fig, axes = subplots(1, 2, figsize=(10, 4))
    colours = dict(zip([h for h, _, _ in HEADS], ("tab:blue", "tab:orange", "tab:green", "tab:red")))
    for ax, task in zip(axes, ("cws", "ner")):
        for head, label, tasks in HEADS:
            if task not in tasks:
                continue
            for i, seed_dir in enumerate(seed_dirs):
                points = dev_curve(seed_dir / head, task, head in JOINT)
                if points:
                    x, y = zip(*points)
                    ax.plot(
                        x,
                        y,
                        color=colours[head],
                        marker=".",
                        alpha=0.9 if i == 0 else 0.55,
                        label=label if i == 0 else None,
                    )
        finish_axes(
            ax,
            f"training steps on {CORPUS[task].upper()} (a joint step counts half)",
            f"dev {'word' if task == 'cws' else 'entity'} F (docs scored while training)",
            legend_size=7,
        )
    save_figure(fig, path, title=title)


app = script_app()


@app.command(help=__doc__)
def compare_report_cli(
    out: str = out_option(),
    eval_limit: int = eval_limit_option(),
    profile: str = profile_option(),
) -> None:
    manifest, seed_dirs = report_inputs(out, eval_limit, Path(out) / "training" / "compare", "compare")
    root = Path(out)
    results: Dict[str, Dict[str, Dict[str, Dict]]] = {}
    for seed_dir in seed_dirs:
        for head, _, tasks in HEADS:
            model = seed_dir / head / "model-best"
            if not model.exists():
                print(f"skip {seed_dir.name}/{head}: not trained")
                continue
            settings = run_settings(seed_dir / head)
            for task in tasks:
                entry = manifest[CORPUS[task]]
                words = Path(entry["dictionary"]) if task == "cws" else None
                result = evaluate(
                    task,
                    model,
                    Path(entry["eval"]),
                    words=words,
                    split=entry["eval_split"],
                    name=f"{seed_dir.name}/{head}:{CORPUS[task]}",
                    limit=eval_limit,
                )
                results.setdefault(head, {}).setdefault(task, {})[seed_dir.name] = {
                    "scores": result["scores"],
                    "train": result["train"],
                    "split": entry["eval_split"],
                    "settings": settings,
                }
                print(f"{seed_dir.name} {head} {task}: {KEY[task]} = {result['scores'][KEY[task]]}")
    table = compare_table(results, profile, {task: manifest[c]["eval_split"] for task, c in CORPUS.items()})
    metrics = root / "metrics"
    metrics.mkdir(parents=True, exist_ok=True)
    write_json_atomic(metrics / "compare.json", {"profile": profile, "eval_limit": eval_limit, "results": results})
    write_table(metrics / "compare.md", table)
    plot_curves(seed_dirs, f"compare: dev F while training, per head and seed ({profile})", metrics / "compare.png")
    print(table)


def main() -> None:
    run_app(app)
