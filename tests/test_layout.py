"""The package's rooms (ml/, pipeline/, training/, ...): every entry point
resolves, and the modules' old names still import the same module objects."""
import configparser
import importlib
from pathlib import Path

import pytest

import spacy_crf
from spacy_crf._moved import MOVED

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(spacy_crf.__file__).parent


def _entry_points():
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg", encoding="utf-8")
    for group, text in parser["options.entry_points"].items():
        for line in filter(None, (line.strip() for line in text.splitlines())):
            name, _, target = (part.strip() for part in line.partition("="))
            yield group, name, target


@pytest.mark.parametrize("group,name,target", list(_entry_points()), ids=lambda v: str(v))
def test_every_entry_point_resolves_under_its_new_module(group, name, target):
    module_name, _, attr = target.partition(":")
    assert module_name not in MOVED, f"{group} {name} still names the old module {module_name}"
    assert callable(getattr(importlib.import_module(module_name), attr))


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_an_old_module_name_imports_the_same_module(old, new):
    moved = importlib.import_module(old)
    assert moved is importlib.import_module(new)
    assert moved.__name__ == new and moved.__spec__.name == new
    assert not (PACKAGE / (old.split(".", 1)[1] + ".py")).exists()  # one file per module


def test_old_from_imports_and_monkeypatches_reach_the_new_module(monkeypatch):
    from spacy_crf import model as old_model
    from spacy_crf.ml import tagger_model

    assert old_model is tagger_model
    monkeypatch.setattr("spacy_crf.model.TRANSITION_INIT_SCALE", 0.5)
    assert tagger_model.TRANSITION_INIT_SCALE == 0.5
