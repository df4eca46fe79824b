"""project/crf_project/training_curve.py: one run's dev scores at every
evaluation (OOV and IV recall included), as a table, JSON and plot."""

import json

import pytest
import srsly
import typer
from typer.testing import CliRunner

from crf_project import training_curve
from crf_project.training_curve import read_evaluations, summarize

# step, score, word F, OOV recall, IV recall, entity F: OOV recall peaks at step 200,
# the weighted score at steps 300 and 400 (a tie: spaCy keeps the later one)
ROWS = [
    (0, 0.01, 10.0, 5.0, 11.0, 0.5),
    (100, 0.70, 90.0, 70.0, 91.0, 60.0),
    (200, 0.80, 93.0, 78.0, 94.0, 70.0),
    (300, 0.85, 94.0, 76.0, 95.5, 78.0),
    (400, 0.85, 94.5, 75.5, 96.0, 76.0),
]


def scores(words_f, oov, iv, ents_f):
    return {"words_f": words_f, "words_oov_recall": oov, "words_iv_recall": iv, "ents_f": ents_f, "token_acc": 100.0}


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "training" / "joint"
    (run / "model-last").mkdir(parents=True)
    (run / "model-last" / "config.cfg").write_text("[corpora]\n\n[corpora.dev]\nlimit = 50\n", encoding="utf8")
    srsly.write_jsonl(
        run / "train_log.times.jsonl",
        [
            {
                "step": s,
                "seconds": 60 * (i + 1),
                "cpu_seconds": 110.0 * (i + 1),
                "threads": 2,
                "score": sc,
                "scores": scores(*rest),
            }
            for i, (s, sc, *rest) in enumerate(ROWS)
        ],
    )
    return run


def test_model_best_and_the_peak_of_oov_recall(run_dir):
    points = read_evaluations(run_dir)
    assert [p["step"] for p in points] == [0, 100, 200, 300, 400]
    summary = summarize(points)
    assert summary["model_best"]["step"] == 400  # the later of the two best scores, as spaCy saves it
    assert summary["oov_peak"]["step"] == 200  # step 0 is not a trained model
    assert summary["after_peak"]["words_oov_recall"] == pytest.approx(-2.5)
    assert summary["after_peak"]["words_iv_recall"] == pytest.approx(2.0)
    assert summary["after_peak"]["words_f"] == pytest.approx(1.5)


def test_the_command_writes_table_json_and_plot_and_no_readme(run_dir, tmp_path, monkeypatch):
    out = tmp_path / "metrics" / "training_curve"
    app = typer.Typer()
    app.command()(training_curve.main)
    result = CliRunner().invoke(app, [str(run_dir), "--output", str(out)])
    assert result.exit_code == 0, result.output
    md = out.with_suffix(".md").read_text(encoding="utf8")
    assert "the first 50 dev docs of each task" in md
    assert "| 400 ◀ | 5.0 | 9.2 | 94.50 | 75.50 | 96.00 | 76.00 |" in md
    assert "| 300 | 4.0 | 7.3 | 94.00 | 76.00 | 95.50 | 78.00 |" in md
    assert "OOV recall peaked at 78.00 at step 200" in md and "OOV recall -2.50, IV recall +2.00" in md
    # the targets of the block-carved dev, not the easier line dev's 96.0 / 80.0 / 91.0
    assert "Targets on the full dev sets: word F 96.5, OOV recall 85.0, entity F 92.0." in md
    data = json.loads(out.with_suffix(".json").read_text(encoding="utf8"))
    assert data["targets"] == {"words_f": 96.5, "words_oov_recall": 85.0, "ents_f": 92.0}
    assert data["dev_limit"] == 50 and len(data["evaluations"]) == 5 and data["model_best"]["step"] == 400
    assert out.with_suffix(".png").stat().st_size > 0
    assert md.rstrip().splitlines()[-1].startswith("_Made by `")  # labelled for the results page
    # the table goes to the results page, not into a README
    assert "--readme" not in CliRunner().invoke(app, ["--help"]).output


def test_spacy_log_without_timing_or_oov(tmp_path):
    """An older run: spaCy's train_log.jsonl only, no OOV recall logged."""
    run = tmp_path / "run"
    run.mkdir()
    srsly.write_jsonl(
        run / "train_log.jsonl",
        [
            {"epoch": 0, "step": s, "score": sc, "scores": {"words_f": w, "ents_f": e}, "losses": {}}
            for s, sc, w, _, _, e in ROWS
        ],
    )
    points = read_evaluations(run)
    assert points[1]["cpu_seconds"] is None and points[1]["words_oov_recall"] is None
    summary = summarize(points)
    assert summary["oov_peak"] is None and summary["model_best"]["step"] == 400
    text = training_curve.table(points, summary, None, "default", "run")
    assert "| 100 | – | – | 90.00 | – | – | 60.00 |" in text and "peaked" not in text and "all dev docs" in text


def test_a_folder_without_a_training_log_is_named(tmp_path):
    app = typer.Typer()
    app.command()(training_curve.main)
    result = CliRunner().invoke(app, [str(tmp_path / "nothing"), "--output", str(tmp_path / "m")])
    assert result.exit_code == 1 and "nothing: no train_log.jsonl" in " ".join(result.output.split())
    only_step_0 = tmp_path / "fresh"
    only_step_0.mkdir()
    srsly.write_jsonl(only_step_0 / "train_log.jsonl", [{"step": 0, "score": 0.0, "scores": {"words_f": 1.0}}])
    with pytest.raises(ValueError, match="no evaluation after step 0"):
        summarize(read_evaluations(only_step_0))
