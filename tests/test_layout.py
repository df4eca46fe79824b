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


def test_both_trainable_heads_share_one_base_and_every_scorer_lives_in_scorers():
    from spacy.util import registry

    from spacy_crf.pipeline import scorers
    from spacy_crf.pipeline.crf_tagger import CRFTagger
    from spacy_crf.pipeline.span_ner import SpanNER
    from spacy_crf.pipeline.trainable_head import TrainableHead

    assert issubclass(CRFTagger, TrainableHead) and issubclass(SpanNER, TrainableHead)
    for method in ("to_disk", "to_bytes", "from_disk", "from_bytes", "update", "labels"):
        assert method not in vars(CRFTagger) and method not in vars(SpanNER), method
    for name, target in (entry[1:] for entry in _entry_points() if entry[0] == "spacy_scorers"):
        assert target.startswith("spacy_crf.pipeline.scorers:"), (name, target)
        assert registry.scorers.get(name).__module__ == scorers.__name__
