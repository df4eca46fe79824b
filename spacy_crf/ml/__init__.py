"""Model layers: the linear-chain CRF maths (:mod:`.crf`), tag schemes and
their transition masks (:mod:`.schemes`), the ``spacy_crf.CRFTagger.v1``
architecture (:mod:`.tagger_model`), the ``spacy_crf.SpanPointer.v1``
architecture (:mod:`.span_model`) and reading learned transitions
(:mod:`.transitions`). Nothing here knows about pipes or training loops."""
