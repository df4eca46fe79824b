"""Pipeline components: the CRF tagger pipe (:mod:`.crf_tagger`), the span
NER pipe (:mod:`.span_ner`), the word merge (:mod:`.merge_words`), their
factories (:mod:`.factories`) and scorers (:mod:`.scorers`), and what the
pipes share: gold tags (:mod:`.gold_tags`), forced tags
(:mod:`.forced_tags`), load-time checks (:mod:`.load_checks`), the guarded
update (:mod:`.guarded_update`), the lexicon prior (:mod:`.lexicon`) and user
dictionaries (:mod:`.user_dict`, :mod:`.user_dict_decoding`)."""
