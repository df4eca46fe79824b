"""Constrained Viterbi decoding in numpy, for prediction on CPU.

:func:`spacy_crf.ml.crf.viterbi` runs a handful of torch ops per batch
around its numpy loops (constraints, tag masks, transposes, the final max).
Each costs a torch op's overhead, and on a busy machine torch's thread pool
makes a small op cost milliseconds: a tagger's prediction, a batch of short
docs, spent most of its decoding time there. This module does the whole
search in numpy, with the same float32 sums in the same order and the same
tie-breaking (the first maximum), so the paths are those of
:func:`~spacy_crf.ml.crf.viterbi`; ``crf``'s CPU kernels call the two loops
below, so both share one implementation.
"""

from typing import List, Optional, Sequence, Tuple

import numpy
from thinc.api import NumpyOps

from ..util import flat_rows
from . import kernels

#: what :func:`spacy_crf.util.flat_rows` concatenates row blocks with where they are not one array's
_NUMPY_OPS = NumpyOps()

#: :data:`spacy_crf.ml.crf.IMPOSSIBLE` (not imported: that module imports this one)
IMPOSSIBLE = numpy.float32(-1e30)


def search(emissions: numpy.ndarray, transitions: numpy.ndarray, start: numpy.ndarray) -> numpy.ndarray:
    """The Viterbi states ``[T, K, B]`` from step-major float32 emissions
    ``[T, K, B]``: each tag's best score at each step (values only;
    backpointers are recovered by :func:`backtrace`). ``transitions``:
    ``[K_from, K_to]``, or one matrix per row ``[K_from, K_to, B]`` (rows of
    different taggers in one search); ``start``: ``[K]``, or ``[K, B]``."""
    num_steps, num_tags, batch_size = emissions.shape
    # ``previous[:, None, :] + transitions[:, :, None]`` would broadcast
    # inside one add whose inner loop is only B long, and at B = 32 that loop
    # overhead is most of the step. Copying the previous scores into a
    # [K_from, K_to, B] buffer first and then adding the transitions as one
    # contiguous run of K_to * B per tag is faster (same float32 sums).
    per_row = transitions if transitions.ndim == 3 else transitions[:, :, None]
    transitions_from_to = numpy.ascontiguousarray(
        numpy.broadcast_to(per_row, (num_tags, num_tags, batch_size)), dtype=numpy.float32
    ).reshape(num_tags, num_tags * batch_size)
    candidates = numpy.empty((num_tags, num_tags, batch_size), dtype=numpy.float32)
    candidates_flat = candidates.reshape(num_tags, num_tags * batch_size)
    scores = numpy.empty(emissions.shape, dtype=numpy.float32)
    scores[0] = (start if start.ndim == 2 else start[:, None]) + emissions[0]
    for t in range(1, num_steps):
        candidates[...] = scores[t - 1][:, None, :]
        candidates_flat += transitions_from_to
        numpy.maximum.reduce(candidates, axis=0, out=scores[t])
        scores[t] += emissions[t]
    return scores


def backtrace(
    scores: numpy.ndarray, real: numpy.ndarray, min_length: int, transitions: numpy.ndarray, last_tag: numpy.ndarray
) -> numpy.ndarray:
    """Best path ``[B, T]`` from the states ``[T, K, B]``, the mask ``real [T, B]``
    and each row's best last tag ``[B]``, walking back one step at a time (all
    rows together) and recovering only the backpointers used; values at
    padded positions are arbitrary."""
    steps = numpy.ascontiguousarray(scores.transpose(0, 2, 1))  # [T, B, K_from]: argmax over a contiguous axis
    transitions_to_from = numpy.ascontiguousarray(transitions.T)
    num_steps, batch_size = steps.shape[:2]
    path = numpy.empty((batch_size, num_steps), dtype=numpy.int64)
    tag = last_tag
    path[:, -1] = tag
    for t in range(num_steps - 2, -1, -1):
        # The same float32 sums as in the search, so the argmax lands on a
        # predecessor that attains the stored maximum.
        best_previous = (steps[t] + transitions_to_from[tag]).argmax(axis=1)
        # A row whose step t+1 is padding has not reached its end yet: it keeps its last tag.
        tag = best_previous if t + 1 < min_length else numpy.where(real[t + 1], best_previous, tag)
        path[:, t] = tag
    return path


def _allowed(scores: numpy.ndarray, allowed) -> numpy.ndarray:
    scores = numpy.asarray(scores, dtype=numpy.float32)
    return scores if allowed is None else numpy.where(numpy.asarray(allowed, dtype=bool), scores, IMPOSSIBLE)


def pad_tag_masks(tag_masks: Optional[Sequence[Optional[numpy.ndarray]]], B: int, T: int, K: int):
    """Per-doc allowed-tag masks (bool ``[n_i, K]``, or None: every tag
    allowed) -> one bool ``[B, T, K]`` array (padding allowed); None when no
    doc has a mask."""
    if tag_masks is None or all(m is None for m in tag_masks):
        return None
    padded = numpy.ones((B, T, K), dtype=bool)
    for i, m in enumerate(tag_masks):
        if m is not None:
            m = _checked_mask(i, m, T, K)
            padded[i, : len(m)] = m
    return padded


def _checked_mask(i: int, mask, T: int, K: int) -> numpy.ndarray:
    """Doc ``i``'s tag mask as a bool array; an error unless it is ``[T or fewer, K]``."""
    mask = numpy.asarray(mask, dtype=bool)
    if mask.ndim != 2 or mask.shape[1] != K or mask.shape[0] > T:
        raise ValueError(f"tag mask {i} has shape {mask.shape}; expected ({T} or fewer, {K})")
    return mask


def decode(
    scores: Sequence[numpy.ndarray],
    transitions: numpy.ndarray,
    start: Optional[numpy.ndarray],
    end: Optional[numpy.ndarray],
    constraints=None,
    tag_masks: Optional[Sequence[Optional[numpy.ndarray]]] = None,
    use_numpy: bool = False,
) -> List[numpy.ndarray]:
    """Best tag ids per doc from its emission scores ``[n_i, K]``: what
    :func:`spacy_crf.ml.tagger_model.decode` gives with a CRF layer.
    ``constraints``: a :class:`~spacy_crf.ml.schemes.TransitionMask` (bool
    transitions, start, end) or None; ``tag_masks`` as there. The compiled
    kernel decodes where it is built (:mod:`.kernels`), unless ``use_numpy``
    asks for the numpy search: the same paths either way."""
    lengths = numpy.array([len(s) for s in scores], dtype=numpy.int64)
    num_tags = len(transitions)
    B, T = len(scores), int(lengths.max(initial=0))
    kernels.warn_if_not_built()
    compiled = kernels.active(kernels.decode_flat) and not use_numpy
    if compiled:
        flat_mask = flat_tag_masks(tag_masks, lengths, T, num_tags)
    else:
        tag_mask = pad_tag_masks(tag_masks, B, T, num_tags)
    if T == 0:
        return [numpy.zeros((0,), dtype=numpy.int64) for _ in scores]
    allowed = (None, None, None) if constraints is None else constraints
    transitions = _allowed(transitions, allowed[0])
    start = _allowed(numpy.zeros(num_tags, dtype=numpy.float32) if start is None else start, allowed[1])
    end = _allowed(numpy.zeros(num_tags, dtype=numpy.float32) if end is None else end, allowed[2])
    if compiled:
        return _decode_compiled(scores, lengths, transitions, start, end, flat_mask)
    # step-major [T, K, B], as crf's recursions; padding stays 0 (never read)
    emissions = numpy.zeros((T, num_tags, B), dtype=numpy.float32)
    for i, s in enumerate(scores):
        emissions[: len(s), :, i] = s
    if tag_mask is not None:
        emissions = numpy.where(tag_mask.transpose(1, 2, 0), emissions, IMPOSSIBLE)
    path, _ = best_paths(emissions, lengths, transitions, start, end)
    return [path[i, :n] for i, n in enumerate(lengths.tolist())]


def best_paths(
    emissions: numpy.ndarray,
    lengths: numpy.ndarray,
    transitions: numpy.ndarray,
    start: numpy.ndarray,
    end: numpy.ndarray,
) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """Best path ``[B, T]`` (int64, -1 at padding) and its score ``[B]`` (0 for
    an empty row) from step-major float32 emissions ``[T, K, B]`` (values
    past a row's length do not change its result), the row lengths ``[B]`` and the
    (already constrained) float32 ``transitions [K, K]``, ``start [K]`` and
    ``end [K]``."""
    num_steps, _, batch_size = emissions.shape
    states = search(emissions, transitions, start)
    min_length = int(lengths.min(initial=num_steps))
    if min_length == num_steps:
        last_states = states[-1]
    else:
        last_states = states[numpy.maximum(lengths - 1, 0), :, numpy.arange(batch_size)].T
    final_scores = last_states + end[:, None]
    last_tag = final_scores.argmax(axis=0)
    best_score = final_scores[last_tag, numpy.arange(batch_size)]
    real = numpy.arange(num_steps)[:, None] < lengths[None, :]  # [T, B]
    path = backtrace(states, real, min_length, transitions, last_tag)
    if min_length < num_steps:
        path[~real.T] = -1
        best_score[lengths == 0] = 0.0
    return path, best_score


def flat_tag_masks(
    tag_masks: Optional[Sequence[Optional[numpy.ndarray]]], lengths: numpy.ndarray, T: int, K: int
) -> Optional[numpy.ndarray]:
    """The per-doc masks of :func:`pad_tag_masks`, checked as there, as one
    uint8 ``[N, K]`` array over the docs' rows (a doc without a mask, or the
    rows past a short mask: every tag allowed); None when no doc has a mask."""
    if tag_masks is None or all(m is None for m in tag_masks):
        return None
    flat = numpy.ones((int(lengths.sum()), K), dtype=numpy.uint8)
    first = 0
    for i, (m, n) in enumerate(zip(tag_masks, lengths.tolist())):
        if m is not None:
            m = _checked_mask(i, m, T, K)
            rows = min(n, len(m))
            flat[first : first + rows] = m[:rows]
        first += n
    return flat


def _decode_compiled(
    scores: Sequence[numpy.ndarray],
    lengths: numpy.ndarray,
    transitions: numpy.ndarray,
    start: numpy.ndarray,
    end: numpy.ndarray,
    flat_mask: Optional[numpy.ndarray],
) -> List[numpy.ndarray]:
    """:func:`decode`'s result from the compiled kernel, over the docs' rows
    as one flat ``[N, K]`` array (the tagger's own array where the docs are
    its row blocks: :func:`spacy_crf.util.flat_rows`)."""
    paths, _, offsets = decode_rows(flat_rows(_NUMPY_OPS, scores), lengths, transitions, start, end, flat_mask)
    bounds = offsets.tolist()
    return [paths[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def decode_rows(
    flat: numpy.ndarray,
    lengths: numpy.ndarray,
    transitions: numpy.ndarray,
    start: numpy.ndarray,
    end: numpy.ndarray,
    allowed: Optional[numpy.ndarray] = None,
) -> Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
    """The compiled kernel (:func:`spacy_crf.ml.kernels.decode_flat`) over
    docs whose emissions are consecutive rows of ``flat [N, K]``, ``lengths
    [B]`` rows each: ``(paths [N], best scores [B], offsets [B + 1])``."""
    offsets = numpy.zeros(len(lengths) + 1, dtype=numpy.int64)
    numpy.cumsum(lengths, out=offsets[1:])
    flat, transitions, start, end = (
        numpy.ascontiguousarray(a, dtype=numpy.float32) for a in (flat, transitions, start, end)
    )
    paths, best = kernels.decode_flat(flat, offsets, transitions, start, end, allowed)
    return paths, best, offsets
