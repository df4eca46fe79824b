"""Engines: turn the ordered stream of input rows into annotated rows.

Both engines run the same code on the same batches (``shard_chunks``:
``batch_size`` rows of one shard; ``annotate_rows``: ``nlp.pipe`` then
``records.annotations``), so they give identical records:

* ``local``: ``nlp.pipe`` in this process, ``n_process`` worker processes
  (spaCy's own multiprocessing).
* ``ray``: Ray Data. Each pending shard is one block of a small dataset of
  paths; a read task per shard streams its rows in chunks (``read_rows``, so
  a bad record is reported with its file and line exactly as locally); an
  actor pool (``workers`` actors, each loading the pipeline once, with
  ``cpus_per_worker`` torch threads and optionally a GPU) annotates them with
  ``map_batches``. A Ray row is a packed chunk of ``batch_size`` rows of
  one shard (``sort_buffer`` batches of them when sorting by length),
  exactly the chunk the local engine gives ``nlp.pipe`` with
  ``n_process=1``, and a block is one chunk: the pool balances chunks, not
  shards, and results stream back chunk by chunk. The driver iterates the result with ``preserve_order`` and
  writes each shard itself (one output per input shard, counts checked,
  temporary name then rename). A shard that cannot be read (not UTF-8, gone)
  comes back as a "fatal" row in its place, so the driver commits the shards
  before it and fails with the local engine's message; a killed actor is
  restarted and its chunk retried. Reading the shards on the cluster keeps the
  driver from parsing everything, and one dataset for the whole run keeps the
  actors (and their loaded pipelines) alive from the first shard to the last.
"""

import gc
import multiprocessing
import os
import signal
import threading
from collections import Counter
from contextlib import contextmanager
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from ..batching import pipe_sorted
from .io import AnnotateError, read_rows
from .pieces import DEFAULT_MAX_CHARS, piece_bounds
from .records import add_confidence, words_key
from .rows import annotate_alone, annotated_row, handled_by, leave_out_conflicts

ROW_KEYS = ("shard", "line", "kind", "text", "meta", "error")


def set_threads(threads: Optional[int]) -> None:
    if threads:
        import torch

        torch.set_num_threads(max(1, int(threads)))


def load_pipeline(pipeline, confidence: bool = False, gpu: bool = False):
    """Load a pipeline (name, path or ``Language``) for annotation."""
    import spacy

    if gpu:
        spacy.prefer_gpu()
    nlp = pipeline
    if isinstance(pipeline, (str, os.PathLike)):
        try:
            nlp = spacy.load(os.fspath(pipeline))
        except Exception as err:  # truncated weights, a bad config...: one line naming the pipeline
            raise AnnotateError(f"pipeline {str(pipeline)!r} cannot be loaded: {err}") from err
        drop_encoder_output(nlp)
    if confidence:
        try:
            add_confidence(nlp)
        except ValueError as err:
            raise AnnotateError(str(err)) from None
    return nlp


def drop_encoder_output(nlp) -> None:
    """End ``nlp`` with spaCy's ``doc_cleaner``, emptying ``doc.tensor`` and
    ``doc._.trf_data``: the encoder's output is not part of the annotation,
    and dropped inside the pipeline it is not sent from each worker of
    ``nlp.pipe(n_process > 1)`` to the parent (about 92 KB of a doc of 50
    characters' 97 KB). Only for a pipeline this module loaded: one handed
    over is left as it is."""
    if "doc_cleaner" not in nlp.pipe_names:
        nlp.add_pipe("doc_cleaner", config={"attrs": {"tensor": None, "_.trf_data": None}, "silent": True})


@contextmanager
def collector_spares_the_pipeline() -> Iterator[None]:
    """Hide the objects alive now (the loaded pipeline, its vocab, the
    imported modules: about half a million) from Python's garbage collector
    until the block ends (``gc.freeze``, undone by ``gc.unfreeze``). A run
    allocates enough short-lived objects per doc to set off a full
    collection every few thousand docs, and each one walked all of them
    only to find them alive (0.27 s apiece on the shipped pipeline, about
    3 % of a run). Forked workers (``n_process > 1``) inherit the frozen
    set. Left alone if the caller has frozen objects already."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def annotate_rows(
    nlp,
    rows: Iterable[Dict[str, Any]],
    *,
    batch_size: int = 64,
    n_process: int = 1,
    confidence: bool = False,
    fmt: str = "jsonl",
    max_chars: int = DEFAULT_MAX_CHARS,
    sort_buffer: int = 0,
    stop_on_failure: bool = False,
) -> Iterator[Dict[str, Any]]:
    """Annotated rows, in input order: every row comes back, the "doc" rows
    with ``ann`` (JSON of words and entities) or, for ``fmt="spacy"``, ``doc``
    (the doc's bytes), and ``cuts`` (JSON counts by kind) when the text was
    longer than ``max_chars`` and annotated in pieces (see ``pieces``). Other
    rows pass through an empty doc, so that they keep their place in the stream.
    ``sort_buffer``: texts go through the pipeline sorted by length within
    this many batches (:func:`spacy_crf.batching.pipe_sorted`; 0: in order).

    A record the pipeline refuses (forced user words or entities that cross
    in its text, a :class:`~spacy_crf.pipeline.user_dict.UserDictConflict`)
    comes back as a "failed" row whose ``error`` names the component, the
    doc and the entries; the other records of its batch are annotated as
    usual. ``stop_on_failure``: read no further rows after a failed one."""
    key = words_key(nlp)
    # The rows wait here, and only their number travels with each text (with
    # n_process > 1 a context is pickled to a worker and back): a record cut
    # into 200 pieces would otherwise travel 200 times whole.
    held: Dict[int, Dict[str, Any]] = {}
    stop = False

    def texts():
        for seq, row in enumerate(rows):
            if stop:
                return
            held[seq] = row
            if row["kind"] != "doc":
                yield "", (seq, 0, 1, None)
                continue
            cuts: Counter = Counter()
            bounds = piece_bounds(nlp, row["text"], max_chars, cuts)
            for k, (start, end) in enumerate(bounds):
                yield row["text"][start:end], (seq, k, len(bounds), dict(cuts) if len(bounds) > 1 else None)

    def alone(seq: int) -> Dict[str, Any]:
        nonlocal stop
        out = annotate_alone(nlp, held.pop(seq), confidence=confidence, fmt=fmt, max_chars=max_chars)
        stop = stop or (stop_on_failure and out["kind"] == "failed")
        return out

    # The pipes leave out a doc whose user dictionary conflicts (in the worker
    # processes too); a record that lost its doc, or a piece of it, is run
    # again alone here, where the error is raised and turned into its row.
    with handled_by(nlp, leave_out_conflicts):
        docs = pipe_sorted(nlp, texts(), batch_size=batch_size, buffer=sort_buffer, n_process=n_process, as_tuples=True)
        next_seq = 0  # the first row not given back yet
        parts: List[Tuple[int, Any]] = []  # the pieces of row next_seq so far
        for doc, (seq, k, n, cuts) in docs:
            while next_seq < seq:  # rows before this one lost their doc or a piece of it
                yield alone(next_seq)
                next_seq += 1
                parts = []
            parts.append((len(parts[-1][1].text) + parts[-1][0] if parts else 0, doc))
            if k < n - 1:
                continue
            if len(parts) < n:
                yield alone(seq)
            else:
                yield annotated_row(held.pop(seq), parts if n > 1 else doc, key, confidence, fmt, cuts)
            parts, next_seq = [], seq + 1
        for seq in sorted(held):  # the last rows lost their doc
            yield alone(seq)


Shard = Tuple[int, str, str]  # (index, path, name)


def shard_rows(shards: Sequence[Shard], text_key: str, id_key: str) -> Iterator[Dict[str, Any]]:
    """The rows of every shard; a shard that cannot be read ends the rows with
    a "fatal" row in its place (see ``_read_shard_chunks``)."""
    for i, path, name in shards:
        try:
            yield from read_rows(path, i, name, text_key, id_key)
        except (AnnotateError, OSError) as err:
            yield fatal_row(i, err)
            return


def fatal_row(shard: int, err: Exception) -> Dict[str, Any]:
    return {"shard": shard, "line": 0, "kind": "fatal", "text": "", "meta": None, "error": str(err)}


def shard_chunks(
    path: str, shard: int, name: str, text_key: str, id_key: str, size: int
) -> Iterator[List[Dict[str, Any]]]:
    """The rows of one shard in chunks of ``size`` (the last one shorter). A chunk
    is one ``nlp.pipe`` batch in both engines, so that both run the model on
    the same batches (padding, and with it the floats, depend on the batch)."""
    chunk: List[Dict[str, Any]] = []
    for row in read_rows(path, shard, name, text_key, id_key):
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def chunk_rows(batch_size: int, sort_buffer: int) -> int:
    """Rows per chunk: one batch, or ``sort_buffer`` batches sorted by length."""
    return batch_size * max(1, sort_buffer)


def chunk_batching(chunk: List[Dict[str, Any]], batch_size: int, sort_buffer: int) -> Dict[str, int]:
    """How ``annotate_rows`` batches a chunk: unsorted, as one batch (however
    many pieces its long records make); sorted, in batches of ``batch_size``."""
    if sort_buffer:
        return {"batch_size": batch_size, "sort_buffer": sort_buffer}
    return {"batch_size": max(1, len(chunk)), "sort_buffer": 0}


class Terminated(BaseException):
    """SIGTERM stopped the run (a BaseException, as KeyboardInterrupt is for
    SIGINT: spaCy's workers catch every Exception and carry on)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


#: the handler :func:`workers_stop_on_signal` has installed in this process, if any
_run_handler: Optional[Any] = None
_fork_hook_installed = False


def _signals_default_in_child() -> None:
    """In a process forked while the run's handler was installed (a worker):
    SIGINT and SIGTERM back to their defaults, so that either kills it at
    once. A Python handler waits for the worker's main thread to come back
    to the interpreter, which a worker stuck in native code never does:
    ``nlp.pipe`` would then join it forever."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        if _run_handler is not None and signal.getsignal(signum) is _run_handler:
            signal.signal(signum, signal.SIG_DFL)


@contextmanager
def workers_stop_on_signal(workers: bool = True) -> Iterator[None]:
    """SIGINT and SIGTERM terminate the worker processes started meanwhile
    (``nlp.pipe(n_process > 1)``), then raise ``KeyboardInterrupt`` or
    ``Terminated`` here. Without it, SIGINT to this process alone left
    ``nlp.pipe`` joining workers blocked on a full pipe (a hang), and SIGTERM
    left them orphaned, blocked forever. The workers themselves die of either
    signal by its default action (:func:`_signals_default_in_child`). A
    signal that is ignored (``nohup``, a background job) or has someone
    else's handler is left as it is. ``workers=False``: none will be started
    (skips the look for queues)."""
    global _run_handler, _fork_hook_installed
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if not _fork_hook_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_signals_default_in_child)
        _fork_hook_installed = True
    owner = os.getpid()
    before = {p.pid for p in multiprocessing.active_children()}
    old_queues = {id(q) for q in _queues()} if workers else set()

    def handler(signum, frame):
        if os.getpid() != owner:  # a forked worker: die of the signal, as it would without this handler
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        for child in multiprocessing.active_children():
            if child.pid not in before:
                child.terminate()
        # The queues feeding those workers may hold more than a pipe takes: their
        # feeder threads stay blocked on the write, and joining them at exit
        # would hang. Nothing in them is needed any more.
        for queue in _queues() if workers else []:
            if id(queue) not in old_queues:
                queue.cancel_join_thread()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)

    saved = {}
    outer = _run_handler
    for signum, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(signum) is default:
            saved[signum] = signal.signal(signum, handler)
    if saved:  # (nested in a run, the outer run's handler stays the one installed)
        _run_handler = handler
    try:
        yield
    finally:
        for signum, old in saved.items():
            signal.signal(signum, old)
        _run_handler = outer


def _queues() -> List[Any]:
    """The multiprocessing queues alive in this process (spaCy's ``nlp.pipe``
    keeps its own out of reach)."""
    import gc
    from multiprocessing.queues import Queue

    # type(), not isinstance: isinstance reads __class__, which some objects (torch) warn on
    return [obj for obj in gc.get_objects() if issubclass(type(obj), Queue)]


def local_stream(
    pipeline,
    shards: Sequence[Shard],
    *,
    text_key: str = "text",
    id_key: str = "id",
    batch_size: int = 64,
    n_process: int = 1,
    threads: Optional[int] = None,
    confidence: bool = False,
    fmt: str = "jsonl",
    gpu: bool = False,
    stop_on_error: bool = False,
    max_chars: int = DEFAULT_MAX_CHARS,
    sort_buffer: int = 0,
    **_,
) -> Iterator[Dict[str, Any]]:
    """``stop_on_error``: read no further than the first bad record, so that the
    caller can drain the stream instead of abandoning it: an abandoned
    ``nlp.pipe(n_process=2)`` can leave its workers blocked on a full pipe."""
    if threads is None and n_process > 1:
        threads = max(1, (os.cpu_count() or 1) // n_process)
    set_threads(threads)
    if n_process > 1:
        # n_process > 1 forks after the fast tokenizer was used; without this it warns per child
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    nlp = load_pipeline(pipeline, confidence, gpu)
    with workers_stop_on_signal(n_process > 1), collector_spares_the_pipeline():
        yield from _local_rows(
            nlp, shards, text_key, id_key, batch_size, n_process, confidence, fmt, stop_on_error, max_chars, sort_buffer
        )


def _local_rows(
    nlp,
    shards: Sequence[Shard],
    text_key: str,
    id_key: str,
    batch_size: int,
    n_process: int,
    confidence: bool,
    fmt: str,
    stop_on_error: bool,
    max_chars: int,
    sort_buffer: int = 0,
) -> Iterator[Dict[str, Any]]:
    if n_process > 1:  # spaCy's own batches run across shard ends
        # a shard that cannot be read comes as a "fatal" row, not an exception:
        # raised inside nlp.pipe, it would leave the workers blocked on their pipes
        rows = _until_error(shard_rows(shards, text_key, id_key), ("fatal", "error") if stop_on_error else ("fatal",))
        yield from annotate_rows(
            nlp,
            rows,
            batch_size=batch_size,
            n_process=n_process,
            confidence=confidence,
            fmt=fmt,
            max_chars=max_chars,
            sort_buffer=sort_buffer,
            stop_on_failure=stop_on_error,
        )
        return
    for i, path, name in shards:
        for chunk in shard_chunks(path, i, name, text_key, id_key, chunk_rows(batch_size, sort_buffer)):
            bad = False
            for row in annotate_rows(
                nlp,
                chunk,
                confidence=confidence,
                fmt=fmt,
                max_chars=max_chars,
                stop_on_failure=False,  # the chunk is read already: stop after it
                **chunk_batching(chunk, batch_size, sort_buffer),
            ):
                bad = bad or row["kind"] in ("error", "failed")
                yield row
            if stop_on_error and bad:
                return


def _until_error(rows: Iterable[Dict[str, Any]], kinds: Sequence[str]) -> Iterator[Dict[str, Any]]:
    for row in rows:
        yield row
        if row["kind"] in kinds:
            return


def ray_stream(*args: Any, **kwargs: Any) -> Iterator[Dict[str, Any]]:
    """The Ray engine (:func:`spacy_crf.annotate.ray_engine.ray_stream`),
    imported when used: Ray is an optional dependency."""
    from .ray_engine import ray_stream as stream

    return stream(*args, **kwargs)


ENGINES = {"local": local_stream, "ray": ray_stream}
