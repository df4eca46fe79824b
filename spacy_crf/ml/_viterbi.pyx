# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Viterbi decoding of ragged docs, compiled: the kernel behind
:func:`spacy_crf.ml.viterbi_numpy.decode` on CPU.

The numpy decoder runs a few array ops per position of the longest doc in
the batch, each with a Python call's overhead, over a padded step-major copy
of the emissions. This one walks each doc's own rows of the flat emissions
``[N, K]`` (the tagger's output, no padding and no transpose) with no Python
per position. Its sums are the numpy decoder's float32 additions in the same
order and its ties go to the first maximum, so the paths and scores are the
same to the bit (``tests/test_viterbi_numpy.py`` checks them against each
other). Typed memoryviews read any buffer, so the module needs no numpy
headers to build.
"""

from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free, malloc

from spacy_crf.ml._lattice cimport check_lattice, mask_rows, row_mask, viterbi_forward

import numpy


def decode_flat(
    const float[:, ::1] emissions,
    const int64_t[::1] offsets,
    const float[:, ::1] transitions,
    const float[::1] start,
    const float[::1] end,
    const uint8_t[:, ::1] allowed=None,
):
    """Best paths of the docs whose emissions are the rows
    ``offsets[i]:offsets[i + 1]`` of ``emissions [N, K]``.

    transitions: ``[K_from, K_to]``; start, end: ``[K]``, already
    constrained (forbidden moves at :data:`~spacy_crf.ml.crf.IMPOSSIBLE`).
    allowed: None, or ``[N, K]`` with 0 where a tag is forbidden at a
    position (its emission then counts as IMPOSSIBLE).

    Returns ``(paths [N] int64, scores [B] float32)``: each doc's tags in
    its rows of ``paths``, and its best path's score (0 for an empty doc).
    """
    cdef Py_ssize_t longest = check_lattice("decode_flat", emissions, offsets, transitions, start, end, allowed)
    cdef Py_ssize_t num_rows = emissions.shape[0]
    cdef Py_ssize_t num_tags = emissions.shape[1]
    cdef Py_ssize_t num_docs = offsets.shape[0] - 1

    paths_array = numpy.empty(num_rows, dtype=numpy.int64)
    scores_array = numpy.zeros(num_docs, dtype=numpy.float32)
    cdef int64_t[::1] paths = paths_array
    cdef float[::1] best_scores = scores_array
    # The best score of each tag at each position of the doc being decoded.
    cdef float* states = <float*>malloc(max(longest, 1) * max(num_tags, 1) * sizeof(float))
    if states == NULL:
        raise MemoryError()
    cdef Py_ssize_t doc, first, length, t, j, k, tag
    cdef float best, candidate
    cdef float* row
    cdef float* previous
    cdef const uint8_t* mask
    cdef const uint8_t* rows_mask = mask_rows(allowed)
    try:
        with nogil:
            for doc in range(num_docs):
                first = offsets[doc]
                length = offsets[doc + 1] - first
                if length == 0:
                    continue
                mask = row_mask(rows_mask, first, num_tags)
                viterbi_forward(&emissions[first, 0], mask, length, num_tags, &transitions[0, 0], &start[0], states)
                # The last tag: the first maximum of the final states plus the end scores.
                row = states + (length - 1) * num_tags
                tag = 0
                best = row[0] + end[0]
                for j in range(1, num_tags):
                    candidate = row[j] + end[j]
                    if candidate > best:
                        best = candidate
                        tag = j
                best_scores[doc] = best
                paths[first + length - 1] = tag
                # Walk back: the first predecessor whose sum attains the stored maximum.
                for t in range(length - 2, -1, -1):
                    previous = states + t * num_tags
                    j = 0
                    best = previous[0] + transitions[0, tag]
                    for k in range(1, num_tags):
                        candidate = previous[k] + transitions[k, tag]
                        if candidate > best:
                            best = candidate
                            j = k
                    tag = j
                    paths[first + t] = tag
    finally:
        free(states)
    return paths_array, scores_array
