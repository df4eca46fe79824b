"""Small helpers: :func:`check_number` (numeric options),
:func:`batch_by_length`, :func:`run_offsets`, :func:`split_rows`, :func:`joined_rows`, :func:`flat_rows` and
:func:`matmul`
(with :func:`one_blas_thread`). The doc keys, file writing and hardware
record have their own modules (:mod:`.doc_keys`, :mod:`.files`,
:mod:`.hardware`).
"""

import os
import threading
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence

import numpy

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


class RowBlocks(list):
    """Consecutive row blocks of one 2-d array (``flat``), as the list of its
    views that ``ops.unflatten`` gives, which keeps the array: :func:`flat_rows`
    hands it back without checking each block (microseconds per doc, more than
    a tagger's layers spend on a short doc). Changing the list drops it."""

    def __init__(self, blocks: Iterable[Any] = (), flat: Optional[numpy.ndarray] = None) -> None:
        super().__init__(blocks)
        self.flat = flat


def _drops_flat(name: str):
    def method(self, *args, **kwargs):
        self.flat = None
        return getattr(list, name)(self, *args, **kwargs)

    method.__name__ = name
    return method


for _name in (
    "__setitem__",
    "__delitem__",
    "__iadd__",
    "__imul__",
    "append",
    "extend",
    "insert",
    "pop",
    "remove",
    "clear",
    "sort",
    "reverse",
):
    setattr(RowBlocks, _name, _drops_flat(_name))


def split_rows(ops: Any, flat: Any, lengths: Sequence[int]) -> List[Any]:
    """``ops.unflatten(flat, lengths)``: for a numpy array, a :class:`RowBlocks`
    of slices (``numpy.split`` costs a few microseconds per block)."""
    if not isinstance(flat, numpy.ndarray) or flat.ndim != 2:
        return ops.unflatten(flat, lengths)
    ends = numpy.cumsum(lengths, dtype=numpy.int64).tolist()
    if (ends[-1] if ends else 0) != len(flat):
        raise ValueError(f"split_rows: lengths sum to {ends[-1] if ends else 0}, the array has {len(flat)} rows")
    return RowBlocks((flat[a:b] for a, b in zip([0] + ends[:-1], ends)), flat)


def flat_rows(ops: Any, arrays: Sequence[Any]) -> Any:
    """``ops.flatten(arrays, pad=0)``, without the copy where the arrays are
    already consecutive row blocks of one array (a :class:`RowBlocks` as
    :func:`split_rows` made it, or as :func:`joined_rows` finds them); read-only then."""
    if isinstance(arrays, RowBlocks) and arrays.flat is not None:
        flat = arrays.flat.view()
        flat.flags.writeable = False
        return flat
    joined = joined_rows(arrays)
    return joined if joined is not None else ops.flatten(arrays, pad=0)


def matmul(ops: Any, A: Any, B: Any, *, trans1: bool = False, trans2: bool = False) -> Any:
    """``ops.gemm(A, B, trans1=trans1, trans2=trans2)``: ``A @ B`` with either
    operand transposed first, computed by the array module's own ``matmul``.

    thinc's ``NumpyOps.gemm`` runs on blis, which is several times slower than
    numpy's BLAS on the tall, narrow products of the emission and lexicon
    layers (``[n_tokens, 416] x [416, n_tags]``; docs/results.md). The results
    agree to float32 rounding (the sums run in another order)."""
    xp = ops.xp
    if trans1:
        A = A.T
    if trans2:  # (a contiguous copy of the small weight matrix halves the product's time)
        B = xp.ascontiguousarray(B.T)
    if xp is not numpy:
        return xp.matmul(A, B)
    with one_blas_thread():
        return xp.matmul(A, B)


_blas_lock = threading.Lock()
_blas_state: Dict[str, Any] = {"libraries": None, "depth": 0, "saved": []}


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with numpy's BLAS on one thread, and give it back its
    thread count afterwards.

    A second thread makes one of :func:`matmul`'s products faster, but
    OpenBLAS's idle workers spin for a while after each one: on 2 cores they
    took the cores from the encoder's threads that run next, and the whole
    pipeline ran slower although its layers ran faster. Nested and
    concurrent blocks share one limit, lifted when the last one ends. The
    BLAS libraries are those loaded at the first call (numpy's, loaded with
    numpy)."""
    with _blas_lock:
        if _blas_state["libraries"] is None:
            _blas_state["libraries"] = _blas_libraries()
        if _blas_state["depth"] == 0:
            _blas_state["saved"] = [(lib, lib.num_threads) for lib in _blas_state["libraries"]]
            for lib, _ in _blas_state["saved"]:
                lib.set_num_threads(1)
        _blas_state["depth"] += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_state["depth"] -= 1
            if _blas_state["depth"] == 0:
                for lib, threads in _blas_state["saved"]:
                    lib.set_num_threads(threads)


def _blas_libraries() -> List[Any]:
    """threadpoolctl's controllers of the BLAS libraries loaded now; none
    where threadpoolctl cannot inspect the process (the products then run
    with the library's own threads: slower beside an encoder, never wrong)."""
    try:
        from threadpoolctl import ThreadpoolController

        return list(ThreadpoolController().select(user_api="blas").lib_controllers)
    except Exception:  # (a speed setting: it must never stop a prediction)
        return []


_fork_hook_installed = False


def install_fork_hook() -> None:
    """Make forked children of this process use one torch thread (once per process).

    libgomp's thread pool does not survive fork(): a child of a process that
    already ran a parallel torch op hangs on its first one (``nlp.pipe`` with
    ``n_process > 1`` forks on Linux; with torch 2.13 a child's first
    2000 x 2000 matmul never returns). One thread per worker process is also what such a
    pool wants. A guard, not a speed-up, so not left to an opt-in: the
    models' forward passes call it (the first pass of a spacy-crf model in
    a process registers it), never an import or a pipe's construction.
    """
    global _fork_hook_installed
    import torch

    if not _fork_hook_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: torch.set_num_threads(1))
        _fork_hook_installed = True


def save_attr_once(cls: type, load: Callable[[bytes], Any]) -> None:
    """Save a thinc model attribute of type ``cls`` as its ``to_bytes()`` and
    load it with ``load``, once for equal bytes while a model holds the object:
    the heads of a joint pipeline that saved the same dictionary or tagger
    share one copy (one automaton, one session, one cache)."""
    import hashlib
    import weakref

    from thinc.api import deserialize_attr, serialize_attr

    loaded: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()

    @serialize_attr.register(cls)
    def _serialize(_: Any, value: Any, name: str, model: Any) -> bytes:
        return value.to_bytes()

    @deserialize_attr.register(cls)
    def _deserialize(_: Any, value: bytes, name: str, model: Any) -> Any:
        key = hashlib.blake2b(value, digest_size=16).hexdigest()
        found = loaded.get(key)
        if found is None:
            found = load(value)
            loaded[key] = found
        return found
