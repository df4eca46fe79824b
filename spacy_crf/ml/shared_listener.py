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

With the stock mean pooling (``reduce_mean.v1``), the batch is pooled at
once (:func:`mean_pooled`): ``trfs2arrays`` aligns and pools doc by doc
and copies the aligned rows twice, this gathers them into one buffer and
runs the same thinc ``reduce_mean`` over it, so the result is the same to
the bit; where the compiled kernel is built (:mod:`.kernels`), it sums
each token's rows straight into its output row with ``reduce_mean``'s
arithmetic, the same result again without the gathered copy.
"""

from typing import Hashable, List, Optional, Sequence

import numpy
from spacy.tokens import Doc
from thinc.api import Model, NumpyOps
from thinc.types import Floats2d

from .._compat import layer_forward, transformer_data
from ..util import split_rows
from . import kernels
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
    return _pooled.get(
        (*docs, *data), key, sum(len(doc) for doc in docs), lambda: read_only(_pool(tok2vec, docs, data))
    )


def _pool(tok2vec: Model, docs: Sequence[Doc], data: Sequence[object]) -> List[Floats2d]:
    pooled = mean_pooled(tok2vec, data)
    return tok2vec.predict(docs) if pooled is None else pooled


def mean_pooled(tok2vec: Model, data: Sequence[object]) -> Optional[List[Floats2d]]:
    """``tok2vec``'s prediction from the docs' ``trf_data`` (``data``), for the
    stock listener chain with ``reduce_mean`` pooling on CPU and float32
    transformer outputs that are all non-empty; None for anything else (the
    caller runs the chain)."""
    from spacy_transformers.data_classes import TransformerData
    from spacy_transformers.layers.trfs2arrays import forward as trfs2arrays_forward
    from thinc.layers.reduce_mean import forward as reduce_mean_forward

    if tok2vec.name != LISTENER_CHAIN or not isinstance(tok2vec.ops, NumpyOps) or not data:
        return None
    to_arrays = tok2vec.layers[-1]
    if layer_forward(to_arrays) is not trfs2arrays_forward or len(to_arrays.layers) != 1:
        return None
    pooling = to_arrays.layers[0]
    if layer_forward(pooling) is not reduce_mean_forward:
        return None
    sources, indices, lengths = [], [], []
    for trf_data in data:
        if not isinstance(trf_data, TransformerData) or "last_hidden_state" not in trf_data.model_output:
            return None
        hidden = trf_data.model_output["last_hidden_state"]
        if not isinstance(hidden, numpy.ndarray) or hidden.dtype != numpy.float32 or hidden.size == 0:
            return None
        sources.append(hidden.reshape(-1, hidden.shape[-1]))
        indices.append(trf_data.align.dataXd)
        lengths.append(trf_data.align.lengths)
    width = sources[0].shape[1]
    if any(source.shape[1] != width for source in sources):
        return None
    counts = [len(doc_lengths) for doc_lengths in lengths]
    if kernels.active(kernels.mean_rows):
        means = numpy.empty((sum(counts), width), dtype=numpy.float32)
        kernels.mean_rows(
            sources,
            [numpy.ascontiguousarray(index, dtype=numpy.int32) for index in indices],
            [numpy.ascontiguousarray(doc_lengths, dtype=numpy.int32) for doc_lengths in lengths],
            means,
        )
        return split_rows(pooling.ops, means, counts)
    rows = numpy.empty((sum(len(index) for index in indices), width), dtype=numpy.float32)
    start = 0
    for source, index in zip(sources, indices):
        numpy.take(source, index, axis=0, out=rows[start : start + len(index)])
        start += len(index)
    means = pooling.ops.reduce_mean(rows, numpy.concatenate(lengths).astype(numpy.int32))
    return split_rows(pooling.ops, means, counts)
