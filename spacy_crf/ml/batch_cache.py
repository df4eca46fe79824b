"""Results computed for a batch of docs, kept for the next head that asks for
the same batch.

The heads of a joint pipeline see each batch in turn, and each one splits it
into the same length-sorted sub-batches (``CRFTagger.pipe``): by the time the
second head predicts its first sub-batch, the first head has done all of
them. So what they share (the lexicon features, the pooled transformer
output, the docs' texts) is kept for the last few sub-batches, not just the
last one, up to a number of tokens.
"""

import operator
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable, Sequence, Tuple, TypeVar

import numpy

T = TypeVar("T")

#: tokens' worth of results a cache keeps: a batch of 128 docs of 128 tokens
DEFAULT_MAX_TOKENS = 16_384


class BatchCache:
    """Results by the identity of the objects they were computed from (docs,
    their ``trf_data``) and a hashable ``extra`` (what else they depend on),
    oldest dropped first once they hold more than ``max_tokens`` tokens (the
    newest is always kept). The entries hold their objects, so an object's
    ``id`` is not reused while its entry exists."""

    def __init__(self, max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        self.max_tokens = max_tokens
        self._entries: "OrderedDict[Hashable, Tuple[Tuple[object, ...], Any, int]]" = OrderedDict()
        self._tokens = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, objects: Sequence[object], extra: Hashable, n_tokens: int, compute: Callable[[], T]) -> T:
        """The result kept for the same ``objects`` (by identity, in order) and
        ``extra``, else ``compute()``, kept as ``n_tokens`` tokens' worth."""
        key = (extra, tuple(map(id, objects)))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and all(map(operator.is_, entry[0], objects)):
                self._entries.move_to_end(key)
                return entry[1]
        result = compute()
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._tokens -= old[2]
            self._entries[key] = (tuple(objects), result, n_tokens)
            self._tokens += n_tokens
            while self._tokens > self.max_tokens and len(self._entries) > 1:
                _, (_, _, size) = self._entries.popitem(last=False)
                self._tokens -= size
        return result

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._tokens = 0


def read_only(result: T) -> T:
    """``result`` (an array, or a sequence of arrays) with its numpy arrays
    made read-only, as results kept for several heads are (a GPU array has no
    flags: the heads copy it anyway)."""
    for array in [result] if isinstance(result, numpy.ndarray) else result:  # type: ignore[union-attr]
        if isinstance(array, numpy.ndarray):
            array.setflags(write=False)
    return result
