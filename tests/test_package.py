"""The package's architecture rules (docs/architecture.md): the library
holds no project code, hard-codes no language, and keeps each tag encoding
in spacy_crf.ml.schemes; modules stay small unless they are one concept."""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "spacy_crf"
MODULES = sorted(PACKAGE.rglob("*.py"))
# One concept each, longer than the ~400-line guide: the CRF maths.
ONE_CONCEPT = {"ml/crf.py"}


def _imports(path):
    tree = ast.parse(path.read_text(encoding="utf8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_project_code_in_the_library(path):
    text = path.read_text(encoding="utf8")
    assert not [m for m in _imports(path) if m.split(".")[0] in ("project", "scripts")]
    assert "train_meta.json" not in text
    blank_calls = [
        node
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "blank"
    ]
    assert not blank_calls, "a language is hard-coded"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_small_unless_one_concept(path):
    if str(path.relative_to(PACKAGE)) in ONE_CONCEPT:
        return
    assert len(path.read_text(encoding="utf8").splitlines()) <= 420


def test_the_shared_helpers_import_nothing_from_the_package():
    # every room imports them: one import back into the package would be a loop
    for name in ("util.py", "doc_keys.py", "files.py"):
        tree = ast.parse((PACKAGE / name).read_text(encoding="utf8"))
        relative = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level]
        assert not relative and not [m for m in _imports(PACKAGE / name) if m.split(".")[0] == "spacy_crf"], name


def test_no_module_re_exports_names():
    # a name is imported from its home module; only imports run for their
    # effect (the command modules, the factories in a worker) are unused
    unused = {
        str(p.relative_to(PACKAGE)) for p in MODULES if re.search(r"noqa:[^\n]*F401", p.read_text(encoding="utf8"))
    }
    assert unused <= {"cli/__init__.py", "annotate/ray_engine.py"}, sorted(unused)


def test_bmes_tags_are_defined_once():
    defined = [
        p.name
        for p in MODULES
        if re.search(r"""BMES_TAGS\s*=|\(\s*"B",\s*"M",\s*"E",\s*"S"\s*\)""", p.read_text(encoding="utf8"))
    ]
    assert defined == ["schemes.py"]
