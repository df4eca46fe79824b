# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Every occurrence of a dictionary's words in a text, compiled: the kernel
behind :meth:`spacy_crf.ml.lexicon_match.WordLexicon.match_arrays`.

The Aho-Corasick automaton of pyahocorasick finds the same occurrences, but
over a text translated to two private-use digits per character (its nodes
branch on a byte-sized alphabet) and with a Python tuple per occurrence. Here
a trie over code points of the reversed words is walked back from each
character of the text, up to the longest word: one hash lookup per step,
and no Python object per occurrence.
The occurrences come out in the automaton's order (by end, the longest
first), so everything computed from them is the same to the bit.
"""

from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport free, malloc, realloc

import numpy

# A child is found by (node << CODE_BITS | code point) in one open-addressing
# table: a dictionary of 350k words has about a million nodes, and a table of
# per-node child lists would be as large and slower to search.
cdef enum:
    CODE_BITS = 21
cdef uint64_t EMPTY = <uint64_t>-1


cdef inline uint64_t _slot(const uint64_t* keys, uint64_t mask, uint64_t key) nogil:
    """Where ``key`` is in the table, or the empty slot where it would go."""
    cdef uint64_t slot = ((key * <uint64_t>0x9E3779B97F4A7C15) >> 20) & mask
    while keys[slot] != EMPTY and keys[slot] != key:
        slot = (slot + 1) & mask
    return slot


cdef class WordTrie:
    """The words of ``words`` (distinct strings, none empty), word ``i``
    found as id ``i``."""

    cdef uint64_t[::1] keys
    cdef int32_t[::1] children
    cdef int32_t[::1] word_at
    cdef uint64_t mask
    cdef readonly int max_length
    cdef readonly Py_ssize_t num_nodes

    def __init__(self, words):
        words = list(words)  # read twice: sized first, then filled
        cdef Py_ssize_t total = 1
        cdef str word
        for word in words:
            total += len(word)
        cdef uint64_t size = 16
        while size < 2 * <uint64_t>total:
            size *= 2
        self.mask = size - 1
        self.keys = numpy.full(size, EMPTY, dtype=numpy.uint64)
        self.children = numpy.zeros(size, dtype=numpy.int32)
        word_at = numpy.full(total, -1, dtype=numpy.int32)
        self.word_at = word_at
        self.max_length = 0
        cdef Py_ssize_t nodes = 1, word_id = 0
        cdef int32_t node
        cdef Py_UCS4 ch
        cdef uint64_t key, slot
        for word in words:
            if len(word) == 0:
                raise ValueError("WordTrie: a word is empty")
            node = 0
            for ch in reversed(word):
                key = (<uint64_t>node << CODE_BITS) | <uint64_t>ch
                slot = _slot(&self.keys[0], self.mask, key)
                if self.keys[slot] == EMPTY:
                    self.keys[slot] = key
                    self.children[slot] = <int32_t>nodes
                    nodes += 1
                node = self.children[slot]
            if self.word_at[node] != -1:
                raise ValueError(f"WordTrie: the word {word!r} is given twice")
            self.word_at[node] = <int32_t>word_id
            self.max_length = max(self.max_length, len(word))
            word_id += 1
        self.num_nodes = nodes
        self.word_at = word_at[:nodes].copy()

    def find(self, str text):
        """``(ends, word_ids)``: int64 arrays, one entry per occurrence of a
        word in ``text``, ``ends`` the index of its last character; ordered
        by end, and at the same end the longest word first."""
        cdef Py_ssize_t n = len(text)
        cdef Py_ssize_t capacity = 1024, count = 0, group, i
        cdef int64_t* found = <int64_t*>malloc(2 * capacity * sizeof(int64_t))
        cdef int64_t* grown
        cdef int64_t swap
        if found == NULL:
            raise MemoryError()
        cdef Py_ssize_t first, last, limit
        cdef int32_t node, word
        cdef uint64_t key, slot
        cdef Py_UCS4 ch
        try:
            for last in range(n):
                # The trie holds the words reversed: walking back from ``last``
                # meets the words that end there, the shortest first.
                node = 0
                group = count
                limit = max(-1, last - self.max_length)
                for first in range(last, limit, -1):
                    ch = text[first]
                    key = (<uint64_t>node << CODE_BITS) | <uint64_t>ch
                    slot = _slot(&self.keys[0], self.mask, key)
                    if self.keys[slot] == EMPTY:
                        break
                    node = self.children[slot]
                    word = self.word_at[node]
                    if word >= 0:
                        if count == capacity:
                            capacity *= 2
                            grown = <int64_t*>realloc(found, 2 * capacity * sizeof(int64_t))
                            if grown == NULL:
                                raise MemoryError()
                            found = grown
                        found[2 * count] = last
                        found[2 * count + 1] = word
                        count += 1
                for i in range((count - group) // 2):  # the longest first
                    swap = found[2 * (group + i) + 1]
                    found[2 * (group + i) + 1] = found[2 * (count - 1 - i) + 1]
                    found[2 * (count - 1 - i) + 1] = swap
            pairs = numpy.empty((count, 2), dtype=numpy.int64)
            if count:
                _copy(pairs, found, count)
        finally:
            free(found)
        return numpy.ascontiguousarray(pairs[:, 0]), numpy.ascontiguousarray(pairs[:, 1])


cdef void _copy(int64_t[:, ::1] out, int64_t* found, Py_ssize_t count):
    cdef Py_ssize_t i
    for i in range(count):
        out[i, 0] = found[2 * i]
        out[i, 1] = found[2 * i + 1]
