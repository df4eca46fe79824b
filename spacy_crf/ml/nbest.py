"""Exact n-best (k-best) decoding: the ``k`` best tag paths of each doc,
their scores and their probabilities (:func:`decode`).

Where the compiled kernels are built (:mod:`.kernels`) they decode:
``_nbest.pyx`` the paths (the 1-best's forward pass, then Lawler's
partition from the end: a few short backtraces per path) and
``_partition.pyx`` each doc's ``log Z``. Below is the pure-numpy path,
their reference and fallback.

Its search is the list Viterbi algorithm: at each position and tag it keeps
the ``k`` best partial paths ending there (best first), and extends them by
merging, for each tag, the ``K`` sorted lists "rank ``r`` of tag ``i`` plus
the move ``i -> j``" into their top ``k``. Every array operation runs over
the whole batch and all ``(tag, rank)`` candidates at once; the only Python
loops are over the positions and over the ``k`` ranks of a merge.

The first of the ``k`` is the Viterbi path exactly, both ways:
:func:`spacy_crf.ml.viterbi_numpy.best_paths` keeps, per tag, the maximum of
the same float32 sums (``previous + transition``, then ``+ emission``), and
takes the first maximum on a tie; the merge's first round takes the maximum
of the same sums and, on a tie, the candidate of the smallest previous tag
(rank 0 of a tag is never below its other ranks, so the first tie is a rank
0). The other ranks follow in order of score; among equal scores the order
is deterministic, but any of the tied paths may come first (the kernel's
and the list Viterbi's may differ there).

Forbidden moves and tags score ``IMPOSSIBLE`` as in :mod:`spacy_crf.ml.crf`,
so a path that takes one scores about ``IMPOSSIBLE`` and is dropped from
the result: a doc has fewer than ``k`` paths when fewer are allowed, and
none when the tag masks and the constraints leave no path at all (where
Viterbi returns the least bad one). An empty doc has one empty path, with
score 0 and probability 1. A path's probability at temperature ``T`` is
``exp(score / T - log Z_T)``, ``log Z_T`` the forward algorithm's over the
same constrained scores divided by ``T`` (:func:`log_partition` here, with
:func:`spacy_crf.ml.crf.log_partition` as the reference); ``T = 1`` gives
``P(path | doc)`` under the CRF.
"""

from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy
import torch
from thinc.api import NumpyOps

from ..util import flat_rows
from . import crf, kernels, viterbi_numpy

#: what :func:`spacy_crf.util.flat_rows` concatenates row blocks with where they are not one array's
_NUMPY_OPS = NumpyOps()

#: empty slots of a rank list (fewer than ``k`` partial paths so far)
_EMPTY = numpy.float32(-numpy.inf)
#: a path whose score is at or below this took a forbidden move or tag (each costs ``IMPOSSIBLE``)
FORBIDDEN_BELOW = numpy.float32(crf.IMPOSSIBLE / 2)


class NBest(NamedTuple):
    """One doc's best paths, best first: ``paths`` int64 ``[m, n]`` (tag ids),
    ``scores`` float32 ``[m]``, ``probabilities`` float64 ``[m]`` (None when not
    asked for); ``m <= k`` is the number of allowed paths found."""

    paths: numpy.ndarray
    scores: numpy.ndarray
    probabilities: Optional[numpy.ndarray]


class _Merge:
    """The top ``k`` of ``lists`` sorted lists per column, in reused buffers.

    :meth:`__call__` takes candidates ``[k, lists, cols]`` (rank-major: rank
    ``r`` of list ``i`` for column ``c`` at ``cand[r, i, c]``, each list
    sorted best first, empty ranks ``-inf``) and writes the top ``k`` scores
    ``[k, cols]`` and, for each, its flat index into the candidates. Each of
    the ``k`` rounds takes every column's best head (the best rank not yet
    taken of each list), the smallest list on a tie, and moves that list's
    head on by one rank. At most ``k - 1`` moves per column, so no head goes
    past rank ``k - 1``."""

    def __init__(self, k: int, lists: int, cols: int) -> None:
        self.k, self.lists, self.cols = k, lists, cols
        self.size = lists * cols  # one rank of the candidates
        # code[i, c] = size - 1 - (i * cols + c): the largest code of a tie is its
        # smallest list, and the reversed flat views below index by code directly.
        # int32 where it fits: the product with the tie mask is several times
        # faster than in int64; fancy indexing takes intp, so codes are cast once.
        self.code = numpy.arange(self.size - 1, -1, -1, dtype=_index_dtype(self.size)).reshape(lists, cols)
        self.first_heads = numpy.arange(self.size, dtype=numpy.intp)
        self.heads_at = numpy.empty(self.size, dtype=numpy.intp)  # flat candidate index of each head
        self.equal = numpy.empty((lists, cols), dtype=bool)
        self.coded = numpy.empty((lists, cols), dtype=self.code.dtype)

    def __call__(self, cand: numpy.ndarray, out_scores: numpy.ndarray, out_index: numpy.ndarray) -> None:
        k, size = self.k, self.size
        flat = cand.reshape(-1)
        heads = cand[0]  # the rank-0 candidates are the first heads; replaced in place as lists move on
        heads_by_code = heads.reshape(-1)[::-1]
        self.heads_at[...] = self.first_heads
        heads_at_by_code = self.heads_at[::-1]
        for q in range(k):
            best = numpy.maximum.reduce(heads, axis=0, out=out_scores[q])
            numpy.equal(heads, best, out=self.equal)
            numpy.multiply(self.equal, self.code, out=self.coded)
            first = numpy.maximum.reduce(self.coded, axis=0).astype(numpy.intp)
            taken = out_index[q] = heads_at_by_code[first]
            if q + 1 < k:
                following = taken + size
                heads_at_by_code[first] = following
                heads_by_code[first] = flat[following]


def _index_dtype(size: int):
    return numpy.int32 if size < 2**31 else numpy.int64


def search(
    emissions: numpy.ndarray, transitions: numpy.ndarray, start: numpy.ndarray, k: int
) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """The list Viterbi states ``[T, k, K, B]`` (the ``k`` best scores of
    partial paths ending in each tag at each step, best first; ``-inf`` where
    there are fewer) and backpointers ``[T, k, K * B]`` from step-major
    float32 emissions ``[T, K, B]`` and the (constrained) ``transitions [K, K]``
    and ``start [K]``. Backpointer ``[t, q, j * B + b]`` is the flat index
    ``(r * K + i) * K * B + j * B + b`` of its candidate: rank ``r`` of tag
    ``i`` at step ``t - 1``."""
    num_steps, num_tags, batch_size = emissions.shape
    cols = num_tags * batch_size
    states = numpy.empty((num_steps, k, num_tags, batch_size), dtype=numpy.float32)
    states[0, 0] = start[:, None] + emissions[0]
    states[0, 1:] = _EMPTY
    index_dtype = _index_dtype(k * num_tags * cols)
    pointers = numpy.empty((num_steps, k, cols), dtype=index_dtype)
    if num_steps == 1:
        return states, pointers
    # as viterbi_numpy.search: copy the previous scores into the candidates,
    # then add the transitions as contiguous runs of K_to * B (the same sums)
    transitions_from_to = numpy.ascontiguousarray(
        numpy.broadcast_to(transitions[:, :, None], (num_tags, num_tags, batch_size)), dtype=numpy.float32
    ).reshape(num_tags, cols)
    cand = numpy.empty((k, num_tags, num_tags, batch_size), dtype=numpy.float32)
    cand_flat = cand.reshape(k, num_tags, cols)
    merge = _Merge(k, num_tags, cols)
    for t in range(1, num_steps):
        cand[...] = states[t - 1][:, :, None, :]
        cand_flat += transitions_from_to
        merge(cand_flat, states[t].reshape(k, cols), pointers[t])
        states[t] += emissions[t]
    return states, pointers


def best_paths(
    emissions: numpy.ndarray,
    lengths: numpy.ndarray,
    transitions: numpy.ndarray,
    start: numpy.ndarray,
    end: numpy.ndarray,
    k: int,
) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """The ``k`` best paths ``[B, k, T]`` (int64, -1 at padding) and their
    scores ``[B, k]`` (best first) from step-major float32 emissions ``[T, K,
    B]`` (values past a row's length change nothing), the row lengths ``[B]``
    (at least 1 each) and the (constrained) float32 ``transitions [K, K]``,
    ``start [K]`` and ``end [K]``: :func:`spacy_crf.ml.viterbi_numpy.best_paths`
    with ``k`` paths. Slots past the number of paths a row has score
    ``-inf``; paths through forbidden moves score about ``IMPOSSIBLE``."""
    num_steps, num_tags, batch_size = emissions.shape
    states, pointers = search(emissions, transitions, start, k)
    min_length = int(lengths.min(initial=num_steps))
    columns = numpy.arange(batch_size)
    if min_length == num_steps:
        last_states = states[-1]
    else:  # [B, k, K] -> [k, K, B]
        last_states = states[numpy.maximum(lengths - 1, 0), :, :, columns].transpose(1, 2, 0)
    final = numpy.ascontiguousarray(last_states + end[None, :, None], dtype=numpy.float32)
    scores = numpy.empty((k, batch_size), dtype=numpy.float32)
    state = numpy.empty((k, batch_size), dtype=_index_dtype(final.size))
    _Merge(k, num_tags, batch_size)(final, scores, state)
    # walk back: ``state`` is the flat index (q * K + j) * B + b into a step's
    # [k, K, B] states, which is also where its backpointer is in pointers[t]
    cols = num_tags * batch_size
    visited = numpy.empty((num_steps, k, batch_size), dtype=state.dtype)
    visited[-1] = state
    real = numpy.arange(num_steps)[:, None] < lengths[None, :]  # [T, B]
    for t in range(num_steps - 1, 0, -1):
        previous = pointers[t].reshape(-1)[state] // cols * batch_size + columns
        # a row whose step t is padding has not reached its last step yet: it keeps its state
        state = previous if t < min_length else numpy.where(real[t], previous, state)
        visited[t - 1] = state
    paths = (visited // batch_size % num_tags).astype(numpy.int64).transpose(2, 1, 0)
    if min_length < num_steps:
        paths = numpy.where(real.T[:, None, :], paths, -1)
    return numpy.ascontiguousarray(paths), numpy.ascontiguousarray(scores.T)


def _constrained(scores, allowed) -> numpy.ndarray:
    scores = numpy.asarray(scores, dtype=numpy.float32)
    return scores if allowed is None else numpy.where(numpy.asarray(allowed, dtype=bool), scores, crf.IMPOSSIBLE)


def _shift_of(scores: numpy.ndarray, axis=None, keepdims: bool = False) -> numpy.ndarray:
    """The largest allowed score (0 where all are forbidden), to subtract before ``exp``."""
    allowed = numpy.where(scores > FORBIDDEN_BELOW, scores, -numpy.inf)
    largest = allowed.max(axis=axis, keepdims=keepdims)
    return numpy.where(numpy.isfinite(largest), largest, 0.0)


#: the smallest factor the scaled forward pass trusts: products of three stay normal floats
_SMALLEST = 1e-100


def log_partition(
    emissions: numpy.ndarray,
    lengths: numpy.ndarray,
    transitions: numpy.ndarray,
    start: numpy.ndarray,
    end: numpy.ndarray,
) -> numpy.ndarray:
    """``log Z [B]`` (float64) of the (already constrained and masked)
    step-major float32 emissions ``[T, K, B]``, rows of ``lengths`` ``>= 1``.

    The forward algorithm scaled, in float64: at each step the summed
    exp-scores of the path prefixes ending in each tag, ``alpha [B, K]``, are
    one small matrix product with ``exp(transitions)`` times ``exp(emissions)``
    (each shifted by its largest allowed score), divided by their total,
    whose log is added up; the exponentials of forbidden scores are exactly
    0. Four small numpy ops per step, where :func:`spacy_crf.ml.crf.log_partition`
    (log space, torch, the reference) costs about as much as the whole n-best
    search. Scaling loses nothing while every factor it multiplies (a
    transition's, an emission's, a previous ``alpha``) is 0 or at least
    ``1e-100``: the products stay normal floats. A row where one is not (scores
    hundreds apart) gets ``crf``'s value instead."""
    num_steps, num_tags, batch_size = emissions.shape
    steps = emissions.transpose(0, 2, 1).astype(numpy.float64)  # [T, B, K]
    steps[0] += start
    allowed = steps > FORBIDDEN_BELOW
    shifts = _shift_of(steps, axis=2, keepdims=True)
    numpy.exp(numpy.subtract(steps, shifts, out=steps), out=steps)
    unsure = (allowed & (steps < _SMALLEST)).any(axis=2)  # [T, B]
    move_shift, end_shift = float(_shift_of(transitions)), float(_shift_of(end))
    moves = numpy.exp(transitions.astype(numpy.float64) - move_shift)
    ends = numpy.exp(end.astype(numpy.float64) - end_shift)
    tiny_moves = bool(((transitions > FORBIDDEN_BELOW) & (moves < _SMALLEST)).any())
    tiny_moves |= bool(((end > FORBIDDEN_BELOW) & (ends < _SMALLEST)).any())
    norms = numpy.empty((num_steps, batch_size))
    summed = numpy.empty((batch_size, num_tags))
    # steps[t] becomes alpha at step t, in place, once its emission factors are used
    with numpy.errstate(divide="ignore", invalid="ignore"):
        for t in range(num_steps):
            if t:
                steps[t] *= numpy.matmul(steps[t - 1], moves, out=summed)
            total = numpy.add.reduce(steps[t], axis=1, out=norms[t])
            steps[t] /= total[:, None]
        unsure |= ((steps > 0) & (steps < _SMALLEST)).any(axis=2)
        rows, last = numpy.arange(batch_size), lengths - 1
        finals = steps[last, rows] @ ends
        log_norms = numpy.cumsum(numpy.log(norms) + shifts[:, :, 0], axis=0)
        log_z = log_norms[last, rows] + last * move_shift + numpy.log(finals) + end_shift
    real = numpy.arange(num_steps)[:, None] < lengths[None, :]
    again = numpy.flatnonzero((unsure & real).any(axis=0) | tiny_moves | ~numpy.isfinite(log_z))
    if len(again):
        log_z[again] = _torch_log_partition(emissions[:, :, again], lengths[again], transitions, start, end)
    return log_z


def _torch_log_partition(
    emissions: numpy.ndarray,
    lengths: numpy.ndarray,
    transitions: numpy.ndarray,
    start: numpy.ndarray,
    end: numpy.ndarray,
) -> numpy.ndarray:
    """:func:`log_partition` by :func:`spacy_crf.ml.crf.log_partition`."""
    with torch.no_grad():
        batch_major = torch.from_numpy(numpy.ascontiguousarray(emissions.transpose(2, 0, 1)))
        mask = torch.from_numpy(numpy.arange(emissions.shape[0])[None, :] < lengths[:, None])
        log_z = crf.log_partition(
            batch_major, mask, torch.from_numpy(transitions), torch.from_numpy(start), torch.from_numpy(end)
        )
    return log_z.numpy().astype(numpy.float64)


def check_k(k) -> int:
    """``k`` as an int; a ``ValueError`` unless it is a positive integer."""
    if isinstance(k, bool) or not isinstance(k, (int, numpy.integer)) or k < 1:
        raise ValueError(f"n-best decoding: k must be a positive integer, got {k!r}")
    return int(k)


def check_temperature(temperature) -> float:
    """``temperature`` as a float; a ``ValueError`` unless it is a finite number > 0."""
    number = isinstance(temperature, (int, float, numpy.number)) and not isinstance(temperature, bool)
    if not number or not numpy.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"n-best decoding: the temperature must be a finite number > 0, got {temperature!r}")
    return float(temperature)


def decode(
    scores: Sequence[numpy.ndarray],
    transitions: numpy.ndarray,
    start: Optional[numpy.ndarray],
    end: Optional[numpy.ndarray],
    k: int,
    constraints=None,
    tag_masks: Optional[Sequence[Optional[numpy.ndarray]]] = None,
    probabilities: bool = True,
    temperature: float = 1.0,
    use_numpy: bool = False,
) -> List[NBest]:
    """The ``k`` best allowed paths of each doc from its emission scores
    ``[n_i, K]``, as :func:`spacy_crf.ml.viterbi_numpy.decode` takes them
    (``constraints``: a :class:`~spacy_crf.ml.schemes.TransitionMask` or None;
    ``tag_masks``: per doc None or bool ``[n_i, K]``); the first is the path
    ``viterbi_numpy.decode`` gives, wherever a path is allowed.
    ``probabilities``: also each path's ``exp(score / T - log Z_T)``, ``log
    Z_T`` the log-partition with every score divided by ``temperature`` ``T``
    (1: the CRF's own distribution; the paths do not depend on it). The
    compiled kernels run where they are built (:mod:`.kernels`), unless
    ``use_numpy`` asks for the list Viterbi above: the same paths, but among
    paths of equal score maybe in another order."""
    k = check_k(k)
    temperature = check_temperature(temperature)
    lengths = numpy.array([len(s) for s in scores], dtype=numpy.int64)
    num_tags = len(transitions)
    B, T = len(scores), int(lengths.max(initial=0))
    kernels.warn_if_not_built()
    compiled = kernels.active(kernels.nbest_flat) and kernels.active(kernels.log_partition_flat) and not use_numpy
    if compiled:
        flat_mask = viterbi_numpy.flat_tag_masks(tag_masks, lengths, T, num_tags)
    else:
        tag_mask = viterbi_numpy.pad_tag_masks(tag_masks, B, T, num_tags)
    allowed = (None, None, None) if constraints is None else constraints
    transitions = _constrained(transitions, allowed[0])
    start = _constrained(numpy.zeros(num_tags) if start is None else start, allowed[1])
    end = _constrained(numpy.zeros(num_tags) if end is None else end, allowed[2])
    crf_scores = (transitions, start, end)
    if compiled:
        return _decode_compiled(scores, lengths, crf_scores, flat_mask, k, probabilities, temperature)
    return _decode_numpy(scores, lengths, crf_scores, tag_mask, k, probabilities, temperature)


def _decode_compiled(scores, lengths, crf_scores, flat_mask, k, probabilities, temperature) -> List[NBest]:
    """:func:`decode` by the kernels, over the docs' rows as one flat array."""
    offsets = numpy.zeros(len(lengths) + 1, dtype=numpy.int64)
    numpy.cumsum(lengths, out=offsets[1:])
    flat = numpy.ascontiguousarray(flat_rows(_NUMPY_OPS, scores), dtype=numpy.float32).reshape(-1, len(crf_scores[0]))
    transitions, start, end = (numpy.ascontiguousarray(a, dtype=numpy.float32) for a in crf_scores)
    paths, path_scores, counts = kernels.nbest_flat(flat, offsets, transitions, start, end, k, flat_mask)
    probs = None
    if probabilities:
        log_z = kernels.log_partition_flat(flat, offsets, transitions, start, end, flat_mask, temperature)
        with numpy.errstate(invalid="ignore", over="ignore"):  # (-inf - -inf past a doc's paths: not read)
            probs = numpy.exp(path_scores / temperature - log_z[:, None])
    kept = path_scores.astype(numpy.float32)
    firsts, lasts = (offsets[:-1] * k).tolist(), (offsets[:-1] * k + counts * lengths).tolist()
    # (a few hundred ns a doc, as much as a short doc's decoding: no slices where a doc has all k)
    new = tuple.__new__
    return [
        new(NBest, (paths[a:b].reshape(m, n), s if m == k else s[:m], p if p is None or m == k else p[:m]))
        for a, b, n, m, s, p in zip(
            firsts, lasts, lengths.tolist(), counts.tolist(), kept, [None] * len(kept) if probs is None else probs
        )
    ]


def _tempered(scores: numpy.ndarray, temperature: float) -> numpy.ndarray:
    """The allowed ``scores`` divided by ``temperature`` (forbidden ones stay forbidden)."""
    if temperature == 1.0:
        return scores
    return numpy.where(scores > FORBIDDEN_BELOW, scores / numpy.float32(temperature), scores).astype(numpy.float32)


def _decode_numpy(scores, lengths, crf_scores, tag_mask, k, probabilities, temperature) -> List[NBest]:
    """:func:`decode` by the list Viterbi and the scaled forward pass in numpy."""
    transitions, start, end = crf_scores
    num_tags, B, T = len(transitions), len(scores), int(lengths.max(initial=0))
    results: List[Optional[NBest]] = [None] * B
    for i in numpy.flatnonzero(lengths == 0).tolist():  # one empty path
        one = numpy.ones(1) if probabilities else None
        results[i] = NBest(numpy.zeros((1, 0), dtype=numpy.int64), numpy.zeros(1, dtype=numpy.float32), one)
    rows = numpy.flatnonzero(lengths > 0)
    if len(rows):
        emissions = numpy.zeros((T, num_tags, len(rows)), dtype=numpy.float32)
        for column, i in enumerate(rows.tolist()):
            emissions[: lengths[i], :, column] = scores[i]
        if tag_mask is not None:
            emissions = numpy.where(tag_mask[rows].transpose(1, 2, 0), emissions, crf.IMPOSSIBLE)
        row_lengths = lengths[rows]
        paths, path_scores = best_paths(emissions, row_lengths, transitions, start, end, k)
        found = (path_scores > FORBIDDEN_BELOW).sum(axis=1)
        log_z = numpy.zeros(len(rows))
        if probabilities:  # (rows with no allowed path need none)
            some = found > 0
            some_emissions = emissions if some.all() else emissions[:, :, some]
            tempered = (_tempered(a, temperature) for a in (some_emissions, transitions, start, end))
            log_z[some] = log_partition(next(tempered), row_lengths[some], *tempered)
        for column, (i, m) in enumerate(zip(rows.tolist(), found.tolist())):
            kept = path_scores[column, :m]
            probs = numpy.exp(kept.astype(numpy.float64) / temperature - log_z[column]) if probabilities else None
            results[i] = NBest(paths[column, :m, : lengths[i]], kept, probs)
    return results  # every row is filled above
