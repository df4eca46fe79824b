"""Convert every available corpus to ``.spacy`` and check the counts.

    python crf_project convert-corpora --assets assets --out corpus [--limit N] [--max-chars 256] \
        [--carve blocks --block-size 200 [--lines-dev] | --carve lines]

Calls :func:`spacy_crf.corpora.convert_corpus` (the function behind
``python -m spacy_crf convert-corpus``) for each corpus: CWS docs are
word-tokenized reference docs, NER docs character-tokenized with entities;
docs longer than ``--max-chars`` characters are split at sentence or clause
ends (never inside a word or entity) so that they fit the transformer window.
Where a corpus has no dev file, a dev split is carved from train with a fixed
seed, as random blocks of consecutive lines (``--carve blocks``; ``lines``:
random single lines, the carve of earlier versions, which makes dev easier
than the test; ``--lines-dev`` also carves that old kind of dev set from
what the blocks leave, as ``dev_lines.spacy``, so that one model trained
without either is scored on both). For every corpus with a dev split the manifest reports how
much of it the training part already holds (``rates``): the OOV rate of its
words (CWS) and the share of its entities also in training (NER), and the
same for the test split where its file is there. The counts read from each *whole* file are compared with those
published in the data README (a mismatch is an error). Held-back test files
that are absent are skipped: the corpus is then evaluated on its dev split,
and ``corpus/manifest.json`` says so (``eval_split``).
"""

import sys
from pathlib import Path

import typer

from crf_project.paths import MANIFEST_PATHS, MANIFEST_RELATIVE, to_manifest
from crf_project.script_cli import choice_option, run_app, script_app
from spacy_crf.cli._app import check_option
from spacy_crf.corpora import CorpusFormatError, SplitError, convert_corpus
from spacy_crf.corpora.rates import file_rates
from spacy_crf.corpora.split import CARVES, DEFAULT_BLOCK_SIZE
from spacy_crf.files import write_json_atomic

# (name, task, format, train file, dev file or None (carve), test file or None)
CORPORA = [
    ("sxu", "cws", "sighan", "cws/sxu/train.txt", None, "cws/sxu/test.txt"),
    ("pku", "cws", "sighan", None, None, "cws/sighan2005/pku_test_gold.utf8"),
    ("msr", "cws", "sighan", None, None, "cws/sighan2005/msr_test_gold.utf8"),
    ("msra", "ner", "bio", "ner/msra/msra_train_bio", None, "ner/msra/msra_test_bio"),
    (
        "weibo",
        "ner",
        "weibo",
        "ner/weibo/weiboNER_2nd_conll.train",
        "ner/weibo/weiboNER_2nd_conll.dev",
        "ner/weibo/weiboNER_2nd_conll.test",
    ),
    ("resume", "ner", "bmes", "ner/resume/train.char.bmes", "ner/resume/dev.char.bmes", "ner/resume/test.char.bmes"),
    # CLUENER's test.json has no labels; its dev.json is the split everyone reports.
    ("cluener", "ner", "cluener", "ner/cluener/train.json", None, "ner/cluener/dev.json"),
]
# Dictionaries for OOV/IV recall of the cross-corpus test sets.
DICTIONARIES = {"pku": "cws/sighan2005/pku_training_words.utf8", "msr": "cws/sighan2005/msr_training_words.utf8"}
# Counts of the whole files, from the data README.
EXPECTED = {
    "cws/sxu/train.txt": {"docs": 17115, "words": 528238},
    "cws/sxu/test.txt": {"docs": 3654, "words": 113527},
    "cws/sighan2005/pku_test_gold.utf8": {"docs": 1944, "words": 104372},
    "cws/sighan2005/msr_test_gold.utf8": {"docs": 3985},
    "ner/msra/msra_train_bio": {
        "docs": 45000,
        "chars": 2171573,
        "entities": {"LOC": 36860, "ORG": 20584, "PER": 17615},
    },
    "ner/msra/msra_test_bio": {"docs": 3442, "chars": 172601},
    "ner/weibo/weiboNER_2nd_conll.train": {"docs": 1350},
    "ner/weibo/weiboNER_2nd_conll.dev": {"docs": 270},
    "ner/weibo/weiboNER_2nd_conll.test": {"docs": 270},
    "ner/resume/train.char.bmes": {"docs": 3821},
    "ner/resume/dev.char.bmes": {"docs": 463},
    "ner/resume/test.char.bmes": {"docs": 477, "entities_total": 1630},
    "ner/cluener/train.json": {"docs": 10748},
    "ner/cluener/dev.json": {"docs": 1343},
}


def check_counts(rel: str, stats: dict, errors: list) -> None:
    for key, want in EXPECTED.get(rel, {}).items():
        got = stats["read"].get(key)
        if got != want:
            errors.append(f"{rel}: {key} is {got}, the data README says {want}")


def describe_rates(rates: dict) -> str:
    if rates.get("oov_rate") is not None:
        return f"OOV rate {rates['oov_rate'] * 100:.2f}% of {rates['words']:,} words"
    if rates.get("seen_rate") is not None:
        return f"{rates['seen_rate'] * 100:.2f}% of {rates['entities']:,} entities seen in train"
    return "no words or entities"


app = script_app()


@app.command(help=__doc__)
def convert_corpora_cli(
    assets_dir: str = typer.Option("assets", "--assets"),
    out_dir: str = typer.Option("corpus", "--out"),
    limit: int = typer.Option(0, "--limit", help="keep the first N training docs (0: all)"),
    max_chars: int = typer.Option(256, "--max-chars"),
    dev_ratio: float = typer.Option(0.1, "--dev-ratio"),
    seed: int = typer.Option(0, "--seed"),
    carve: str = choice_option("blocks", "--carve", CARVES, help="how dev splits are carved"),
    block_size: int = typer.Option(DEFAULT_BLOCK_SIZE, "--block-size", help="lines per dev block (--carve blocks)"),
    only: str = typer.Option("", "--only", help="comma-separated corpus names (default: all)"),
    lines_dev: bool = typer.Option(
        False,
        "--lines-dev",
        help="where dev is carved in blocks, also carve as many random single lines from the rest into "
        "dev_lines.spacy (the carve of earlier versions), out of training too, to score one model on both",
    ),
) -> None:
    check_option("--limit", limit, minimum=0, hint="0: all docs")
    check_option("--max-chars", max_chars, minimum=0, hint="0: no splitting")
    check_option("--dev-ratio", dev_ratio, minimum=0, maximum=1, max_open=True)
    check_option("--block-size", block_size, minimum=1)
    if lines_dev and carve != "blocks":
        raise typer.BadParameter("only applies with --carve blocks", param_hint="--lines-dev")
    if not Path(assets_dir).is_dir():
        raise typer.BadParameter(f"{assets_dir}: no such directory", param_hint="--assets")
    assets, out = Path(assets_dir), Path(out_dir)
    only_names = set(filter(None, only.split(",")))
    manifest, errors = {}, []
    limit_docs = limit or None

    def run(rel, fmt, output, **kw):
        try:
            stats = convert_corpus(
                fmt, assets / rel, output, max_chars=max_chars, seed=seed, carve=carve, block_size=block_size, **kw
            )
        except (CorpusFormatError, SplitError, ValueError, OSError) as err:  # the message names the file
            sys.exit(f"error: {err}")
        check_counts(rel, stats, errors)
        return stats

    for name, task, fmt, train, dev, test in CORPORA:
        if only_names and name not in only_names:
            continue
        entry = {"task": task}
        if train:
            if dev is None:
                lines_output = out / name / "dev_lines.spacy" if lines_dev else None
                stats = run(
                    train,
                    fmt,
                    out / name / "train.spacy",
                    dev_output=out / name / "dev.spacy",
                    dev_ratio=dev_ratio,
                    lines_dev_output=lines_output,
                    limit=limit_docs,
                )
                how = f"blocks of {block_size} lines" if carve == "blocks" else "single lines"
                entry["dev_note"] = f"carved from train: ratio {dev_ratio}, seed {seed}, {how}"
                entry["carve"] = stats["carve"]
                rates = {"dev": stats["dev_rates"]}
                if lines_output is not None:
                    entry["dev_lines"] = str(lines_output)
                    entry["dev_note"] += "; dev_lines: as many single lines from the rest, out of training too"
                    rates["dev_lines"] = stats["lines_dev_rates"]
            else:
                stats = run(train, fmt, out / name / "train.spacy", limit=limit_docs)
                run(dev, fmt, out / name / "dev.spacy", limit=limit_docs)
                rates = {"dev": file_rates(task, out / name / "train.spacy", out / name / "dev.spacy")}
            entry.update(train=str(out / name / "train.spacy"), dev=str(out / name / "dev.spacy"))
            entry["counts"] = {k: v["written"] for k, v in stats["outputs"].items()}
        if test and (assets / test).exists():
            run(test, fmt, out / name / "test.spacy")
            entry.update(eval=str(out / name / "test.spacy"), eval_split="test")
            if train:
                rates["test"] = file_rates(task, out / name / "train.spacy", out / name / "test.spacy")
        elif train:
            entry.update(
                eval=entry["dev"],
                eval_split="dev",
                eval_note=f"held-back test file {test} is absent: scores are on the dev split",
            )
            print(f"NOTE {name}: {test} is absent; this corpus is evaluated on its dev split")
        else:
            print(f"NOTE {name}: {test} is absent; no cross-corpus score for {name}")
            continue
        if train:
            # the share of each split that training has seen: a dev set is only as hard as the
            # test when these match (OOV rate of words for CWS, seen entities for NER)
            entry["rates"] = rates
            print(f"{name}: " + "; ".join(f"{split} {describe_rates(r)}" for split, r in rates.items()))
        if name in DICTIONARIES:
            entry["dictionary"] = str(assets / DICTIONARIES[name])
        elif task == "cws":
            entry["dictionary"] = entry["train"]
        manifest[name] = entry
    # paths relative to the manifest, wherever this ran and wherever it is read (load_manifest)
    for entry in manifest.values():
        entry.update({k: to_manifest(entry[k], out) for k in MANIFEST_PATHS if isinstance(entry.get(k), str)})
        entry["paths"] = MANIFEST_RELATIVE
    write_json_atomic(out / "manifest.json", manifest)
    if errors:
        sys.exit("counts differ from the data README:\n  " + "\n  ".join(errors))
    print(f"converted {', '.join(manifest)}; counts match the data README; manifest: {out / 'manifest.json'}")


def main() -> None:
    run_app(app)
