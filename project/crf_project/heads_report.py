"""Softmax versus CRF versus span NER heads on one encoder, corpus and budget, over seeds.

    python crf_project heads-report --out ROOT [--corpus cluener] [--eval-limit N]

The `ner-heads` workflow trains, per seed, into
``ROOT/training/heads/CORPUS/seed<N>/``:

* ``softmax``: ``crf_ner`` with ``use_crf = false`` (its emission layer
  decoded by argmax);
* ``crf``: ``crf_ner`` (bioes CRF, ``crf_lr_multiplier`` on the transitions);
* ``span``: ``span_ner`` (GlobalPointer), trained on every mention, nested
  ones included (``doc.spans["mentions"]``).

This script scores every trained model found there on the manifest's
evaluation split of CORPUS:

* ``ents_p/r/f`` and per-type F of ``doc.ents`` against the gold
  ``doc.ents`` (spaCy's definition: the figure the published tables report);
* ``mentions_f``: every gold mention, nested ones included
  (``doc.spans["mentions"]``), against what the head predicts: the span
  group for the span head (overlaps allowed), ``doc.ents`` for the taggers;
* the speed of ``nlp.pipe`` in chars/s
  (batch 128, one process, after a warm-up batch).

It writes ``ROOT/metrics/ner_heads_CORPUS.json`` and ``.md`` (mean ±
half-range over the seeds found, per-label F of the best head, training
seconds and chars/s per head, and the published BERT-base figures for
CLUENER).
"""

from pathlib import Path
from statistics import mean
from typing import Dict, List

import spacy
import srsly
import typer
from spacy.scorer import Scorer, get_ner_prf
from spacy.training import Example

from crf_project.compare_report import dev_curve
from crf_project.evaluate import predict_docs, read_docbin
from crf_project.results import write_table
from crf_project.script_cli import run_app, script_app
from crf_project.seed_report import cell, eval_limit_option, out_option, profile_option, report_inputs
from spacy_crf.files import write_json_atomic
from spacy_crf.hardware import hardware
from spacy_crf.plots import finish_axes, save_figure, subplots

# (model dir, label)
HEADS = [
    ("softmax", "softmax (`crf_ner`, `use_crf = false`)"),
    ("crf", "CRF (`crf_ner`, bioes)"),
    ("span", "span (`span_ner`, GlobalPointer)"),
]
MENTIONS_KEY = "mentions"
# CLUENER2020 dev F1 with BERT-base (published; another encoder and hardware)
PUBLISHED = {"cluener": {"softmax": 79.63, "crf": 80.76, "span": 81.12}}


def mentions(doc, attr: str = MENTIONS_KEY) -> List:
    """Gold docs: every mention (the ``mentions`` group, else ``doc.ents``).
    Predicted docs: the span head's group (nested included), else the
    entities of a tagger."""
    group = doc.spans.get(MENTIONS_KEY)
    return list(group) if group is not None else list(doc.ents)


def score_model(model: Path, data: Path, limit: int) -> Dict:
    nlp = spacy.load(model)
    refs = list(read_docbin(data).get_docs(nlp.vocab))
    if limit:
        refs = refs[:limit]
    docs, speed = predict_docs(nlp, refs, batch_size=128)
    examples = [Example(d, r) for d, r in zip(docs, refs)]
    scores = dict(get_ner_prf(examples))
    nested = Scorer.score_spans(examples, MENTIONS_KEY, getter=mentions, allow_overlap=True, labeled=True)
    scores.update({f"mentions_{k}": nested[f"{MENTIONS_KEY}_{k}"] for k in ("p", "r", "f")})
    meta_path = model.parent / "train_meta.json"
    train = srsly.read_json(meta_path) if meta_path.exists() else None
    return {"scores": scores, "speed": speed, "train": train, "pipeline": nlp.pipe_names}


def tables(corpus: str, split: str, profile: str, results: Dict[str, Dict[str, Dict]]) -> str:
    published = PUBLISHED.get(corpus, {})
    rows = []
    for head, label in HEADS:
        runs = results.get(head, {})
        if not runs:
            continue
        get = lambda key: [r["scores"].get(key) for r in runs.values()]  # noqa: E731
        train_s = [(r["train"] or {}).get("train_seconds") for r in runs.values()]
        speed = [r["speed"]["chars_per_s"] for r in runs.values()]
        rows.append(
            f"| {label} | {cell(get('ents_f'))} | {cell(get('ents_p'))} | {cell(get('ents_r'))} | "
            f"{cell(get('mentions_f'))} | {', '.join(sorted(runs))} | {cell(train_s, 1, 0)} | "
            f"{cell(speed, 1, 0)} | {published.get(head, '–')} |"
        )
    lines = [
        f"Profile `{profile}`; {corpus} {split} split; entity F of `doc.ents` (spaCy's definition) and "
        "F over every gold mention, nested ones included (`mentions`); mean ± half-range over the seeds; "
        "train s: wall seconds of `spacy train` per run; chars/s: `nlp.pipe`, batch 128, one process. "
        "Written by `spacy project run heads-report`.",
        "",
        "| head | entity F | P | R | mentions F (nested) | seeds | train s | chars/s | published F1 (BERT-base) |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
    ]
    if published:
        lines += [
            "",
            "Published figures: CLUENER2020 dev with BERT-base (12 layers, 768 hidden) on a GPU: "
            "another encoder and hardware, for orientation only.",
        ]
    means = {head: mean(r["scores"]["ents_f"] for r in runs.values()) for head, runs in results.items() if runs}
    if means:
        best = max(means, key=means.get)
        per_type: Dict[str, List[float]] = {}
        for run in results[best].values():
            for label, s in (run["scores"].get("ents_per_type") or {}).items():
                per_type.setdefault(label, []).append(s["f"])
        lines += [
            "",
            f"Per-label entity F of the best head ({dict(HEADS)[best]}), mean over its seeds:",
            "",
            "| label | F |",
            "|---|---|",
            *(f"| {label} | {100 * mean(fs):.2f} |" for label, fs in sorted(per_type.items())),
        ]
    return "\n".join(lines)


def plot_curves(curves: Dict[str, Dict[str, List[tuple]]], title: str, path: Path) -> None:
    """Dev entity F against the step, one colour per head, one line per seed."""
    fig, ax = subplots(figsize=(6.4, 4.0))
    for (head, label), colour in zip(HEADS, ("tab:blue", "tab:orange", "tab:green")):
        for i, (_seed, points) in enumerate(sorted(curves.get(head, {}).items())):
            if points:
                steps, f = zip(*points)
                ax.plot(
                    steps,
                    f,
                    color=colour,
                    marker=".",
                    alpha=0.9 if i == 0 else 0.55,
                    label=label.replace("`", "") if i == 0 else None,
                )
    ax.set_title(title, fontsize=9)
    finish_axes(ax, "training step", "dev entity F (docs scored while training)")
    save_figure(fig, path)


app = script_app()


@app.command(help=__doc__)
def heads_report_cli(
    out: str = out_option(),
    corpus: str = typer.Option("cluener", "--corpus"),
    eval_limit: int = eval_limit_option(),
    profile: str = profile_option(),
) -> None:
    manifest, seed_dirs = report_inputs(
        out, eval_limit, Path(out) / "training" / "heads" / corpus, "ner-heads", corpus=corpus
    )
    root = Path(out)
    entry = manifest[corpus]
    results: Dict[str, Dict[str, Dict]] = {}
    curves: Dict[str, Dict[str, List[tuple]]] = {}
    for seed_dir in seed_dirs:
        for head, _ in HEADS:
            curves.setdefault(head, {})[seed_dir.name] = dev_curve(seed_dir / head, "ner", joint=False)
            model = seed_dir / head / "model-best"
            if not model.exists():
                print(f"skip {seed_dir.name}/{head}: not trained")
                continue
            result = score_model(model, Path(entry["eval"]), eval_limit)
            results.setdefault(head, {})[seed_dir.name] = result
            s = result["scores"]
            print(
                f"{seed_dir.name} {head}: ents_f = {s['ents_f']:.4f}, mentions_f = {s['mentions_f']:.4f}, "
                f"{result['speed']['chars_per_s']:,.0f} chars/s"
            )
    table = tables(corpus, entry["eval_split"], profile, results)
    metrics = root / "metrics"
    metrics.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        metrics / f"ner_heads_{corpus}.json",
        {
            "profile": profile,
            "corpus": corpus,
            "split": entry["eval_split"],
            "data": entry["eval"],
            "eval_limit": eval_limit,
            "hardware": hardware(),
            "results": results,
        },
    )
    plot = metrics / f"ner_heads_{corpus}.png"
    plot_curves(curves, f"{corpus}: dev entity F while training, per head and seed ({profile})", plot)
    table += (
        f"\n\nDev curves (the docs scored while training, one line per seed): "
        f"[`metrics/{plot.name}`](metrics/{plot.name})."
    )
    write_table(metrics / f"ner_heads_{corpus}.md", table)
    print(table)


def main() -> None:
    run_app(app)
