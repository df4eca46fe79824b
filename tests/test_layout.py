"""The package's rooms (ml/, pipeline/, training/, ...): every entry point
resolves, and the heads share one base."""

import configparser
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _entry_points():
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg", encoding="utf-8")
    for group, text in parser["options.entry_points"].items():
        for line in filter(None, (line.strip() for line in text.splitlines())):
            name, _, target = (part.strip() for part in line.partition("="))
            yield group, name, target


@pytest.mark.parametrize("group,name,target", list(_entry_points()), ids=lambda v: str(v))
def test_every_entry_point_resolves(group, name, target):
    module_name, _, attr = target.partition(":")
    assert callable(getattr(importlib.import_module(module_name), attr)), f"{group} {name}: {target}"


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
