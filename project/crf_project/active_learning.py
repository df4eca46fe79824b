"""Does labelling the least confident documents first pay? An active-learning simulation on MSRA.

    python crf_project active-learning TRAIN DEV --output PREFIX [--start 500 --batch 500 --rounds 4] \
        [--seeds 0,1] [--pool 8000] [--steps 600] [--learn-rate 0.001] [--dev-limit 1000]

Per seed: a random start set of ``--start`` training docs is "labelled" and
``--pool`` other random docs are the unlabelled pool. Each of ``--rounds``
rounds adds ``--batch`` docs from the pool, chosen either

* ``uncertainty``: the docs the current model is least sure of, by the
  review queue's document score (``spacy crf review-queue``: the smallest
  CRF marginal of a decoded tag over the doc's characters), ranked by the
  queue's own code (``score_docs``, ``least_confident``); or
* ``random``: uniformly from the pool, with the seed's generator;

and a new model is trained on what is labelled so far. Every model, the
start's included, is trained from scratch with the seed's initialisation and
the same number of steps (``--steps`` batches of ``--batch-docs`` docs), so
a point depends only on the docs labelled, not on the path to it; both
strategies share the start set and its model. Each model is scored on the
same ``--dev-limit`` docs of DEV (evenly spaced over the file, so every
block of the block-carved dev is in), entity P/R/F of ``doc.ents``.

The model is a cheap one that trains in minutes on one core: ``crf_ner``
(bioes) over spaCy's ``HashEmbedCNN`` on character tokens, no pretrained
encoder. It asks whether the shipped doc score picks better docs to label
than chance, not what the shipped pipeline would score.

Writes PREFIX.json (every point: seed, strategy, round, docs, characters and
entities labelled, P/R/F, CPU seconds), rewritten after each point, then
PREFIX.md (mean ± half-range over the seeds per round, the difference
uncertainty - random, and the characters and entities labelled: the docs
a model is least sure of can be longer, or hold more entities) and
PREFIX.png (entity F against docs, characters and entities labelled).
``--report-only`` redraws PREFIX.md and PREFIX.png from PREFIX.json.
"""

import random
import time
from pathlib import Path
from statistics import mean
from typing import Dict, List, Sequence, Tuple, Union

import spacy
import srsly
import typer
from spacy.language import Language
from spacy.tokens import Doc
from spacy.training import Example
from spacy.util import fix_random_seed, minibatch
from spacy.vocab import Vocab
from thinc.api import Adam

from crf_project.evaluate import read_docbin
from crf_project.results import made_by, write_table
from crf_project.script_cli import run_app, script_app
from crf_project.seed_report import cell, profile_option
from spacy_crf.annotate.review import least_confident, score_docs
from spacy_crf.cli._app import check_option
from spacy_crf.files import write_json_atomic
from spacy_crf.hardware import hardware
from spacy_crf.plots import finish_axes, save_figure, subplots

STRATEGIES = ("uncertainty", "random")
COLOURS = {"uncertainty": "tab:red", "random": "tab:blue"}


# --- selection ----------------------------------------------------------------------------------


def least_confident_docs(nlp: Language, texts: Sequence[str], pool: Sequence[int], n: int) -> List[int]:
    """The ``n`` docs of ``pool`` (indices into ``texts``) that ``nlp`` is least
    sure of, least sure first: the review queue's ranking, by its own code."""
    return [item.doc_id for item in least_confident(score_docs(nlp, ((i, texts[i]) for i in pool)), n)]


def random_docs(pool: Sequence[int], n: int, rng: random.Random) -> List[int]:
    """``n`` docs of ``pool`` drawn uniformly without replacement by ``rng``."""
    return rng.sample(list(pool), n)


def take(pool: Sequence[int], chosen: Sequence[int]) -> List[int]:
    """The pool less ``chosen``, in its order. A chosen doc that is not in the
    pool, or chosen twice, is an error: it would be labelled twice."""
    left = set(pool)
    for i in chosen:
        if i not in left:
            raise ValueError(f"doc {i} is not in the unlabelled pool (labelled already, or chosen twice)")
        left.discard(i)
    return [i for i in pool if i in left]


def start_and_pool(n_docs: int, start: int, pool: int, seed: int) -> Tuple[List[int], List[int]]:
    """The seed's random start set and unlabelled pool, disjoint, of ``n_docs`` docs."""
    drawn = random.Random(seed).sample(range(n_docs), start + pool)
    return drawn[:start], drawn[start:]


# --- model --------------------------------------------------------------------------------------


def zh_vocab() -> Vocab:
    """The vocab to read the docs with and build every model on: it holds the
    strings of the docs' labels, and Chinese's lexical attributes (a bare
    ``Vocab()`` gives every character the norm 0, the feature the model embeds)."""
    return spacy.blank("zh").vocab


def build_nlp(width: int, embed_size: int, vocab: Union[Vocab, bool] = True) -> Language:
    """``crf_ner`` (bioes) over spaCy's ``HashEmbedCNN`` on character tokens, not
    initialized; ``vocab``: the :func:`zh_vocab` the docs were read with."""
    nlp = spacy.blank("zh", vocab=vocab, config={"nlp": {"tokenizer": {"segmenter": "char"}}})
    tok2vec = {
        "@architectures": "spacy.HashEmbedCNN.v2",
        "pretrained_vectors": None,
        "width": width,
        "depth": 4,
        "embed_size": embed_size,
        "window_size": 1,
        "maxout_pieces": 3,
        "subword_features": False,
    }
    nlp.add_pipe(
        "crf_ner", config={"scheme": "bioes", "model": {"@architectures": "spacy_crf.CRFTagger.v1", "tok2vec": tok2vec}}
    )
    return nlp


def train(docs: Sequence[Doc], seed: int, settings: Dict) -> Language:
    """A new model trained from scratch on ``docs`` for ``settings["steps"]`` steps."""
    fix_random_seed(seed)
    nlp = build_nlp(settings["width"], settings["embed_size"], docs[0].vocab)
    examples = [Example(nlp.make_doc(doc.text), doc) for doc in docs]
    optimizer = Adam(settings["learn_rate"], L2=0.01, grad_clip=1.0)
    nlp.initialize(lambda: examples, sgd=optimizer)
    rng, step = random.Random(seed), 0
    while step < settings["steps"]:
        rng.shuffle(examples)
        for batch in minibatch(examples, size=settings["batch_docs"]):
            nlp.update(batch, sgd=optimizer, drop=0.1)
            step += 1
            if step == settings["steps"]:
                break
    return nlp


def evenly(items: Sequence, limit: int) -> List:
    """``limit`` items spread evenly over ``items`` (all of them when ``limit`` is 0 or not below their number)."""
    if not limit or limit >= len(items):
        return list(items)
    return [items[i * len(items) // limit] for i in range(limit)]


def score(nlp: Language, dev: Sequence[Doc]) -> Dict[str, float]:
    scores = nlp.evaluate([Example(nlp.make_doc(doc.text), doc) for doc in dev])
    return {key: scores[key] for key in ("ents_p", "ents_r", "ents_f")}


# --- simulation ---------------------------------------------------------------------------------


def simulate(train_docs: List[Doc], dev: List[Doc], seed: int, settings: Dict, record) -> None:
    """One seed's runs: the start, then each strategy's rounds; ``record(point)`` gets every point."""
    texts = [doc.text for doc in train_docs]
    start, pool0 = start_and_pool(len(train_docs), settings["start"], settings["pool"], seed)

    def point(strategy: str, round_: int, labelled: List[int], nlp: Language, cpu: float, select_cpu: float) -> Dict:
        docs = [train_docs[i] for i in labelled]
        return {
            "seed": seed,
            "strategy": strategy,
            "round": round_,
            "docs": len(docs),
            "chars": sum(len(d.text) for d in docs),
            "entities": sum(len(d.ents) for d in docs),
            **score(nlp, dev),
            "train_cpu_s": round(cpu, 1),
            "select_cpu_s": round(select_cpu, 1),
        }

    clock = time.process_time()
    first = train([train_docs[i] for i in start], seed, settings)
    first_point = point("start", 0, start, first, time.process_time() - clock, 0.0)
    for strategy in STRATEGIES:  # the shared start, on each strategy's curve
        record({**first_point, "strategy": strategy})
    for strategy in STRATEGIES:
        labelled, pool, nlp, rng = list(start), list(pool0), first, random.Random(seed)
        for round_ in range(1, settings["rounds"] + 1):
            clock = time.process_time()
            if strategy == "uncertainty":
                chosen = least_confident_docs(nlp, texts, pool, settings["batch"])
            else:
                chosen = random_docs(pool, settings["batch"], rng)
            select_cpu = time.process_time() - clock
            pool, labelled = take(pool, chosen), labelled + chosen
            clock = time.process_time()
            nlp = train([train_docs[i] for i in labelled], seed, settings)
            record(point(strategy, round_, labelled, nlp, time.process_time() - clock, select_cpu))


# --- report -------------------------------------------------------------------------------------


def by_round(points: List[Dict], strategy: str) -> Dict[int, List[Dict]]:
    out: Dict[int, List[Dict]] = {}
    for p in points:
        if p["strategy"] == strategy:
            out.setdefault(p["round"], []).append(p)
    return out


def table(points: List[Dict], settings: Dict, profile: str) -> str:
    rows = []
    unc, rnd = by_round(points, "uncertainty"), by_round(points, "random")
    for round_ in sorted(set(unc) & set(rnd)):
        u = {p["seed"]: p for p in unc[round_]}
        r = {p["seed"]: p for p in rnd[round_]}
        seeds = sorted(set(u) & set(r))
        diff = [u[s]["ents_f"] - r[s]["ents_f"] for s in seeds]
        rows.append(
            f"| {round_} | {u[seeds[0]]['docs']:,} | {cell([r[s]['ents_f'] for s in seeds])} | "
            f"{cell([u[s]['ents_f'] for s in seeds])} | {cell(diff)} | "
            f"{cell([r[s]['chars'] for s in seeds], 1, 0)} | {cell([u[s]['chars'] for s in seeds], 1, 0)} | "
            f"{cell([r[s]['entities'] for s in seeds], 1, 0)} | {cell([u[s]['entities'] for s in seeds], 1, 0)} | "
            f"{', '.join(map(str, seeds))} |"
        )
    return "\n".join(
        [
            f"Profile `{profile}`; MSRA, `crf_ner` (bioes) over HashEmbedCNN (width {settings['width']}), "
            f"trained from scratch for {settings['steps']} steps of {settings['batch_docs']} docs at each point; "
            f"start {settings['start']} random docs, then {settings['rounds']} rounds of {settings['batch']} docs "
            f"from a pool of {settings['pool']}, chosen by the review queue's doc score (uncertainty) or at random; "
            f"entity F on {settings['dev_docs']} dev docs spread over the block-carved dev; "
            "mean ± half-range over the seeds; difference: per seed, uncertainty − random.",
            "",
            "| round | docs labelled | entity F, random | entity F, uncertainty | difference | "
            "chars labelled, random | chars labelled, uncertainty | entities labelled, random | "
            "entities labelled, uncertainty | seeds |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )


#: the panels of the plot beside the docs one: a cost of labelling other than the docs, per seed
COSTS = (("chars", "characters labelled"), ("entities", "entities labelled"))


def plot(points: List[Dict], path: Path, title: str) -> None:
    """Entity F against docs labelled (mean, band: min to max over seeds), and
    against characters and entities labelled (one line per seed)."""
    fig, (by_docs, *by_cost) = subplots(1, 1 + len(COSTS), figsize=(14.0, 4.0))
    for strategy in STRATEGIES:
        rounds = by_round(points, strategy)
        xs = [rounds[k][0]["docs"] for k in sorted(rounds)]
        fs = [[100 * p["ents_f"] for p in rounds[k]] for k in sorted(rounds)]
        colour = COLOURS[strategy]
        by_docs.plot(xs, [mean(f) for f in fs], color=colour, marker="o", label=strategy)
        by_docs.fill_between(xs, [min(f) for f in fs], [max(f) for f in fs], color=colour, alpha=0.2)
        for i, seed in enumerate(sorted({p["seed"] for p in points})):
            mine = sorted(
                (p for p in points if p["strategy"] == strategy and p["seed"] == seed), key=lambda p: p["round"]
            )
            for ax, (key, _) in zip(by_cost, COSTS):
                ax.plot(
                    [p[key] for p in mine],
                    [100 * p["ents_f"] for p in mine],
                    color=colour,
                    marker="o",
                    linestyle=("-", "--", ":", "-.")[i % 4],
                    label=f"{strategy}, seed {seed}",
                )
    finish_axes(by_docs, "docs labelled", "dev entity F (mean; band: min to max over seeds)")
    for ax, (_, label) in zip(by_cost, COSTS):
        finish_axes(ax, label, "dev entity F (one line per seed)")
    save_figure(fig, path, title)


# --- command ------------------------------------------------------------------------------------

app = script_app()


@app.command(help=__doc__)
def active_learning_cli(
    train_path: Path = typer.Argument(..., help="MSRA training docs (.spacy, character tokens with entities)"),
    dev_path: Path = typer.Argument(..., help="MSRA dev docs (.spacy)"),
    output: Path = typer.Option(..., "--output", help="PREFIX of PREFIX.json, PREFIX.md, PREFIX.png"),
    start: int = typer.Option(500, "--start", help="random docs labelled before the first round"),
    batch: int = typer.Option(500, "--batch", help="docs added per round"),
    rounds: int = typer.Option(4, "--rounds"),
    pool: int = typer.Option(8000, "--pool", help="random unlabelled docs the rounds choose from"),
    seeds: str = typer.Option("0,1", "--seeds", help="comma-separated seeds"),
    steps: int = typer.Option(600, "--steps", help="training steps of every model"),
    batch_docs: int = typer.Option(32, "--batch-docs", help="docs per training step"),
    learn_rate: float = typer.Option(0.001, "--learn-rate"),
    width: int = typer.Option(64, "--width", help="HashEmbedCNN width"),
    embed_size: int = typer.Option(5000, "--embed-size", help="HashEmbedCNN rows"),
    dev_limit: int = typer.Option(1000, "--dev-limit", help="dev docs scored, spread over the file (0: all)"),
    profile: str = profile_option(),
    report_only: bool = typer.Option(
        False,
        "--report-only",
        help="only redraw PREFIX.md and PREFIX.png from a complete PREFIX.json (TRAIN, DEV unread)",
    ),
) -> None:
    json_path = output.with_name(output.name + ".json")
    if report_only:
        report = srsly.read_json(json_path) if json_path.is_file() else {}
        if not report.get("complete"):
            raise typer.BadParameter(f"{json_path} is missing or holds an unfinished run", param_hint="--report-only")
        write_report(report, output, f"Points read from `{json_path.name}`, as its run wrote them.")
        return
    for name, value in (("--start", start), ("--batch", batch), ("--rounds", rounds), ("--steps", steps)):
        check_option(name, value, minimum=1)
    for name, value in (("--batch-docs", batch_docs), ("--width", width), ("--embed-size", embed_size)):
        check_option(name, value, minimum=1)
    check_option("--pool", pool, minimum=batch * rounds, hint="at least --batch x --rounds docs to choose from")
    check_option("--dev-limit", dev_limit, minimum=0, hint="0: all docs")
    if not learn_rate > 0:
        raise typer.BadParameter(f"must be > 0, got {learn_rate!r}", param_hint="--learn-rate")
    try:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    except ValueError:
        raise typer.BadParameter(f"comma-separated integers, got {seeds!r}", param_hint="--seeds") from None
    if not seed_list:
        raise typer.BadParameter("no seed given", param_hint="--seeds")
    import torch

    torch.set_num_threads(1)  # one core: the simulation's CPU seconds are one core's, on a shared machine
    vocab = zh_vocab()
    train_docs = list(read_docbin(train_path).get_docs(vocab))
    dev = evenly(list(read_docbin(dev_path).get_docs(vocab)), dev_limit)
    if start + pool > len(train_docs):
        raise typer.BadParameter(
            f"{train_path} has {len(train_docs):,} docs, fewer than --start + --pool = {start + pool:,}",
            param_hint="--pool",
        )
    settings = dict(
        start=start, batch=batch, rounds=rounds, pool=pool, steps=steps, batch_docs=batch_docs,
        learn_rate=learn_rate, width=width, embed_size=embed_size, dev_docs=len(dev),
    )  # fmt: skip
    report = {"profile": profile, "train": str(train_path), "dev": str(dev_path), "settings": settings}
    report.update(seeds=seed_list, hardware=hardware(), command=made_by(), points=[], complete=False)

    def record(p: Dict) -> None:
        report["points"].append(p)
        write_json_atomic(json_path, report)
        print(
            f"seed {p['seed']} {p['strategy']:<11} round {p['round']}: {p['docs']:,} docs "
            f"({p['chars']:,} chars) -> entity F {100 * p['ents_f']:.2f} "
            f"(train {p['train_cpu_s']:.0f} CPU s, selection {p['select_cpu_s']:.0f} CPU s)",
            flush=True,
        )

    for seed in seed_list:
        simulate(train_docs, dev, seed, settings, record)
    report["complete"] = True
    write_json_atomic(json_path, report)
    write_report(report, output)


def write_report(report: Dict, output: Path, note: str = "") -> None:
    """PREFIX.md and PREFIX.png of a complete run's ``report``."""
    profile = report["profile"]
    png = output.with_name(output.name + ".png")
    plot(report["points"], png, f"MSRA: labelling the least confident docs first vs at random ({profile})")
    text = table(report["points"], report["settings"], profile) + f"\n\nCurve: [`{png.name}`]({png.name})."
    write_table(output.with_name(output.name + ".md"), text + (f" {note}" if note else ""))
    print(text)


def main() -> None:
    run_app(app)
