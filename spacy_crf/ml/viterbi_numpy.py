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

from typing import List, Optional, Sequence

import numpy

#: :data:`spacy_crf.ml.crf.IMPOSSIBLE` (not imported: that module imports this one)
IMPOSSIBLE = numpy.float32(-1e30)


def search(emissions: numpy.ndarray, transitions: numpy.ndarray, start: numpy.ndarray) -> numpy.ndarray:
    """The Viterbi states ``[T, K, B]`` from step-major float32 emissions
    ``[T, K, B]``: each tag's best score at each step (values only;
    backpointers are recovered by :func:`backtrace`)."""
    transitions_from_to = transitions[:, :, None]
    scores = numpy.empty(emissions.shape, dtype=numpy.float32)
    scores[0] = start[:, None] + emissions[0]
    for t in range(1, len(emissions)):
        scores[t] = (scores[t - 1][:, None, :] + transitions_from_to).max(axis=0) + emissions[t]
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
            m = numpy.asarray(m, dtype=bool)
            if m.ndim != 2 or m.shape[1] != K or m.shape[0] > T:
                raise ValueError(f"tag mask {i} has shape {m.shape}; expected ({T} or fewer, {K})")
            padded[i, : len(m)] = m
    return padded


def decode(
    scores: Sequence[numpy.ndarray],
    transitions: numpy.ndarray,
    start: Optional[numpy.ndarray],
    end: Optional[numpy.ndarray],
    constraints=None,
    tag_masks: Optional[Sequence[Optional[numpy.ndarray]]] = None,
) -> List[numpy.ndarray]:
    """Best tag ids per doc from its emission scores ``[n_i, K]``: what
    :func:`spacy_crf.ml.tagger_model.decode` gives with a CRF layer.
    ``constraints``: a :class:`~spacy_crf.ml.schemes.TransitionMask` (bool
    transitions, start, end) or None; ``tag_masks`` as there."""
    lengths = numpy.array([len(s) for s in scores], dtype=numpy.int64)
    num_tags = len(transitions)
    B, T = len(scores), int(lengths.max(initial=0))
    tag_mask = pad_tag_masks(tag_masks, B, T, num_tags)
    if T == 0:
        return [numpy.zeros((0,), dtype=numpy.int64) for _ in scores]
    allowed = (None, None, None) if constraints is None else constraints
    transitions = _allowed(transitions, allowed[0])
    start = _allowed(numpy.zeros(num_tags, dtype=numpy.float32) if start is None else start, allowed[1])
    end = _allowed(numpy.zeros(num_tags, dtype=numpy.float32) if end is None else end, allowed[2])
    # step-major [T, K, B], as crf's recursions; padding stays 0 (never read)
    emissions = numpy.zeros((T, num_tags, B), dtype=numpy.float32)
    for i, s in enumerate(scores):
        emissions[: len(s), :, i] = s
    if tag_mask is not None:
        emissions = numpy.where(tag_mask.transpose(1, 2, 0), emissions, IMPOSSIBLE)
    states = search(emissions, transitions, start)
    min_length = int(lengths.min())
    if min_length == T:
        last_states = states[-1]
    else:
        last_states = states[numpy.maximum(lengths - 1, 0), :, numpy.arange(B)].T
    last_tag = (last_states + end[:, None]).argmax(axis=0)
    real = numpy.arange(T)[:, None] < lengths[None, :]  # [T, B]
    path = backtrace(states, real, min_length, transitions, last_tag)
    return [path[i, :n] for i, n in enumerate(lengths.tolist())]
