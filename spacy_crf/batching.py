"""Length-sorted batching for inference: :func:`pipe_sorted`.

``nlp.pipe`` cuts its input into batches in input order, and a transformer
pads each batch (spacy-transformers: each length-sorted sub-batch of one
batch) to its longest span. In a corpus of mixed lengths a batch mixes
short and long texts, and the encoder runs over the padding too.
:func:`pipe_sorted` reads ``buffer`` batches of texts at a time, passes
them to *one* ``nlp.pipe`` call sorted by length (so that each batch holds
texts of similar length) and gives the docs back in input order: the same
docs as ``nlp.pipe`` on the same texts, up to the float rounding of an
encoder run on other batch shapes. It works with ``n_process > 1`` (one
``nlp.pipe`` call for the whole stream, so the worker processes start once),
with ``as_tuples``, and with an error handler that leaves docs out (those
are left out here too).
"""

from itertools import islice
from typing import Any, Iterable, Iterator, List, Tuple

#: Batches per sorted buffer unless told otherwise (the default of ``spacy crf
#: speed`` and ``spacy crf annotate``: see docs/results.md for the gain).
DEFAULT_SORT_BUFFER = 8


def sorted_buffers(items: Iterable[Any], size: int, length) -> Iterator[Tuple[int, List[Tuple[int, Any]]]]:
    """Buffers of up to ``size`` items, each as ``(number of items,
    [(position in the buffer, item), ...] sorted by length(item))``. The
    sort is stable, so items of equal length keep their order."""
    stream = iter(items)
    while True:
        buffer = list(islice(stream, size))
        if not buffer:
            return
        order = sorted(range(len(buffer)), key=lambda i: length(buffer[i]))
        yield len(buffer), [(i, buffer[i]) for i in order]


def pipe_sorted(
    nlp,
    texts: Iterable[Any],
    *,
    batch_size: int = 64,
    buffer: int = DEFAULT_SORT_BUFFER,
    n_process: int = 1,
    as_tuples: bool = False,
    **pipe_kwargs: Any,
) -> Iterator[Any]:
    """``nlp.pipe(texts, batch_size=..., n_process=..., as_tuples=...)`` with
    the texts sorted by length (characters) within each ``buffer`` batches,
    yielding the docs (or ``(doc, context)`` pairs) in input order.
    ``buffer=1`` sorts within each batch only, ``buffer=0`` not at all (plain
    ``nlp.pipe``). Up to ``buffer * batch_size`` texts and docs are held in
    memory at a time. Other keyword arguments go to ``nlp.pipe``."""
    if not isinstance(buffer, int) or isinstance(buffer, bool) or buffer < 0:
        raise ValueError(f"buffer must be an integer >= 0 (0: no sorting), got {buffer!r}")
    if not buffer:
        yield from nlp.pipe(texts, batch_size=batch_size, n_process=n_process, as_tuples=as_tuples, **pipe_kwargs)
        return

    def length(item: Any) -> int:
        return len(item[0] if as_tuples else item)

    def reordered() -> Iterator[Tuple[Any, Tuple[int, int, int, Any]]]:
        # each text travels with (its buffer's number and size, its position, its context)
        for number, (size, entries) in enumerate(sorted_buffers(texts, buffer * batch_size, length)):
            for position, item in entries:
                text, context = item if as_tuples else (item, None)
                yield text, (number, size, position, context)

    # A buffer is given back once all its docs are in, or, when an error
    # handler left some out (``nlp.set_error_handler``), once the next
    # buffer's first doc arrives: without the ones it left out, as nlp.pipe.
    held: List[Any] = []
    done, current = 0, -1
    for doc, (number, size, position, context) in nlp.pipe(
        reordered(), batch_size=batch_size, n_process=n_process, as_tuples=True, **pipe_kwargs
    ):
        if number != current:
            yield from (item for item in held if item is not None)
            held, done, current = [None] * size, 0, number
        held[position] = (doc, context) if as_tuples else doc
        done += 1
        if done == size:
            yield from held
            held = []
    yield from (item for item in held if item is not None)
