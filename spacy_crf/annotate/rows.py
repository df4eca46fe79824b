"""One row of ``spacy crf annotate`` and its doc: the annotated row
(:func:`annotated_row`), and a record the pipeline refuses. During a run the
pipes leave out a doc whose user dictionary conflicts
(:func:`leave_out_conflicts`, in the worker processes too), and
:func:`annotate_alone` runs its record again alone in this process, where
the error is raised and becomes a "failed" row naming the doc and the
entries (:func:`spacy_crf.annotate.engines.annotate_rows`)."""

from collections import Counter
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional

from ..pipeline.user_dict import UserDictConflict
from .io import dumps
from .pieces import join_annotations, join_docs, piece_bounds
from .records import annotations, words_key


def _doc_bytes(doc) -> bytes:
    # The encoder's output (doc.tensor, trf_data) is not part of the annotation.
    for key in [k for k in doc.user_data if isinstance(k, tuple) and len(k) > 1 and k[1] == "trf_data"]:
        del doc.user_data[key]
    return doc.to_bytes(exclude=["tensor"])


def annotated_row(
    row: Dict[str, Any], doc, key: Optional[str], confidence: bool, fmt: str, cuts: Optional[Dict[str, int]]
) -> Dict[str, Any]:
    """``row`` with its annotations; ``doc``: the doc, or ``[(offset, doc), ...]``
    for a text annotated in pieces."""
    out = dict(row)
    out["ann"] = out["doc"] = None
    out["cuts"] = dumps(cuts) if cuts else None
    if row["kind"] != "doc":
        return out
    if fmt == "spacy":
        whole = join_docs([d for _, d in doc], [o for o, _ in doc]) if isinstance(doc, list) else doc
        out["doc"] = _doc_bytes(whole)
    elif isinstance(doc, list):
        out["ann"] = dumps(join_annotations([(o, annotations(d, key, confidence)) for o, d in doc]))
    else:
        out["ann"] = dumps(annotations(doc, key, confidence))
    return out


def leave_out_conflicts(name: str, proc: Any, docs: List[Any], err: Exception) -> None:
    """The pipes' error handler during a run: a doc whose user dictionary
    conflicts is left out of the stream (:func:`~spacy_crf.annotate.engines.annotate_rows` runs its
    record again alone); any other error is raised."""
    if not isinstance(err, UserDictConflict):
        raise err


@contextmanager
def handled_by(nlp, handler: Callable) -> Iterator[None]:
    """``nlp.set_error_handler(handler)`` for the block, then each pipe's own again."""
    before = [(pipe, pipe.get_error_handler()) for _, pipe in nlp.pipeline if hasattr(pipe, "set_error_handler")]
    default = nlp.default_error_handler
    nlp.set_error_handler(handler)
    try:
        yield
    finally:
        nlp.default_error_handler = default
        for pipe, old in before:
            pipe.set_error_handler(old)


def annotate_alone(nlp, row: Dict[str, Any], *, confidence: bool, fmt: str, max_chars: int) -> Dict[str, Any]:
    """``row`` annotated on its own (its pieces in one batch), in this
    process, the pipes raising their errors: a user dictionary's conflict
    makes it a "failed" row with the error; any other error is raised."""
    from spacy.util import raise_error

    cuts: Counter = Counter()
    bounds = piece_bounds(nlp, row["text"], max_chars, cuts) if row["kind"] == "doc" else [(0, 0)]
    try:
        with handled_by(nlp, raise_error):
            docs = list(nlp.pipe([row["text"][start:end] for start, end in bounds], batch_size=len(bounds)))
    except UserDictConflict as err:
        return {**row, "kind": "failed", "text": "", "error": str(err), "ann": None, "doc": None, "cuts": None}
    if len(bounds) == 1:
        return annotated_row(row, docs[0], words_key(nlp), confidence, fmt, None)
    pieces = [(start, doc) for (start, _), doc in zip(bounds, docs)]
    return annotated_row(row, pieces, words_key(nlp), confidence, fmt, dict(cuts))
