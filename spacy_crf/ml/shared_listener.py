"""One pooled transformer output per batch for the heads that listen to the
same transformer in the same way, at prediction time.

A joint pipeline's segmenter and NER tagger each listen to the shared
transformer through spacy-transformers' ``TransformerListener.v1``: a
listener layer that reads ``doc._.trf_data``, then ``trfs2arrays``, which
pools each doc's wordpiece rows into one row per token. At prediction the two
heads pool the same data the same way, per doc in Python, one after the
other. :func:`predict` gives the second head the first one's result
(kept for the last few sub-batches, :mod:`.batch_cache`), for the
same doc objects carrying the same ``trf_data`` objects and a listener chain
of the same layers (same names, forward functions and attributes) and
without parameters, whose prediction is then a function of ``trf_data``
alone. Anything else (training, another tok2vec, a doc without
``trf_data``) runs the layer as usual. The arrays handed out are read-only,
as two heads hold them.
"""

from typing import Hashable, List, Optional, Sequence

from spacy.tokens import Doc
from thinc.api import Model
from thinc.types import Floats2d

from .._compat import layer_forward, transformer_data
from .batch_cache import BatchCache, read_only

#: spacy-transformers' listener chain, as ``TransformerListener.v1`` builds it
LISTENER_CHAIN = "transformer-listener>>trfs2arrays"


def signature(tok2vec: Model) -> Optional[Hashable]:
    """What makes two listener chains compute the same prediction: their
    upstream, and each layer's name, forward function and attributes. None
    when ``tok2vec`` is not a parameter-free listener chain (no sharing)."""
    if tok2vec.name != LISTENER_CHAIN:
        return None
    nodes = list(tok2vec.walk())
    if any(node.param_names for node in nodes):
        return None
    listener = tok2vec.layers[0]
    layers = tuple((node.name, layer_forward(node), repr(sorted(node.attrs.items()))) for node in nodes)
    return (getattr(listener, "upstream_name", None), layers)


_pooled = BatchCache()


def predict(tok2vec: Model, docs: Sequence[Doc]) -> List[Floats2d]:
    """``tok2vec.predict(docs)``, or what it gave for the same docs and
    ``trf_data`` in one of the last batches, where that is the same (see the
    module docstring)."""
    key = signature(tok2vec)
    data = tuple(transformer_data(doc) for doc in docs) if key is not None and docs else ()
    if key is None or not data or any(d is None for d in data):
        return tok2vec.predict(docs)
    return _pooled.get((*docs, *data), key, sum(len(doc) for doc in docs), lambda: read_only(tok2vec.predict(docs)))
