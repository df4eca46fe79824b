"""Calibrated confidences: the ECE and its reliability table against hand
computations, the temperature of a CRF head (T = 1 changes nothing, any T
changes the marginals and never the decoded words or entities, it is saved
and checked at load), its fitting, and ``spacy crf calibrate`` end to end on
a tiny pipeline."""

import itertools
import json
import math

import numpy
import pytest
import spacy
import srsly
from _configs import PROBE_ENTS, PROBE_WORDS
from conftest import half_trained_pipeline
from spacy.tokens import DocBin
from typer.testing import CliRunner

from spacy_crf.calibration.measure import expected_calibration_error, log_loss, reliability
from spacy_crf.calibration.temperature import minimise
from spacy_crf.ml import tagger_model
from spacy_crf.pipeline.confidence import check_temperature, set_temperature, span_confidences

TEXTS = ["张三去上海", "我在北京工作", "李四住广州", "北京大学在北京", "今天天气好", "上海人"]


@pytest.fixture(scope="module")
def trained():
    return half_trained_pipeline(PROBE_WORDS, PROBE_ENTS)


@pytest.fixture
def nlp(trained):
    """The module's pipeline, through bytes (each test changes its own copy)."""
    source = trained[0]
    return spacy.util.load_model_from_config(source.config).from_bytes(source.to_bytes())


# --- the measurement -------------------------------------------------------------------------------


def test_ece_of_a_perfectly_calibrated_set_is_zero():
    # in each bin, as many right as the confidence says: exactly 0
    conf, correct = [], []
    for c in (0.1, 0.3, 0.5, 0.7, 0.9, 1.0):
        conf += [c] * 10
        correct += [True] * round(10 * c) + [False] * (10 - round(10 * c))
    assert expected_calibration_error(conf, correct, 10) == pytest.approx(0.0, abs=1e-12)
    # drawn: right with the probability the confidence says
    rng = numpy.random.default_rng(0)
    conf = rng.uniform(0, 1, 200_000)
    assert expected_calibration_error(conf, rng.uniform(0, 1, conf.size) < conf, 15) < 0.01


def test_ece_of_a_miscalibrated_set_is_the_hand_computation():
    # 10 spans said 0.9, 8 right; 10 said 0.55, 9 right; with 15 bins they land in bins 13 and 8
    conf = [0.9] * 10 + [0.55] * 10
    correct = [True] * 8 + [False] * 2 + [True] * 9 + [False]
    table = reliability(conf, correct, 15)
    assert table["ece"] == pytest.approx(0.5 * abs(0.8 - 0.9) + 0.5 * abs(0.9 - 0.55))  # 0.225
    assert [b["count"] for b in table["bins"]] == [0] * 8 + [10] + [0] * 4 + [10, 0]
    assert table["bins"][13]["accuracy"] == pytest.approx(0.8) and table["bins"][8]["confidence"] == pytest.approx(0.55)
    assert table["n"] == 20 and table["accuracy"] == pytest.approx(0.85)
    # always-sure and wrong half the time: 0.5; a confidence of 1 is in the last bin
    assert expected_calibration_error([1.0, 1.0], [True, False], 10) == pytest.approx(0.5)
    # two unequal bins: weights 3/4 and 1/4
    ece = expected_calibration_error([0.95, 0.95, 0.95, 0.25], [True, True, False, True], 10)
    assert ece == pytest.approx(0.75 * abs(2 / 3 - 0.95) + 0.25 * abs(1 - 0.25))
    assert log_loss([0.8, 0.5], [True, False]) == pytest.approx(-(math.log(0.8) + math.log(0.5)) / 2)


@pytest.mark.parametrize(
    "conf, correct, bins, match",
    [
        ([0.5, math.nan], [True, True], 10, "NaN"),
        ([1.5], [True], 10, r"\[0, 1\]"),
        ([0.5], [True, False], 10, "1 confidences but 2"),
        ([0.5], [True], 0, "bins must be a whole number >= 1"),
    ],
)
def test_bad_measurements_are_refused(conf, correct, bins, match):
    with pytest.raises(ValueError, match=match):
        reliability(conf, correct, bins)


def test_minimise_finds_the_minimum_of_a_one_dimensional_function():
    t, tried = minimise(lambda t: (math.log(t) - math.log(2.5)) ** 2)
    assert t == pytest.approx(2.5, rel=1e-3) and len(tried) < 60


# --- the temperature -------------------------------------------------------------------------------


def _marginals(nlp, name):
    docs = [nlp.make_doc(t) for t in TEXTS]
    return nlp.get_pipe(name).predict_marginals(docs)


def test_the_default_temperature_is_one_and_changes_nothing(nlp):
    for name in ("segmenter", "crf_ner"):
        pipe = nlp.get_pipe(name)
        assert pipe.cfg["temperature"] == 1.0
        docs = [nlp.make_doc(t) for t in TEXTS]
        scores = pipe.emission_scores(docs)
        plain = tagger_model.marginals(pipe.model, scores, pipe.constraints, pipe.tag_masks(docs, preset=False))
        for a, b in zip(pipe.predict_marginals(docs), plain):
            numpy.testing.assert_array_equal(a, b)


def _brute_force_marginals(pipe, scores, t):
    """Each position's tag posterior by enumerating every allowed path, its score divided by t."""
    transitions, start, end = tagger_model.transition_scores(pipe.model)
    mask = pipe.constraints
    n, k = scores.shape
    probs = numpy.zeros((n, k))
    total = 0.0
    for path in itertools.product(range(k), repeat=n):
        if not (mask.start[path[0]] and mask.end[path[-1]]) or not all(
            mask.transitions[a, b] for a, b in zip(path, path[1:])
        ):
            continue
        score = start[path[0]] + end[path[-1]] + sum(scores[i, y] for i, y in enumerate(path))
        score += sum(transitions[a, b] for a, b in zip(path, path[1:]))
        weight = math.exp(score / t)
        total += weight
        for i, y in enumerate(path):
            probs[i, y] += weight
    return probs / total


@pytest.mark.parametrize("t", [0.5, 3.0])
def test_the_temperature_divides_every_score_before_the_forward_backward(nlp, t):
    pipe = nlp.get_pipe("segmenter")  # 4 tags: every path of a 4-character doc
    set_temperature(pipe, t)
    doc = nlp.make_doc("上海人好")
    scores = pipe.model.ops.to_numpy(pipe.emission_scores([doc])[0]).astype("float64")
    got = pipe.predict_marginals([doc])[0]
    numpy.testing.assert_allclose(got, _brute_force_marginals(pipe, scores, t), atol=1e-5)


def test_a_temperature_changes_confidences_never_predictions(nlp):
    before_docs = [nlp(t) for t in TEXTS]
    before = {name: _marginals(nlp, name) for name in ("segmenter", "crf_ner")}
    for name in ("segmenter", "crf_ner"):
        set_temperature(nlp.get_pipe(name), 4.0)
    after_docs = [nlp(t) for t in TEXTS]
    assert [[t.text for t in d] for d in after_docs] == [[t.text for t in d] for d in before_docs]
    assert [[(e.text, e.label_) for e in d.ents] for d in after_docs] == [
        [(e.text, e.label_) for e in d.ents] for d in before_docs
    ]
    for name in ("segmenter", "crf_ner"):
        hot = _marginals(nlp, name)
        assert sum(float(numpy.abs(a - b).max()) for a, b in zip(hot, before[name])) > 1e-3
        # less sure on the whole (not at every token: a posterior is not monotone in T)
        mean_max = [float(numpy.concatenate([m.max(axis=1) for m in ms]).mean()) for ms in (hot, before[name])]
        assert mean_max[0] < mean_max[1]


def test_span_confidences_are_the_entity_confidences_of_annotate(nlp):
    from spacy_crf.annotate.records import ent_confidences

    pipe = nlp.get_pipe("crf_ner")
    set_temperature(pipe, 2.0)
    index = {tag: i for i, tag in enumerate(pipe.tags)}
    for doc in nlp.pipe(TEXTS[:3]):
        marginals = pipe.predict_marginals([doc])[0]
        ours = span_confidences(pipe, doc, marginals)
        theirs = [c for *_, c in ent_confidences(doc, marginals, index, pipe.scheme)]
        assert numpy.round(ours, 4).tolist() == theirs


def test_a_fitted_temperature_survives_to_disk_and_from_disk(nlp, tmp_path):
    set_temperature(nlp.get_pipe("crf_ner"), 1.75)
    expected = _marginals(nlp, "crf_ner")
    nlp.to_disk(tmp_path / "p")
    assert srsly.read_json(tmp_path / "p" / "crf_ner" / "cfg")["temperature"] == 1.75
    loaded = spacy.load(tmp_path / "p")
    assert loaded.get_pipe("crf_ner").cfg["temperature"] == 1.75
    assert loaded.get_pipe("segmenter").cfg["temperature"] == 1.0
    for a, b in zip(_marginals(loaded, "crf_ner"), expected):
        numpy.testing.assert_allclose(a, b, atol=1e-6)
    pipe = loaded.get_pipe("crf_ner")
    pipe.cfg["temperature"] = 1.0
    pipe.from_bytes(nlp.get_pipe("crf_ner").to_bytes())
    assert pipe.cfg["temperature"] == 1.75


def test_a_save_without_a_temperature_loads_uncalibrated(nlp, tmp_path):
    nlp.get_pipe("crf_ner").to_disk(tmp_path / "ner")
    cfg = srsly.read_json(tmp_path / "ner" / "cfg")
    del cfg["temperature"]
    srsly.write_json(tmp_path / "ner" / "cfg", cfg)
    pipe = nlp.get_pipe("crf_ner")
    set_temperature(pipe, 3.0)
    pipe.from_disk(tmp_path / "ner")
    assert pipe.cfg["temperature"] == 1.0


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, True, "2", None])
def test_bad_temperatures_are_refused(nlp, tmp_path, bad):
    pipe = nlp.get_pipe("crf_ner")
    with pytest.raises(ValueError, match=r"\[crf_ner\] temperature must be a finite number > 0"):
        set_temperature(pipe, bad)
    assert pipe.cfg["temperature"] == 1.0
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        check_temperature("x", bad)
    pipe.to_disk(tmp_path / "ner")
    cfg = srsly.read_json(tmp_path / "ner" / "cfg")
    cfg["temperature"] = bad
    (tmp_path / "ner" / "cfg").write_text(json.dumps(cfg), encoding="utf8")
    # (NaN and infinity are not JSON: the cfg does not even read)
    with pytest.raises(ValueError, match=r"\[crf_ner\] cannot (load directory .*its cfg's temperature must be|read)"):
        pipe.from_disk(tmp_path / "ner")


# --- spacy crf calibrate -------------------------------------------------------------------------


def _inputs(trained, tmp_path):
    nlp, word_refs, ent_refs = trained
    nlp.to_disk(tmp_path / "pipeline")
    DocBin(docs=word_refs * 3).to_disk(tmp_path / "words.spacy")
    DocBin(docs=ent_refs * 3).to_disk(tmp_path / "ents.spacy")
    return tmp_path / "pipeline", tmp_path / "words.spacy", tmp_path / "ents.spacy"


def test_calibrate_writes_the_calibrated_pipeline_and_its_report(trained, tmp_path):
    from spacy_crf.calibration.run import calibrate

    pipeline, words, ents = _inputs(trained, tmp_path)
    summary = calibrate(pipeline, words, ents, tmp_path / "out", n_bins=10, cache=tmp_path / "cache")
    assert set(summary["heads"]) == {"words", "ents"}
    words_result = summary["heads"]["words"]
    assert words_result["n_docs"] == {"fit": 9, "held_out": 9}  # 18 docs by parity
    assert len(words_result["after"]["bins"]) == 10
    loaded = spacy.load(tmp_path / "out")
    for kind, name in (("words", "segmenter"), ("ents", "crf_ner")):
        t = summary["heads"][kind]["temperature"]
        assert t > 0 and loaded.get_pipe(name).cfg["temperature"] == pytest.approx(t)
        assert loaded.meta["calibration"]["heads"][name]["temperature"] == pytest.approx(t)
    report = tmp_path / "out" / "calibration"
    assert json.loads((report / "report.json").read_text(encoding="utf8"))["bins"] == 10
    assert "| words | `segmenter` |" in (report / "report.md").read_text(encoding="utf8")
    assert (report / "reliability.png").read_bytes()[:4] == b"\x89PNG"
    # the predictions are those of the input pipeline
    source = spacy.load(pipeline)
    texts = [d.text for d in DocBin().from_disk(words).get_docs(source.vocab)]
    assert [[t.text for t in d] for d in loaded.pipe(texts)] == [[t.text for t in d] for d in source.pipe(texts)]
    # a second fit reads the cache (the same result) and may replace its output with --force
    again = calibrate(pipeline, words, ents, tmp_path / "out", n_bins=10, cache=tmp_path / "cache", force=True)
    assert again["heads"]["ents"]["temperature"] == summary["heads"]["ents"]["temperature"]
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 2


def test_calibrate_command_line(trained, tmp_path):
    from spacy_crf.cli import app

    pipeline, words, ents = _inputs(trained, tmp_path)
    runner = CliRunner()
    out = tmp_path / "out"

    def output(result):
        return " ".join(result.output.split())

    result = runner.invoke(app, ["calibrate", str(pipeline), "-", str(ents), str(out), "--bins", "10"])
    assert result.exit_code == 0, result.output
    assert (
        "held-out ECE" in output(result)
        and "words" not in json.loads((out / "calibration" / "report.json").read_text(encoding="utf8"))["heads"]
    )
    assert spacy.load(out).get_pipe("segmenter").cfg["temperature"] == 1.0
    result = runner.invoke(app, ["calibrate", str(pipeline), "-", str(ents), str(out)])
    assert result.exit_code == 1 and "not empty" in output(result)
    result = runner.invoke(app, ["calibrate", str(pipeline), "-", str(ents), str(out), "--objective", "x"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["calibrate", str(pipeline), "-", "-", str(tmp_path / "o2")])
    assert result.exit_code == 1 and "nothing to calibrate" in output(result)
    result = runner.invoke(app, ["calibrate", str(pipeline), str(tmp_path / "no.spacy"), "-", str(tmp_path / "o2")])
    assert result.exit_code == 1 and "is not a file" in output(result)


def test_calibrate_refuses_a_pipeline_without_the_head(trained, tmp_path):
    from spacy_crf.calibration.run import CalibrationError, calibrate

    _, words, ents = _inputs(trained, tmp_path)
    seg_only = spacy.blank("zh")
    seg_only.add_pipe("segmenter", source=trained[0])
    seg_only.to_disk(tmp_path / "seg")
    with pytest.raises(CalibrationError, match="dev_ents given, but pipeline .* has no CRF tagger"):
        calibrate(tmp_path / "seg", None, ents, tmp_path / "out")
    assert not (tmp_path / "out").exists()
