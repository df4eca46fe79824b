"""The modules' names before the package was split into rooms
(``ml/``, ``pipeline/``, ``training/``): ``import spacy_crf.pipe`` (or
``from spacy_crf import model``) still works and gives the module under its
new name, the same module object, so user code and monkeypatches written
against the old names keep working."""

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "spacy_crf.crf": "spacy_crf.ml.crf",
    "spacy_crf.model": "spacy_crf.ml.tagger_model",
    "spacy_crf.span": "spacy_crf.ml.span_model",
    "spacy_crf.schemes": "spacy_crf.ml.schemes",
    "spacy_crf.transitions": "spacy_crf.ml.transitions",
    "spacy_crf.pipe": "spacy_crf.pipeline.crf_tagger",
    "spacy_crf.span_pipe": "spacy_crf.pipeline.span_ner",
    "spacy_crf.merge": "spacy_crf.pipeline.merge_words",
    "spacy_crf.factories": "spacy_crf.pipeline.factories",
    "spacy_crf.checks": "spacy_crf.pipeline.load_checks",
    "spacy_crf.guarded": "spacy_crf.pipeline.guarded_update",
    "spacy_crf.forced": "spacy_crf.pipeline.forced_tags",
    "spacy_crf.gold": "spacy_crf.pipeline.gold_tags",
    "spacy_crf.lexicon": "spacy_crf.pipeline.lexicon",
    "spacy_crf.user_dict": "spacy_crf.pipeline.user_dict",
    "spacy_crf.user_dict_decoding": "spacy_crf.pipeline.user_dict_decoding",
    "spacy_crf.scorers": "spacy_crf.pipeline.scorers",
    "spacy_crf.optimizers": "spacy_crf.training.optimizers",
    "spacy_crf.autocast": "spacy_crf.training.autocast",
    "spacy_crf.sparse_embeddings": "spacy_crf.training.sparse_embeddings",
    "spacy_crf.freeze": "spacy_crf.training.freeze",
    "spacy_crf.loggers": "spacy_crf.training.loggers",
    "spacy_crf.quantize": "spacy_crf.encoders.quantize",
}


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and loads it as the module under its new name."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module(MOVED[spec.name])
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        # the import system has just set __spec__ to the old name's: give the module its own back
        module.__spec__ = module.__spec__.loader_state


def install() -> None:
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
