"""The ``spacy_crf.SpanPointer.v1`` architecture: a GlobalPointer span head.

Every span ``(i, j)`` (first and last token, ``i <= j``) gets one score per
label, so overlapping and nested entities are scored independently: 北京大学
(ORG) and the 北京 (LOC) inside it are two cells of the score table, not two
competing tag sequences. For each label ``l`` the head projects every token
vector ``x`` to a start vector ``q = W_start[l] x + b`` and an end vector
``k = W_end[l] x + b`` of ``width`` dimensions; then::

    score(i, j, l) = R(i) q_i[l] . R(j) k_j[l] / sqrt(width)

where ``R(p)`` is the rotary position embedding (RoPE, ``rope = true``): it
rotates pairs of dimensions by angles proportional to the position, so the
score depends on the span's length ``j - i`` as well as on its ends. Cells
with ``j < i``, beyond the doc, or (with ``max_length``) longer than
``max_length`` tokens are never scored.

The loss is GlobalPointer's *multilabel categorical cross-entropy*, per doc
and label, over the valid cells ``Ω`` split into gold spans ``P`` and the
others ``N``::

    loss = log(1 + Σ_{c ∈ N} exp(s_c)) + log(1 + Σ_{c ∈ P} exp(-s_c))

It pushes every gold cell above 0 and every other cell below 0, so the
decision threshold is 0 with no tuning, and unlike per-cell binary
cross-entropy it is not swamped by the ~n²/2 negative cells of a doc. Cells
whose gold is unknown (misaligned or missing annotation) are in neither set.
The losses are summed over docs and labels.

As with the CRF (:mod:`spacy_crf.ml.tagger_model`), the thinc model ends with the
projection (docs -> ``[n, 2 * n_labels * width]`` per doc: all start vectors,
then all end vectors) and the pipe computes the loss with :func:`span_loss`,
which returns the gradient of those projections. The parameters are named
``span_start_W``, ``span_start_b``, ``span_end_W``, ``span_end_b`` so that
:mod:`spacy_crf.training.optimizers` can give them a learning-rate group (``span_*``).
"""

import math
from typing import List, Optional, Sequence, Tuple

import numpy
import torch
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, chain, get_array_module, glorot_uniform_init, zero_init
from thinc.types import Floats2d
from thinc.util import torch2xp, xp2torch

from ..util import install_fork_hook, matmul
from . import fast_align

START_W, START_B, END_W, END_B = "span_start_W", "span_start_b", "span_end_W", "span_end_b"
#: gold cell values: a gold span, not a gold span, unknown (left out of the loss)
POSITIVE, NEGATIVE, UNKNOWN = 1, 0, -1
ROPE_BASE = 10000.0

#: one prediction: (first token, end token exclusive, label id, score)
Prediction = Tuple[int, int, int, float]


@registry.architectures("spacy_crf.SpanPointer.v1")
def build_span_pointer(
    tok2vec: Model[List[Doc], List[Floats2d]],
    nO: Optional[int] = None,
    width: int = 64,
    rope: bool = True,
) -> Model[List[Doc], List[Floats2d]]:
    """Token features -> per-label start and end projections (GlobalPointer).

    tok2vec: any layer that gives one vector per token (a transformer
        listener, ``spacy.HashEmbedCNN.v2``, ...).
    nO: the number of labels; inferred by the pipe from its labels if unset.
    width: dimensions of each label's start and end vectors (even with rope).
    rope: rotary position embedding, so that scores know the span length.
    """
    if rope and width % 2:
        raise ValueError(f"SpanPointer: width must be even with rope = true, got {width}.")
    fast_align.install()  # spacy-transformers' alignment without a Python step per token
    projection = SpanProjection(nO=nO, width=width)
    model: Model = chain(tok2vec, projection)
    model.set_ref("tok2vec", tok2vec)
    model.set_ref("span_projection", projection)
    model.attrs["span_width"] = width
    model.attrs["span_rope"] = rope
    return model


def SpanProjection(nO: Optional[int] = None, width: int = 64, nI: Optional[int] = None) -> Model:
    """[n, nI] -> [n, 2 * nO * width] per doc: start vectors of every label, then end vectors."""
    return Model(
        "span_projection",
        _projection_forward,
        init=_projection_init,
        dims={"nO": nO, "nI": nI, "nH": width},
        params={START_W: None, START_B: None, END_W: None, END_B: None},
    )


def _projection_init(model: Model, X: Optional[List[Floats2d]] = None, Y=None) -> None:
    if X is not None and len(X) and model.maybe_get_dim("nI") is None:
        model.set_dim("nI", X[0].shape[1])
    nO, nI, nH = model.get_dim("nO"), model.get_dim("nI"), model.get_dim("nH")
    for W, b in ((START_W, START_B), (END_W, END_B)):
        model.set_param(W, glorot_uniform_init(model.ops, (nO * nH, nI)))
        model.set_param(b, zero_init(model.ops, (nO * nH,)))


def _projection_forward(model: Model, Xs: List[Floats2d], is_train: bool):
    install_fork_hook()  # (torch runs in this process from now on: a forked worker must not hang)
    Ws = [model.get_param(START_W), model.get_param(END_W)]
    bs = [model.get_param(START_B), model.get_param(END_B)]
    half = Ws[0].shape[0]
    lengths = [len(x) for x in Xs]
    X = model.ops.flatten(Xs, pad=0) if Xs else model.ops.alloc2f(0, model.get_dim("nI"))
    Y = model.ops.xp.concatenate([matmul(model.ops, X, W, trans2=True) + b for W, b in zip(Ws, bs)], axis=1)

    def backprop(dYs: List[Floats2d]) -> List[Floats2d]:
        dY = model.ops.flatten(dYs, pad=0) if dYs else model.ops.alloc2f(0, 2 * half)
        dX = None
        for (W, b), part in zip(((START_W, START_B), (END_W, END_B)), (dY[:, :half], dY[:, half:])):
            part = model.ops.xp.ascontiguousarray(part)
            model.inc_grad(W, matmul(model.ops, part, X, trans1=True))
            model.inc_grad(b, part.sum(axis=0))
            d = matmul(model.ops, part, model.get_param(W))
            dX = d if dX is None else dX + d
        return model.ops.unflatten(dX, lengths)

    return model.ops.unflatten(Y, lengths), backprop


def is_initialized(model: Model) -> bool:
    layer = model.get_ref("span_projection")
    return all(layer.has_param(name) is True for name in layer.param_names)


# --- the maths, in torch -----------------------------------------------------


def rope(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding over ``x`` [B, T, L, d] (d even): dimensions
    ``(2m, 2m+1)`` at position ``p`` rotate by ``p * ROPE_BASE ** (-2m / d)``."""
    B, T, L, d = x.shape
    theta = ROPE_BASE ** (-torch.arange(0, d, 2, dtype=x.dtype, device=x.device) / d)  # [d/2]
    angle = torch.arange(T, dtype=x.dtype, device=x.device)[:, None] * theta[None, :]  # [T, d/2]
    cos, sin = torch.cos(angle)[None, :, None, :], torch.sin(angle)[None, :, None, :]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).reshape(B, T, L, d)


def start_end_vectors(projections: torch.Tensor, n_labels: int, use_rope: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """[B, T, 2 * L * d] projections -> start and end vectors [B, T, L, d],
    rotated by their absolute positions with ``use_rope``."""
    B, T, _ = projections.shape
    q, k = projections.reshape(B, T, 2, n_labels, -1).unbind(dim=2)
    if use_rope:
        q, k = rope(q), rope(k)
    return q, k


def span_scores(projections: torch.Tensor, n_labels: int, use_rope: bool) -> torch.Tensor:
    """[B, T, 2 * L * d] projections -> scores [B, L, T, T] (``[b, l, i, j]``:
    span from token i to token j, both included, label l)."""
    q, k = start_end_vectors(projections, n_labels, use_rope)
    return torch.einsum("bild,bjld->blij", q, k) / math.sqrt(q.shape[-1])


def valid_cells(lengths: Sequence[int], T: int, max_length: int = 0, device=None) -> torch.Tensor:
    """bool [B, T, T]: cells ``(i, j)`` with ``i <= j < length`` and, if
    ``max_length`` > 0, ``j - i < max_length``."""
    i = torch.arange(T, device=device)
    cells = i[:, None] <= i[None, :]
    if max_length > 0:
        cells = cells & (i[None, :] - i[:, None] < max_length)
    inside = i[None, :] < torch.as_tensor(list(lengths), device=device)[:, None]  # [B, T]
    return cells[None] & inside[:, :, None] & inside[:, None, :]


def multilabel_categorical_crossentropy(
    scores: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor
) -> torch.Tensor:
    """``log(1 + Σ_N exp(s)) + log(1 + Σ_P exp(-s))`` over the last dimension
    (bool masks ``positive``/``negative``; cells in neither are left out)."""
    neg_inf = torch.finfo(scores.dtype).min
    zero = scores.new_zeros(scores.shape[:-1] + (1,))
    s_neg = torch.cat([zero, scores.masked_fill(~negative, neg_inf)], dim=-1)
    s_pos = torch.cat([zero, (-scores).masked_fill(~positive, neg_inf)], dim=-1)
    return torch.logsumexp(s_neg, dim=-1) + torch.logsumexp(s_pos, dim=-1)


def _pad(arrays: Sequence[Floats2d], requires_grad: bool = False) -> torch.Tensor:
    lengths = [len(a) for a in arrays]
    T, D = max(lengths, default=0), arrays[0].shape[1]
    xp = get_array_module(arrays[0])
    padded = xp.zeros((len(arrays), T, D), dtype="float32")
    for b, a in enumerate(arrays):
        padded[b, : len(a)] = a
    return xp2torch(padded, requires_grad=requires_grad)


def span_loss(
    model: Model,
    projections: List[Floats2d],
    gold: List[Optional[numpy.ndarray]],
    max_length: int = 0,
) -> Tuple[float, List[Floats2d]]:
    """Summed loss over docs and labels, and its gradient for each doc's projections.

    gold: per doc an int8 array [L, n, n] of :data:`POSITIVE`, :data:`NEGATIVE`
        and :data:`UNKNOWN` (only cells ``i <= j`` are read), or None when the
        doc has no gold for this head (it contributes nothing).
    """
    lengths = [len(p) for p in projections]
    if not projections or not any(lengths):
        return 0.0, [p * 0 for p in projections]
    n_labels = model.get_ref("span_projection").get_dim("nO")
    X = _pad(projections, requires_grad=True)
    B, T, _ = X.shape
    scores = span_scores(X, n_labels, model.attrs["span_rope"])  # [B, L, T, T]
    cells = numpy.full((B, n_labels, T, T), UNKNOWN, dtype="int8")
    for b, g in enumerate(gold):
        if g is not None:
            cells[b, :, : lengths[b], : lengths[b]] = g
    cells = torch.as_tensor(cells, device=scores.device)
    valid = valid_cells(lengths, T, max_length, scores.device)[:, None]  # [B, 1, T, T]
    positive, negative = valid & (cells == POSITIVE), valid & (cells == NEGATIVE)
    loss = multilabel_categorical_crossentropy(
        scores.reshape(B, n_labels, T * T), positive.reshape(B, n_labels, T * T), negative.reshape(B, n_labels, T * T)
    ).sum()
    loss.backward()
    grad = torch2xp(X.grad)
    return float(loss.detach()), [grad[b, :n] for b, n in enumerate(lengths)]


#: the most score cells (labels x rows x columns) computed at once when
#: predicting: 2**24 float32 cells are 64 MB. A batch under it is scored in
#: one go; above it (a long doc pads every doc of its batch to its length,
#: and its table grows with the square of that length) each doc is scored
#: on its own, in blocks of start tokens.
MAX_CELLS = 2**24


def predict_spans(
    model: Model,
    projections: List[Floats2d],
    max_length: int = 0,
    threshold: float = 0.0,
    max_cells: int = MAX_CELLS,
    max_spans: Optional[Sequence[int]] = None,
) -> List[List[Prediction]]:
    """Per doc, every valid cell scoring above ``threshold``, as
    ``(start, end, label_id, score)`` with ``end`` exclusive, highest score
    first. At most about ``max_cells`` scores are held in memory at once.
    ``max_spans``: per doc, the most predictions kept (the best ones; 0: no
    cap), so that a model scoring nearly every cell above the threshold
    does not return n² spans."""
    out: List[List[Prediction]] = [[] for _ in projections]
    lengths = [len(p) for p in projections]
    if not any(lengths):
        return out
    caps = list(max_spans) if max_spans is not None else [0] * len(projections)
    n_labels = model.get_ref("span_projection").get_dim("nO")
    use_rope = model.attrs["span_rope"]
    with torch.no_grad():
        if len(projections) * n_labels * max(lengths) ** 2 <= max_cells:
            scores = span_scores(_pad(projections), n_labels, use_rope)
            valid = valid_cells(lengths, scores.shape[-1], max_length, scores.device)[:, None]
            _collect(scores, valid & (scores > threshold), out, range(len(projections)), caps=caps)
        else:
            for b, projection in enumerate(projections):
                if lengths[b]:
                    _predict_long(projection, n_labels, use_rope, max_length, threshold, max_cells, out[b], caps[b])
    for b, preds in enumerate(out):
        _best_first(preds, caps[b])
    return out


def _best_first(preds: List[Prediction], cap: int = 0) -> None:
    """Sort ``preds`` in place, highest score first, keeping the ``cap`` best (0: all)."""
    preds.sort(key=lambda p: (-p[3], p[0], p[1], p[2]))
    if cap:
        del preds[cap:]


def _collect(
    scores: torch.Tensor,
    hits: torch.Tensor,
    out: List[List[Prediction]],
    docs: Sequence[int],
    first_row: int = 0,
    first_col: int = 0,
    caps: Optional[Sequence[int]] = None,
) -> None:
    """Append the cells of ``hits`` (bool, like ``scores`` [B, L, R, C]) to ``out[docs[b]]``;
    rows are start tokens counted from ``first_row``, columns end tokens from
    ``first_col``. ``caps[b]`` (if > 0): only the best ``caps[b]`` cells of
    doc b are turned into Python tuples."""
    for b in range(hits.shape[0]):
        cells = hits[b].nonzero()  # [n, 3]: label, row, column
        values = scores[b][hits[b]]  # same (row-major) order as nonzero()
        cap = caps[b] if caps else 0
        if cap and len(values) > cap:
            best = torch.topk(values, cap).indices
            cells, values = cells[best], values[best]
        for (label, i, j), value in zip(cells.tolist(), values.tolist()):
            out[docs[b]].append((first_row + i, first_col + j + 1, label, float(value)))


def _predict_long(
    projection: Floats2d,
    n_labels: int,
    use_rope: bool,
    max_length: int,
    threshold: float,
    max_cells: int,
    out: List[Prediction],
    cap: int = 0,
) -> None:
    """One doc, scored in blocks of start tokens: RoPE needs the absolute
    positions, so the start and end vectors are rotated once for the whole
    doc; each block's table is ``[L, rows, columns]``, the columns being
    the end tokens a span of at most ``max_length`` tokens can reach. With
    a ``cap``, the predictions are cut back to the ``cap`` best whenever
    they reach twice that, so they never hold more."""
    X = _pad([projection])
    n = X.shape[1]
    q, k = start_end_vectors(X, n_labels, use_rope)  # [1, n, L, d]
    scale = math.sqrt(q.shape[-1])
    if max_length <= 0:
        rows = max(1, max_cells // (n_labels * n))  # a block: [L, rows, n]
    else:  # a block: [L, rows, rows - 1 + max_length]; the largest rows that fits
        rows = max(1, int((math.sqrt(max_length**2 + 4 * max_cells / n_labels) - max_length) / 2))
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        end = n if max_length <= 0 else min(n, stop - 1 + max_length)
        i = torch.arange(start, stop, device=X.device)
        j = torch.arange(start, end, device=X.device)
        scores = torch.einsum("ild,jld->lij", q[0, start:stop], k[0, start:end]) / scale  # [L, R, C]
        valid = i[:, None] <= j[None, :]
        if max_length > 0:
            valid = valid & (j[None, :] - i[:, None] < max_length)
        _collect(scores[None], (valid[None] & (scores > threshold))[None], [out], [0], start, start, [cap])
        if cap and len(out) >= 2 * cap:
            _best_first(out, cap)


def all_scores(model: Model, projections: List[Floats2d]) -> List[numpy.ndarray]:
    """Per doc the full score table [L, n, n] (``[l, i, j]``; cells with j < i are meaningless)."""
    if not projections or not any(len(p) for p in projections):
        return [numpy.zeros((0, len(p), len(p)), dtype="f") for p in projections]
    n_labels = model.get_ref("span_projection").get_dim("nO")
    with torch.no_grad():
        scores = span_scores(_pad(projections), n_labels, model.attrs["span_rope"]).cpu().numpy()
    return [scores[b, :, : len(p), : len(p)] for b, p in enumerate(projections)]
