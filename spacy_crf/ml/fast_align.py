"""spacy-transformers' wordpiece alignment and piece strings, in numpy.

Before the encoder runs, spacy-transformers' ``TransformerModel`` maps every
doc token to its wordpieces by the tokenizer's offset mapping
(``get_alignment_via_offset_mapping``: a ``Token`` object, a dictionary
entry and a set per token) and spells out every piece
(``convert_ids_to_tokens``: a Python call per piece). On Chinese text, a
token and a piece per character, the two show in the shipped pipeline's
profile (docs/results.md, "Where inference time goes").

:func:`align_by_offsets` and :func:`piece_strings` compute the same results
with array operations. :func:`install` makes spacy-transformers use them: it
replaces the two functions that ``TransformerModel``'s forward pass looks
up as globals of its module (listed in :mod:`spacy_crf._compat`). Their
results are equal to spacy-transformers' own for every input, so other
spacy-transformers pipelines in the process see no difference. The
architectures of this package call it when they are built.
"""

import sys
import weakref
from typing import Any, Dict, List, Sequence, cast

import numpy
from spacy.attrs import IDX, LENGTH
from spacy.tokens import Span
from thinc.types import Ints1d, Ragged

from .._compat import replace_transformer_helpers, stock_transformer_helper

_STRING_TABLES: "weakref.WeakKeyDictionary[Any, numpy.ndarray]" = weakref.WeakKeyDictionary()


def align_by_offsets(spans: Sequence[Span], offset_mapping) -> Ragged:
    """For each token of the spans' docs (each doc once, in the order the
    spans first name it), the indices of its wordpieces in the flattened
    ``offset_mapping`` (batch, pieces, 2): the pieces whose characters
    overlap the token's characters or the one character after it, from every
    span that holds the token; ``get_alignment_via_offset_mapping`` of
    spacy-transformers, with the same result."""
    if len(spans) != len(offset_mapping):
        raise ValueError("Cannot align batches of different sizes.")
    doc_base: Dict[int, int] = {}
    layouts: Dict[int, numpy.ndarray] = {}
    n_positions = 0
    for span in spans:
        doc = span.doc
        if id(doc) not in doc_base:
            doc_base[id(doc)] = n_positions
            layouts[id(doc)] = doc.to_array([IDX, LENGTH]).reshape((len(doc), 2)).astype(numpy.int64)
            n_positions += len(doc)
    positions: List[numpy.ndarray] = []
    pieces: List[numpy.ndarray] = []
    wp_start = 0
    for span, offsets in zip(spans, offset_mapping):
        offsets = numpy.asarray(offsets, dtype=numpy.int64).reshape((-1, 2))
        if len(span):
            layout = layouts[id(span.doc)][span.start : span.end]
            starts = layout[:, 0] - layout[0, 0]
            ends = starts + layout[:, 1]  # inclusive: the character after a token maps to it
            n_chars = int(ends[-1]) + 1  # len(span.text) + 1
            # each character: the last token that starts at or before it, if it reaches it
            chars = numpy.arange(n_chars)
            token_of = numpy.searchsorted(starts, chars, side="right") - 1
            token_of[chars > ends[token_of]] = -1
            # each piece's characters, as (piece, character) pairs
            lengths = numpy.maximum(offsets[:, 1] - offsets[:, 0], 0)
            piece = numpy.repeat(numpy.arange(len(offsets)), lengths)
            char = numpy.repeat(offsets[:, 0] - numpy.cumsum(lengths) + lengths, lengths) + numpy.arange(len(piece))
            inside = (char >= 0) & (char < n_chars)
            piece, token = piece[inside], token_of[char[inside]]
            keep = token >= 0
            positions.append(doc_base[id(span.doc)] + span.start + token[keep])
            pieces.append(wp_start + piece[keep])
        wp_start += offsets.shape[0]
    if positions:
        width = max(wp_start, 1)
        keys = numpy.unique(numpy.concatenate(positions) * width + numpy.concatenate(pieces))
        position, flat = numpy.divmod(keys, width)
        lengths = numpy.bincount(position, minlength=n_positions)
    else:
        flat, lengths = numpy.zeros((0,), dtype=numpy.int64), numpy.zeros((n_positions,), dtype=numpy.int64)
    return Ragged(cast(Ints1d, flat.astype("i")), cast(Ints1d, lengths.astype("i")))


def string_table(tokenizer) -> numpy.ndarray:
    """Every id's piece string of a fast tokenizer (added tokens included), as
    ``convert_ids_to_tokens`` gives them; cached per tokenizer and vocabulary size."""
    backend = tokenizer.backend_tokenizer
    # (get_vocab_size(with_added_tokens=True) builds the whole vocabulary on
    # every call, which costs more than the lookups it would save)
    size = max(backend.get_vocab_size(with_added_tokens=False), max(tokenizer.added_tokens_decoder, default=-1) + 1)
    table = _STRING_TABLES.get(tokenizer)
    if table is None or len(table) != size:
        table = numpy.empty(size, dtype=object)
        table[:] = [backend.id_to_token(i) for i in range(size)]
        _STRING_TABLES[tokenizer] = table
    return table


def piece_strings(tokenizer, input_ids) -> List[List[Any]]:
    """``[tokenizer.convert_ids_to_tokens(row) for row in input_ids]`` of a fast
    tokenizer (input_ids: (batch, pieces)), by table lookup."""
    array = numpy.asarray(input_ids)
    table = string_table(tokenizer)
    if array.size and (array.min() < 0 or array.max() >= len(table)):
        return [tokenizer.convert_ids_to_tokens(row) for row in array]
    return table[array].tolist()


def _stock_convert(tokenizer) -> bool:
    """Whether ``tokenizer`` spells its pieces as a stock fast tokenizer does."""
    from transformers import PreTrainedTokenizerFast

    return (
        isinstance(tokenizer, PreTrainedTokenizerFast)
        and type(tokenizer).convert_ids_to_tokens is PreTrainedTokenizerFast.convert_ids_to_tokens
        and "convert_ids_to_tokens" not in vars(tokenizer)
    )


def huggingface_tokenize(tokenizer, texts: List[str]):
    """spacy-transformers' ``huggingface_tokenize`` (the same call of the
    tokenizer, the same ``BatchEncoding``), with the piece strings from
    :func:`piece_strings` where the tokenizer is a stock fast one."""
    if not _stock_convert(tokenizer):
        return stock_transformer_helper("huggingface_tokenize")(tokenizer, texts)
    token_data = tokenizer(
        texts,
        add_special_tokens=True,
        return_attention_mask=True,
        return_offsets_mapping=True,
        return_tensors="np",
        return_token_type_ids=None,
        padding="longest",
    )
    token_data["input_texts"] = piece_strings(tokenizer, token_data["input_ids"])
    token_data["pad_token"] = tokenizer.pad_token
    return token_data


def install() -> None:
    """Make spacy-transformers' ``TransformerModel`` forward pass use
    :func:`align_by_offsets` and :func:`huggingface_tokenize`, and run its
    encoder at prediction over a bounded number of pieces per call
    (:mod:`.encoder_chunks`), if spacy-transformers is loaded (a model built
    without it has no transformer to speed up, and importing it has side
    effects). Idempotent."""
    if "spacy_transformers" not in sys.modules:
        return
    replace_transformer_helpers(align_by_offsets, huggingface_tokenize)
    from . import encoder_chunks

    encoder_chunks.install()
