"""Calibrated confidences: how far a CRF head's span confidences are from
their accuracy (:mod:`.measure`, :mod:`.diagram`), and the temperature that
brings them closer, fitted on dev docs (:mod:`.collect`,
:mod:`.temperature`, :mod:`.run`; ``spacy crf calibrate``). The temperature
itself is a setting of the pipe (:mod:`spacy_crf.pipeline.confidence`)."""
