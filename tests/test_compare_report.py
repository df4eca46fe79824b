"""project/crf_project/compare_report.py: what each run was trained with, and the table."""

import srsly

from crf_project.compare_report import compare_table, dev_curve, plot_curves, run_settings

CONFIG = """[training]
max_steps = 1000

[training.optimizer]
@optimizers = "Adam.v1"

[training.optimizer.learn_rate]
@schedules = "warmup_linear.v1"
warmup_steps = 100
total_steps = ${training.max_steps}
initial_rate = 0.00030000000000000003
"""


def _run_dir(tmp_path, name, scores):
    run = tmp_path / name
    (run / "model-best").mkdir(parents=True)
    (run / "model-best" / "config.cfg").write_text(CONFIG, encoding="utf8")
    srsly.write_jsonl(run / "train_log.jsonl", [{"step": step, "score": score} for step, score in scores])
    return run


def test_run_settings_read_the_budget_and_the_step_model_best_came_from(tmp_path):
    run = _run_dir(tmp_path, "joint_crf", [(0, 0.1), (250, 0.7), (500, 0.9), (750, 0.4)])
    assert run_settings(run) == {"max_steps": 1000, "learn_rate": 0.0003, "best_step": 500}
    (run / "train_log.jsonl").unlink()
    assert run_settings(run)["best_step"] is None


def _result(words_f, ents_f, steps, best, seconds):
    return {
        "scores": {"words_f": words_f, "words_oov_recall": 0.7, "ents_f": ents_f},
        "train": {"train_seconds": seconds},
        "settings": {"max_steps": steps, "learn_rate": 3e-4, "best_step": best},
    }


def test_the_table_gives_mean_and_half_range_and_each_rows_budget():
    crf0, crf1 = _result(0.95, 0.88, 1000, 1000, 1800), _result(0.93, 0.86, 1000, 750, 1700)
    results = {
        "joint_crf": {"cws": {"seed0": crf0, "seed1": crf1}, "ner": {"seed0": crf0, "seed1": crf1}},
        "ner_spacy": {"ner": {"seed0": _result(None, 0.40, 500, 250, 900)}},
    }
    table = compare_table(results, "default", {"cws": "dev", "ner": "dev"})
    rows = [line for line in table.splitlines() if line.startswith("| CRF") or line.startswith("| spaCy ner")]
    assert rows[0] == (
        "| CRF (crf_segmenter + crf_ner, joint) | 94.00 ± 1.00 | 70.00 ± 0.00 | 87.00 ± 1.00 "
        "| 2 (seed0, seed1) | 1,000 | 0.0003 | 1,000, 750 | 1,800, 1,700 |"
    )  # seed order, not sorted
    assert rows[1] == "| spaCy ner (transition-based) | – | – | 40.00 | 1 (seed0) | 500 | 0.0003 | 250 | 900 |"
    assert "softmax" not in table.split("| head")[1]  # heads not trained get no row


def test_dev_curves_count_a_joint_step_as_half_a_step_of_each_task(tmp_path):
    run = tmp_path / "joint_crf"
    run.mkdir()
    srsly.write_jsonl(
        run / "train_log.jsonl",
        [
            {"step": 0, "scores": {"words_f": 30.0, "ents_f": 0.5}, "score": 0.1},
            {"step": 500, "scores": {"words_f": 93.0, "ents_f": 70.0}, "score": 0.8},
        ],
    )
    assert dev_curve(run, "cws", joint=True) == [(0.0, 30.0), (250.0, 93.0)]
    assert dev_curve(run, "ner", joint=False) == [(0.0, 0.5), (500.0, 70.0)]
    assert dev_curve(tmp_path / "never_trained", "ner", joint=False) == []


def test_the_plot_draws_every_run_found(tmp_path):
    seed = tmp_path / "seed0"
    for head, key in (("joint_crf", "ents_f"), ("ner_spacy", "ents_f"), ("cws_tagger", "words_f")):
        (seed / head).mkdir(parents=True)
        srsly.write_jsonl(
            seed / head / "train_log.jsonl",
            [{"step": s, "scores": {key: f}, "score": f / 100} for s, f in ((0, 1.0), (100, 50.0))],
        )
    path = tmp_path / "compare.png"
    plot_curves([seed], "test", path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
