# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Each token's mean of its wordpieces' transformer rows, compiled: the
kernel behind :func:`spacy_crf.ml.shared_listener.mean_pooled`.

The numpy path gathers every token's piece rows into one array
(``numpy.take``) and averages them with thinc's ``reduce_mean``: two passes
over a batch's hidden states, the first writing a copy as large as them.
Here each token's rows are summed straight into its output row, with
``reduce_mean``'s arithmetic (the output row starts at zero and each piece
row adds ``(float)(1.0 / n) * row``, in piece order), so the means are the
same to the bit.
"""

from libc.stdint cimport int32_t
from libc.string cimport memset


def mean_rows(sources, indices, lengths, float[:, ::1] out):
    """Fill ``out [N, width]`` with the token means of the docs, one doc after
    another: doc ``d``'s pieces are the rows of ``sources[d] [P_d, width]``
    (float32), its tokens' pieces the rows ``indices[d]`` (int32, token
    after token) and each token's piece count ``lengths[d]`` (int32). A
    token of no piece gets zeros."""
    cdef Py_ssize_t num_docs = len(sources)
    if len(indices) != num_docs or len(lengths) != num_docs:
        raise ValueError("mean_rows: sources, indices and lengths must have one entry per doc")
    cdef Py_ssize_t width = out.shape[1], row = 0, doc, token, piece, k, j
    cdef const float[:, ::1] source
    cdef const int32_t[::1] index
    cdef const int32_t[::1] count
    cdef float scale
    cdef const float* values
    cdef float* mean
    for doc in range(num_docs):
        source = sources[doc]
        index = indices[doc]
        count = lengths[doc]
        if source.shape[1] != width:
            raise ValueError(f"mean_rows: doc {doc} has rows of {source.shape[1]} values, the output {width}")
        if row + count.shape[0] > out.shape[0]:
            raise ValueError(f"mean_rows: the output has {out.shape[0]} rows, too few for doc {doc}")
        k = 0
        for token in range(count.shape[0]):
            if count[token] < 0 or k + count[token] > index.shape[0]:
                raise ValueError(f"mean_rows: doc {doc}'s piece counts do not fit its {index.shape[0]} indices")
            k += count[token]
        if k != index.shape[0]:
            raise ValueError(f"mean_rows: doc {doc}'s piece counts sum to {k}, it has {index.shape[0]} indices")
        for k in range(index.shape[0]):
            if index[k] < 0 or index[k] >= source.shape[0]:
                raise ValueError(f"mean_rows: doc {doc} indexes row {index[k]} of {source.shape[0]}")
        with nogil:
            k = 0
            for token in range(count.shape[0]):
                mean = &out[row, 0]
                memset(mean, 0, width * sizeof(float))
                if count[token] > 0:
                    scale = 1.0 / count[token]
                    for piece in range(count[token]):
                        values = &source[index[k], 0]
                        for j in range(width):
                            mean[j] += scale * values[j]
                        k += 1
                row += 1
    if row != out.shape[0]:
        raise ValueError(f"mean_rows: the docs have {row} tokens, the output {out.shape[0]} rows")
