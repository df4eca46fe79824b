"""The dev curve of one training run, OOV recall included.

``python crf_project training-curve training/joint --output metrics/training_curve``

Reads what the run logged at every evaluation (``train_log.times.jsonl`` of
``spacy_crf.TimedConsoleLogger.v1``, with CPU time, else spaCy's
``train_log.jsonl``): SXU word F with its OOV and IV recall (the segmenter's
``spacy_crf.words_scorer.v2``) and MSRA entity F. Writes
``OUTPUT.json`` (every evaluation), ``OUTPUT.md`` (the table and how OOV recall
moved) and ``OUTPUT.png`` (the scores against the steps, with the issue's
targets).

Its question is the one the OOV target leaves open: do more steps find unseen
words, or only learn the seen ones? The scores are those of the dev docs that
the run evaluated (``corpora.dev.limit``), the ones ``model-best`` was picked on.
"""

from pathlib import Path
from typing import Dict, List, Optional

import srsly
import typer
from thinc.api import Config
from wasabi import msg

from crf_project.results import write_table
from crf_project.script_cli import script_app
from crf_project.targets import DEV_TARGETS
from spacy_crf.files import write_json_atomic
from spacy_crf.plots import finish_axes, save_figure, subplots
from spacy_crf.training.loggers import times_path

KEYS = ("words_f", "words_oov_recall", "words_iv_recall", "ents_f")


def read_evaluations(run_dir: Path) -> List[Dict]:
    """One dict per evaluation: ``step``, ``seconds``/``cpu_seconds`` (None
    without timing rows), ``score`` (what picks model-best) and the dev scores
    of :data:`KEYS` in percent (None where not logged)."""
    log = run_dir / "train_log.jsonl"
    times = times_path(log)
    if times.exists():
        rows = [
            {
                "step": r["step"],
                "seconds": r["seconds"],
                "cpu_seconds": r["cpu_seconds"],
                "score": r["score"],
                "scores": r["scores"],
            }
            for r in srsly.read_jsonl(times)
        ]
    elif log.exists():
        rows = [
            {"step": r["step"], "seconds": None, "cpu_seconds": None, "score": r["score"], "scores": r["scores"]}
            for r in srsly.read_jsonl(log)
        ]
    else:
        raise FileNotFoundError(
            f"{run_dir}: no train_log.jsonl or {times.name}: not a training run of scripts/train.py"
        )
    return [
        {
            "step": r["step"],
            "seconds": r["seconds"],
            "cpu_seconds": r["cpu_seconds"],
            "score": r["score"],
            **{key: r["scores"].get(key) for key in KEYS},
        }
        for r in rows
    ]


def dev_limit(run_dir: Path) -> Optional[int]:
    """``corpora.dev.limit`` of the run (0: all dev docs), from its saved config."""
    for name in ("model-last", "model-best"):
        path = run_dir / name / "config.cfg"
        if path.exists():
            return Config().from_disk(path, interpolate=False)["corpora"]["dev"].get("limit")
    return None


def summarize(points: List[Dict]) -> Dict:
    """model-best (the last evaluation with the highest weighted score, as
    spaCy saves it), the peak of OOV recall, and the change from that peak to
    the last evaluation."""
    scored = [p for p in points if p["step"] > 0]
    if not scored:
        raise ValueError("no evaluation after step 0: nothing to report")
    top = max(p["score"] for p in scored)
    best = [p for p in scored if p["score"] == top][-1]
    summary = {"model_best": best, "last": scored[-1], "oov_peak": None, "after_peak": None}
    with_oov = [p for p in scored if p["words_oov_recall"] is not None]
    if with_oov:
        peak = max(with_oov, key=lambda p: p["words_oov_recall"])
        last = with_oov[-1]
        summary["oov_peak"] = peak
        summary["after_peak"] = {
            key: None if peak[key] is None or last[key] is None else round(last[key] - peak[key], 3) for key in KEYS
        }
    return summary


def _cell(value: Optional[float], fmt: str = "{:.2f}") -> str:
    return "–" if value is None else fmt.format(value)


def table(points: List[Dict], summary: Dict, limit: Optional[int], profile: str, run_dir: str) -> str:
    docs = "all dev docs" if not limit else f"the first {limit:,} dev docs of each task"
    lines = [
        f"Profile `{profile}`, run `{run_dir}`: dev scores at every evaluation, on {docs} (those that "
        "picked `model-best`, marked ◀); CPU: every thread of the training process since training "
        "started, dev evaluations included. Written by `spacy project run training-curve`.",
        "",
        "| step | wall min | CPU min | SXU word F | OOV recall | IV recall | MSRA entity F |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in points:
        mark = " ◀" if p is summary["model_best"] else ""
        lines.append(
            f"| {p['step']:,}{mark} | {_cell(p['seconds'] and p['seconds'] / 60, '{:.1f}')} | "
            f"{_cell(p['cpu_seconds'] and p['cpu_seconds'] / 60, '{:.1f}')} | {_cell(p['words_f'])} | "
            f"{_cell(p['words_oov_recall'])} | {_cell(p['words_iv_recall'])} | {_cell(p['ents_f'])} |"
        )
    peak, change = summary["oov_peak"], summary["after_peak"]
    if peak is not None:
        lines += [
            "",
            f"OOV recall peaked at {peak['words_oov_recall']:.2f} at step {peak['step']:,} (word F "
            f"{_cell(peak['words_f'])}, IV recall {_cell(peak['words_iv_recall'])}). From there to step "
            f"{summary['last']['step']:,}: OOV recall {_cell(change['words_oov_recall'], '{:+.2f}')}, "
            f"IV recall {_cell(change['words_iv_recall'], '{:+.2f}')}, word F "
            f"{_cell(change['words_f'], '{:+.2f}')}. Targets on the full dev sets: word F "
            f"{DEV_TARGETS['words_f']}, OOV recall {DEV_TARGETS['words_oov_recall']}, entity F {DEV_TARGETS['ents_f']}.",
        ]
    return "\n".join(lines)


def plot(points: List[Dict], summary: Dict, path: Path, title: str) -> None:
    fig, axes = subplots(1, 2, figsize=(10, 4))
    scored = [p for p in points if p["step"] > 0]
    steps = [p["step"] for p in scored]
    for key, name in (("words_f", "word F"), ("words_iv_recall", "IV recall"), ("words_oov_recall", "OOV recall")):
        if any(p[key] is not None for p in scored):
            axes[0].plot(steps, [p[key] for p in scored], marker=".", label=f"SXU {name}")
    axes[1].plot(steps, [p["ents_f"] for p in scored], marker=".", label="MSRA entity F")
    for ax, keys in ((axes[0], ("words_f", "words_oov_recall")), (axes[1], ("ents_f",))):
        for key in keys:
            ax.axhline(DEV_TARGETS[key], color="grey", linestyle="--", linewidth=1, label=f"target {DEV_TARGETS[key]}")
        ax.axvline(summary["model_best"]["step"], color="black", linestyle=":", linewidth=1, label="model-best")
    finish_axes(axes[0], "training step", "SXU dev (%)")
    finish_axes(axes[1], "training step", "MSRA dev (%)")
    save_figure(fig, path, title=title)


app = script_app()


@app.command()
def main(
    run_dir: Path = typer.Argument(..., help="a training output folder (train_log.jsonl)"),
    output: Path = typer.Option(Path("metrics/training_curve"), help="OUTPUT.json, OUTPUT.md, OUTPUT.png"),
    profile: str = typer.Option("default"),
) -> None:
    try:
        points = read_evaluations(run_dir)
        summary = summarize(points)
    except (FileNotFoundError, ValueError) as err:
        msg.fail(str(err), exits=1)
    limit = dev_limit(run_dir)
    text = table(points, summary, limit, profile, str(run_dir))
    write_json_atomic(
        output.with_suffix(".json"),
        {
            "profile": profile,
            "run": str(run_dir),
            "dev_limit": limit,
            "targets": DEV_TARGETS,
            "evaluations": points,
            **summary,
        },
    )
    write_table(output.with_suffix(".md"), text)
    plot(points, summary, output.with_suffix(".png"), f"{run_dir}: dev scores against training steps ({profile})")
    print(text)
