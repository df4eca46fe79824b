"""A doc's text from its token arrays.

``Doc.text`` joins ``token.text_with_ws`` over the tokens, building a
``Token`` object per token: on character-tokenized Chinese that is one object
per character, read again by every component that needs the text. The text
is each token's ``ORTH`` string followed by a space where ``SPACY`` is set,
which is exactly what ``Token.text_with_ws`` returns; here the strings are
looked up once per distinct character and joined without token objects.
"""

import numpy
from spacy.attrs import ORTH, SPACY
from spacy.tokens import Doc


def doc_text(doc: Doc) -> str:
    """``doc.text``, the same string."""
    if not len(doc):
        return ""
    rows = doc.to_array([ORTH, SPACY]).reshape((len(doc), 2))
    unique, inverse = numpy.unique(rows[:, 0], return_inverse=True)
    strings = doc.vocab.strings
    pieces = numpy.array([strings[orth] for orth in unique.tolist()], dtype=object)[inverse.reshape(-1)]
    spaced = rows[:, 1] != 0
    pieces[spaced] += " "
    return "".join(pieces.tolist())
