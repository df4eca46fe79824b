"""project/crf_project/lexicon_ablation.py: the four settings from two models, and the table."""

import pytest
import typer

from crf_project.lexicon_ablation import ablation_table, parse_weights


def _run(alone_f, chosen_f, weight, ents_f, best, seconds):
    return {
        "words": {
            False: {"weight": 0.0, "words_f": alone_f, "words_oov_recall": 0.80},
            True: {"weight": weight, "words_f": chosen_f, "words_oov_recall": 0.86},
        },
        "ents": {"ents_f": ents_f},
        "train": {"train_seconds": seconds},
        "settings": {"max_steps": 1500, "learn_rate": 3e-4, "best_step": best},
    }


def test_each_model_gives_two_settings_with_mean_and_half_range_over_seeds():
    results = {
        "off": {"seed0": _run(0.94, 0.95, 1.0, 0.80, 1500, 900), "seed1": _run(0.92, 0.95, 1.5, 0.82, 1000, 950)},
        "features": {"seed0": _run(0.95, 0.96, 0.5, 0.85, 1500, 1000)},
    }
    table = ablation_table(results, "reduced", {"sxu": "dev", "msra": "dev"})
    rows = {line.split(":")[0][2:]: line for line in table.splitlines() if line.startswith("| ") and ":" in line}
    assert rows["none"] == (
        "| none: no lexicon | 93.00 ± 1.00 | 80.00 ± 0.00 | 81.00 ± 1.00 | 0 | 2 (seed0, seed1) | 1,500 "
        "| 1,500, 1,000 | 900, 950 |"
    )
    # the prior changes the words only: the same models' entity F, the weight chosen per seed
    assert rows["prior"].startswith(
        "| prior: decoding prior (weight tuned on the split) | 95.00 ± 0.00 | 86.00 ± 0.00 "
    )
    assert "| 81.00 ± 1.00 | 1, 1.5 | 2 (seed0, seed1) |" in rows["prior"]
    assert rows["learned"].startswith("| learned: learned lexicon features | 95.00 | 80.00 | 85.00 | 0 | 1 (seed0) |")
    assert rows["both"].startswith("| both: learned features + decoding prior | 96.00 | 86.00 | 85.00 | 0.5 |")
    assert "reduced" in table and "on dev" in table


def test_a_model_not_trained_gets_no_rows():
    table = ablation_table({"off": {"seed0": _run(0.9, 0.9, 0.0, 0.8, 10, 1)}}, "smoke", {"sxu": "dev", "msra": "dev"})
    assert "| none:" in table and "| prior:" in table and "| learned:" not in table and "| both:" not in table


def test_weights_always_include_the_model_alone_and_refuse_bad_ones():
    assert parse_weights("1,0.5,1") == [0.0, 0.5, 1.0]
    with pytest.raises(typer.BadParameter, match="weights must be >= 0"):
        parse_weights("1,-2")
    with pytest.raises(typer.BadParameter, match="not a comma-separated list"):
        parse_weights("1,x")
