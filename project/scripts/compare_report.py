"""CRF versus softmax heads on the same encoder, data and budget, over seeds.

    python scripts/compare_report.py --out ROOT [--eval-limit N] [--readme README.md]

The `compare` workflow trains, per seed, into ``ROOT/training/compare/seed<N>/``:

* ``joint_crf``: the shipped model (configs/joint.cfg, CRF heads);
* ``joint_softmax``: the same model with ``use_crf = false``: the same
  emission layer, decoded by argmax instead of the CRF (the like-for-like head);
* ``cws_tagger``: spaCy's ``tagger`` on BMES tags (SXU only);
* ``ner_spacy``: spaCy's transition-based ``ner`` (MSRA only).

This script scores every trained model found there on the manifest's
evaluation split (SXU words, MSRA entities), writes
``ROOT/metrics/compare.json`` and ``compare.md`` (mean ± half-range over the
seeds found, and the seeds), and with ``--readme`` puts the table between
the ``<!-- COMPARE -->`` markers of that README.
"""
from pathlib import Path
from typing import Dict

from evaluate import evaluate
from readme_block import replace_block
from seed_report import cell, parse_report_args

from spacy_crf.util import write_json_atomic, write_text_atomic

# (model dir, label, tasks it is scored on)
HEADS = [
    ("joint_crf", "CRF (crf_segmenter + crf_ner, joint)", ("cws", "ner")),
    ("joint_softmax", "softmax, same emission layer (use_crf = false, joint)", ("cws", "ner")),
    ("cws_tagger", "spaCy tagger on BMES tags", ("cws",)),
    ("ner_spacy", "spaCy ner (transition-based)", ("ner",)),
]
CORPUS = {"cws": "sxu", "ner": "msra"}
KEY = {"cws": "words_f", "ner": "ents_f"}


def main() -> None:
    args, manifest, seed_dirs = parse_report_args(
        __doc__, lambda a: Path(a.out) / "training" / "compare", "compare")
    root = Path(args.out)
    results: Dict[str, Dict[str, Dict[str, Dict]]] = {}
    for seed_dir in seed_dirs:
        for head, _, tasks in HEADS:
            model = seed_dir / head / "model-best"
            if not model.exists():
                print(f"skip {seed_dir.name}/{head}: not trained")
                continue
            for task in tasks:
                entry = manifest[CORPUS[task]]
                words = Path(entry["dictionary"]) if task == "cws" else None
                result = evaluate(task, model, Path(entry["eval"]), words=words, split=entry["eval_split"],
                                  name=f"{seed_dir.name}/{head}:{CORPUS[task]}", limit=args.eval_limit)
                results.setdefault(head, {}).setdefault(task, {})[seed_dir.name] = {
                    "scores": result["scores"], "train": result["train"], "split": entry["eval_split"]}
                print(f"{seed_dir.name} {head} {task}: {KEY[task]} = {result['scores'][KEY[task]]}")
    rows = []
    for head, label, _ in HEADS:
        by_task = results.get(head, {})
        if not by_task:
            continue
        seeds = sorted({s for runs in by_task.values() for s in runs})
        cws = [r["scores"]["words_f"] for r in by_task.get("cws", {}).values()]
        oov = [r["scores"].get("words_oov_recall") for r in by_task.get("cws", {}).values()]
        ner = [r["scores"]["ents_f"] for r in by_task.get("ner", {}).values()]
        train_s = [(r.get("train") or {}).get("train_seconds") for runs in by_task.values() for r in runs.values()]
        train_s = sorted({t for t in train_s if t is not None})
        rows.append(f"| {label} | {cell(cws)} | {cell(oov)} | {cell(ner)} | {len(seeds)} ({', '.join(seeds)}) | "
                    f"{', '.join(f'{t:,.0f}' for t in train_s) or '–'} |")
    splits = {task: manifest[c]["eval_split"] for task, c in CORPUS.items()}
    table = "\n".join([
        f"Profile `{args.profile}`; SXU word F on {splits['cws']}, MSRA entity F on {splits['ner']}; "
        "mean ± half-range over the seeds. Written by `spacy project run compare-report`.",
        "",
        "| head | SXU word F | SXU OOV recall | MSRA entity F | seeds | train s per run |",
        "|---|---|---|---|---|---|",
        *rows,
    ])
    metrics = root / "metrics"
    metrics.mkdir(parents=True, exist_ok=True)
    write_json_atomic(metrics / "compare.json", {"profile": args.profile, "eval_limit": args.eval_limit,
                                                "results": results})
    write_text_atomic(metrics / "compare.md", table + "\n")
    print(table)
    if args.readme and args.profile != "smoke":  # smoke runs never touch the committed README
        replace_block(Path(args.readme), "COMPARE", table)


if __name__ == "__main__":
    main()
