"""The study's central claim on a tiny synthetic task: with emissions fixed,
a CRF trained at a learning rate where transitions barely move learns nothing
about the tag grammar, and the CRF learning-rate multiplier fixes that."""

import numpy
import pytest
import spacy

from crf_project.study_measures import emission_margins, mean_and_spread, record_run, transition_emission_ratio
from spacy_crf.ml.schemes import make_tags, transition_mask
from spacy_crf.ml.tagger_model import CRF, crf_loss, decode
from spacy_crf.ml.transitions import TransitionTable
from spacy_crf.training.optimizers import grouped_adam

TAGS = make_tags("bmes", [])
MASK = transition_mask("bmes", TAGS)


def _bmes_sequence(rng, n_words):
    tags = []
    for _ in range(n_words):
        length = int(rng.choice([1, 2, 2, 3, 4]))
        tags += [3] if length == 1 else [0] + [1] * (length - 2) + [2]
    return numpy.array(tags)


def _task(seed, n_docs=40, signal=1.0, noise=1.0):
    """Gold BMES paths and frozen, noisy emissions for them."""
    rng = numpy.random.default_rng(seed)
    gold = [_bmes_sequence(rng, int(rng.integers(3, 8))) for _ in range(n_docs)]
    emissions = [(signal * numpy.eye(4)[g] + noise * rng.standard_normal((len(g), 4))).astype("f") for g in gold]
    return gold, emissions


def _train_frozen(multiplier, init_seed=0, steps=60, base_lr=1e-4):
    """Train only the CRF parameters over fixed emissions, unconstrained."""
    numpy.random.seed(init_seed)  # the transitions' random initialisation
    model = CRF(nO=4)
    model.attrs["use_crf"] = True
    model.set_ref("crf", model)
    model.initialize()
    initial = model.get_param("crf_transitions").copy()
    optimizer = grouped_adam(base_lr, crf_lr_multiplier=multiplier, use_averages=False)
    gold, emissions = _task(0)
    for _ in range(steps):
        _, backprop = model.begin_update(emissions)
        _, d_scores = crf_loss(model, emissions, gold, MASK, constrain_training=False)
        backprop(d_scores)
        model.finish_update(optimizer)
    table = TransitionTable(
        TAGS, model.get_param("crf_transitions"), model.get_param("crf_start"), model.get_param("crf_end"), MASK
    )
    test_gold, test_emissions = _task(1, n_docs=200)
    # decode without constraints: accuracy must come from what was learned
    predicted = decode(model, test_emissions, constraints=None)
    accuracy = float(numpy.mean(numpy.concatenate([p == g for p, g in zip(predicted, test_gold)])))
    moved = float(numpy.abs(model.get_param("crf_transitions") - initial).max())
    return table, accuracy, test_emissions, moved


@pytest.fixture(scope="module")
def runs():
    return {m: _train_frozen(m) for m in (1.0, 100.0, 1000.0)}


def test_multiplier_raises_validity():
    # averaged over three random initialisations: the validity of a barely
    # moved matrix is whatever its initialisation happened to give
    validity = {m: [] for m in (1.0, 100.0, 1000.0)}
    for seed in range(3):
        for m in validity:
            table, _, _, moved = _train_frozen(m, init_seed=seed, steps=40)
            validity[m].append(table.validity())
            if m == 1.0:
                assert moved < 0.01  # the regime of the claim: transitions barely move
    mean = {m: numpy.mean(v) for m, v in validity.items()}
    assert mean[1000.0] > 0.95
    assert mean[1000.0] > mean[1.0] + 0.2
    assert mean[100.0] > mean[1.0]


def test_frozen_emissions_crf_1000x_decodes_better_than_1x(runs):
    (_, acc_1, emissions, _), (_, acc_1000, _, _) = runs[1.0], runs[1000.0]
    argmax = float(
        numpy.mean(numpy.concatenate([e.argmax(1) == g for e, g in zip(emissions, _task(1, n_docs=200)[0])]))
    )
    assert acc_1 < argmax + 0.03  # barely-moved transitions add (almost) nothing
    assert acc_1000 > acc_1 + 0.05


def test_transitions_at_1x_are_small_next_to_emissions(runs):
    (table_1, _, emissions, _), (table_1000, _, _, _) = runs[1.0], runs[1000.0]
    assert transition_emission_ratio(table_1, emissions) < 0.1
    assert transition_emission_ratio(table_1000, emissions) > 5 * transition_emission_ratio(table_1, emissions)


def test_emission_margins_and_aggregation():
    scores = [numpy.array([[3.0, 1.0, 0.0], [0.0, 0.5, 0.25]]), numpy.zeros((0, 3))]
    numpy.testing.assert_allclose(emission_margins(scores), [2.0, 0.25])
    assert mean_and_spread([0.9, 0.8, None]) == {"mean": pytest.approx(0.85), "spread": pytest.approx(0.05), "n": 2}
    assert mean_and_spread([None]) is None


def test_record_run_on_a_pipeline():
    from spacy.training import Example

    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_tagger", config={"scheme": "bio"})
    examples = [Example.from_dict(nlp.make_doc("张三去上海"), {"entities": [(0, 2, "PER"), (3, 5, "LOC")]})]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(5):
        nlp.update(examples, sgd=optimizer)
    record = record_run(nlp, "crf_tagger", ["张三去上海", ""], nlp.evaluate(examples))
    assert record["use_crf"] and 0 <= record["validity"] <= 1
    assert record["transitions"]["tags"] == nlp.get_pipe("crf_tagger").tags
    assert record["transition_emission_ratio"] > 0 and record["mean_emission_margin"] > 0


def _fake_record(task, depth, head, multiplier, seed, f1, validity=None, ratio=None):
    record = {
        "task": task,
        "depth": depth,
        "head": head,
        "multiplier": multiplier,
        "seed": seed,
        "f1": f1,
        "scheme": "bmes",
        "train_seconds": 10.0,
    }
    if head == "crf":
        rng = numpy.random.default_rng(seed)
        record.update(
            validity=validity,
            transition_emission_ratio=ratio,
            transitions={
                "tags": TAGS,
                "transitions": rng.normal(size=(4, 4)).tolist(),
                "start": [0.0] * 4,
                "end": [0.0] * 4,
            },
        )
    return record


def test_study_report(tmp_path):
    from crf_project.study_report import reading, results_table, write_report

    records = []
    for seed in (0, 1):
        for depth, soft, crf1, crf1000 in ((1, 0.80, 0.84, 0.86), (12, 0.95, 0.951, 0.952)):
            records.append(_fake_record("cws", depth, "softmax", 1, seed, soft + seed * 0.01))
            records.append(_fake_record("cws", depth, "crf", 1, seed, crf1, validity=0.5, ratio=0.02))
            records.append(_fake_record("cws", depth, "crf", 1000, seed, crf1000, validity=1.0, ratio=0.5))
    table = results_table(records)
    assert "| softmax | 80.5 ± 0.5 | 95.5 ± 0.5 |" in table
    lines = reading(records)
    assert any(line.startswith("- **Claim 1 (cws, 12 layers): held.**") for line in lines)
    assert any(line.startswith("- **Claim 2 (cws, 12 layers): held.**") for line in lines)
    assert any(line.startswith("- **Claim 3 (cws, 1 layer): held.**") for line in lines)
    path = write_report(records, tmp_path, budget="200 steps", command="spacy project run study")
    text = path.read_text()
    assert "200 steps" in text and "## Transition validity" in text
    assert (tmp_path / "multiplier_curves.png").exists()
    assert (tmp_path / "transitions_cws_1L_x1000.png").read_bytes()[:4] == b"\x89PNG"
    # a claim that fails is reported as such
    worse = [dict(r, f1=0.7) if r["head"] == "crf" and r["depth"] == 1 else r for r in records]
    assert any("Claim 3 (cws, 1 layer): did not hold" in line for line in reading(worse))
    # a claim-2 failure names the moves ranked wrong (the fake matrices are random)
    invalid = [dict(r, validity=0.9) if r["head"] == "crf" and r["multiplier"] == 1000 else r for r in records]
    line = next(line for line in reading(invalid) if "Claim 2 (cws, 12 layers)" in line)
    assert "did not hold" in line and "Ranked wrong most often at x1000 (runs of 2)" in line
    # a gain no larger than the spread over seeds does not count
    noisy = [
        dict(r, f1=0.861 + 0.02 * r["seed"])
        if r["head"] == "crf" and r["multiplier"] == 1000 and r["depth"] == 1
        else dict(r, f1=0.86 + 0.02 * r["seed"])
        if r["head"] == "crf" and r["depth"] == 1
        else r
        for r in records
    ]
    line = next(line for line in reading(noisy) if "Claim 3 (cws, 1 layer)" in line)
    assert line.startswith("- **Claim 3 (cws, 1 layer): held in part.**") and "within the seed spread" in line
    # nothing learned at all is inconclusive, and claim 1 needs a full-depth run
    shallow_only = [dict(r, f1=0.0) for r in records if r["depth"] == 1]
    lines = reading(shallow_only)
    assert any("Claim 1 (cws): not assessed" in line for line in lines)
    assert any("Claim 3 (cws, 1 layer): inconclusive" in line for line in lines)
