"""spacy-crf: linear-chain CRF sequence labelling for spaCy.

Importing the package runs nothing: it registers nothing and imports
neither torch nor spaCy. spaCy finds the factories (``crf_tagger``,
``crf_ner``, ``crf_segmenter``, ``span_ner``, ``crf_merge_words``), the
``spacy_crf.CRFTagger.v1`` and ``spacy_crf.SpanPointer.v1`` architectures,
the optimizers, scorers, corpus readers, callbacks and the timed logger
through the package's entry points, and imports each module when a config
first names it. Without an installed package, import the modules themselves
(``spacy_crf.pipeline.factories``, ``spacy_crf.corpora``, ``spacy_crf.training.loggers``, ...).
"""

__version__ = "0.1.0"
