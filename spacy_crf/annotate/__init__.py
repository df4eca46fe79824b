"""Annotate a corpus at scale: ``spacy crf annotate PIPELINE INPUT OUTPUT``.

``annotate()`` (in ``run``) reads shards (``io``), annotates them with a local
``nlp.pipe`` or a Ray Data actor pool (``engines``) and writes one record per
doc (``records``) to one output per shard, resumably.
"""

from .io import AnnotateError
from .run import annotate
from .writers import read_output

__all__ = ["annotate", "AnnotateError", "read_output"]
