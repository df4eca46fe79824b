"""One model on both dev carves: how much easier random single lines make dev.

    python crf_project dev-carves --out ROOT [--eval-limit N] [--profile NAME]

The studies' ``dev-carves`` workflow converts SXU and MSRA into
``ROOT/corpus_carves/`` with the project's dev (blocks of consecutive lines,
the ship project's carve and seed) *and* a second dev of as many random
single lines (``--lines-dev``: the carve of earlier versions), both held
out of training; then it trains the recipe on what is left, per seed, into
``ROOT/training/dev_carves/seed<N>/``.

This script scores every such model on both dev sets: SXU word F and OOV
recall (against that training part's words), MSRA entity F; and puts beside
them how much of each split training has seen (the manifest's rates: SXU
OOV rate, MSRA entities seen in training). Where the held-back test files
are in the assets, the test is scored too and each dev's gap to it is a
row; where they are absent, the test's rates (measured on the held-back
files, ``dev_rates.TARGETS``) say which dev it resembles. Writes
``ROOT/metrics/dev_carves.json`` and ``.md`` (mean ± half-range over seeds).
"""

from pathlib import Path
from typing import Dict, List, Optional

import spacy
import typer

from crf_project.compare_report import run_settings
from crf_project.dev_rates import TARGETS
from crf_project.evaluate import evaluate_cws, evaluate_ner, read_docbin
from crf_project.paths import load_manifest
from crf_project.results import write_table
from crf_project.script_cli import run_app, script_app
from crf_project.seed_report import cell, eval_limit_option, out_option, profile_option
from spacy_crf.cli._app import check_option
from spacy_crf.corpora import read_word_set
from spacy_crf.files import write_json_atomic

CORPUS_DIR = "corpus_carves"
#: (manifest key, row label); the test only where its file was converted.
SPLITS = [
    ("dev", "dev: random blocks of lines (the project's carve)"),
    ("dev_lines", "dev_lines: random single lines (the carve of earlier versions)"),
    ("test", "official test"),
]
#: (corpus, task, score keys)
TASKS = [("sxu", "cws", ("words_f", "words_oov_recall")), ("msra", "ner", ("ents_f",))]
RATE = {"cws": "oov_rate", "ner": "seen_rate"}


def split_paths(entry: Dict) -> Dict[str, str]:
    """The ``.spacy`` file of each split in a manifest entry (the test only
    where it was converted)."""
    paths = {"dev": entry["dev"], "dev_lines": entry["dev_lines"]}
    if entry.get("eval_split") == "test":
        paths["test"] = entry["eval"]
    return paths


def score_model(model: Path, manifest: Dict, eval_limit: int) -> Dict[str, Dict[str, Dict]]:
    """corpus -> split -> scores of one model (loaded once for every split)."""
    nlp = spacy.load(model)
    out: Dict[str, Dict[str, Dict]] = {}
    for corpus, task, keys in TASKS:
        entry = manifest[corpus]
        iv_words = read_word_set(entry["train"]) if task == "cws" else None
        out[corpus] = {}
        for split, path in split_paths(entry).items():
            refs = list(read_docbin(Path(path)).get_docs(nlp.vocab))
            refs = refs[:eval_limit] if eval_limit else refs
            result = evaluate_cws(nlp, refs, iv_words) if task == "cws" else evaluate_ner(nlp, refs)
            out[corpus][split] = {k: result["scores"].get(k) for k in keys}
    return out


def carves_table(results: Dict[str, Dict], manifest: Dict, profile: str, eval_limit: int) -> str:
    """The Markdown table: one row per split, then each dev's difference from
    the block dev (and from the test where it was scored)."""
    seeds = sorted(results)

    def values(corpus: str, split: str, key: str) -> List[Optional[float]]:
        return [results[s][corpus].get(split, {}).get(key) for s in seeds]

    def rate(corpus: str, task: str, split: str) -> str:
        r = manifest[corpus].get("rates", {}).get(split, {}).get(RATE[task])
        if r is None and split == "test":
            r = TARGETS[corpus][RATE[task]]
            return f"{100 * r:.2f} (held-back file)"
        return "–" if r is None else f"{100 * r:.2f}"

    def diff(corpus: str, key: str, a: str, b: str) -> List[Optional[float]]:
        return [
            None if x is None or y is None else x - y for x, y in zip(values(corpus, a, key), values(corpus, b, key))
        ]

    scored = {split for s in seeds for split in results[s]["sxu"]}
    rows = []
    for split, label in SPLITS:
        if split not in scored and split != "test":
            continue
        rows.append(
            f"| {label} | {rate('sxu', 'cws', split)} | {cell(values('sxu', split, 'words_f'))} | "
            f"{cell(values('sxu', split, 'words_oov_recall'))} | {rate('msra', 'ner', split)} | "
            f"{cell(values('msra', split, 'ents_f'))} |"
        )
    gaps = [("dev_lines", "dev", "dev_lines − dev (how much easier single lines are)")]
    if "test" in scored:
        gaps += [("test", "dev", "test − dev"), ("test", "dev_lines", "test − dev_lines")]
    for a, b, label in gaps:
        rows.append(
            f"| {label} | | {cell(diff('sxu', 'words_f', a, b))} | {cell(diff('sxu', 'words_oov_recall', a, b))} "
            f"| | {cell(diff('msra', 'ents_f', a, b))} |"
        )
    steps = sorted({results[s]["settings"]["max_steps"] for s in seeds})
    limit = f"first {eval_limit:,} docs of each split" if eval_limit else "whole splits"
    return "\n".join(
        [
            f"Profile `{profile}`; one model per seed ({', '.join(seeds)}; {', '.join(f'{n:,}' for n in steps)} "
            f"steps) trained without either dev set, scored on both ({limit}); mean ± half-range over the "
            "seeds. Rates: SXU words not in training (OOV rate, %), MSRA entities also in training (%). "
            "Written by `spacy project run dev-carves-report`.",
            "",
            "| split | SXU OOV rate | SXU word F | SXU OOV recall | MSRA seen entities | MSRA entity F |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )


app = script_app()


@app.command(help=__doc__)
def dev_carves_cli(
    out: str = out_option(),
    eval_limit: int = eval_limit_option(),
    profile: str = profile_option(),
) -> None:
    check_option("--eval-limit", eval_limit, minimum=0, hint="0: all docs")
    manifest_path = Path(out) / CORPUS_DIR / "manifest.json"
    if not manifest_path.is_file():
        raise typer.BadParameter(f"{manifest_path}: no such file (run dev-carves-corpus first)", param_hint="--out")
    manifest = load_manifest(manifest_path)
    missing = [c for c, _, _ in TASKS if "dev_lines" not in manifest.get(c, {})]
    if missing:
        raise typer.BadParameter(
            f"{manifest_path}: no dev_lines split for {', '.join(missing)} (convert with --lines-dev)",
            param_hint="--out",
        )
    folder = Path(out) / "training" / "dev_carves"
    seed_dirs = sorted(p for p in folder.glob("seed*") if (p / "model-best").exists())
    if not seed_dirs:
        raise typer.BadParameter(f"{folder}: no seed*/model-best (run dev-carves-train first)", param_hint="--out")
    results: Dict[str, Dict] = {}
    for seed_dir in seed_dirs:
        scored: Dict = score_model(seed_dir / "model-best", manifest, eval_limit)
        scored["settings"] = run_settings(seed_dir)
        results[seed_dir.name] = scored
        print(f"{seed_dir.name}: " + "; ".join(f"{c} {scored[c]}" for c, _, _ in TASKS))
    table = carves_table(results, manifest, profile, eval_limit)
    metrics = Path(out) / "metrics"
    metrics.mkdir(parents=True, exist_ok=True)
    rates = {c: manifest[c].get("rates", {}) for c, _, _ in TASKS}
    payload = {"profile": profile, "eval_limit": eval_limit, "rates": rates, "results": results}
    write_json_atomic(metrics / "dev_carves.json", payload)
    write_table(metrics / "dev_carves.md", table)
    print(table)


def main() -> None:
    run_app(app)
