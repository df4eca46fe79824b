"""spacy-crf: linear-chain CRF sequence labelling for spaCy.

Importing the package registers nothing and imports neither torch nor
spaCy; its one effect is an import hook that maps the modules' names from
before the ``ml/``, ``pipeline/``, ``training/`` split to their new homes
(:mod:`spacy_crf._moved`). spaCy finds the factories (``crf_tagger``,
``crf_ner``, ``crf_segmenter``, ``span_ner``, ``crf_merge_words``), the
``spacy_crf.CRFTagger.v1`` and ``spacy_crf.SpanPointer.v1`` architectures,
the optimizers, scorers, corpus readers, callbacks and the timed logger
through the package's entry points, and imports each module when a config
first names it. Without an installed package, import the modules themselves
(``spacy_crf.pipeline.factories``, ``spacy_crf.corpora``, ``spacy_crf.training.loggers``, ...).
"""

__version__ = "0.1.0"

from ._moved import install as _install_old_names

_install_old_names()
