"""project/crf_project/active_learning.py: the docs each strategy chooses, the
pool they come from, the table, and a whole simulation on a tiny corpus."""

import json
import random

import pytest
import srsly
from spacy.tokens import Doc, DocBin, Span
from typer.testing import CliRunner

from crf_project.active_learning import (
    app,
    build_nlp,
    least_confident_docs,
    random_docs,
    start_and_pool,
    table,
    take,
    zh_vocab,
)
from spacy_crf.annotate.review import review_queue, score_docs

NAMES = [("张三", "PER"), ("李四", "PER"), ("北京", "LOC"), ("上海", "LOC"), ("广州", "LOC"), ("新华社", "ORG")]
CHARS = "我在北京工作张三去上海今天天气好李四住广州他们的是了人有中国大学生"
FILLERS = ["去", "在", "和", "今天", "工作", "开会", "天气好", "说"]


def corpus(n: int, seed: int = 0):
    """``n`` distinct char-tokenized docs with entities, as the corpus step writes MSRA."""
    rng, vocab, docs, seen = random.Random(seed), zh_vocab(), [], set()
    while len(docs) < n:
        parts = [rng.choice(NAMES) if rng.random() < 0.4 else (rng.choice(FILLERS), None) for _ in range(6)]
        text = "".join(p for p, _ in parts)
        if text in seen:
            continue
        seen.add(text)
        doc = Doc(vocab, words=list(text), spaces=[False] * len(text))
        ents, at = [], 0
        for piece, label in parts:
            if label:
                ents.append(Span(doc, at, at + len(piece), label=label))
            at += len(piece)
        doc.ents = ents
        docs.append(doc)
    return docs


@pytest.fixture(scope="module")
def tiny_model():
    """A model whose doc scores differ: a few updates on the tiny corpus."""
    from spacy.training import Example
    from spacy.util import fix_random_seed
    from thinc.api import Adam

    fix_random_seed(0)
    docs = corpus(20)
    nlp = build_nlp(16, 200, docs[0].vocab)
    examples = [Example(nlp.make_doc(d.text), d) for d in docs]
    optimizer = Adam(0.01)
    nlp.initialize(lambda: examples, sgd=optimizer)
    for _ in range(10):
        nlp.update(examples, sgd=optimizer)
    return nlp


def test_uncertainty_takes_the_pool_docs_the_review_queue_puts_first(tiny_model, tmp_path):
    rng = random.Random(1)
    texts = ["".join(rng.choice(CHARS) for _ in range(rng.randint(3, 12))) for _ in range(40)]
    pool = list(range(1, 40, 2))  # odd docs only: the even ones are labelled already
    chosen = least_confident_docs(tiny_model, texts, pool, 5)
    scores = {item.doc_id: item.score for item in score_docs(tiny_model, ((i, texts[i]) for i in pool))}
    assert len(set(scores.values())) >= 5 and chosen != pool[:5]  # a ranking, not the pool's order
    assert chosen == sorted(pool, key=scores.get)[:5]  # lowest first, ties in pool order (a stable sort)
    # the same five, in the same order, as `spacy crf review-queue` writes for the pool's texts
    (tmp_path / "pool.txt").write_text("\n".join(texts[i] for i in pool) + "\n", encoding="utf8")
    review_queue(tiny_model, tmp_path / "pool.txt", tmp_path / "queue.json", n=5)
    queued = [task["data"]["text"] for task in json.loads((tmp_path / "queue.json").read_text(encoding="utf8"))]
    assert [texts[i] for i in chosen] == queued


def test_random_picks_are_seed_reproducible_and_from_the_pool():
    pool = list(range(100, 200))
    first = random_docs(pool, 10, random.Random(3))
    assert first == random_docs(pool, 10, random.Random(3))
    assert first != random_docs(pool, 10, random.Random(4))
    assert len(set(first)) == 10 and set(first) <= set(pool)


def test_the_pool_never_gives_a_doc_twice(tiny_model):
    texts = [d.text for d in corpus(60, seed=2)]
    start, pool = start_and_pool(len(texts), 10, 40, seed=5)
    assert (start, pool) == start_and_pool(len(texts), 10, 40, seed=5)
    assert not set(start) & set(pool) and len(set(start + pool)) == 50
    labelled, rng = list(start), random.Random(5)
    for round_ in range(4):
        if round_ % 2:
            chosen = least_confident_docs(tiny_model, texts, pool, 8)
        else:
            chosen = random_docs(pool, 8, rng)
        pool, labelled = take(pool, chosen), labelled + chosen
        assert len(labelled) == len(set(labelled)) == 10 + 8 * (round_ + 1)
        assert not set(labelled) & set(pool)
    assert len(pool) == 40 - 32
    with pytest.raises(ValueError, match=f"doc {labelled[0]} is not in the unlabelled pool"):
        take(pool, [labelled[0]])
    with pytest.raises(ValueError, match="chosen twice"):
        take(pool, [pool[0], pool[0]])


def _point(seed, strategy, round_, f, chars):
    docs = 10 + 5 * round_
    return {
        "seed": seed,
        "strategy": strategy,
        "round": round_,
        "docs": docs,
        "chars": chars,
        "entities": chars // 100,
        "ents_f": f,
    }


def test_the_table_gives_mean_half_range_and_the_per_seed_difference():
    points = [
        _point(0, "random", 1, 0.50, 300),
        _point(1, "random", 1, 0.60, 340),
        _point(0, "uncertainty", 1, 0.58, 400),
        _point(1, "uncertainty", 1, 0.62, 420),
    ]
    settings = dict(start=10, batch=5, rounds=1, pool=50, steps=3, batch_docs=4, width=16, dev_docs=7)
    text = table(points, settings, "test")
    # random 55 ± 5, uncertainty 60 ± 2, differences 8 and 2: 5 ± 3
    assert "| 1 | 15 | 55.00 ± 5.00 | 60.00 ± 2.00 | 5.00 ± 3.00 | 320 ± 20 | 410 ± 10 | 3 ± 0 | 4 ± 0 | 0, 1 |" in text


def test_a_simulation_writes_every_point_and_the_report(tmp_path):
    docs = corpus(40, seed=3)
    DocBin(docs=docs[:30]).to_disk(tmp_path / "train.spacy")
    DocBin(docs=docs[30:]).to_disk(tmp_path / "dev.spacy")
    args = [str(tmp_path / "train.spacy"), str(tmp_path / "dev.spacy"), "--output", str(tmp_path / "al")]
    args += "--start 6 --batch 4 --rounds 2 --pool 12 --seeds 0,1 --steps 2 --batch-docs 4".split()
    args += "--width 16 --embed-size 200 --dev-limit 5".split()
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = srsly.read_json(tmp_path / "al.json")
    assert report["complete"] and report["settings"]["dev_docs"] == 5
    points = report["points"]
    assert len(points) == 2 * 2 * 3  # seeds x strategies x (start + rounds)
    for seed in (0, 1):
        starts = [p for p in points if p["seed"] == seed and p["round"] == 0]
        assert {p["strategy"] for p in starts} == {"uncertainty", "random"}
        assert len({(p["chars"], p["ents_f"]) for p in starts}) == 1  # one start, one model, both curves
    assert sorted({p["docs"] for p in points}) == [6, 10, 14]
    text = (tmp_path / "al.md").read_text(encoding="utf8")
    assert text.count("\n| ") == 4 and "| 2 | 14 |" in text  # header and rounds 0 to 2
    assert (tmp_path / "al.png").stat().st_size > 0
    # the report again from the JSON alone: the same table, no training (the corpus is not read)
    (tmp_path / "al.png").unlink()
    redrawn = CliRunner().invoke(app, ["missing.spacy", "missing.spacy", *args[2:4], "--report-only"])
    assert redrawn.exit_code == 0, redrawn.output
    assert (tmp_path / "al.png").stat().st_size > 0
    rows = lambda t: [line for line in t.splitlines() if line.startswith("| ")]  # noqa: E731
    assert rows((tmp_path / "al.md").read_text(encoding="utf8")) == rows(text)
    assert "Points read from `al.json`" in (tmp_path / "al.md").read_text(encoding="utf8")
    assert report["command"].startswith("_Made by ")
    srsly.write_json(tmp_path / "al.json", {**report, "complete": False})
    unfinished = CliRunner().invoke(app, ["missing.spacy", "missing.spacy", *args[2:4], "--report-only"])
    assert unfinished.exit_code == 2 and "holds an unfinished run" in unfinished.output
    too_few = CliRunner().invoke(app, args[:4] + "--start 6 --batch 4 --rounds 2 --pool 40".split())
    assert too_few.exit_code == 2 and "fewer than --start + --pool" in too_few.output
