"""project/scripts/curve.py and timed_logger.py: per-depth settings, the timing
rows of every evaluation, and the curve's table and plot."""
import io

import pytest
import spacy
import srsly
import typer
from typer.testing import CliRunner

import curve
from timed_logger import times_path, timed_console_logger


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
        nlp, io.StringIO(), io.StringIO())
    for step, seconds in ((0, 0), (200, 61)):
        log_step({"epoch": 0, "step": step, "score": 0.5, "other_scores": {"ents_f": 0.5}, "losses": {},
                  "checkpoints": [], "seconds": seconds, "words": 0})
    log_step(None)  # spaCy's "no evaluation this step": nothing written
    finalize()
    rows = list(srsly.read_jsonl(times_path(log_file)))
    assert [(r["step"], r["seconds"]) for r in rows] == [(0, 0), (200, 61)]
    assert rows[1]["cpu_seconds"] >= rows[0]["cpu_seconds"] >= 0 and rows[0]["threads"] >= 1
    assert [r["step"] for r in srsly.read_jsonl(log_file)] == [0, 200]
    assert times_path(log_file).name == "train_log.times.jsonl"


def _fake_run(root, depth, lr, points):
    run = root / "training" / "curve" / f"{depth}L"
    run.mkdir(parents=True)
    srsly.write_json(run / "curve_settings.json", {"depth": depth, "learn_rate": lr, "dev_limit": 1000})
    srsly.write_jsonl(run / "train_log.jsonl", [{"step": s, "scores": {"words_f": w, "ents_f": e}}
                                               for s, _, w, e in points])
    srsly.write_jsonl(run / "train_log.times.jsonl", [{"step": s, "seconds": c / 2, "cpu_seconds": c, "threads": 2}
                                                     for s, c, _, _ in points])


def test_report_writes_the_table_the_plot_and_the_readme_block(tmp_path):
    _fake_run(tmp_path, 3, 3e-4, [(0, 1, 0.0, 0.0), (200, 600, 90.5, 60.25), (400, 1200, 93.0, 75.0)])
    _fake_run(tmp_path, 12, 1e-4, [(0, 2, 0.0, 0.0), (200, 2400, 94.0, 80.0)])
    readme = tmp_path / "README.md"
    readme.write_text("x\n<!-- CURVE -->\nold\n<!-- /CURVE -->\n", encoding="utf8")
    result = CliRunner().invoke(curve.app, ["report", "--out", str(tmp_path), "--readme", str(readme)])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "metrics" / "curve.md").read_text(encoding="utf8")
    assert "| 3 | 0.0003 | 200 | 5.0 | 10.0 | 90.50 | 60.25 |" in text
    assert "| 12 | 0.0001 | 200 | 20.0 | 40.0 | 94.00 | 80.00 |" in text
    assert "| 3 | 0.0003 | 0 |" not in text  # the untrained step-0 row is left out
    assert (tmp_path / "metrics" / "curve.png").read_bytes()[:4] == b"\x89PNG"
    assert "| 12 | 0.0001 | 200 |" in readme.read_text(encoding="utf8")


def test_report_without_runs_says_what_to_run(tmp_path):
    result = CliRunner().invoke(curve.app, ["report", "--out", str(tmp_path)])
    assert result.exit_code == 1 and "run the curve workflow first" in result.output
