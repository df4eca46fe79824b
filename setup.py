"""The compiled part of the package: the Viterbi kernel, the n-best kernel
and its log-partition, the dictionary matcher and the mean pooling
(``spacy_crf/ml/_viterbi.pyx``, ``_nbest.pyx``, ``_partition.pyx``,
``_word_trie.pyx``, ``_pooling.pyx``).

Everything else about the package is in setup.cfg. The kernels' typed
memoryviews need no numpy headers, so building them needs Cython and a C
compiler only (pyproject.toml's build requirements).
"""

import sys

from Cython.Build import cythonize
from setuptools import Extension, setup

KERNELS = ["_viterbi", "_nbest", "_partition", "_word_trie", "_pooling"]

# The kernels promise the pure-Python paths' float32 results to the bit: no
# fused multiply-adds, whatever -march a builder's CFLAGS ask for. Python's
# own CFLAGS carry -g, which made each module about a megabyte of debug
# information; -g0 (later on the command line, so it wins) leaves it out.
FLAGS = [] if sys.platform == "win32" else ["-ffp-contract=off", "-g0"]
# The log-partition's exp of every emission vectorizes only where GCC may turn
# comparisons into selects: -fno-trapping-math (nothing reads the
# floating-point exception flags; the results are the same).
EXTRA_FLAGS = {"_partition": [] if sys.platform == "win32" else ["-fno-trapping-math"]}
EXTENSIONS = cythonize(
    [
        Extension(
            f"spacy_crf.ml.{name}", [f"spacy_crf/ml/{name}.pyx"], extra_compile_args=FLAGS + EXTRA_FLAGS.get(name, [])
        )
        for name in KERNELS
    ]
)
for extension in EXTENSIONS:
    # Where no C compiler is at hand the install goes on without the kernels,
    # and the package runs its pure-Python paths (spacy_crf.ml.kernels).
    # (Set after cythonize, whose extensions do not carry the flag over.)
    extension.optional = True

setup(ext_modules=EXTENSIONS)
