"""Small helpers: :func:`check_number` (numeric options),
:func:`batch_by_length`, :func:`run_offsets`, :func:`joined_rows` and :func:`flat_rows`. The doc keys, file writing and hardware record that
lived here have their own modules (:mod:`.doc_keys`, :mod:`.files`,
:mod:`.hardware`); their names are re-exported for old imports.
"""

from typing import Any, List, Optional, Sequence

import numpy

from .doc_keys import (  # noqa: F401 (re-exported)
    DEFAULT_SPANS_KEY,
    NO_GOLD_WORDS,
    SOURCE_KEY,
    doc_source,
    has_gold_words,
    quote_text,
)
from .files import (  # noqa: F401 (re-exported)
    OutputPathError,
    PathLike,
    atomic_dir,
    atomic_path,
    check_output_dir,
    check_output_paths,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)
from .hardware import hardware  # noqa: F401 (re-exported)

# --- numeric options ------------------------------------------------------------------------------------------------


def check_number(
    name: str,
    value: Any,
    *,
    minimum: Optional[float] = None,
    maximum: Optional[float] = None,
    max_open: bool = False,
    hint: str = "",
) -> None:
    """Raise ``ValueError`` naming the option ``name`` unless ``value`` is a
    number in ``[minimum, maximum]`` (``maximum`` excluded with ``max_open``;
    NaN is never in range). ``hint`` says what a special value means."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if ok and minimum is not None:
        ok = value >= minimum
    if ok and maximum is not None:
        ok = value < maximum if max_open else value <= maximum
    if not ok:
        bounds = []
        if minimum is not None:
            bounds.append(f">= {minimum:g}")
        if maximum is not None:
            bounds.append(f"{'<' if max_open else '<='} {maximum:g}")
        raise ValueError(
            f"{name} must be {' and '.join(bounds) or 'a number'}, got {value!r}" + (f" ({hint})" if hint else "")
        )


def batch_by_length(lengths: Sequence[int], max_items: int) -> List[List[int]]:
    """Indices of docs grouped by length (shortest first) so that a group padded to
    its longest doc has at most ``max_items`` tokens; one group when ``max_items`` is 0.
    A doc longer than ``max_items`` is a group of its own.

    The grouping of ``spacy_transformers.util.batch_by_length``, which is not
    imported here: that module loads ``transformers`` on import, a cost every
    pipeline with a ``crf_tagger`` would pay at start-up, transformer or not."""
    if not max_items:
        return [list(range(len(lengths)))] if len(lengths) else []
    batches: List[List[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if batches and lengths[i] * (len(batches[-1]) + 1) <= max_items:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def run_offsets(lengths: numpy.ndarray) -> numpy.ndarray:
    """For runs of ``lengths[k]`` items laid end to end, each item's position
    within its run: ``[0, 1, 2, 0, 1]`` for lengths ``[3, 2]`` (an empty run
    contributes nothing). ``lengths``: ``[n_runs]`` ints; the result:
    ``[lengths.sum()]`` int64."""
    lengths = numpy.asarray(lengths, dtype=numpy.int64)
    return numpy.arange(int(lengths.sum()), dtype=numpy.int64) - numpy.repeat(numpy.cumsum(lengths) - lengths, lengths)


def joined_rows(arrays: Sequence[Any]) -> Optional[numpy.ndarray]:
    """The rows of ``arrays`` as one read-only 2-d array without copying,
    where they are consecutive row blocks of one buffer (what
    ``ops.unflatten`` returns: views of one array); None when they are
    anything else, and a caller must copy them together (``ops.flatten``)."""
    blocks = [a for a in arrays if isinstance(a, numpy.ndarray) and len(a)]
    if not blocks or len(blocks) != sum(1 for a in arrays if len(a)):
        return None
    first = blocks[0]
    if first.base is None or first.ndim != 2:
        return None
    owner, width = first.base, first.shape[1]
    if first.strides != (width * first.itemsize, first.itemsize):
        return None
    address = first.__array_interface__["data"][0]
    for a in blocks:
        same = a.base is owner and a.dtype == first.dtype and a.ndim == 2 and a.strides == first.strides
        if not same or a.shape[1] != width or a.__array_interface__["data"][0] != address:
            return None
        address += a.nbytes
    total = sum(len(a) for a in blocks)
    # one buffer, the blocks back to back in it: their span is inside the buffer
    return numpy.lib.stride_tricks.as_strided(first, shape=(total, width), writeable=False)


def flat_rows(ops: Any, arrays: Sequence[Any]) -> Any:
    """``ops.flatten(arrays, pad=0)``, without the copy where the arrays are
    already consecutive row blocks of one array (:func:`joined_rows`)."""
    joined = joined_rows(arrays)
    return joined if joined is not None else ops.flatten(arrays, pad=0)
