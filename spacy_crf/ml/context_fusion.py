"""The ``spacy_crf.ContextFusion.v1`` layer: a small contextual layer over
each token's features before the emission layer (``spacy_crf.CRFTagger.v1``'s
``fusion``).

Without it, the features beside the encoder's (the lexicon's, the tagger's)
reach the linear emission layer as they are: a dictionary match or a tagger's
marginal can only move the scores of its own token. This layer mixes each
token's features with its neighbours' (within the doc), so that evidence
about one character informs the tags of the next.

The maths, for a batch of docs with N tokens in all, X ``[N, nI]`` the rows
of the layer below (encoder | lexicon | tagger features), docs laid end to end:

* H₀ = X W_inᵀ + b_in, W_in ``fusion_in_W`` ``[width, nI]``, b_in
  ``fusion_in_b`` ``[width]``: one projection to the layer's width;
* ``kind = "conv"``: ``depth`` residual windowed maxout blocks (spaCy's
  ``MaxoutWindowEncoder``), for l = 1..depth:
  C = seq2col(H_{l-1}, window) ``[N, (2·window+1)·width]`` (the token's
  ``window`` neighbours on each side, zeros past the ends of its doc),
  Z = C W_lᵀ + b_l ``[N, width·P]`` (``fusion_conv_W`` ``[depth, width·P,
  (2·window+1)·width]``, ``fusion_conv_b`` ``[depth, width·P]``,
  P = ``maxout_pieces``), M = max over the P pieces of Z ``[N, width]``,
  H_l = H_{l-1} + LayerNorm(M) with gain ``fusion_norm_G`` and bias
  ``fusion_norm_b`` (``[depth, width]``); H = H_depth;
* Y = [X | H] ``[N, nI + width]``, split per doc: the emission layer sees
  the features as before and their contextual mix beside them, so the
  model of before is one setting of the weights (the emission columns of
  H at zero).

Backprop from dY: dH = dY[:, nI:] goes back through the blocks (the
residual passes it on; each block adds its input's gradient through the
layer norm, the maxout's chosen pieces and seq2col's adjoint) to dH₀;
dW_in = dH₀ᵀ X, db_in = sum_i dH₀[i], dX = dY[:, :nI] + dH₀ W_in. No
dropout inside (spaCy's MaxoutWindowEncoder has none either).

Learning rate: every parameter is named ``fusion_*`` and grouped with the
emission layer (:data:`spacy_crf.training.param_groups.EMISSION_PATTERNS`):
with ``crf_includes_emissions = false`` (``configs/joint.cfg``) that is the
optimizer's base rate, the encoder's; with ``true``, the ``crf`` group's.
A float32 layer of numpy maths: CPU autocast (a torch shim's) and lazy rows
(the encoder's embedding table) leave it as it is.
"""

from typing import Callable, List, Optional, Tuple

from spacy.util import registry
from thinc.api import Model, glorot_uniform_init, zero_init
from thinc.types import Floats2d

from ..util import flat_rows, matmul, split_rows

#: the name of the layer in a CRF tagger model (``model.get_ref``)
REF = "context_fusion"
# A BiLSTM kind waits for a correct kernel: thinc's LSTM backprop (8.3)
# fails a finite-difference check, its input gradient at a one-step
# sequence is zero.
KINDS = ("conv",)
IN_W, IN_B = "fusion_in_W", "fusion_in_b"
CONV_W, CONV_B, NORM_G, NORM_B = "fusion_conv_W", "fusion_conv_b", "fusion_norm_G", "fusion_norm_b"
NORM_EPS = 1e-5


@registry.layers("spacy_crf.ContextFusion.v1")
def ContextFusion(
    width: int = 64, depth: int = 1, window: int = 1, kind: str = "conv", maxout_pieces: int = 2
) -> Model[List[Floats2d], List[Floats2d]]:
    """Token features ``[n, nI]`` per doc -> ``[n, nI + width]``: the features
    and a contextual mix of them (see the module doc).

    width: width of the mix.
    depth: conv blocks.
    window: the neighbours on each side a conv block sees (``depth``
        blocks see ``depth * window``).
    kind: ``"conv"`` (residual windowed maxout), the only kind so far.
    maxout_pieces: pieces of each conv unit's maxout.
    """
    who = "spacy_crf.ContextFusion.v1"
    for name, value, low in (("width", width, 1), ("depth", depth, 1), ("window", window, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{who}: {name} must be a whole number >= {low}, got {value!r}")
    if kind not in KINDS:
        raise ValueError(f"{who}: kind must be one of {', '.join(map(repr, KINDS))}, got {kind!r}")
    if isinstance(maxout_pieces, bool) or not isinstance(maxout_pieces, int) or maxout_pieces < 1:
        raise ValueError(f"{who}: maxout_pieces must be a whole number >= 1, got {maxout_pieces!r}")
    params = [IN_W, IN_B, CONV_W, CONV_B, NORM_G, NORM_B]
    return Model(
        REF,
        _forward,
        init=_init,
        dims={"nI": None, "nO": None, "width": width, "depth": depth, "window": window, "pieces": maxout_pieces},
        params={name: None for name in params},
        attrs={"kind": kind},
    )


def _init(model: Model, X: Optional[List[Floats2d]] = None, Y=None) -> None:
    if X is not None and len(X) and model.maybe_get_dim("nI") is None:
        model.set_dim("nI", X[0].shape[1])
    nI, width, depth = model.get_dim("nI"), model.get_dim("width"), model.get_dim("depth")
    model.set_dim("nO", nI + width)
    ops = model.ops
    model.set_param(IN_W, glorot_uniform_init(ops, (width, nI)))
    model.set_param(IN_B, zero_init(ops, (width,)))
    nP, nF = model.get_dim("pieces"), 2 * model.get_dim("window") + 1
    model.set_param(CONV_W, ops.xp.stack([glorot_uniform_init(ops, (width * nP, width * nF)) for _ in range(depth)]))
    model.set_param(CONV_B, zero_init(ops, (depth, width * nP)))
    model.set_param(NORM_G, ops.xp.ones((depth, width), dtype="f"))
    model.set_param(NORM_B, zero_init(ops, (depth, width)))


def _forward(model: Model, Xs: List[Floats2d], is_train: bool):
    ops = model.ops
    nI, width = model.get_dim("nI"), model.get_dim("width")
    lengths = [len(x) for x in Xs]
    X = flat_rows(ops, Xs) if Xs else ops.alloc2f(0, nI)
    if X.shape[1] != nI:
        raise ValueError(f"spacy_crf.ContextFusion.v1: the features are {X.shape[1]} wide, the layer takes {nI}")
    W_in = model.get_param(IN_W)
    H0 = matmul(ops, X, W_in, trans2=True) + model.get_param(IN_B)
    if len(X):
        H, backprop_mix = _conv_forward(model, H0, ops.asarray1i(lengths))
    else:
        H, backprop_mix = H0, (lambda dH: dH)
    Y = ops.xp.hstack([X, H])

    def backprop(dYs: List[Floats2d]) -> List[Floats2d]:
        dY = flat_rows(ops, dYs) if dYs else ops.alloc2f(0, nI + width)
        dH0 = backprop_mix(ops.as_contig(dY[:, nI:]))
        model.inc_grad(IN_W, matmul(ops, dH0, X, trans1=True))
        model.inc_grad(IN_B, dH0.sum(axis=0))
        return split_rows(ops, dY[:, :nI] + matmul(ops, dH0, W_in), lengths)

    return split_rows(ops, Y, lengths), backprop


# --- conv: residual windowed maxout blocks ---------------------------------------------------------


def _conv_forward(model: Model, H: Floats2d, lengths) -> Tuple[Floats2d, Callable[[Floats2d], Floats2d]]:
    ops = model.ops
    N, width = H.shape
    window, nP = model.get_dim("window"), model.get_dim("pieces")
    W, b = model.get_param(CONV_W), model.get_param(CONV_B)
    G, beta = model.get_param(NORM_G), model.get_param(NORM_B)
    saved = []
    for layer in range(len(W)):
        C = ops.seq2col(ops.as_contig(H), window, lengths=lengths)
        Z = matmul(ops, C, W[layer], trans2=True) + b[layer]
        M, which = ops.maxout(ops.reshape3f(Z, N, width, nP))
        xhat, rstd = _normalize(M)
        H = H + xhat * G[layer] + beta[layer]
        saved.append((C, which, xhat, rstd))

    def backprop(dH: Floats2d) -> Floats2d:
        dW, db = ops.alloc_f(W.shape), ops.alloc_f(b.shape)
        dG, dbeta = ops.alloc_f(G.shape), ops.alloc_f(beta.shape)
        for layer in reversed(range(len(W))):
            C, which, xhat, rstd = saved[layer]
            dG[layer] = (dH * xhat).sum(axis=0)
            dbeta[layer] = dH.sum(axis=0)
            dM = _backprop_normalize(dH * G[layer], xhat, rstd)
            dZ = ops.reshape2f(ops.backprop_maxout(ops.as_contig(dM), which, nP), N, width * nP)
            dW[layer] = matmul(ops, dZ, C, trans1=True)
            db[layer] = dZ.sum(axis=0)
            dH = dH + ops.backprop_seq2col(matmul(ops, dZ, W[layer]), window, lengths=lengths)
        for name, grad in ((CONV_W, dW), (CONV_B, db), (NORM_G, dG), (NORM_B, dbeta)):
            model.inc_grad(name, grad)
        return dH

    return H, backprop


def _normalize(M: Floats2d) -> Tuple[Floats2d, Floats2d]:
    """Layer norm without its gain and bias: (M - mean) / sqrt(var + eps) per row, and 1 / sqrt(var + eps)."""
    centred = M - M.mean(axis=1, keepdims=True)
    rstd = 1.0 / ((centred * centred).mean(axis=1, keepdims=True) + NORM_EPS) ** 0.5
    return centred * rstd, rstd


def _backprop_normalize(dxhat: Floats2d, xhat: Floats2d, rstd: Floats2d) -> Floats2d:
    mean_d = dxhat.mean(axis=1, keepdims=True)
    mean_dx = (dxhat * xhat).mean(axis=1, keepdims=True)
    return rstd * (dxhat - mean_d - xhat * mean_dx)
