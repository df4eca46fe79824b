"""The documentation site (docs/, mkdocs.yml) says what the code does: every
factory setting with its default, the command reference, the module map,
examples that run, and no measured figures left in the code's comments."""

import ast
import functools
import importlib
import importlib.util
import inspect
import io
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
from conftest import load_script

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PACKAGE = ROOT / "spacy_crf"


def _section_table(page: Path, title: str):
    """{first cell: [cells]} of the first table under the heading `` `title` ``."""
    lines = page.read_text(encoding="utf8").splitlines()
    heading = re.compile(rf"^#{{2,4}} `{re.escape(title)}`$")
    at = next((i for i, line in enumerate(lines) if heading.match(line)), None)
    assert at is not None, f"{page.name}: no heading `{title}`"
    rows = {}
    for line in lines[at + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            rows[cells[0]] = cells
        elif rows and not line.startswith("|"):
            break
    assert rows, f"{page.name}: no table under `{title}`"
    return rows


def _rendered(value) -> str:
    """A config value as the docs write it (config syntax; a registered function by its name)."""
    if isinstance(value, dict):
        return next(v for k, v in value.items() if k.startswith("@"))
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


def _check_table(page, title, defaults, params):
    rows = _section_table(page, title)
    documented = {cells[0].strip("`") for cells in rows.values() if cells[0] not in ("setting",)}
    assert documented == set(params), (
        f"{page.name}: `{title}` documents {sorted(documented)}, the code has {sorted(params)}"
    )
    for name in params:
        cell = rows[f"`{name}`"][1]
        assert f"`{_rendered(defaults[name])}`" in cell, (
            f"{page.name}: `{title}` setting {name!r}: default cell {cell!r}, the code's default is "
            f"{_rendered(defaults[name])!r}"
        )


@functools.lru_cache(maxsize=None)
def _package_factories():
    """{name: (factory function, default config)} of every factory defined in spacy_crf."""
    from spacy.language import Language
    from spacy.util import registry

    for path in sorted(PACKAGE.rglob("*.py")):
        if "Language.factory" in path.read_text(encoding="utf8"):
            importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
    found = {}
    for name, func in registry.factories.get_all().items():
        if getattr(func, "__module__", "").startswith("spacy_crf"):
            found[name] = (func, Language.get_factory_meta(name).default_config)
    return found


def test_the_factories_are_found():
    assert {"crf_tagger", "crf_ner", "crf_segmenter", "span_ner", "crf_merge_words", "crf_ent_confidence"} <= set(
        _package_factories()
    )


@pytest.mark.parametrize("factory", sorted(_package_factories()))
def test_every_factory_setting_is_documented_with_its_default(factory):
    func, defaults = _package_factories()[factory]
    params = [p for p in inspect.signature(func).parameters if p not in ("nlp", "name")]
    assert set(params) == set(defaults), f"{factory}: signature and default config differ"
    _check_table(DOCS / "components.md", factory, defaults, params)


def _package_architectures():
    """{name: (function, default config)} of the spacy_crf architectures the factories default to."""
    from spacy.util import registry

    found = {}
    for _, defaults in _package_factories().values():
        model = defaults.get("model")
        if isinstance(model, dict) and model["@architectures"].startswith("spacy_crf."):
            name = model["@architectures"]
            found[name] = (registry.architectures.get(name), {k: v for k, v in model.items() if k != "@architectures"})
    return found


def test_every_architecture_setting_is_documented_with_its_default():
    architectures = _package_architectures()
    assert {"spacy_crf.CRFTagger.v1", "spacy_crf.SpanPointer.v1"} <= set(architectures)
    for name, (func, defaults) in architectures.items():
        params = list(inspect.signature(func).parameters)
        assert set(params) == set(defaults), f"{name}: signature and default config differ"
        _check_table(DOCS / "components.md", name, defaults, params)


def test_the_command_reference_is_generated_from_the_app():
    docs_cli = load_script(ROOT / "scripts" / "docs_cli.py")
    page = (DOCS / "cli.md").read_text(encoding="utf8")
    assert docs_cli.block(page) == docs_cli.render().strip("\n"), (
        "docs/cli.md: the command reference is stale; run python scripts/docs_cli.py"
    )


def test_the_command_reference_names_every_command_and_option():
    import typer.main

    from spacy_crf.cli import app

    page = (DOCS / "cli.md").read_text(encoding="utf8")
    for name, command in typer.main.get_command(app).commands.items():
        section = page[page.index(f"## `spacy crf {name}`") :]
        section = section[: section.find("\n## ", 1) if "\n## " in section[1:] else None]
        for param in command.params:
            for opt in param.opts if param.param_type_name == "option" else [param.name.upper()]:
                assert f"`{opt}" in section or f" {opt}" in section, f"docs/cli.md: {name} lacks {opt}"


def _named_modules(text: str):
    """Paths of Python and Cython modules named on a page in code spans, relative to spacy_crf/."""
    names = re.findall(r"`([\w/]+\.pyx?)`", text)
    return {n.removeprefix("spacy_crf/") for n in names if not n.startswith(("tests/", "scripts/", "project/"))}


def test_the_architecture_page_names_every_module_and_only_existing_ones():
    named = _named_modules((DOCS / "architecture.md").read_text(encoding="utf8"))
    modules = {str(p.relative_to(PACKAGE)) for pattern in ("*.py", "*.pyx") for p in PACKAGE.rglob(pattern)}
    assert not modules - named, f"docs/architecture.md does not name {sorted(modules - named)}"
    assert not named - modules, f"docs/architecture.md names modules that do not exist: {sorted(named - modules)}"


def test_the_usage_page_examples_run(tmp_path, monkeypatch):
    page = DOCS / "usage.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf8"), re.S)
    assert len(blocks) >= 4
    monkeypatch.chdir(tmp_path)  # the example writes transitions.png
    namespace = {}
    exec(compile("\n".join(blocks), str(page), "exec"), namespace)
    assert [(e.text, e.label_) for e in namespace["nlp"]("张三去上海").ents] == [("张三", "PER"), ("上海", "LOC")]
    assert not namespace["seg"].user_dict.entries and not namespace["ner"].user_dict.entries


def test_every_page_is_in_the_nav():
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf8"))

    def pages(nav):
        for item in nav:
            for value in item.values():
                yield from (pages(value) if isinstance(value, list) else [value])

    assert sorted(pages(config["nav"])) == sorted(p.name for p in DOCS.glob("*.md"))


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="mkdocs is not installed (the docs extra)")
def test_mkdocs_builds_strictly(tmp_path):
    # strict: a broken link or anchor (validation: warn in mkdocs.yml) fails the build
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]


# A measured figure: a time, a rate, a ratio or a share, as benchmarks write them.
MEASURED = re.compile(
    r"\b\d[\d,.]*\s?(ms|us|µs|ns)\b|\b\d[\d,.]* s (against|per|to|on)\b|chars/s\b.*\d|\d[\d,.]*\s?chars/s"
    r"|~?\b\d+(\.\d+)?x (faster|slower|cheaper)|\b\d+(\.\d+)?% (of the|faster|slower)"
)


def _comments_and_docstrings(path: Path):
    text = path.read_text(encoding="utf8")
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield getattr(node, "lineno", 1), doc


def test_no_measured_figures_in_comments_docstrings_or_configs():
    found = []
    # the library, and the project's commands (project/crf_project/)
    for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "project" / "crf_project").glob("*.py")]):
        found += [
            f"{path.relative_to(ROOT)}:{line}: {m.group(0)!r}"
            for line, text in _comments_and_docstrings(path)
            for m in [MEASURED.search(text)]
            if m
        ]
    for path in sorted((ROOT / "configs").glob("*.cfg")):
        for line, text in enumerate(path.read_text(encoding="utf8").splitlines(), 1):
            if text.lstrip().startswith("#") and MEASURED.search(text):
                found.append(f"{path.relative_to(ROOT)}:{line}: {MEASURED.search(text).group(0)!r}")
    # both project files' comments (the ship project's and the studies')
    for path in (ROOT / "project" / "project.yml", ROOT / "project" / "studies" / "project.yml"):
        for line, text in enumerate(path.read_text(encoding="utf8").splitlines(), 1):
            if "#" in text and MEASURED.search(text.split("#", 1)[1]):
                found.append(f"{path.relative_to(ROOT)}:{line}: {MEASURED.search(text).group(0)!r}")
    assert not found, "measured figures belong in docs/results.md:\n" + "\n".join(found)


def _vars(command: str):
    return dict(re.findall(r"--vars\.(\w+)=(\S+)", command.replace("\\\n", " ")))


def test_the_training_page_gives_the_smoke_run_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf8").replace("\\\n", " ")
    ci_smoke = next(line for line in ci.splitlines() if line.startswith("spacy project run all "))
    page = (DOCS / "training.md").read_text(encoding="utf8")
    at = page.index("spacy project run all project --vars.data_dir=../shared/data --vars.profile=smoke")
    assert _vars(page[at : page.index("```", at)]) == _vars(ci_smoke)


# --- docs/refusals.md: what each entry point refuses, and the test of each -----------------------------------------

REFUSALS_HEADER = ["bad input", "refused when", "the message names", "test"]
TEST_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)(?:\[[^\]`]*\])?`")


def _refusal_tables(text: str):
    """{heading: [rows]} of every table on the page, a row as its cells, the header left out."""
    tables: dict = {}
    heading = ""
    for line in text.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            rows = tables.setdefault(heading, [])
            if cells != REFUSALS_HEADER:
                rows.append(cells)
    return tables


def _refusal_problems(text: str, commands, factories):
    """What is wrong with the page: a table whose columns are not the four, a row
    that names no test or a test that does not exist, a command or factory
    without a table of its own."""
    problems = []
    tables = _refusal_tables(text)
    for heading, rows in tables.items():
        for cells in rows:
            if len(cells) != len(REFUSALS_HEADER):
                problems.append(f"{heading}: row {cells[0]!r} has {len(cells)} cells, not {len(REFUSALS_HEADER)}")
                continue
            found = TEST_REFERENCE.findall(cells[-1])
            if not found or TEST_REFERENCE.sub("", cells[-1]).strip(" ,"):
                problems.append(f"{heading}: row {cells[0]!r}: the test cell is not `tests/FILE.py::test_NAME`, ...")
            for path, name in found:
                file = ROOT / path
                if not file.is_file():
                    problems.append(f"{heading}: row {cells[0]!r} names {path}, which does not exist")
                elif not re.search(rf"^def {name}\(", file.read_text(encoding="utf8"), re.M):
                    problems.append(f"{heading}: row {cells[0]!r} names {path}::{name}, which is not defined there")
    with_rows = [heading for heading, rows in tables.items() if rows]
    for command in commands:
        if not any(f"`spacy crf {command}`" in heading for heading in with_rows):
            problems.append(f"the command `spacy crf {command}` has no table")
    for factory in factories:
        if not any(f"`{factory}`" in heading for heading in with_rows):
            problems.append(f"the factory `{factory}` has no table")
    return problems


def _commands():
    import typer.main

    from spacy_crf.cli import app

    return sorted(typer.main.get_command(app).commands)


def test_every_refusal_names_a_test_that_exists_and_every_command_and_factory_has_a_table():
    text = (DOCS / "refusals.md").read_text(encoding="utf8")
    assert len(_commands()) >= 8 and "annotate" in _commands()
    assert _refusal_problems(text, _commands(), sorted(_package_factories())) == []
    assert sum(len(rows) for rows in _refusal_tables(text).values()) >= 100
    assert "(docs/refusals.md)" in (ROOT / "README.md").read_text(encoding="utf8")


def test_the_refusals_check_finds_a_missing_test_and_a_command_without_a_table():
    text = (DOCS / "refusals.md").read_text(encoding="utf8")
    row = "| an unknown `scheme` | at construction |"
    assert row in text
    broken = text.replace("### `spacy crf speed`", "### speed").replace(
        "`tests/test_pipe.py::test_initialize_with_labels_that_do_not_fit_the_scheme` |\n| a scheme",
        "`tests/test_pipe.py::test_no_such_test` |\n| a scheme",
    )
    broken += "\n| a row | at load | nothing | `tests/test_nowhere.py::test_x[a-b]` |\n| a row | at load | the test | none |\n"
    problems = _refusal_problems(broken, _commands(), sorted(_package_factories()))
    assert problems == [
        "`crf_tagger`, `crf_ner`, `crf_segmenter`: row 'an unknown `scheme`' names "
        "tests/test_pipe.py::test_no_such_test, which is not defined there",
        "User dictionaries: row 'a row' names tests/test_nowhere.py, which does not exist",
        "User dictionaries: row 'a row': the test cell is not `tests/FILE.py::test_NAME`, ...",
        "the command `spacy crf speed` has no table",
    ], problems
