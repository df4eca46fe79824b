# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The log-partition ``log Z`` of ragged docs at a temperature, compiled:
what the n-best probabilities are divided by (:func:`spacy_crf.ml.nbest.decode`).

``log Z`` is the forward algorithm over the scores divided by the
temperature ``T``, scaled, in float64: at each step the summed
exp-scores of the path prefixes ending in each tag are one small product
with ``exp(transitions)`` times ``exp(emissions)`` (each shifted by its
largest allowed score), divided by their total, whose log is added up;
forbidden moves and tags (``IMPOSSIBLE``, or 0 in ``allowed``) count 0.
Nothing underflows while every factor and every normalised sum is 0 or at
least ``1e-100`` (products of three stay normal floats); a doc where one is
not is summed again in log space, an ``exp`` per move.

Most of the time goes to the ``exp`` of every emission and to the product,
so both are written for the compiler's vectors: the emissions' factors by
a float32 ``exp`` of their own (a relative error of about 1e-7 times the
argument, below the float32 path scores' own; a doc with a factor below
``exp(-80)`` takes libm's in float64 instead), the product in pairs of
doubles with the rows padded to a multiple of 4 tags (up to 32 at widths
fixed at compile time, so that a step's sums stay in registers), normalised
a step late so that the chain from one step to the next is the product
alone. (Visiting only the allowed moves, in blocks of tags with the same
predecessors, did a third of the multiplications for BIOES but was no
faster at these widths: docs/results.md.)
"""

from libc.math cimport INFINITY, exp, isfinite, log
from libc.stdint cimport int64_t, uint8_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from spacy_crf.ml._lattice cimport check_lattice, emission, mask_rows, row_mask

import numpy

#: a score at or below this is forbidden
cdef float FORBIDDEN_BELOW = -5e29
cdef double SMALLEST = 1e-100
#: the fast ``exp`` takes arguments down to this
cdef float DEEPEST = -80.0


cdef extern from *:
    """
    #include <math.h>
    #include <string.h>
    #if defined(_MSC_VER) && !defined(restrict)
    #define restrict __restrict
    #endif
    #if defined(__GNUC__)
    #define PARTITION_INLINE static inline __attribute__((always_inline))
    #else
    #define PARTITION_INLINE static inline
    #endif

    /* exp(x) for x in [-87, 0]: a degree-7 Taylor polynomial of the rest
       after the power of two, to about 1e-7; branch-free, so it vectorizes. */
    static inline float partition_expf(float x) {
        float k = x * 1.44269504088896341f + 12582912.0f;  /* + 1.5 * 2^23 rounds x / ln 2 */
        unsigned int bits;
        memcpy(&bits, &k, 4);
        k -= 12582912.0f;
        float r = x - k * 0.693145751953125f;
        r = r - k * 1.428606765330187e-06f;
        float p = 1.0f + r * (1.0f + r * (0.5f + r * (0.16666667f + r * (0.041666668f
                  + r * (0.008333334f + r * (0.0013888889f + r * 0.00019841270f))))));
        bits = (bits + 127u) << 23;  /* 2^k */
        float scale;
        memcpy(&scale, &bits, 4);
        return p * scale;
    }

    /* values = exp(values) in place, each in [-87, 0] or -inf (0) */
    static void partition_exp_fast(float* restrict values, Py_ssize_t size) {
        for (Py_ssize_t i = 0; i < size; i++) {
            float a = values[i];
            float f = partition_expf(a > -87.0f ? a : -87.0f);
            values[i] = a > -87.0f ? f : 0.0f;
        }
    }

    /* moved = alpha [K] @ moves [K, width]. With GCC or Clang in vectors of
       two doubles that stay in registers (left to itself, GCC vectorized
       over the rows and kept the sums in memory, a store and a load per add). */
    #if defined(__GNUC__) || defined(__clang__)
    typedef double partition_pair __attribute__((vector_size(16)));
    PARTITION_INLINE void partition_moved(const double* restrict alpha, Py_ssize_t K, const Py_ssize_t width,
                                          const double* restrict moves, double* restrict moved) {
        partition_pair sums[width / 2];
        for (Py_ssize_t j = 0; j < width / 2; j++)
            sums[j] = (partition_pair){0.0, 0.0};
        for (Py_ssize_t i = 0; i < K; i++) {
            partition_pair a = {alpha[i], alpha[i]};
            const double* out_of = moves + i * width;
            for (Py_ssize_t j = 0; j < width / 2; j++) {
                partition_pair m;
                memcpy(&m, out_of + 2 * j, sizeof m);
                sums[j] += a * m;
            }
        }
        memcpy(moved, sums, width * sizeof(double));
    }
    #else
    PARTITION_INLINE void partition_moved(const double* restrict alpha, Py_ssize_t K, const Py_ssize_t width,
                                          const double* restrict moves, double* restrict moved) {
        for (Py_ssize_t j = 0; j < width; j++)
            moved[j] = 0.0;
        for (Py_ssize_t i = 0; i < K; i++)
            for (Py_ssize_t j = 0; j < width; j++)
                moved[j] += alpha[i] * moves[i * width + j];
    }
    #endif

    /* The scaled forward pass over the factors [n, width] (float32, or
       float64 where `doubles`; 0 where forbidden and past the K tags) and
       the moves [K, width]: log Z less the shifts. Sets *unsure where a
       normalised sum falls below 1e-100. A step's sums are normalised a
       step late (the product with the moves is linear), while the next
       product runs. Inlined with constant widths, the sums stay in registers. */
    PARTITION_INLINE double partition_sum(const void* factors, const int doubles, Py_ssize_t n, Py_ssize_t K,
                                          const Py_ssize_t width, const double* restrict moves,
                                          const double* restrict end_exp, double* restrict alpha,
                                          double* restrict moved, int* unsure) {
        const float* singles = (const float*)factors;
        const double* pairs = (const double*)factors;
        double logs = 0.0, product = 1.0, low = 1.0, scale = 1.0, total;
        for (Py_ssize_t j = 0; j < width; j++)
            alpha[j] = doubles ? pairs[j] : (double)singles[j];
        for (Py_ssize_t t = 0;; t++) {
            double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
            for (Py_ssize_t j = 0; j < width; j += 4) {
                s0 += alpha[j];
                s1 += alpha[j + 1];
                s2 += alpha[j + 2];
                s3 += alpha[j + 3];
            }
            total = (s0 + s1) + (s2 + s3);
            if (!(total > 0.0))
                return -INFINITY;
            scale = 1.0 / total;
            for (Py_ssize_t j = 0; j < width; j++) {
                double a = alpha[j] * scale;
                low = (a > 0.0 && a < low) ? a : low;
            }
            product *= total;
            if (product < 1e-200 || product > 1e200) {
                logs += log(product);
                product = 1.0;
            }
            if (t + 1 == n)
                break;
            partition_moved(alpha, K, width, moves, moved);
            for (Py_ssize_t j = 0; j < width; j++) {
                Py_ssize_t at = (t + 1) * width + j;
                alpha[j] = moved[j] * ((doubles ? pairs[at] : (double)singles[at]) * scale);
            }
        }
        if (low < 1e-100)
            *unsure = 1;
        total = 0.0;
        for (Py_ssize_t j = 0; j < width; j++)
            total += alpha[j] * scale * end_exp[j];
        return logs + log(product) + log(total);
    }

    #define PARTITION_SUM(W) \\
        static double partition_sum_##W(const void* factors, int doubles, Py_ssize_t n, Py_ssize_t K, \\
                                        const double* moves, const double* end_exp, int* unsure) { \\
            double alpha[W], moved[W]; \\
            if (doubles) \\
                return partition_sum(factors, 1, n, K, W, moves, end_exp, alpha, moved, unsure); \\
            return partition_sum(factors, 0, n, K, W, moves, end_exp, alpha, moved, unsure); \\
        }
    PARTITION_SUM(4)
    PARTITION_SUM(8)
    PARTITION_SUM(12)
    PARTITION_SUM(16)
    PARTITION_SUM(20)
    PARTITION_SUM(24)
    PARTITION_SUM(28)
    PARTITION_SUM(32)

    /* the padded row width for K tags: a multiple of 4 */
    static Py_ssize_t partition_width(Py_ssize_t K) {
        return (K + 3) / 4 * 4;
    }

    static double partition_scaled_sum(const void* factors, int doubles, Py_ssize_t n, Py_ssize_t K,
                                       const double* moves, const double* end_exp, double* alpha,
                                       double* moved, int* unsure) {
        switch (partition_width(K)) {
        case 4: return partition_sum_4(factors, doubles, n, K, moves, end_exp, unsure);
        case 8: return partition_sum_8(factors, doubles, n, K, moves, end_exp, unsure);
        case 12: return partition_sum_12(factors, doubles, n, K, moves, end_exp, unsure);
        case 16: return partition_sum_16(factors, doubles, n, K, moves, end_exp, unsure);
        case 20: return partition_sum_20(factors, doubles, n, K, moves, end_exp, unsure);
        case 24: return partition_sum_24(factors, doubles, n, K, moves, end_exp, unsure);
        case 28: return partition_sum_28(factors, doubles, n, K, moves, end_exp, unsure);
        case 32: return partition_sum_32(factors, doubles, n, K, moves, end_exp, unsure);
        }
        if (doubles)
            return partition_sum(factors, 1, n, K, partition_width(K), moves, end_exp, alpha, moved, unsure);
        return partition_sum(factors, 0, n, K, partition_width(K), moves, end_exp, alpha, moved, unsure);
    }
    """
    void partition_exp_fast(float* values, Py_ssize_t size) noexcept nogil
    Py_ssize_t partition_width(Py_ssize_t K) noexcept nogil
    double partition_scaled_sum(const void* factors, int doubles, Py_ssize_t n, Py_ssize_t K, const double* moves,
                                const double* end_exp, double* alpha, double* moved, int* unsure) noexcept nogil


cdef struct Buffers:
    float* singles  # [n, width]: a doc's factors, fast
    double* doubles  # [n, width]: the same by libm
    double* moves  # [K, width]: exp of the transitions
    double* end  # [width]: exp of the end scores
    double* alpha  # [2 width]


cdef double _scaled(
    Buffers* b, const float* emissions, const uint8_t* allowed, Py_ssize_t n, Py_ssize_t num_tags,
    const float* start, double shifts, double inverse, bint fast, int* unsure,
) noexcept nogil:
    """``log Z`` by the scaled pass, ``shifts`` the moves' and the end's
    shifts (divided by ``T``) already; its factors by the fast ``exp``
    (``fast``: unsure where one is below ``exp(-80)``) or libm's (unsure
    where one is below ``SMALLEST``); unsure too where a normalised sum is."""
    cdef Py_ssize_t t, j, width = partition_width(num_tags)
    cdef float e, x, shift, inverse_single = <float>inverse
    cdef double x_double
    cdef float* singles
    cdef double* doubles
    cdef const float* row
    cdef const uint8_t* mask
    for t in range(n):
        row = emissions + t * num_tags
        mask = row_mask(allowed, t, num_tags)
        singles = b.singles + t * width
        shift = -INFINITY
        for j in range(num_tags):
            e = emission(row, mask, j)
            x = -INFINITY
            if e > FORBIDDEN_BELOW and (t > 0 or start[j] > FORBIDDEN_BELOW):
                x = e + start[j] if t == 0 else e
            singles[j] = x
            shift = x if x > shift else shift
        if shift == -INFINITY:
            return -INFINITY
        shifts += shift * inverse
        if fast:
            for j in range(num_tags):
                x = (singles[j] - shift) * inverse_single
                if x < DEEPEST and x != -INFINITY:
                    unsure[0] = 1
                    return -INFINITY
                singles[j] = x
        else:
            doubles = b.doubles + t * width
            for j in range(num_tags):
                x_double = exp((<double>singles[j] - shift) * inverse)
                if x_double < SMALLEST and singles[j] != -INFINITY:
                    unsure[0] = 1
                doubles[j] = x_double
            for j in range(num_tags, width):
                doubles[j] = 0.0
        for j in range(num_tags, width):
            singles[j] = -INFINITY
    if fast:
        partition_exp_fast(b.singles, n * width)
    return shifts + partition_scaled_sum(
        <const void*>b.singles if fast else <const void*>b.doubles, 0 if fast else 1, n, num_tags, b.moves, b.end,
        b.alpha, b.alpha + width, unsure)


cdef double _exact(
    Buffers* b, const float* emissions, const uint8_t* allowed, Py_ssize_t n, Py_ssize_t num_tags,
    const float* transitions, const float* start, const float* end, double inverse,
) noexcept nogil:
    """``log Z`` by the forward pass in log space (an ``exp`` per move): for
    the docs the scaled pass is unsure of."""
    cdef Py_ssize_t t, i, j
    cdef double largest, total, x
    cdef float e, move
    cdef double* alpha = b.alpha
    cdef double* step = b.doubles
    for j in range(num_tags):
        e = emission(emissions, allowed, j)
        alpha[j] = -INFINITY
        if e > FORBIDDEN_BELOW and start[j] > FORBIDDEN_BELOW:
            alpha[j] = (<double>e + <double>start[j]) * inverse
    for t in range(1, n):
        for j in range(num_tags):
            e = emission(emissions + t * num_tags, row_mask(allowed, t, num_tags), j)
            largest = -INFINITY
            for i in range(num_tags):
                move = transitions[i * num_tags + j]
                if move > FORBIDDEN_BELOW:
                    x = alpha[i] + move * inverse
                    largest = x if x > largest else largest
            step[j] = -INFINITY
            if largest != -INFINITY and e > FORBIDDEN_BELOW:
                total = 0.0
                for i in range(num_tags):
                    move = transitions[i * num_tags + j]
                    if move > FORBIDDEN_BELOW:
                        total += exp(alpha[i] + move * inverse - largest)
                step[j] = largest + log(total) + e * inverse
        memcpy(alpha, step, num_tags * sizeof(double))
    largest = -INFINITY
    for j in range(num_tags):
        if end[j] > FORBIDDEN_BELOW:
            x = alpha[j] + end[j] * inverse
            largest = x if x > largest else largest
    if largest == -INFINITY:
        return -INFINITY
    total = 0.0
    for j in range(num_tags):
        if end[j] > FORBIDDEN_BELOW:
            total += exp(alpha[j] + end[j] * inverse - largest)
    return largest + log(total)


cdef double _exp_table(
    const float* scores, Py_ssize_t rows, Py_ssize_t cols, double inverse, double* out, int* tiny,
) noexcept nogil:
    """``out [rows, width] = exp((scores [rows, cols] - shift) / T)`` (0 where
    forbidden and past ``cols``), ``shift`` the largest allowed score; returns
    ``shift / T`` (0 when none is allowed); ``tiny`` where an allowed factor is
    below ``SMALLEST``."""
    cdef Py_ssize_t i, j, width = partition_width(cols)
    cdef double shift = -INFINITY
    cdef float score
    for i in range(rows * cols):
        if scores[i] > FORBIDDEN_BELOW and scores[i] > shift:
            shift = scores[i]
    if shift == -INFINITY:
        shift = 0.0
    for i in range(rows):
        for j in range(width):
            out[i * width + j] = 0.0
            if j < cols:
                score = scores[i * cols + j]
                if score > FORBIDDEN_BELOW:
                    out[i * width + j] = exp((<double>score - shift) * inverse)
                    if out[i * width + j] < SMALLEST:
                        tiny[0] = 1
    return shift * inverse


def log_partition_flat(
    const float[:, ::1] emissions,
    const int64_t[::1] offsets,
    const float[:, ::1] transitions,
    const float[::1] start,
    const float[::1] end,
    const uint8_t[:, ::1] allowed=None,
    double temperature=1.0,
):
    """``log Z [B]`` (float64) of the docs whose emissions are the rows
    ``offsets[i]:offsets[i + 1]`` of ``emissions [N, K]``, every score divided
    by ``temperature``: the log of the summed ``exp(score / T)`` of the
    doc's allowed paths; -inf where none is allowed, 0 for an empty doc.

    transitions ``[K_from, K_to]``, start, end ``[K]``: already constrained
    (forbidden moves at :data:`~spacy_crf.ml.crf.IMPOSSIBLE`); allowed: None,
    or ``[N, K]`` with 0 where a tag is forbidden at a position.
    """
    if not (temperature > 0 and temperature < INFINITY):
        raise ValueError(f"log_partition_flat: the temperature must be a finite number > 0, got {temperature}")
    cdef Py_ssize_t longest = check_lattice("log_partition_flat", emissions, offsets, transitions, start, end, allowed)
    cdef Py_ssize_t num_rows = emissions.shape[0]
    cdef Py_ssize_t num_tags = emissions.shape[1]
    cdef Py_ssize_t num_docs = offsets.shape[0] - 1

    log_z_array = numpy.zeros(num_docs)
    if num_rows == 0:  # (no pointer into the views below)
        return log_z_array
    cdef double[::1] log_z = log_z_array
    cdef Py_ssize_t width = partition_width(num_tags)
    cdef Buffers b
    b.singles = <float*>malloc(longest * width * sizeof(float))
    b.doubles = <double*>malloc(longest * width * sizeof(double))
    b.moves = <double*>malloc(num_tags * width * sizeof(double))
    b.end = <double*>malloc(width * sizeof(double))
    b.alpha = <double*>malloc(2 * width * sizeof(double))
    cdef Py_ssize_t doc, first, length
    cdef const uint8_t* mask
    cdef const uint8_t* rows_mask = mask_rows(allowed)
    cdef double inverse = 1.0 / temperature, end_shift, move_shift, value
    cdef int tiny = 0, unsure
    try:
        if b.singles == NULL or b.doubles == NULL or b.moves == NULL or b.end == NULL or b.alpha == NULL:
            raise MemoryError()
        with nogil:
            end_shift = _exp_table(&end[0], 1, num_tags, inverse, b.end, &tiny)
            move_shift = _exp_table(&transitions[0, 0], num_tags, num_tags, inverse, b.moves, &tiny)
            for doc in range(num_docs):
                first = offsets[doc]
                length = offsets[doc + 1] - first
                if length == 0:
                    continue
                mask = row_mask(rows_mask, first, num_tags)
                unsure = tiny
                value = -INFINITY
                if not unsure:  # (a move's shift counts once per move)
                    value = _scaled(&b, &emissions[first, 0], mask, length, num_tags, &start[0],
                                    end_shift + (length - 1) * move_shift, inverse, True, &unsure)
                    if unsure:
                        unsure = 0
                        value = _scaled(&b, &emissions[first, 0], mask, length, num_tags, &start[0],
                                        end_shift + (length - 1) * move_shift, inverse, False, &unsure)
                if unsure or not isfinite(value):
                    value = _exact(&b, &emissions[first, 0], mask, length, num_tags, &transitions[0, 0],
                                   &start[0], &end[0], inverse)
                log_z[doc] = value
    finally:
        free(b.singles)
        free(b.doubles)
        free(b.moves)
        free(b.end)
        free(b.alpha)
    return log_z_array
