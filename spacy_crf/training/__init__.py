"""Training helpers named in configs: optimizers with learning-rate groups
and lazy row updates (:mod:`.optimizers`), the ``[initialize]`` callbacks
(:mod:`.autocast`, :mod:`.sparse_embeddings`, :mod:`.freeze`) and the timed
console logger (:mod:`.loggers`). Corpus readers live in
:mod:`spacy_crf.corpora`."""
