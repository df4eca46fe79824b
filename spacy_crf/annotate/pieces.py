"""Very long records: annotated in pieces, written as one record.

A record longer than ``max_chars`` characters (``--max-chars``) is cut into
pieces of at most that many characters by the corpus converter's
:func:`~spacy_crf.corpora.split.split_long` on the pipeline's own tokens:
after the last sentence end (``。！？；…!?;``, with closing quotes) that fits,
else after the last clause punctuation (``，、：``), else at the last token
boundary that is not inside a run of digits or Latin letters, else at the last
token boundary. When a single token is longer than ``max_chars`` (a very long
Latin run with a whitespace tokenizer), the record is cut every ``max_chars``
characters instead ("inside_token"). The
pieces go through ``nlp.pipe`` as docs of their own, so memory is bounded by
the batch and ``max_chars`` (one 430,000-character record took 5.8 GB whole);
the model sees no context across a cut, which is why cuts prefer sentence
ends. The record keeps the original text, and the pieces' words and entities
are shifted back to offsets into it; an entity can only end at a cut, never
span one. The summary counts the cuts by kind.
"""

from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

#: ``--max-chars``: longer records are annotated in pieces of at most this many characters.
DEFAULT_MAX_CHARS = 2000


def piece_bounds(nlp, text: str, max_chars: int, cuts: Optional[Counter] = None) -> List[Tuple[int, int]]:
    """``[(start, end), ...]`` character ranges that cover ``text`` in order,
    each at most ``max_chars`` long (and never over ``nlp.max_length``, which
    ``nlp.pipe`` refuses); ``cuts`` counts the cuts by kind."""
    max_chars = min(max_chars, nlp.max_length)
    if len(text) <= max_chars:
        return [(0, len(text))]
    from ..corpora.split import SplitError, split_long

    # the tokenizer alone: nlp.make_doc would refuse a text over nlp.max_length
    doc = nlp.tokenizer(text)
    found: Counter = Counter()
    try:
        pieces = [len(piece.text) for piece in split_long(doc, max_chars, stats=found)]
    except SplitError:  # a token longer than max_chars: cut every max_chars characters
        pieces = [min(max_chars, len(text) - start) for start in range(0, len(text), max_chars)]
        found = Counter({"inside_token": len(pieces) - 1})
    if cuts is not None:
        cuts.update(found)
    bounds, start = [], 0
    for length in pieces:
        bounds.append((start, start + length))
        start += length
    assert start == len(text)  # split_long's pieces concatenate to the text
    return bounds


def join_annotations(parts: List[Tuple[int, Dict[str, Any]]]) -> Dict[str, Any]:
    """One record's words and entities from its pieces' ``(offset, annotations)``."""
    words: List[List[int]] = []
    ents: List[Dict[str, Any]] = []
    for offset, ann in parts:
        words.extend([s + offset, e + offset] for s, e in ann["words"])
        ents.extend({**ent, "start": ent["start"] + offset, "end": ent["end"] + offset} for ent in ann["ents"])
    return {"words": words, "ents": ents}


def join_docs(docs: List[Any], offsets: List[int]):
    """One doc from the pieces' docs: tokens, entities and span groups by
    ``Doc.from_docs``; the entity confidences, kept by character offsets in
    ``user_data``, shifted by hand (``from_docs`` drops such keys)."""
    from spacy.tokens import Doc

    from .records import CONFIDENCE_KEY

    # exclude: a keyword of spaCy >= 3.3 that its type stub lacks
    doc = Doc.from_docs(docs, ensure_whitespace=False, exclude=["user_data", "tensor"])  # type: ignore[call-arg]
    if any(CONFIDENCE_KEY in piece.user_data for piece in docs):
        doc.user_data[CONFIDENCE_KEY] = [
            [s + offset, e + offset, label, conf]
            for piece, offset in zip(docs, offsets)
            for s, e, label, conf in piece.user_data.get(CONFIDENCE_KEY, [])
        ]
    return doc
