"""Evaluate the trained models on every available evaluation set.

    python crf_project evaluate-all --out ROOT [--eval-limit N]

Reads ``ROOT/corpus/manifest.json`` and scores, where they exist:

* CWS (``ROOT/training/joint`` = CRF segmenter + NER on one encoder,
  ``ROOT/training/cws`` = single-task CRF, ``ROOT/training/cws_softmax`` = spaCy
  ``tagger`` on BMES tags) on SXU (test, or dev when the test file is held
  back) with the SXU training words as the OOV dictionary, and on the PKU and
  MSR SIGHAN 2005 gold files (cross-corpus) with their training word lists;
* NER (``ROOT/training/joint``, ``ROOT/training/ner`` = single-task CRF,
  ``ROOT/training/ner_softmax`` = spaCy ``ner``) on MSRA (test, or dev), with
  the recall of entities seen and unseen in MSRA training.

Writes one JSON per score to ``ROOT/metrics/`` and the table
``ROOT/metrics/summary.md``. ``--models`` names the training folders to
score: the ship project scores ``joint`` alone, so that models the study
project trains beside it never change what ``all`` writes (the study
project scores those into ``--table separate.md``).
"""

from pathlib import Path

import typer

from crf_project.evaluate import evaluate
from crf_project.results import write_table
from crf_project.script_cli import run_app, script_app
from crf_project.seed_report import eval_limit_option, out_option, profile_option, read_manifest
from spacy_crf.files import write_json_atomic

# (label, training dir); a model that was not trained is skipped. "joint" is the
# default workflow's CRF model (segmenter + NER on one encoder); "cws"/"ner" are
# the single-task CRF models of the train-cws / train-ner commands.
MODELS = {
    "cws": [("CRF, joint", "joint"), ("CRF, single-task", "cws"), ("softmax (spaCy tagger)", "cws_softmax")],
    "ner": [("CRF, joint", "joint"), ("CRF, single-task", "ner"), ("softmax (spaCy ner)", "ner_softmax")],
}


def pct(x):
    return "–" if x is None else f"{100 * x:.2f}"


app = script_app()


@app.command(help=__doc__)
def evaluate_all_cli(
    out: str = out_option(),
    eval_limit: int = eval_limit_option(),
    profile: str = profile_option(),
    gpu_id: int = typer.Option(-1, "--gpu-id", help="GPU to score on (-1: CPU)"),
    models: str = typer.Option(
        ",".join(sorted({d for rows in MODELS.values() for _, d in rows})),
        "--models",
        help="comma-separated training folders to score (where trained)",
    ),
    table_name: str = typer.Option("summary.md", "--table", help="the table's file name in ROOT/metrics/"),
) -> None:
    wanted = set(models.split(","))
    known = {d for rows in MODELS.values() for _, d in rows}
    if not wanted <= known:
        raise typer.BadParameter(f"{models!r}: not among {', '.join(sorted(known))}", param_hint="--models")
    _, manifest = read_manifest(out, eval_limit)
    if gpu_id >= 0:
        import spacy

        spacy.require_gpu(gpu_id)
    root = Path(out)
    metrics = root / "metrics"
    metrics.mkdir(parents=True, exist_ok=True)
    rows = []
    for corpus, entry in manifest.items():
        task = entry["task"]
        if task == "ner" and corpus != "msra":
            continue  # further NER benchmarks: train with the ner-benchmark workflow
        for label, model_dir in (row for row in MODELS[task] if row[1] in wanted):
            model = root / "training" / model_dir / "model-best"
            if not model.exists():
                print(f"skip {model_dir} on {corpus}: {model} not trained")
                continue
            note = entry.get("eval_note", "")
            result = evaluate(
                task,
                model,
                Path(entry["eval"]),
                words=Path(entry["dictionary"]) if task == "cws" else None,
                train_ents=Path(entry["train"]) if task == "ner" else None,
                split=entry["eval_split"],
                name=f"{model_dir}:{corpus}",
                note=note,
                limit=eval_limit,
            )
            result["profile"] = profile
            if eval_limit:
                result["note"] = (note + f" Only the first {eval_limit} docs were scored.").strip()
            path = metrics / f"{model_dir}_{corpus}_{entry['eval_split']}.json"
            write_json_atomic(path, result)
            s, train = result["scores"], result["train"] or {}
            if task == "cws":
                score = f"P {pct(s['words_p'])} / R {pct(s['words_r'])} / **F {pct(s['words_f'])}**"
                extra = f"OOV-R {pct(s.get('words_oov_recall'))}, IV-R {pct(s.get('words_iv_recall'))}"
            else:
                score = f"P {pct(s['ents_p'])} / R {pct(s['ents_r'])} / **F {pct(s['ents_f'])}**"
                seen = f"seen-R {pct(s.get('ents_seen_recall'))}, unseen-R {pct(s.get('ents_unseen_recall'))}; "
                extra = seen + ", ".join(
                    f"{t} {pct(v['f'])}" for t, v in sorted((s.get("ents_per_type") or {}).items())
                )
            hw = result["hardware"]
            device = hw.get("gpu") or f"{hw.get('cpu_count')} CPU cores"
            rows.append(
                f"| {task} | {corpus} ({entry['eval_split']}) | {label} | {score} | {extra} | "
                f"{result['speed']['chars_per_s']:,.0f} | {train.get('train_seconds', '–')} | {device} |"
            )
            print(rows[-1])
    table = "\n".join(
        [
            f"Profile `{profile}`; `(dev)`: the held-back test file was absent, so the score is on the dev split.",
            "",
            "| task | corpus (split) | model | score | OOV/IV recall; seen/unseen recall, per-type F | chars/s | train s | hardware |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    write_table(metrics / table_name, table)
    print(table)


def main() -> None:
    run_app(app)
