"""Softmax baselines: training data for spaCy's own ``tagger`` on BMES tags.

Project code: the reader is registered when ``spacy train`` runs with
``--code scripts/baselines.py`` (see ``scripts/train.py --code``).

The CRF segmenter (``crf_tagger``, scheme ``bmes``) learns from reference docs
whose tokens are the gold words. spaCy's ``tagger`` needs a reference doc with
the *same* tokens as the predicted doc (characters) and one ``tag_`` per token.
:class:`BMESTagCorpus` reads the same ``.spacy`` files as
``spacy_crf.CharCorpus.v1`` and turns each word-tokenized reference doc into
a character-tokenized doc tagged ``B``/``M``/``E``/``S`` (whitespace tokens:
``S``), so both models train on exactly the same text and words.

:func:`words_from_tags` turns predicted tags back into words (the way a
softmax tagger is decoded: greedily, ``B``/``S`` start a word, any tag after
an ``E``/``S`` starts one too), so the baseline is scored with the same word
P/R/F and OOV recall as the CRF. While training, the tagger is scored the same
way (``spacy_crf.bmes_tag_words_scorer.v1`` in configs/cws_softmax.cfg), so its
dev curve and ``model-best`` are on word F like the CRF segmenter's.
"""

from pathlib import Path
from typing import Callable, Iterable, Iterator, List

import spacy
from spacy.language import Language
from spacy.tokens import Doc, Span, SpanGroup
from spacy.training import Example

from spacy_crf.corpora import CharCorpus
from spacy_crf.ml.schemes import position_tag
from spacy_crf.pipeline.scorers import word_offsets_from_tags


def bmes_tags(predicted: Doc, reference: Doc) -> List[str]:
    """One BMES tag per token of ``predicted`` (characters) from the words
    (tokens) of ``reference``; both docs must have the same text."""
    if predicted.text != reference.text:
        raise ValueError("predicted and reference docs have different texts")
    starts = {t.idx for t in reference}
    ends = {t.idx + len(t) for t in reference}
    tags = []
    for token in predicted:
        if token.is_space:
            tags.append("S")
            continue
        tags.append(position_tag("bmes", token.idx in starts, token.idx + len(token) in ends))
    return tags


def char_tag_example(predicted: Doc, reference: Doc) -> Example:
    """An Example whose reference has the predicted doc's tokens and BMES tags."""
    tags = bmes_tags(predicted, reference)
    ref = Doc(
        predicted.vocab,
        words=[t.text for t in predicted],
        spaces=[bool(t.whitespace_) for t in predicted],
        tags=tags,
    )
    return Example(predicted, ref)


class BMESTagCorpus(CharCorpus):
    """:class:`~spacy_crf.corpora.CharCorpus` whose examples carry BMES tags
    on character tokens (for spaCy's ``tagger``)."""

    def make_examples(self, nlp: Language, reference_docs: Iterable[Doc]) -> Iterator[Example]:
        for eg in super().make_examples(nlp, reference_docs):
            yield char_tag_example(eg.predicted, eg.reference)


@spacy.registry.readers("spacy_crf.BMESTagCorpus.v1")
def create_bmes_tag_corpus_reader(
    path: Path, max_length: int = 0, limit: int = 0
) -> Callable[[Language], Iterable[Example]]:
    """Reader of CWS ``.spacy`` files (word-tokenized references) for a
    character tagger: reference docs are characters tagged B/M/E/S.

    max_length: split reference docs longer than this many characters (0: no limit).
    limit: read at most this many docs (0: all).
    """
    if path is None:
        raise ValueError("spacy_crf.BMESTagCorpus.v1 needs a path")
    return BMESTagCorpus(path, max_length=max_length, limit=limit)


def words_from_tags(doc: Doc, spans_key: str = "words") -> Doc:
    """Write the words encoded by the tokens' BMES ``tag_`` to ``doc.spans[spans_key]``."""
    tags = [t.tag_ for t in doc]
    spans = [Span(doc, s, e) for s, e in word_offsets_from_tags(tags, doc)]
    doc.spans[spans_key] = SpanGroup(doc, name=spans_key, spans=spans)
    return doc
