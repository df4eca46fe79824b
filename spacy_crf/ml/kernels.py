"""The package's compiled kernels, and the one switch that turns them off.

Five loops of prediction run in C (Cython modules built by pip at
install): the Viterbi decoding of each doc over its own rows
(``_viterbi.pyx``, behind :func:`spacy_crf.ml.viterbi_numpy.decode`), the
n-best decoding and the log-partition of its probabilities (``_nbest.pyx``
and ``_partition.pyx``, behind :func:`spacy_crf.ml.nbest.decode`), the
dictionary matching of the lexicon features and the segmenter's prior
(``_word_trie.pyx``, behind
:meth:`spacy_crf.ml.lexicon_match.WordLexicon.match_arrays`) and the mean
pooling of the transformer's rows per token (``_pooling.pyx``, behind
:func:`spacy_crf.ml.shared_listener.mean_pooled`). Each gives what its
pure-Python path gives, to the bit: the numpy search, the pyahocorasick
automaton and thinc's ``reduce_mean`` stay as the references the tests
compare with, and as the fallback of a source tree that was never built.
The n-best kernels are the exception: the same paths (among paths of equal
score, maybe in another order) and the same ``log Z`` to float rounding.

``SPACY_CRF_PURE_PYTHON=1`` in the environment (or :func:`enabled` patched
in a benchmark) runs the pure-Python paths with the kernels built. Where
they were not built (pip found no C compiler, and hides why), the first
prediction says so with a :class:`KernelsNotBuiltWarning`.
"""

import os
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy

#: the environment variable that turns the kernels off
PURE_PYTHON = "SPACY_CRF_PURE_PYTHON"

decode_flat: Optional[Callable[..., Tuple[numpy.ndarray, numpy.ndarray]]]
nbest_flat: Optional[Callable[..., Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]]]
log_partition_flat: Optional[Callable[..., numpy.ndarray]]
WordTrie: Optional[Any]
mean_rows: Optional[Callable[..., None]]
try:
    from ._viterbi import decode_flat
except ImportError:  # pragma: no cover - CI builds it, and tests/test_kernels.py requires it
    decode_flat = None
try:
    from ._nbest import nbest_flat
except ImportError:  # pragma: no cover - as above
    nbest_flat = None
try:
    from ._partition import log_partition_flat
except ImportError:  # pragma: no cover - as above
    log_partition_flat = None
try:
    from ._word_trie import WordTrie
except ImportError:  # pragma: no cover - as above
    WordTrie = None
try:
    from ._pooling import mean_rows
except ImportError:  # pragma: no cover - as above
    mean_rows = None


def enabled() -> bool:
    """Whether prediction uses the kernels that are built."""
    return os.environ.get(PURE_PYTHON, "") in ("", "0")


def active(kernel: Optional[Any]) -> bool:
    """Whether to call ``kernel`` (one of this module's names): built, and enabled."""
    return kernel is not None and enabled()


def built() -> Dict[str, bool]:
    """Which kernels this installation has."""
    return {
        "viterbi": decode_flat is not None,
        "nbest": nbest_flat is not None,
        "partition": log_partition_flat is not None,
        "word_trie": WordTrie is not None,
        "pooling": mean_rows is not None,
    }


def missing() -> List[str]:
    """The kernels this installation lacks."""
    return [name for name, is_built in built().items() if not is_built]


class KernelsNotBuiltWarning(UserWarning):
    """The compiled kernels are missing: prediction runs the slower pure-Python paths."""


_warned = False


def warn_if_not_built() -> None:
    """Warn once per process when a kernel is missing and the kernels are not
    switched off on purpose."""
    global _warned
    if _warned or not missing() or not enabled():
        return
    _warned = True
    warnings.warn(
        KernelsNotBuiltWarning(
            f"spacy-crf's compiled kernels are not built ({', '.join(missing())}): predictions are the same, "
            "from slower pure-Python paths. Reinstall spacy-crf where a C compiler is available "
            f"(or set {PURE_PYTHON}=1 to run without them on purpose)."
        ),
        stacklevel=3,
    )
