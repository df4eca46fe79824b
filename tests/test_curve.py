"""project/crf_project/curve.py and spacy_crf.training.loggers: per-depth settings, the timing
rows of every evaluation, and the curve's table and plot."""

import io

import pytest
import spacy
import srsly
import typer
from typer.testing import CliRunner

from crf_project import curve
from crf_project.targets import DEV_TARGETS
from spacy_crf.training.loggers import timed_console_logger, times_path


def test_per_depth_settings_need_a_value_for_every_depth():
    assert curve.parse_depths("3,6,12") == [3, 6, 12]
    assert curve.per_depth("3=4800,6=2400", [3, 6], "--steps", int) == {3: 4800, 6: 2400}
    assert curve.per_depth("3=3e-4, 12=1e-4", [3, 12], "--learn-rates") == {3: 3e-4, 12: 1e-4}
    with pytest.raises(typer.BadParameter, match=r"no value for depth\(s\) \[12\]"):
        curve.per_depth("3=4800", [3, 12], "--steps", int)
    with pytest.raises(typer.BadParameter, match="DEPTH=VALUE"):
        curve.per_depth("3:4800", [3], "--steps", int)
    with pytest.raises(typer.BadParameter, match="between 1 and 12"):
        curve.parse_depths("3,24")


def test_the_timed_logger_writes_wall_and_cpu_seconds_beside_the_console_log(tmp_path):
    nlp = spacy.blank("zh")
    log_file = tmp_path / "train_log.jsonl"
    log_step, finalize = timed_console_logger(console_output=False, output_file=str(log_file))(
        nlp, io.StringIO(), io.StringIO()
    )
    for step, seconds in ((0, 0), (200, 61)):
        log_step(
            {
                "epoch": 0,
                "step": step,
                "score": 0.5,
                "other_scores": {"ents_f": 0.5},
                "losses": {},
                "checkpoints": [],
                "seconds": seconds,
                "words": 0,
            }
        )
    log_step(None)  # spaCy's "no evaluation this step": nothing written
    finalize()
    rows = list(srsly.read_jsonl(times_path(log_file)))
    assert [(r["step"], r["seconds"]) for r in rows] == [(0, 0), (200, 61)]
    assert rows[1]["cpu_seconds"] >= rows[0]["cpu_seconds"] >= 0 and rows[0]["threads"] >= 1
    assert [r["step"] for r in srsly.read_jsonl(log_file)] == [0, 200]
    assert times_path(log_file).name == "train_log.times.jsonl"
    assert rows[1]["scores"] == {"ents_f": 50.0}  # percent, as in train_log.jsonl


def _fake_run(root, depth, lr, points, tag="", ents_share=0.5):
    run = root / "training" / "curve" / (f"{depth}L-{tag}" if tag else f"{depth}L")
    run.mkdir(parents=True)
    srsly.write_json(
        run / "curve_settings.json",
        {"depth": depth, "learn_rate": lr, "dev_limit": 1000, "ents_share": ents_share, "tag": tag},
    )
    srsly.write_jsonl(
        run / "train_log.jsonl", [{"step": s, "scores": {"words_f": w, "ents_f": e}} for s, _, w, e in points]
    )
    srsly.write_jsonl(
        run / "train_log.times.jsonl",
        [{"step": s, "seconds": c / 2, "cpu_seconds": c, "threads": 2} for s, c, _, _ in points],
    )


def test_report_writes_the_table_and_the_plot(tmp_path):
    _fake_run(tmp_path, 3, 3e-4, [(0, 1, 0.0, 0.0), (200, 600, 90.5, 60.25), (400, 1200, 93.0, 75.0)])
    _fake_run(tmp_path, 12, 1e-4, [(0, 2, 0.0, 0.0), (200, 2400, 94.0, 80.0)])
    _fake_run(tmp_path, 3, 3e-4, [(0, 1, 0.0, 0.0), (200, 600, 91.0, 62.0)], tag="ents70", ents_share=0.7)
    result = CliRunner().invoke(curve.app, ["report", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "metrics" / "curve.md").read_text(encoding="utf8")
    assert "| 3L | 3 | 0.0003 | 0.5 | 200 | 5.0 | 10.0 | 90.50 | – | 60.25 |" in text  # OOV recall not logged
    assert "| 12L | 12 | 0.0001 | 0.5 | 200 | 20.0 | 40.0 | 94.00 | – | 80.00 |" in text
    assert "| 3L | 3 | 0.0003 | 0.5 | 0 |" not in text  # the untrained step-0 row is left out
    # the variant sorts beside its depth; too few points for a fit is said, not guessed
    assert text.index("| 3L |") < text.index("| 3L-ents70 |") < text.index("| 12L |")
    assert (
        "| 12L | 94.00 (step 200, 40 CPU min) | – | 80.00 (step 200, 40 CPU min) | 200 | – | – (too few points) | "
        "– (not logged while training) | – (too few points) |" in text
    )
    assert (tmp_path / "metrics" / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_fit_budget_extrapolates_a_power_law_and_says_when_a_run_is_flat():
    # error = 10 * minutes ** -0.5: 5.0 at 4, 2.5 at 16, 1.25 at 64 CPU-minutes
    points = [{"step": 0, "cpu_seconds": 1, "words_f": 0.0}] + [
        {"step": 100 * i, "cpu_seconds": m * 60, "words_f": 100 - 10 * m**-0.5}
        for i, m in enumerate((1, 4, 9, 16, 25, 36, 49, 64), start=1)
    ]
    fit = curve.fit_budget(points, "words_f", 99.0)
    assert fit["slope"] == pytest.approx(-0.5)
    assert fit["cpu_minutes_to_target"] == pytest.approx(100.0)  # 10 * m ** -0.5 = 1
    assert fit["gain_per_doubling"] == pytest.approx(1.25 * (1 - 2**-0.5))
    assert curve.fit_budget(points, "words_f", 90.0)["cpu_minutes_to_target"] == 64  # already there
    flat = [dict(p, words_f=95.0) if p["step"] else p for p in points]
    assert curve.fit_budget(flat, "words_f", 99.0)["cpu_minutes_to_target"] is None
    assert curve.fit_budget(points[:3], "words_f", 99.0) is None  # too few late points


def test_report_reads_the_scores_of_a_run_stopped_before_spacy_wrote_its_log(tmp_path):
    run = tmp_path / "training" / "curve" / "6L"
    run.mkdir(parents=True)
    srsly.write_json(run / "curve_settings.json", {"depth": 6, "learn_rate": 2e-4, "dev_limit": 1000})
    srsly.write_jsonl(
        run / "train_log.times.jsonl",
        [
            {"step": 0, "seconds": 5, "cpu_seconds": 3.0, "threads": 1, "scores": {"words_f": 1.0, "ents_f": 0.0}},
            {
                "step": 200,
                "seconds": 500,
                "cpu_seconds": 300.0,
                "threads": 1,
                "scores": {"words_f": 91.0, "ents_f": 55.5},
            },
        ],
    )
    points = curve.read_points(run)
    assert [(p["step"], p["words_f"], p["ents_f"]) for p in points] == [(0, 1.0, 0.0), (200, 91.0, 55.5)]


def test_report_without_runs_says_what_to_run(tmp_path):
    result = CliRunner().invoke(curve.app, ["report", "--out", str(tmp_path)])
    assert result.exit_code == 1 and "run the curve workflow first" in result.output


def test_plan_runs_adds_the_task_balance_variants_at_their_depths():
    plans = curve.plan_runs([3, 6, 12], [0.5, 0.7], [3], "")
    assert [(p["name"], p["ents_share"]) for p in plans] == [("3L", 0.5), ("6L", 0.5), ("12L", 0.5), ("3L-ents70", 0.7)]
    assert [p["name"] for p in curve.plan_runs([3], [0.5], [], "mult1000")] == ["3L-mult1000"]


def test_run_all_runs_side_by_side_and_records_only_finished_runs(tmp_path):
    import sys

    ok, bad = tmp_path / "ok", tmp_path / "bad"
    threads = "import os; print(os.environ.get('OMP_NUM_THREADS'))"
    pending = [
        (
            "ok",
            [sys.executable, "-c", threads],
            ok / "curve_settings.json",
            {"steps": 1, "learn_rate": 1e-4, "ents_share": 0.5},
            ok,
        ),
        (
            "bad",
            [sys.executable, "-c", "raise SystemExit(3)"],
            bad / "curve_settings.json",
            {"steps": 1, "learn_rate": 1e-4, "ents_share": 0.5},
            bad,
        ),
    ]
    with pytest.raises(SystemExit):
        curve.run_all(pending, jobs=2)
    assert srsly.read_json(ok / "curve_settings.json")["steps"] == 1
    assert (ok / "train.log").read_text().strip() == "1"  # one torch thread per run side by side
    assert not (bad / "curve_settings.json").exists()  # a failed run is not taken as trained


def test_run_rejects_bad_shares_and_share_depths(tmp_path):
    base = ["run", "--depths", "3", "--steps", "3=10", "--learn-rates", "3=1e-4", "--out", str(tmp_path)]
    result = CliRunner().invoke(curve.app, base + ["--ents-shares", "0.5,1.5"])
    assert result.exit_code != 0 and "strictly between 0 and 1" in result.output
    result = CliRunner().invoke(curve.app, base + ["--ents-shares", "0.5,0.7", "--share-depths", "6"])
    assert result.exit_code != 0 and "not in --depths" in result.output


def test_minutes_to_target_carries_the_fitted_exponent_from_the_full_dev_score():
    fit = {"slope": -0.5}
    # error 4 at 100 CPU-minutes; error 2 needs (2/4) ** (1/-0.5) = 4x the CPU
    assert curve.minutes_to_target(fit, 96.0, 100.0, 98.0) == pytest.approx(400.0)
    assert curve.minutes_to_target(fit, 98.5, 100.0, 98.0) == 100.0  # already there
    assert curve.minutes_to_target({"slope": 0.1}, 96.0, 100.0, 98.0) is None  # not improving
    assert curve.minutes_to_target(None, 96.0, 100.0, 98.0) is None


def test_report_anchors_on_full_dev_scores_and_takes_a_stopped_run_from_its_config(tmp_path):
    points = [(0, 1, 0.0, 0.0)] + [(200 * i, 600 * i, 100 - 8 / i**0.5, 100 - 40 / i**0.5) for i in range(1, 9)]
    _fake_run(tmp_path, 3, 3e-4, points)
    run3 = tmp_path / "training" / "curve" / "3L"
    # full-dev word F past its target, entity F short of its target
    srsly.write_json(run3 / "full_dev_cws.json", {"scores": {"words_f": 0.97, "words_oov_recall": 0.8}})
    srsly.write_json(run3 / "full_dev_ner.json", {"scores": {"ents_f": 0.86}})
    # a 12-layer run stopped after two evaluations: no curve_settings.json yet
    stopped = tmp_path / "training" / "curve" / "12L"
    (stopped / "model-best").mkdir(parents=True)
    (stopped / "model-best" / "config.cfg").write_text(
        "[corpora]\n[corpora.dev]\nlimit = 1000\n[corpora.train]\nents_share = 0.5\n"
        "[training]\nmax_steps = 400\n[training.optimizer]\ncrf_lr_multiplier = 100\n"
        "[training.optimizer.learn_rate]\ninitial_rate = 0.0001\n",
        encoding="utf8",
    )
    srsly.write_jsonl(
        stopped / "train_log.times.jsonl",
        [
            {"step": s, "seconds": c, "cpu_seconds": c, "threads": 1, "scores": {"words_f": w, "ents_f": e}}
            for s, c, w, e in ((0, 90, 5.0, 0.0), (100, 700, 85.0, 40.0), (200, 1300, 90.0, 60.0))
        ],
    )
    result = CliRunner().invoke(curve.app, ["report", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "metrics" / "curve.md").read_text(encoding="utf8")
    assert "`12L` stopped at step 200 of 400" in text
    assert "| 12L | 12 | 0.0001 | 0.5 | 200 | 21.7 | 21.7 | 90.00 | – | 60.00 |" in text
    assert "| 3L | 97.00 (OOV 80.0) / 86.00 |" not in text  # the step column comes first
    assert "| 1,600 | 97.00 (OOV 80.0) / 86.00 | reached |" in text
    # entities: slope -0.5 from the subset fit; error 14 -> the target's from model-best at 80 CPU-minutes
    minutes = 80 * ((100 - DEV_TARGETS["ents_f"]) / 14) ** (1 / -0.5)
    assert f"~{minutes:,.0f} CPU min (full dev)" in text


def test_report_shows_oov_recall_where_the_run_logged_it(tmp_path):
    """words_scorer.v2 logs OOV recall at every evaluation: a column, a best
    cell and a target cell that says a falling recall never gets there."""
    _fake_run(tmp_path, 3, 3e-4, [(0, 1, 0.0, 0.0)])
    run = tmp_path / "training" / "curve" / "3L"
    oov = [
        (200, 600, 90.0, 77.0, 60.0),
        (400, 1200, 93.0, 78.5, 70.0),
        (600, 1800, 94.0, 78.0, 75.0),
        (800, 2400, 95.0, 77.5, 78.0),
    ]
    text = _report_with_oov(tmp_path, run, oov)
    assert "| 3L | 3 | 0.0003 | 0.5 | 400 | 20.0 | 20.0 | 93.00 | 78.50 | 70.00 |" in text
    assert "| 78.50 (step 400, 20 CPU min) |" in text
    assert "points per doubling; not on this line (flat or falling) |" in text
    assert f"SXU OOV recall {DEV_TARGETS['words_oov_recall']}" in text
    data = srsly.read_json(tmp_path / "metrics" / "curve.json")
    assert [p["words_oov_recall"] for p in data["runs"]["3L"]["points"]] == [77.0, 78.5, 78.0, 77.5]
    # a recall that creeps up: the fitted line reaches the target only far past the run
    creeping = [(s, c, w, 77.0 + 0.01 * i, e) for i, (s, c, w, _, e) in enumerate(oov)]
    text = _report_with_oov(tmp_path, run, creeping)
    fit = curve.fit_budget(
        [{"step": s, "cpu_seconds": c, "words_oov_recall": o} for s, c, _, o, _ in creeping],
        "words_oov_recall",
        DEV_TARGETS["words_oov_recall"],
    )
    assert fit["cpu_minutes_to_target"] > curve.EXTRAPOLATION_LIMIT * 40  # the line does get there, absurdly late
    assert f"points per doubling; not within {curve.EXTRAPOLATION_LIMIT}x this run's CPU (nearly flat) |" in text


def _report_with_oov(tmp_path, run, points):
    """Write a run's timed log of (step, CPU s, word F, OOV recall, entity F) and report it."""
    srsly.write_jsonl(
        run / "train_log.times.jsonl",
        [
            {
                "step": s,
                "seconds": c,
                "cpu_seconds": c,
                "threads": 2,
                "scores": {"words_f": w, "words_oov_recall": o, "words_iv_recall": 99.0, "ents_f": e},
            }
            for s, c, w, o, e in points
        ],
    )
    result = CliRunner().invoke(curve.app, ["report", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    return (tmp_path / "metrics" / "curve.md").read_text(encoding="utf8")
