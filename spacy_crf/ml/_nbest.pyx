# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The ``k`` best tag paths of ragged docs, compiled: the search behind
:func:`spacy_crf.ml.nbest.decode` on CPU.

The numpy path's list Viterbi keeps ``k`` partial paths per tag and
position: ``k`` times the 1-best's work, and more. This kernel runs the
1-best's forward pass (``_lattice.pxd``'s, the one ``_viterbi.pyx`` runs,
so its first path is that path to the bit) and finds the others by Lawler's
partition of the paths, from the end (Nilsson and Goldberger's n-best for
HMMs). Each path after the first equals an earlier one from some node on
(the node: a position and its tag; the end counts as one) and takes there
the predecessor after the earlier path's in the order of their sums
``states[t - 1, i] + transitions[i, tag]``; before that it follows the
Viterbi backpointers. Its score is the earlier path's less the difference
of those two sums. Each path found offers, at every node of the part it
backtraced, the second-best predecessor there, and at the node where it
left, the predecessor after its own; the best offer is the next path. Only
the best ``k - found`` offers are kept (one that ``k - found`` others beat
is never taken), and a backtrace that reaches a node of an earlier path's
backtraced part copies that path's prefix and differences (the
backpointers are the same from there on). So the work past the forward
pass is a few short backtraces and a scan of each new path's differences.

Forbidden moves, start and end tags (``IMPOSSIBLE`` in the constrained
scores) and forbidden tags (``allowed``) are never offered: a doc has as
many paths as are allowed, up to ``k``, none when none is. Among paths of
equal score the order is deterministic (the earlier offer first), not
necessarily the numpy path's.
"""

from libc.math cimport INFINITY
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memmove

from spacy_crf.ml._lattice cimport check_lattice, mask_rows, row_mask, viterbi_forward

import numpy

#: a sum at or below this took a forbidden move or tag
cdef float FORBIDDEN_BELOW = -5e29


cdef struct Buffers:
    float* states  # [n, K] of the doc being decoded
    float* moves_to  # [K_to, K_from]: a column of the transitions, contiguous
    double* gaps  # [k, n + 1]: per path, at each backtraced node, best minus second-best predecessor sum
    int32_t* seconds  # [k, n + 1]: the second-best predecessor there
    int* changed_at  # [k]: the node where a path leaves the one it came from (n: the end)
    double* path_scores  # [k]
    double* offer_scores  # [k], best first
    int* offer_paths  # [k]: the path the offer changes
    int* offer_nodes  # [k]: at which node
    int* offer_tags  # [k]: to which predecessor


cdef inline void _best_two(
    const float* previous, const float* moves, Py_ssize_t num_tags,
    float* best, int* best_tag, float* second, int* second_tag,
) noexcept nogil:
    """The first maximum of ``previous[i] + moves[i]`` and the largest of the
    others (the first of them on a tie)."""
    cdef Py_ssize_t i
    cdef float value
    best[0] = -INFINITY
    second[0] = -INFINITY
    best_tag[0] = -1
    second_tag[0] = -1
    for i in range(num_tags):
        value = previous[i] + moves[i]
        if value > best[0]:
            second[0] = best[0]
            second_tag[0] = best_tag[0]
            best[0] = value
            best_tag[0] = i
        elif value > second[0]:
            second[0] = value
            second_tag[0] = i


cdef inline int _next_tag(
    const float* previous, const float* moves, Py_ssize_t num_tags, float after, int after_tag, float* found,
) noexcept nogil:
    """The predecessor after ``after_tag`` (sum ``after``) in the order of
    the sums, best first and the smaller tag first among equal ones; -1 when
    no allowed one is left."""
    cdef Py_ssize_t i
    cdef float value
    cdef int tag = -1
    found[0] = FORBIDDEN_BELOW
    for i in range(num_tags):
        value = previous[i] + moves[i]
        if (value < after or (value == after and i > after_tag)) and value > found[0]:
            found[0] = value
            tag = i
    return tag


cdef inline bint _wanted(Buffers* b, int room, int count, double score) noexcept nogil:
    """Whether an offer of ``score`` is among the best ``room`` (after those that score the same)."""
    return room > 0 and (count < room or score > b.offer_scores[room - 1])


cdef inline void _offer(Buffers* b, int room, int* count, double score, int path, int node, int tag) noexcept nogil:
    """Keep the offer if it is among the best ``room``, after those that score the same."""
    cdef int at
    if not _wanted(b, room, count[0], score):
        return
    at = count[0] if count[0] < room else room - 1
    while at > 0 and b.offer_scores[at - 1] < score:
        b.offer_scores[at] = b.offer_scores[at - 1]
        b.offer_paths[at] = b.offer_paths[at - 1]
        b.offer_nodes[at] = b.offer_nodes[at - 1]
        b.offer_tags[at] = b.offer_tags[at - 1]
        at -= 1
    b.offer_scores[at] = score
    b.offer_paths[at] = path
    b.offer_nodes[at] = node
    b.offer_tags[at] = tag
    if count[0] < room:
        count[0] += 1


cdef void _backtrace(
    Buffers* b, int64_t* paths, Py_ssize_t n, Py_ssize_t num_tags, int path, Py_ssize_t top, int room, int* count,
) noexcept nogil:
    """Fill ``path``'s tags below node ``top`` from the backpointers, offering
    the second-best predecessor of each node; copy an earlier path's prefix
    from the first node the two share on that path's backtraced part."""
    cdef int64_t* row = paths + path * n
    cdef double* gaps = b.gaps + path * (n + 1)
    cdef int32_t* seconds = b.seconds + path * (n + 1)
    cdef double score = b.path_scores[path]
    cdef Py_ssize_t node = top, other
    cdef int64_t tag
    cdef float best, second
    cdef int best_tag, second_tag
    while node >= 1:
        tag = row[node]
        for other in range(path):
            if b.changed_at[other] > node and paths[other * n + node] == tag:
                memcpy(row, paths + other * n, node * sizeof(int64_t))
                memcpy(gaps + 1, b.gaps + other * (n + 1) + 1, node * sizeof(double))
                memcpy(seconds + 1, b.seconds + other * (n + 1) + 1, node * sizeof(int32_t))
                while node >= 1:
                    if seconds[node] >= 0 and _wanted(b, room, count[0], score - gaps[node]):
                        _offer(b, room, count, score - gaps[node], path, <int>node, seconds[node])
                    node -= 1
                return
        _best_two(b.states + (node - 1) * num_tags, b.moves_to + tag * num_tags, num_tags,
                  &best, &best_tag, &second, &second_tag)
        row[node - 1] = best_tag
        if second > FORBIDDEN_BELOW:
            gaps[node] = <double>best - <double>second
            seconds[node] = second_tag
            if _wanted(b, room, count[0], score - gaps[node]):
                _offer(b, room, count, score - gaps[node], path, <int>node, second_tag)
        else:
            gaps[node] = INFINITY
            seconds[node] = -1
        node -= 1


cdef int _doc_nbest(
    Buffers* b, int64_t* paths, Py_ssize_t n, Py_ssize_t num_tags, int k, const float* end,
) noexcept nogil:
    """The ``k`` best paths of a doc whose states are in ``b.states``: their
    tags in ``paths [k, n]``, their scores in ``b.path_scores``; returns how
    many there are."""
    cdef float best, second, value, following
    cdef int best_tag, second_tag, found, count = 0, path, parent, node, tag
    cdef const float* previous
    cdef const float* moves
    _best_two(b.states + (n - 1) * num_tags, end, num_tags, &best, &best_tag, &second, &second_tag)
    if best <= FORBIDDEN_BELOW:
        return 0
    paths[n - 1] = best_tag
    b.path_scores[0] = best
    b.changed_at[0] = <int>n
    if second > FORBIDDEN_BELOW:
        _offer(b, k - 1, &count, <double>second, 0, <int>n, second_tag)
    _backtrace(b, paths, n, num_tags, 0, n - 1, k - 1, &count)
    found = 1
    while found < k and count > 0:
        path, parent, node, tag = found, b.offer_paths[0], b.offer_nodes[0], b.offer_tags[0]
        b.path_scores[path] = b.offer_scores[0]
        count -= 1
        memmove(b.offer_scores, b.offer_scores + 1, count * sizeof(double))
        memmove(b.offer_paths, b.offer_paths + 1, count * sizeof(int))
        memmove(b.offer_nodes, b.offer_nodes + 1, count * sizeof(int))
        memmove(b.offer_tags, b.offer_tags + 1, count * sizeof(int))
        found += 1
        memcpy(paths + path * n + node, paths + parent * n + node, (n - node) * sizeof(int64_t))
        paths[path * n + node - 1] = tag
        b.changed_at[path] = node
        # the offer after this one at the same node
        previous = b.states + (node - 1) * num_tags
        moves = end if node == n else b.moves_to + paths[path * n + node] * num_tags
        value = previous[tag] + moves[tag]
        tag = _next_tag(previous, moves, num_tags, value, tag, &following)
        if tag >= 0:
            _offer(b, k - found, &count, b.path_scores[path] - (<double>value - <double>following), path, node, tag)
        _backtrace(b, paths, n, num_tags, path, node - 1, k - found, &count)
    return found


def nbest_flat(
    const float[:, ::1] emissions,
    const int64_t[::1] offsets,
    const float[:, ::1] transitions,
    const float[::1] start,
    const float[::1] end,
    int k,
    const uint8_t[:, ::1] allowed=None,
):
    """The ``k`` best paths of the docs whose emissions are the rows
    ``offsets[i]:offsets[i + 1]`` of ``emissions [N, K]``.

    transitions ``[K_from, K_to]``, start, end ``[K]``: already constrained
    (forbidden moves at :data:`~spacy_crf.ml.crf.IMPOSSIBLE`); allowed: None,
    or ``[N, K]`` with 0 where a tag is forbidden at a position (its
    emission then counts as IMPOSSIBLE).

    Returns ``(paths [k * N] int64, scores [B, k] float64, counts [B] int64)``:
    doc ``i``'s ``counts[i]`` paths, best first, are
    ``paths[k * offsets[i]:][:counts[i] * n_i]`` as ``[counts[i], n_i]``,
    their scores ``scores[i, :counts[i]]`` (-inf past them); an empty doc has
    one empty path of score 0.
    """
    if k < 1:
        raise ValueError(f"nbest_flat: k must be at least 1, got {k}")
    cdef Py_ssize_t longest = check_lattice("nbest_flat", emissions, offsets, transitions, start, end, allowed)
    cdef Py_ssize_t num_rows = emissions.shape[0]
    cdef Py_ssize_t num_tags = emissions.shape[1]
    cdef Py_ssize_t num_docs = offsets.shape[0] - 1
    cdef Py_ssize_t i, j

    paths_array = numpy.empty(k * num_rows, dtype=numpy.int64)
    scores_array = numpy.full((num_docs, k), -numpy.inf)
    counts_array = numpy.ones(num_docs, dtype=numpy.int64)  # (an empty doc's one path)
    scores_array[:, 0] = 0.0
    if num_rows == 0:  # (no pointer into the views below)
        return paths_array, scores_array, counts_array
    cdef int64_t[::1] paths = paths_array
    cdef double[:, ::1] scores = scores_array
    cdef int64_t[::1] counts = counts_array
    cdef Buffers b
    cdef Py_ssize_t nodes = longest + 1
    b.states = <float*>malloc(longest * num_tags * sizeof(float))
    b.moves_to = <float*>malloc(num_tags * num_tags * sizeof(float))
    b.gaps = <double*>malloc(k * nodes * sizeof(double))
    b.seconds = <int32_t*>malloc(k * nodes * sizeof(int32_t))
    b.changed_at = <int*>malloc(k * sizeof(int))
    b.path_scores = <double*>malloc(k * sizeof(double))
    b.offer_scores = <double*>malloc(k * sizeof(double))
    b.offer_paths = <int*>malloc(k * sizeof(int))
    b.offer_nodes = <int*>malloc(k * sizeof(int))
    b.offer_tags = <int*>malloc(k * sizeof(int))
    cdef Py_ssize_t doc, first, length, r
    cdef int found
    cdef const uint8_t* mask
    cdef const uint8_t* rows_mask = mask_rows(allowed)
    try:
        if (b.states == NULL or b.moves_to == NULL or b.gaps == NULL or b.seconds == NULL or b.changed_at == NULL
                or b.path_scores == NULL or b.offer_scores == NULL or b.offer_paths == NULL or b.offer_nodes == NULL
                or b.offer_tags == NULL):
            raise MemoryError()
        with nogil:
            for i in range(num_tags):
                for j in range(num_tags):
                    b.moves_to[j * num_tags + i] = transitions[i, j]
            for doc in range(num_docs):
                first = offsets[doc]
                length = offsets[doc + 1] - first
                if length == 0:
                    continue
                mask = row_mask(rows_mask, first, num_tags)
                viterbi_forward(&emissions[first, 0], mask, length, num_tags, &transitions[0, 0], &start[0], b.states)
                found = _doc_nbest(&b, &paths[k * first], length, num_tags, k, &end[0])
                counts[doc] = found
                for r in range(found):
                    scores[doc, r] = b.path_scores[r]
                if not found:
                    scores[doc, 0] = -INFINITY
    finally:
        free(b.states)
        free(b.moves_to)
        free(b.gaps)
        free(b.seconds)
        free(b.changed_at)
        free(b.path_scores)
        free(b.offer_scores)
        free(b.offer_paths)
        free(b.offer_nodes)
        free(b.offer_tags)
    return paths_array, scores_array, counts_array
