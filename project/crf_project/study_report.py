"""The CRF learning-rate study's report: tables, heatmaps, plots and a reading.

Input: one JSON record per run (see :func:`spacy_crf.study.record_run`) with
the run's coordinates added: ``task`` ("cws"/"ner"), ``depth`` (encoder
layers), ``head`` ("softmax" or "crf"), ``multiplier`` and ``seed``, plus
``f1`` (the task's main dev score), optionally ``oov_recall`` and
``train_seconds``. Output: ``README.md`` beside the PNGs it refers to.
"""

from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import srsly

from crf_project.study_measures import mean_and_spread
from spacy_crf.ml.schemes import transition_mask
from spacy_crf.ml.transitions import TransitionTable
from spacy_crf.plots import finish_axes, save_figure, subplots

HEAD_ORDER = ("softmax", "crf x1", "crf x100", "crf x1000")


def head_name(record: Dict) -> str:
    if record["head"] == "softmax":
        return "softmax"
    return f"crf x{record['multiplier']:g}"


def load_records(runs_dir: Path) -> List[Dict]:
    return [srsly.read_json(p) for p in sorted(Path(runs_dir).glob("*.json"))]


def _cell(values: List[Optional[float]], scale: float = 100.0, digits: int = 1) -> str:
    stats = mean_and_spread(values)
    if stats is None:
        return "–"
    return f"{stats['mean'] * scale:.{digits}f} ± {stats['spread'] * scale:.{digits}f}"


def _group(records: Iterable[Dict]) -> Dict[Tuple[str, str, int], List[Dict]]:
    groups: Dict[Tuple[str, str, int], List[Dict]] = defaultdict(list)
    for r in records:
        groups[(head_name(r), r["task"], int(r["depth"]))].append(r)
    return groups


def results_table(records: Sequence[Dict], key: str = "f1", scale: float = 100.0, digits: int = 1) -> str:
    """Markdown: heads as rows, task x depth as columns, mean ± spread over seeds."""
    groups = _group(records)
    columns = sorted({(r["task"], int(r["depth"])) for r in records})
    heads = [h for h in HEAD_ORDER if any(k[0] == h for k in groups)]
    header = "| head | " + " | ".join(f"{t} {d}L" for t, d in columns) + " |"
    lines = [header, "|---" * (len(columns) + 1) + "|"]
    for head in heads:
        cells = [_cell([r.get(key) for r in groups.get((head, t, d), [])], scale, digits) for t, d in columns]
        lines.append(f"| {head} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mean(records: List[Dict], key: str) -> Optional[float]:
    stats = mean_and_spread([r.get(key) for r in records])
    return stats["mean"] if stats else None


def _spread(records: List[Dict], key: str) -> float:
    stats = mean_and_spread([r.get(key) for r in records])
    return stats["spread"] if stats else 0.0


def _gain(a: List[Dict], b: List[Dict], key: str = "f1") -> Tuple[float, float]:
    """Mean of ``a`` minus mean of ``b``, and the larger of their spreads over seeds:
    a gain no larger than the spread is not told apart from seed noise."""
    return (_mean(a, key) or 0.0) - (_mean(b, key) or 0.0), max(_spread(a, key), _spread(b, key))


def common_violations(records: Sequence[Dict], most: int = 3) -> List[Tuple[Tuple[str, str, str], int]]:
    """The (state, impossible next, possible next) triples ranked wrong most
    often over ``records`` (runs with a transition matrix), with their counts."""
    counts: Counter = Counter()
    for r in records:
        t = r.get("transitions")
        if t:
            table = TransitionTable.from_dict(t, transition_mask(r.get("scheme", "bmes"), t["tags"]))
            counts.update(set(table.violations()))  # a run counts each move once
    # ties in a fixed order, so that the report is the same on every run
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:most]


def _fmt(value: Optional[float], scale: float = 100.0) -> str:
    return "n/a" if value is None else f"{value * scale:.1f}"


def _layers(depth: int) -> str:
    return f"{depth} layer{'s' if depth != 1 else ''}"


def reading(records: Sequence[Dict]) -> List[str]:
    """One line per claim and task: held / did not hold, with the numbers.

    Claim 1 needs runs at a full depth beside the shallow one; a claim whose
    heads all scored 0 F1 is inconclusive (the budget was too small for the
    model to learn the task at all), not refuted. A difference in F1 counts
    only when it is larger than the spread over seeds of both sides.
    """
    groups = _group(records)
    out = []
    for task in sorted({r["task"] for r in records}):
        depths = sorted({int(r["depth"]) for r in records if r["task"] == task})
        if not depths:
            continue
        full, shallow = max(depths), min(depths)
        g = lambda head, depth: groups.get((head, task, depth), [])  # noqa: E731

        def learned(depth: int) -> bool:
            return any((_mean(g(h, depth), "f1") or 0.0) > 0 for h in HEAD_ORDER)

        if len(depths) < 2:
            out.append(f"- **Claim 1 ({task}): not assessed.** No runs with a full-depth encoder yet.")
        else:
            soft_f, crf1_f = _mean(g("softmax", full), "f1"), _mean(g("crf x1", full), "f1")
            v1 = _mean(g("crf x1", full), "validity")
            r1 = _mean(g("crf x1", full), "transition_emission_ratio")
            if None not in (soft_f, crf1_f, v1):
                poor = v1 < 0.9 or (r1 is not None and r1 < 0.1)
                diff, noise = _gain(g("crf x1", full), g("softmax", full))
                close = abs(diff) <= max(0.005, noise)
                verdict = "held" if poor and close else "held in part" if poor or close else "did not hold"
                if not learned(full):
                    verdict = "inconclusive (every head scored 0 F1)"
                out.append(
                    f"- **Claim 1 ({task}, {_layers(full)}): {verdict}.** CRF x1 validity {v1:.2f}, "
                    f"mean |transition| / emission margin {r1 if r1 is None else round(r1, 3)}; "
                    f"F1 CRF x1 {_fmt(crf1_f)} vs softmax {_fmt(soft_f)}."
                )
        for depth in depths:
            high = [(m, _mean(g(f"crf x{m}", depth), "validity")) for m in (100, 1000)]
            high = [(m, v) for m, v in high if v is not None]
            if high:
                ok = all(v == 1.0 for _, v in high)
                values = ", ".join(f"x{m}: {v:.2f}" for m, v in high)
                line = (
                    f"- **Claim 2 ({task}, {_layers(depth)}): {'held' if ok else 'did not hold'}.** "
                    f"Validity (1.0 = every impossible move below every possible one) {values}."
                )
                top_m = high[-1][0]
                runs = g(f"crf x{top_m}", depth)
                worst = common_violations(runs)
                if worst:
                    line += (
                        f" Ranked wrong most often at x{top_m} (runs of {len(runs)}): "
                        + ", ".join(f"{s}→{bad} ≥ {s}→{good} ({n})" for (s, bad, good), n in worst)
                        + "."
                    )
                out.append(line)
        soft_s = _mean(g("softmax", shallow), "f1")
        crf1_s = _mean(g("crf x1", shallow), "f1")
        best_m, best_f = None, None
        for m in (100, 1000):
            f = _mean(g(f"crf x{m}", shallow), "f1")
            if f is not None and (best_f is None or f > best_f):
                best_m, best_f = m, f
        if None not in (soft_s, crf1_s, best_f):
            beat, beat_noise = _gain(g("crf x1", shallow), g("softmax", shallow))
            gain, gain_noise = _gain(g(f"crf x{best_m}", shallow), g("crf x1", shallow))
            beats, improves = beat > beat_noise, gain > gain_noise
            verdict = "held" if beats and improves else "held in part" if beats or improves else "did not hold"
            if not learned(shallow):
                verdict = "inconclusive (every head scored 0 F1: the budget is too small for this task)"
            notes = [f"CRF x1 - softmax {beat * 100:+.1f}", f"raised - x1 {gain * 100:+.1f}"]
            notes = [
                f"{n} (within the seed spread, {noise * 100:.1f})" if not ok else n
                for n, ok, noise in zip(notes, (beats, improves), (beat_noise, gain_noise))
            ]
            out.append(
                f"- **Claim 3 ({task}, {_layers(shallow)}): {verdict}.** F1 softmax "
                f"{_fmt(soft_s)}, CRF x1 {_fmt(crf1_s)}, best raised CRF (x{best_m}) {_fmt(best_f)}; "
                + "; ".join(notes)
                + "."
            )
    return out


def plot_multiplier_curves(records: Sequence[Dict], path: Path) -> Path:
    """F1 and validity against the CRF multiplier, one line per task x depth."""
    fig, (ax_f1, ax_val) = subplots(1, 2, figsize=(10, 4))
    for task, depth in sorted({(r["task"], int(r["depth"])) for r in records}):
        crf = [r for r in records if r["task"] == task and int(r["depth"]) == depth and r["head"] == "crf"]
        multipliers = sorted({r["multiplier"] for r in crf})
        if not multipliers:
            continue
        f1 = [_mean([r for r in crf if r["multiplier"] == m], "f1") for m in multipliers]
        val = [_mean([r for r in crf if r["multiplier"] == m], "validity") for m in multipliers]
        line = ax_f1.plot(
            multipliers, [v * 100 if v is not None else None for v in f1], "o-", label=f"{task} {depth}L"
        )[0]
        soft = _mean(
            [r for r in records if r["task"] == task and int(r["depth"]) == depth and r["head"] == "softmax"], "f1"
        )
        if soft is not None:
            ax_f1.axhline(soft * 100, color=line.get_color(), ls=":", lw=1)
        ax_val.plot(multipliers, val, "o-", color=line.get_color(), label=f"{task} {depth}L")
    for ax, label in ((ax_f1, "dev F1 (dotted: softmax)"), (ax_val, "transition validity")):
        ax.set_xscale("log")
        finish_axes(ax, "CRF learning-rate multiplier", label)
    ax_val.set_ylim(-0.05, 1.05)
    return save_figure(fig, path, dpi=110)


def _heatmaps(records: Sequence[Dict], out_dir: Path) -> List[Tuple[str, str]]:
    """Transition heatmaps of CRF x1 vs x1000 at each depth (first seed)."""
    images = []
    for task, depth in sorted({(r["task"], int(r["depth"])) for r in records}):
        for m in (1, 1000):
            runs = sorted(
                (
                    r
                    for r in records
                    if r["task"] == task
                    and int(r["depth"]) == depth
                    and r["head"] == "crf"
                    and r["multiplier"] == m
                    and r.get("transitions")
                ),
                key=lambda r: r["seed"],
            )
            if not runs:
                continue
            t = runs[0]["transitions"]
            scheme = runs[0].get("scheme", "bmes" if task == "cws" else "bioes")
            table = TransitionTable.from_dict(t, transition_mask(scheme, t["tags"]))
            name = f"transitions_{task}_{depth}L_x{m}.png"
            table.plot(out_dir / name, title=f"{task}, {depth} layer(s), CRF x{m}, seed {runs[0]['seed']}")
            images.append((f"{task}, {depth} layer(s), CRF x{m}", name))
    return images


def write_report(records: Sequence[Dict], out_dir: Path, budget: str = "", command: str = "") -> Path:
    """Write README.md and its PNGs into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = list(records)
    lines = ["# CRF learning-rate study", ""]
    lines += [
        "Generated by `spacy project run study`; do not edit by hand.",
        "",
        "Heads: spaCy-CRF's `crf_tagger` with the softmax head (`use_crf = false`, same emission "
        "layer) or the CRF head at a CRF learning-rate multiplier of 1, 100 or 1000 "
        "(`spacy_crf.GroupedAdam.v1`, `crf_lr_multiplier`). The CRF is trained without the "
        "scheme's constraints (`constrain_training = false`), so that validity measures what it "
        "learned; decoding is constrained, as always in `crf_tagger`. Cells: mean ± half-range over seeds.",
        "",
    ]
    if budget:
        lines += [f"**Budget (identical in every cell of a task and depth):** {budget}", ""]
    if command:
        lines += [f"Reproduce: `{command}`", ""]
    seeds = sorted({r["seed"] for r in records})
    lines += [f"Runs: {len(records)}, seeds: {seeds}.", ""]
    lines += ["## Dev F1", "", results_table(records, "f1"), ""]
    if any(r.get("oov_recall") is not None for r in records):
        lines += [
            "## OOV recall (CWS)",
            "",
            results_table([r for r in records if r["task"] == "cws"], "oov_recall"),
            "",
        ]
    crf = [r for r in records if r["head"] == "crf"]
    if crf:
        lines += [
            "## Transition validity",
            "",
            "Share of (state, impossible next, possible next) triples in which the impossible "
            "transition scores lower (1.00 = perfect).",
            "",
            results_table(crf, "validity", scale=1.0, digits=2),
            "",
        ]
        lines += [
            "## mean |transition| / mean emission margin",
            "",
            "Emission margin: top-1 minus top-2 emission score per token.",
            "",
            results_table(crf, "transition_emission_ratio", scale=1.0, digits=3),
            "",
        ]
    if any(r.get("train_seconds") for r in records):
        lines += ["## Train time (s)", "", results_table(records, "train_seconds", scale=1.0, digits=0), ""]
    lines += [
        "## Reading",
        "",
        "Generated from the tables above. Every cell is a short run (see the budget), far from a converged "
        "fine-tuning: the claims speak of encoders fine-tuned to convergence, so a verdict here holds "
        "for this budget only.",
        "",
    ]
    lines += (reading(records) or ["- Not enough runs for a reading."]) + [""]
    try:
        plot_multiplier_curves(records, out_dir / "multiplier_curves.png")
        lines += ["## F1 and validity against the multiplier", "", "![F1 and validity](multiplier_curves.png)", ""]
        images = _heatmaps(records, out_dir)
        if images:
            lines += ["## Transition matrices", ""]
            lines += [f"**{title}**\n\n![{title}]({name})\n" for title, name in images]
    except ImportError:
        lines += ["(Plots skipped: matplotlib is not installed.)", ""]
    path = out_dir / "README.md"
    path.write_text("\n".join(lines), encoding="utf8")
    return path
