"""The compiled part of the package: the Viterbi kernel (``spacy_crf/ml/_viterbi.pyx``).

Everything else about the package is in setup.cfg. The kernel's typed
memoryviews need no numpy headers, so building it needs Cython and a C
compiler only (pyproject.toml's build requirements).
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(ext_modules=cythonize([Extension("spacy_crf.ml._viterbi", ["spacy_crf/ml/_viterbi.pyx"])]))
