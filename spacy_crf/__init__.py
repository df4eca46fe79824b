"""spacy-crf: linear-chain CRF sequence labelling for spaCy.

Importing the package runs nothing: it registers nothing and imports
neither torch nor spaCy. spaCy finds the factories (``crf_tagger``,
``crf_ner``, ``crf_segmenter``, ``span_ner``, ``crf_merge_words``), the
``spacy_crf.CRFTagger.v1`` and ``spacy_crf.SpanPointer.v1`` architectures,
the optimizers, scorers, corpus readers, callbacks and the timed logger
through the package's entry points, and imports each module when a config
first names it. Without an installed package, import the modules themselves
(``spacy_crf.pipeline.factories``, ``spacy_crf.corpora``, ``spacy_crf.training.loggers``, ...).
Nor does building a pipe change anything process-wide: the speed-up that
does is opt-in (:func:`enable_speed_ups`). The one guard that is not (a
fork hook that keeps forked workers from hanging in torch) is registered
by a model's first forward pass.
"""

__version__ = "0.1.0"


def enable_speed_ups() -> None:
    """Change two things in this process that make ``nlp.pipe(n_process > 1)``
    faster (1.7 times as fast on 2 cores, docs/results.md); calling it again
    changes nothing. A pipeline config opts in with the callback
    ``spacy_crf.speed_ups.v1`` in ``[nlp.after_pipeline_creation]``.

    - srsly's msgpack hook registries read the installed packages' entry
      points once per process, not at every ``Doc.to_bytes`` and
      ``Doc.from_bytes`` (:func:`spacy_crf._compat.speed_up_msgpack_hooks`;
      ``restore_msgpack_hooks`` undoes it, for a benchmark);
    - forked children run torch on one thread: libgomp's pool does not
      survive ``fork()``, and a child of a process that ran a parallel torch
      op hangs on its first one (:func:`spacy_crf.util.install_fork_hook`;
      a fork hook cannot be removed). Also registered, whether or not a
      program opts in, by the first forward pass of a spacy-crf model: it
      is a guard against that hang, not a speed-up.
    """
    from ._compat import speed_up_msgpack_hooks
    from .util import install_fork_hook

    speed_up_msgpack_hooks()
    install_fork_hook()
