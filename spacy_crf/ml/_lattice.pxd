# cython: language_level=3
"""What the CRF kernels (``_viterbi``, ``_nbest``, ``_partition``) share: the
check of their arguments, an emission under the ``allowed`` mask, and the
Viterbi forward pass, written once so that the n-best's first path is the
1-best's by construction, not by a copy kept in step."""

from libc.stdint cimport int64_t, uint8_t


cdef inline float emission(const float* row, const uint8_t* allowed, Py_ssize_t j) noexcept nogil:
    """``row[j]``, or :data:`spacy_crf.ml.crf.IMPOSSIBLE` where ``allowed``
    (NULL: all) forbids the tag."""
    if allowed != NULL and not allowed[j]:
        return <float>-1e30
    return row[j]


cdef inline const uint8_t* row_mask(const uint8_t* allowed, Py_ssize_t t, Py_ssize_t num_tags) noexcept nogil:
    """Row ``t`` of a doc's ``[n, K]`` mask (NULL for none)."""
    if allowed == NULL:
        return NULL
    return allowed + t * num_tags


cdef inline const uint8_t* mask_rows(const uint8_t[:, ::1] allowed):
    """The ``[N, K]`` mask's rows as one pointer for :func:`row_mask` (NULL
    for no mask, or no rows): a doc's mask is ``row_mask(rows, first, K)``."""
    if allowed is None or allowed.shape[0] == 0:
        return NULL
    return &allowed[0, 0]


cdef inline void viterbi_forward(
    const float* emissions, const uint8_t* allowed, Py_ssize_t length, Py_ssize_t num_tags,
    const float* transitions, const float* start, float* states,
) noexcept nogil:
    """The Viterbi states ``[length, K]`` of one doc (``emissions`` and
    ``allowed`` its rows; ``transitions`` ``[K, K]`` row-major). The sums are
    the numpy decoder's float32 additions in its order; predecessor-major, so
    the inner loop runs along a row of transitions and the compiler can
    vectorize the max (max is exact: the order of the comparisons does not
    change it)."""
    cdef Py_ssize_t t, j, i
    cdef float candidate
    cdef float* row
    cdef float* previous
    for j in range(num_tags):
        states[j] = start[j] + emission(emissions, allowed, j)
    for t in range(1, length):
        previous = states + (t - 1) * num_tags
        row = previous + num_tags
        for j in range(num_tags):
            row[j] = previous[0] + transitions[j]
        for i in range(1, num_tags):
            for j in range(num_tags):
                candidate = previous[i] + transitions[i * num_tags + j]
                row[j] = candidate if candidate > row[j] else row[j]
        for j in range(num_tags):
            row[j] = row[j] + emission(emissions + t * num_tags, row_mask(allowed, t, num_tags), j)


cdef inline Py_ssize_t check_lattice(
    str who,
    const float[:, ::1] emissions,
    const int64_t[::1] offsets,
    const float[:, ::1] transitions,
    const float[::1] start,
    const float[::1] end,
    const uint8_t[:, ::1] allowed,
) except -1:
    """A ``ValueError`` naming the kernel ``who`` for arguments that do not
    describe ragged docs over one tag set; else the longest doc's length."""
    cdef Py_ssize_t num_rows = emissions.shape[0]
    cdef Py_ssize_t num_tags = emissions.shape[1]
    cdef Py_ssize_t num_docs = offsets.shape[0] - 1
    if num_docs < 0:
        raise ValueError(f"{who}: offsets must hold at least one entry (0)")
    if num_tags == 0 and num_rows > 0:
        raise ValueError(f"{who}: the emissions have rows but no tags")
    if transitions.shape[0] != num_tags or transitions.shape[1] != num_tags:
        raise ValueError(f"{who}: transitions {tuple(transitions.shape)[:2]} for {num_tags} tags")
    if start.shape[0] != num_tags or end.shape[0] != num_tags:
        raise ValueError(f"{who}: start/end of {start.shape[0]}/{end.shape[0]} for {num_tags} tags")
    if allowed is not None and (allowed.shape[0] != num_rows or allowed.shape[1] != num_tags):
        raise ValueError(f"{who}: allowed {tuple(allowed.shape)[:2]}, emissions {(num_rows, num_tags)}")
    if offsets[0] != 0 or offsets[num_docs] != num_rows:
        raise ValueError(f"{who}: offsets run from {offsets[0]} to {offsets[num_docs]}, not 0 to {num_rows}")
    cdef Py_ssize_t i, longest = 0
    for i in range(num_docs):
        if offsets[i + 1] < offsets[i]:
            raise ValueError(f"{who}: offsets decrease at doc {i}")
        longest = max(longest, offsets[i + 1] - offsets[i])
    return longest
