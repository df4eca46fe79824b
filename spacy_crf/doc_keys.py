"""Keys the pipes, scorers and corpus readers share in ``Doc`` objects, and
how a doc is named in an error message (its ``file:line``, or a quote).

Nothing here imports torch or registers anything: every module may import it.
"""

from spacy.tokens import Doc

#: Span group that receives the predicted words of a segmenter.
DEFAULT_SPANS_KEY = "words"
#: Span group that receives the spans of ``span_ner`` (spaCy's ``spancat`` default).
DEFAULT_SPAN_KEY = "sc"
#: ``doc.user_data`` flag set by ``spacy_crf.JointCorpus.v1`` on a reference
#: doc whose tokens are not gold words (an NER doc, tokenized into characters):
#: the segmenter learns nothing from it and word scores skip it.
NO_GOLD_WORDS = "spacy_crf.no_gold_words"
#: ``doc.user_data`` key with the ``file:line`` a corpus doc was read from. It
#: is used in error messages and is not written to ``.spacy`` files.
SOURCE_KEY = "spacy_crf.source"


def has_gold_words(doc: Doc) -> bool:
    """Whether the tokens of this reference doc are its gold words."""
    return not doc.user_data.get(NO_GOLD_WORDS, False)


def quote_text(doc: Doc, width: int = 30) -> str:
    """``repr`` of the doc's text, cut after ``width`` characters."""
    text = doc.text if len(doc.text) <= width else doc.text[:width] + "..."
    return repr(text)


def doc_source(doc: Doc) -> str:
    """``file:line`` a doc was read from, or a short quote of its text."""
    source = doc.user_data.get(SOURCE_KEY)
    if source:
        return str(source)
    return f"doc {quote_text(doc)}"
