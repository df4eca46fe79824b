"""The compiled part of the package: the Viterbi kernel and the dictionary
matcher (``spacy_crf/ml/_viterbi.pyx``, ``spacy_crf/ml/_word_trie.pyx``).

Everything else about the package is in setup.cfg. The kernels' typed
memoryviews need no numpy headers, so building them needs Cython and a C
compiler only (pyproject.toml's build requirements).
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

KERNELS = ["_viterbi", "_word_trie"]

setup(ext_modules=cythonize([Extension(f"spacy_crf.ml.{name}", [f"spacy_crf/ml/{name}.pyx"]) for name in KERNELS]))
