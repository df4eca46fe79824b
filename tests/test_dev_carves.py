"""project/crf_project/dev_carves.py: one model's scores on both dev carves, and the table."""

import json

import typer
from typer.testing import CliRunner

from crf_project import dev_carves
from crf_project.dev_carves import carves_table, split_paths

RATES = {
    "sxu": {"dev": {"oov_rate": 0.05}, "dev_lines": {"oov_rate": 0.03}},
    "msra": {"dev": {"seen_rate": 0.75}, "dev_lines": {"seen_rate": 0.85}},
}


def _seed(blocks, lines, test=None, steps=1500):
    run = {
        "sxu": {
            "dev": {"words_f": blocks[0], "words_oov_recall": blocks[1]},
            "dev_lines": {"words_f": lines[0], "words_oov_recall": lines[1]},
        },
        "msra": {"dev": {"ents_f": blocks[2]}, "dev_lines": {"ents_f": lines[2]}},
        "settings": {"max_steps": steps, "learn_rate": 3e-4, "best_step": steps},
    }
    if test:
        run["sxu"]["test"] = {"words_f": test[0], "words_oov_recall": test[1]}
        run["msra"]["test"] = {"ents_f": test[2]}
    return run


def _rows(table):
    return {
        line.split(" | ")[0][2:]: line for line in table.splitlines() if line.startswith("| ") and "---" not in line
    }


def test_both_devs_of_one_model_side_by_side_with_their_rates_and_the_difference():
    results = {
        "seed0": _seed((0.93, 0.80, 0.82), (0.95, 0.84, 0.86)),
        "seed1": _seed((0.95, 0.82, 0.84), (0.95, 0.84, 0.90)),
    }
    table = carves_table(results, {c: {"rates": r} for c, r in RATES.items()}, "reduced", 0)
    rows = _rows(table)
    assert rows["dev: random blocks of lines (the project's carve)"].endswith(
        "| 5.00 | 94.00 ± 1.00 | 81.00 ± 1.00 | 75.00 | 83.00 ± 1.00 |"
    )
    assert rows["dev_lines: random single lines (the carve of earlier versions)"].endswith(
        "| 3.00 | 95.00 ± 0.00 | 84.00 ± 0.00 | 85.00 | 88.00 ± 2.00 |"
    )
    # per seed, then mean ± half-range: seed0 +2/+4/+4, seed1 0/+2/+6
    assert rows["dev_lines − dev (how much easier single lines are)"].endswith(
        "| | 1.00 ± 1.00 | 3.00 ± 1.00 | | 5.00 ± 1.00 |"
    )
    # no test file: the held-back test's measured rates say which dev it resembles, and no test gap rows
    assert rows["official test"].endswith("| 5.12 (held-back file) | – | – | 71.30 (held-back file) | – |")
    assert "test − dev" not in table
    assert "seed0, seed1; 1,500 steps" in table and "whole splits" in table and "`reduced`" in table


def test_a_scored_test_adds_its_gap_to_each_dev():
    results = {"seed0": _seed((0.94, 0.80, 0.82), (0.96, 0.85, 0.86), test=(0.935, 0.79, 0.80))}
    rates = {c: {"rates": {**r, "test": {"oov_rate": 0.051, "seen_rate": 0.71}}} for c, r in RATES.items()}
    rows = _rows(carves_table(results, rates, "default", 100))
    assert rows["official test"].endswith("| 5.10 | 93.50 | 79.00 | 71.00 | 80.00 |")
    assert rows["test − dev"].endswith("| | -0.50 | -1.00 | | -2.00 |")
    assert rows["test − dev_lines"].endswith("| | -2.50 | -6.00 | | -6.00 |")


def test_split_paths_take_the_test_only_where_it_was_converted():
    entry = {"dev": "d", "dev_lines": "l", "eval": "d", "eval_split": "dev"}
    assert split_paths(entry) == {"dev": "d", "dev_lines": "l"}
    assert split_paths({**entry, "eval": "t", "eval_split": "test"}) == {"dev": "d", "dev_lines": "l", "test": "t"}


def test_the_command_names_what_to_run_first(tmp_path):
    app = typer.Typer()
    app.command()(dev_carves.dev_carves_cli)
    result = CliRunner().invoke(app, ["--out", str(tmp_path)])
    assert result.exit_code == 2 and "run dev-carves-corpus first" in " ".join(result.output.split())
    (tmp_path / "corpus_carves").mkdir()
    manifest = {"sxu": {"dev": "d", "train": "t"}, "msra": {"dev": "d", "train": "t", "dev_lines": "l"}}
    (tmp_path / "corpus_carves" / "manifest.json").write_text(json.dumps(manifest), encoding="utf8")
    result = CliRunner().invoke(app, ["--out", str(tmp_path)])
    assert result.exit_code == 2 and "no dev_lines split for sxu" in " ".join(result.output.split())
    manifest["sxu"]["dev_lines"] = "l"
    (tmp_path / "corpus_carves" / "manifest.json").write_text(json.dumps(manifest), encoding="utf8")
    result = CliRunner().invoke(app, ["--out", str(tmp_path)])
    assert result.exit_code == 2 and "run dev-carves-train first" in " ".join(result.output.split())


def test_a_negative_eval_limit_is_refused(tmp_path):
    app = typer.Typer()
    app.command()(dev_carves.dev_carves_cli)
    result = CliRunner().invoke(app, ["--out", str(tmp_path), "--eval-limit", "-1"])
    assert result.exit_code == 2 and "--eval-limit" in result.output
