"""project/crf_project/results.py: the one results page, each table labelled
with the command and commit that made it."""

import re
import sys

from typer.testing import CliRunner

from crf_project import results


def test_a_table_ends_with_its_command_and_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["crf_project compare-report", "--out", "my out"])
    results.write_table(tmp_path / "compare.md", "| a |\n|---|\n| 1 |\n")
    last = (tmp_path / "compare.md").read_text(encoding="utf8").splitlines()[-1]
    assert re.fullmatch(r"_Made by `python crf_project compare-report --out 'my out'` at commit \S+\._", last)


def test_the_commit_is_dirty_for_changed_code_but_not_for_changed_outputs(tmp_path):
    import subprocess

    def git(*args):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True, capture_output=True
        )

    (tmp_path / "project" / "metrics").mkdir(parents=True)
    (tmp_path / "project" / "metrics" / "curve.md").write_text("old table\n", encoding="utf8")
    (tmp_path / "code.py").write_text("x = 1\n", encoding="utf8")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "start")
    clean = results.commit(tmp_path / "project")
    assert re.fullmatch(r"[0-9a-f]{4,}", clean)
    (tmp_path / "project" / "metrics" / "curve.md").write_text("new table\n", encoding="utf8")
    assert results.commit(tmp_path / "project") == clean  # an output written by the command itself
    (tmp_path / "code.py").write_text("x = 2\n", encoding="utf8")
    assert results.commit(tmp_path / "project") == clean + "-dirty"


def test_the_page_gathers_every_table_with_its_plots(tmp_path, monkeypatch):
    metrics = tmp_path / "metrics"
    metrics.mkdir()
    monkeypatch.setattr(sys, "argv", ["crf_project evaluate-all", "--out", str(tmp_path)])
    results.write_table(metrics / "summary.md", "the summary table")
    results.write_table(metrics / "compare.md", "the compare table")
    (metrics / "compare.png").write_bytes(b"\x89PNG")
    (metrics / "curve.md").write_text("an old table\n", encoding="utf8")
    (metrics / "pipeline_speed.json").write_text("{}", encoding="utf8")
    result = CliRunner().invoke(results.app, ["--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    page = (metrics / results.PAGE).read_text(encoding="utf8")
    # the shipped model's tables first, then the studies' by name
    assert page.index("## summary") < page.index("## compare") < page.index("## curve")
    assert "the compare table" in page and "![compare](compare.png)" in page
    assert page.count("_Made by `python crf_project evaluate-all") == 3  # two tables and the page
    assert "an old table\n\n_Command and commit not recorded" in page
    assert "`pipeline_speed.json`" in page
    assert page.rstrip().splitlines()[-1].startswith("_Made by `")


def test_the_page_needs_a_metrics_folder(tmp_path):
    result = CliRunner().invoke(results.app, ["--out", str(tmp_path)])
    assert result.exit_code == 1 and "metrics: no such folder" in str(result.exception)
