"""How hard is each way of carving a dev set, measured before any training.

    python crf_project dev-rates --assets assets --out metrics/dev_rates.json \\
        [--corpora sxu,msra,cluener] [--block-sizes 20,50,100,200,500] [--seeds 0,1,2,3,4]

For each corpus whose dev split is carved from its training file (as
``convert_corpora.py`` does), and for each carve (random single lines;
random blocks of each block size; the last lines of the file), carves the
dev set with each split seed and measures against the training part:

* CWS: the OOV rate of the dev words (share of dev word tokens not among the
  training words, as ``words_oov_recall`` counts them);
* NER: the share of dev entity mentions also seen in training, by text and
  label (``seen``) and by text alone (``seen_text``).

Prints a table (mean ± standard deviation over the seeds, and the range)
beside the rates of the official test (:data:`TARGETS`, measured on the
held-back test files; re-measured here when the test file is in
``--assets``), and writes everything as JSON. The carve of the project is
the one whose rates come closest to the test's.
"""

import statistics
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import typer
from spacy.vocab import Vocab

from crf_project.convert_corpora import CORPORA
from crf_project.script_cli import script_app
from spacy_crf.corpora import read_corpus
from spacy_crf.corpora.rates import doc_mentions, doc_words, oov_rate, seen_entity_rate
from spacy_crf.corpora.split import carve_dev, dev_size
from spacy_crf.files import write_json_atomic

#: Rates of the official test sets against the whole training file, measured
#: on the held-back files (SXU test.txt, MSRA msra_test_bio); the key is the
#: rate that the table compares.
TARGETS = {"sxu": {"oov_rate": 0.0512}, "msra": {"seen_rate": 0.713}}
#: The rate of each task that the table shows first.
MAIN_RATE = {"cws": "oov_rate", "ner": "seen_rate"}


def corpus_features(task: str, fmt: str, path: Path, limit: Optional[int] = None) -> List[list]:
    """One item per doc of the file: its words (CWS) or its ``(text, label)``
    mentions (NER), the first ``limit`` docs only if given."""
    feature = doc_words if task == "cws" else doc_mentions
    out = []
    for doc in read_corpus(fmt, path, Vocab()):
        out.append(feature(doc))
        if limit and len(out) >= limit:
            break
    return out


def rates(task: str, train: Sequence[list], dev: Sequence[list]) -> Dict[str, object]:
    return oov_rate(train, dev) if task == "cws" else seen_entity_rate(train, dev)


def carve(items: Sequence[list], how: str, ratio: float, seed: int):
    """(train, dev) of a carve named ``lines``, ``blocks:N`` or ``tail`` (the
    last docs of the file: one contiguous held-out stretch, seed-independent)."""
    if how == "tail":
        n_dev = dev_size(len(items), ratio)
        return list(items[: len(items) - n_dev]), list(items[len(items) - n_dev :])
    if how == "lines":
        return carve_dev(items, ratio, seed, carve="lines")
    return carve_dev(items, ratio, seed, carve="blocks", block_size=int(how.split(":", 1)[1]))


def summarize(values: List[float]) -> Dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def measure(
    task: str, items: Sequence[list], carves: Sequence[str], seeds: Sequence[int], ratio: float
) -> Dict[str, dict]:
    """For each carve, the rates of each seed and their summary."""
    out: Dict[str, dict] = {}
    for how in carves:
        per_seed = {}
        for seed in [0] if how == "tail" else seeds:
            train, dev = carve(items, how, ratio, seed)
            per_seed[str(seed)] = rates(task, train, dev)
        keys = [k for k, v in next(iter(per_seed.values())).items() if k.endswith("_rate") and v is not None]
        out[how] = {"seeds": per_seed, "summary": {k: summarize([r[k] for r in per_seed.values()]) for k in keys}}
    return out


def fmt_cell(summary: Optional[Dict[str, float]]) -> str:
    if summary is None:
        return "-"
    s = summary
    return f"{s['mean'] * 100:5.2f} ± {s['sd'] * 100:4.2f} [{s['min'] * 100:5.2f}, {s['max'] * 100:5.2f}]"


app = script_app()


@app.command()
def main(
    assets: Path = typer.Option(
        Path("assets"), "--assets", help="Folder of the corpus files (as fetched)", exists=True, file_okay=False
    ),
    out: Path = typer.Option(..., "--out", help="JSON file to write"),
    corpora: str = typer.Option("sxu,msra,cluener", "--corpora", help="Corpora with a carved dev split"),
    block_sizes: str = typer.Option("20,50,100,200,500,1000", "--block-sizes", help="Block sizes to measure"),
    seeds: str = typer.Option("0,1,2,3,4", "--seeds", help="Split seeds"),
    dev_ratio: float = typer.Option(0.1, "--dev-ratio", help="Share of docs carved into dev, as convert_corpora.py"),
    limit: int = typer.Option(0, "--limit", help="First N docs of each training file (0: all)"),
    tail: bool = typer.Option(True, "--tail/--no-tail", help="Also measure the last docs of the file as dev"),
) -> None:
    """Dev OOV rate (CWS) and seen-entity rate (NER) of each dev carve, against the official test's."""
    from spacy_crf.cli._app import check_option

    check_option("--dev-ratio", dev_ratio, minimum=0, maximum=1, max_open=True)
    check_option("--limit", limit, minimum=0, hint="0: all docs")
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
        sizes = [int(b) for b in block_sizes.split(",") if b.strip()]
    except ValueError:
        raise typer.BadParameter("comma-separated integers expected", param_hint="--seeds/--block-sizes") from None
    if not seed_list or any(b < 1 for b in sizes):
        raise typer.BadParameter("at least one seed, and block sizes >= 1", param_hint="--seeds/--block-sizes")
    carves = ["lines"] + [f"blocks:{b}" for b in sizes] + (["tail"] if tail else [])
    table = {name: (task, fmt, train, test) for name, task, fmt, train, dev, test in CORPORA if train and dev is None}
    names = [c for c in corpora.split(",") if c]
    unknown = [c for c in names if c not in table]
    if unknown:
        raise typer.BadParameter(
            f"{', '.join(unknown)}: not a corpus with a carved dev ({', '.join(table)})", param_hint="--corpora"
        )
    result: Dict[str, dict] = {"dev_ratio": dev_ratio, "seeds": seed_list, "limit": limit, "corpora": {}}
    for name in names:
        task, fmt, train_rel, test_rel = table[name]
        items = corpus_features(task, fmt, assets / train_rel, limit or None)
        entry: Dict[str, object] = {
            "task": task,
            "docs": len(items),
            "dev_docs": dev_size(len(items), dev_ratio),
            "carves": measure(task, items, carves, seed_list, dev_ratio),
        }
        target = dict(TARGETS.get(name, {}))
        if test_rel and (assets / test_rel).exists():
            whole = corpus_features(task, fmt, assets / train_rel)
            measured = rates(task, whole, corpus_features(task, fmt, assets / test_rel))
            target = {k: v for k, v in measured.items() if k.endswith("_rate")}
            entry["test_measured"] = measured
        entry["test"] = target
        result["corpora"][name] = entry
        keys = list(next(iter(entry["carves"].values()))["summary"])
        typer.echo(
            f"\n{name} ({task}): {len(items):,} docs, dev {entry['dev_docs']:,}; "
            f"% mean ± sd over {len(seed_list)} seeds [min, max]"
        )
        typer.echo(f"{'carve':<12}" + "".join(f"{k:>36}" for k in keys))
        for how, res in entry["carves"].items():
            typer.echo(f"{how:<12}" + "".join(f"{fmt_cell(res['summary'].get(k)):>36}" for k in keys))
        typer.echo(f"{'test':<12}" + "".join(f"{(f'{target[k] * 100:.2f}' if k in target else '-'):>36}" for k in keys))
    write_json_atomic(out, result)
    typer.echo(f"\nwrote {out}")
