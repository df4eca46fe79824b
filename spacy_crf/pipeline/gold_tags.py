"""Gold tags over the predicted tokens, read through spaCy's alignment.

``Example.alignment`` maps predicted tokens to reference tokens; the texts
may differ in whitespace (and case), never otherwise. A token gets a gold tag
only when it can be read unambiguously; everything else is unknown (-1),
which the CRF marginalises over. Whitespace tokens are unknown in every span
scheme: decoding puts them outside every word and entity, and a reference
word or entity may contain whitespace that the tagger cannot reproduce.
"""

import warnings
from typing import Dict, List, Optional, Sequence, Tuple

import numpy
from spacy.tokens import Doc
from spacy.training import Example

from ..doc_keys import has_gold_words, quote_text
from ..ml.schemes import from_biluo, make_tags, position_tag

UNKNOWN = -1


def gold_tag_ids(eg: Example, scheme: str, tags: Sequence[str], labels: Sequence[str], component: str) -> numpy.ndarray:
    """Gold tag ids over the predicted tokens of ``eg``; -1 where the gold is
    unknown. ``component`` names the tagger in warnings and errors."""
    try:
        _ = eg.alignment  # built on first use; raises when the texts differ
    except ValueError as e:
        raise ValueError(
            f"[{component}] the predicted and reference texts of doc {quote_text(eg.reference, 60)} "
            f"differ beyond whitespace and case, so their tokens cannot be aligned: {e}"
        ) from None
    index = {tag: i for i, tag in enumerate(tags)}
    if scheme == "bmes":
        return bmes_gold(eg, index)
    if scheme == "tag":
        gold = eg.get_aligned("TAG", as_string=True)
        return numpy.array([index.get(t, UNKNOWN) if t else UNKNOWN for t in gold], dtype="int64")
    x_ents, biluo = eg.get_aligned_ents_and_ner()
    if len(x_ents) < len(eg.reference.ents):
        aligned = {(e.start_char, e.end_char) for e in x_ents}
        lost = [e for e in eg.reference.ents if (e.start_char, e.end_char) not in aligned]
        one = len(lost) == 1
        warnings.warn(
            f"[{component}] {len(lost)} gold entit{'y' if one else 'ies'} of doc "
            f"{quote_text(eg.reference, 60)} {'does' if one else 'do'} not align with its "
            f"tokens and {'is' if one else 'are'} treated as unknown in training: "
            + ", ".join(f"{e.text!r} ({e.label_}, chars {e.start_char}-{e.end_char})" for e in lost),
            stacklevel=2,
        )
    ids = numpy.full(len(biluo), UNKNOWN, dtype="int64")
    for i, tag in enumerate(biluo):
        if tag is None or tag == "-":
            continue
        tag = from_biluo(tag, scheme)
        if tag in index:
            ids[i] = index[tag]
        else:
            warnings.warn(
                f"[{component}] doc {quote_text(eg.reference, 60)}: gold label of tag "
                f"{tag!r} is not among the labels {labels}; treated as unknown.",
                stacklevel=2,
            )
    # Whitespace is outside every entity when decoding; its gold is left
    # to the CRF (an entity of the reference may contain whitespace).
    for token in eg.predicted:
        if token.is_space:
            ids[token.i] = UNKNOWN
    return ids


def bmes_gold(eg: Example, index: Optional[Dict[str, int]] = None) -> numpy.ndarray:
    """BMES tag ids of the predicted tokens from the reference tokens (words).

    A predicted token gets a tag when spaCy's alignment (``eg.alignment``)
    maps it into exactly one reference word; its position inside that word
    gives B, M, E or S (:func:`~spacy_crf.ml.schemes.position_tag`). Positions
    are counted in non-whitespace characters, which is how the alignment
    matches the two texts (they may differ in whitespace): a predicted doc
    ``"张三 去上海"`` against the words ``张三|去|上海`` gives ``B E S B E``.
    Whitespace tokens and tokens spanning several words are unknown (-1),
    which the CRF marginalises over; so is every token of a reference marked
    as having no gold words (an NER doc in joint training).

    index: tag -> id; defaults to the ``bmes`` inventory of :func:`make_tags`.
    """
    if index is None:
        index = {tag: i for i, tag in enumerate(make_tags("bmes", ()))}
    ids = numpy.full(len(eg.predicted), UNKNOWN, dtype="int64")
    if not has_gold_words(eg.reference):
        return ids
    x2y = eg.alignment.x2y
    lengths, flat = x2y.lengths, x2y.data
    offsets = numpy.concatenate([[0], numpy.cumsum(lengths)[:-1]]) if len(lengths) else lengths
    ref = eg.reference
    x_start, x_end = _nonspace_offsets(eg.predicted)
    y_start, y_end = _nonspace_offsets(ref)
    for i, token in enumerate(eg.predicted):
        if lengths[i] != 1 or token.is_space:
            continue
        j = int(flat[offsets[i]])
        if ref[j].is_space:
            continue
        start, end, word_start, word_end = x_start[i], x_end[i], y_start[j], y_end[j]
        if start == end or not word_start <= start < end <= word_end:
            continue
        ids[i] = index[position_tag("bmes", start == word_start, end == word_end)]
    return ids


def _nonspace_offsets(doc: Doc) -> Tuple[List[int], List[int]]:
    """Each token's [start, end) in the doc's text with all whitespace removed."""
    starts, ends = [], []
    pos = 0
    for token in doc:
        text = token.text
        starts.append(pos)
        pos += len(text) if not any(c.isspace() for c in text) else sum(not c.isspace() for c in text)
        ends.append(pos)
    return starts, ends
