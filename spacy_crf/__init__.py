"""spacy-crf: linear-chain CRF sequence labelling for spaCy.

Importing the package registers the ``crf_tagger`` and ``crf_merge_words``
factories, the ``spacy_crf.CRFTagger.v1`` architecture, the grouped
optimizers and the scorers. spaCy also finds them through entry points, so
an explicit import is only needed when the package is not installed.
"""
__version__ = "0.1.0"


def _register() -> None:
    # Imported for their registry side effects. Modules that a helper is still
    # writing may be missing in a partial checkout; everything else must import.
    from . import optimizers, scorers, model, pipe  # noqa: F401
    from . import corpora, merge  # noqa: F401


_register()
