"""The ``spacy_crf.CRFTagger.v1`` architecture: tok2vec -> emissions -> CRF.

The thinc model maps docs to per-token emission scores. The CRF layer is an
identity in the forward pass that owns the transition parameters: a CRF's
loss needs the gold tags, which only the pipe has, so the pipe computes the
loss with :func:`crf_loss`. That function has no side effects: it returns
the gradient of the loss as a :class:`CRFGradient`, the emission gradients
plus the gradients of the CRF parameters, computed in the same autograd
pass. The CRF layer's backprop callback adds the latter to the layer's
parameters and passes the former on, so the transitions get their gradient
in the backward pass like any other thinc parameter, and
``Model.finish_update`` updates every parameter with the same optimizer call.
``CRFGradient`` is not a list on purpose: a layer above the CRF that rebuilt
the gradient would drop the CRF's part, so it fails instead (the CRF layer's
backprop takes nothing else).

Parameter names carry their role (``crf_transitions``, ``crf_emission_W``)
so that :mod:`spacy_crf.training.optimizers` can put them in learning-rate groups.
"""

from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy
import torch
from spacy.tokens import Doc
from spacy.util import registry
from thinc.api import Model, chain, get_array_module, glorot_uniform_init, zero_init
from thinc.types import Floats2d, Ints1d
from thinc.util import torch2xp, xp2torch

from ..util import flat_rows, install_fork_hook, matmul, split_rows
from . import context_fusion, crf, fast_align, viterbi_numpy
from . import lexicon_features as lexfeat
from . import tagger_features as tagfeat
from .schemes import TransitionMask

TRANSITIONS, START, END = "crf_transitions", "crf_start", "crf_end"
EMISSION_W, EMISSION_B = "crf_emission_W", "crf_emission_b"
# pytorch-crf's initialisation: small random scores, so that no transition
# starts out preferred and the learned matrix shows what training did.
TRANSITION_INIT_SCALE = 0.1


@registry.architectures("spacy_crf.CRFTagger.v1")
def build_crf_tagger(
    tok2vec: Model[List[Doc], List[Floats2d]],
    nO: Optional[int] = None,
    use_crf: bool = True,
    use_start_end: bool = True,
    lexicon_width: int = 0,
    tagger_features: Optional[Model[List[Doc], List[Floats2d]]] = None,
    fusion: Optional[Model[List[Floats2d], List[Floats2d]]] = None,
) -> Model[List[Doc], List[Floats2d]]:
    """Token features -> linear emission scores -> linear-chain CRF.

    tok2vec: any layer that gives one vector per token, e.g.
        ``spacy-transformers.TransformerListener.v1`` or ``spacy.HashEmbedCNN.v2``.
    nO: the number of tags; inferred by the pipe from its labels if unset.
    use_crf: False gives the softmax baseline: the same emission layer,
        trained with token-level cross-entropy and decoded by argmax.
    use_start_end: learn start and end scores beside the transitions.
    lexicon_width: > 0: append ``spacy_crf.LexiconFeatures.v1`` of this
        width (a dictionary's words around each token, :mod:`.lexicon_features`)
        to the tok2vec output; 0 (default): none, the model of before.
    tagger_features: a ``spacy_crf.TaggerFeatures.v1`` layer (:mod:`.tagger_features`)
        appended after the lexicon features; None (default): none.
    fusion: a ``spacy_crf.ContextFusion.v1`` layer (:mod:`.context_fusion`): the features
        and a contextual mix of them, before the emission layer; None (default): none.
    """
    if isinstance(lexicon_width, bool) or not isinstance(lexicon_width, int) or lexicon_width < 0:
        raise ValueError(
            f"spacy_crf.CRFTagger.v1: lexicon_width must be a whole number >= 0 (0: off), got {lexicon_width!r}"
        )
    fast_align.install()  # spacy-transformers' alignment without a Python step per token
    emissions = Emissions(nO=nO)
    for setting, layer, ref, kind in (
        ("tagger_features", tagger_features, tagfeat.REF, "TaggerFeatures"),
        ("fusion", fusion, context_fusion.REF, "ContextFusion"),
    ):
        if layer is not None and layer.name != ref:
            raise ValueError(f"spacy_crf.CRFTagger.v1: {setting} is a {layer.name!r} layer, not {kind}")
    features = lexfeat.LexiconFeatures(lexicon_width) if lexicon_width else None
    extra = [layer for layer in (features, tagger_features) if layer is not None]
    layers: List[Model] = [lexfeat.with_lexicon_features(tok2vec, *extra) if extra else tok2vec]
    layers += [fusion, emissions] if fusion is not None else [emissions]
    if use_crf:
        layers.append(CRF(nO=nO, use_start_end=use_start_end))
    model: Model[List[Doc], List[Floats2d]] = chain(*layers)
    model.set_ref("tok2vec", tok2vec)
    model.set_ref("emissions", emissions)
    for ref, layer in ((lexfeat.REF, features), (tagfeat.REF, tagger_features), (context_fusion.REF, fusion)):
        if layer is not None:
            model.set_ref(ref, layer)
    if use_crf:
        model.set_ref("crf", layers[-1])
    model.attrs["use_crf"] = use_crf
    return model


def Emissions(nO: Optional[int] = None, nI: Optional[int] = None) -> Model[List[Floats2d], List[Floats2d]]:
    """A linear layer over each doc's token vectors: [n, nI] -> [n, nO]."""
    return Model(
        "crf_emissions",
        _emissions_forward,
        init=_emissions_init,
        dims={"nO": nO, "nI": nI},
        params={EMISSION_W: None, EMISSION_B: None},
    )


def _emissions_init(model: Model, X: Optional[List[Floats2d]] = None, Y=None) -> None:
    if X is not None and len(X) and model.maybe_get_dim("nI") is None:
        model.set_dim("nI", X[0].shape[1])
    if Y is not None and len(Y) and model.maybe_get_dim("nO") is None:
        model.set_dim("nO", Y[0].shape[1])
    nO, nI = model.get_dim("nO"), model.get_dim("nI")
    # Glorot rather than zeros (spaCy's softmax default): with zero emissions
    # and a CRF on top every tag path is tied at the first step.
    model.set_param(EMISSION_W, glorot_uniform_init(model.ops, (nO, nI)))
    model.set_param(EMISSION_B, zero_init(model.ops, (nO,)))


def _emissions_forward(model: Model, Xs: List[Floats2d], is_train: bool):
    install_fork_hook()  # (torch runs in this process from now on: a forked worker must not hang)
    W = model.get_param(EMISSION_W)
    b = model.get_param(EMISSION_B)
    lengths = [len(x) for x in Xs]
    # (no copy of the lexicon features' concatenation: views of one array)
    X = flat_rows(model.ops, Xs) if Xs else model.ops.alloc2f(0, model.get_dim("nI"))
    Y = matmul(model.ops, X, W, trans2=True) + b

    def backprop(dYs: List[Floats2d]) -> List[Floats2d]:
        dY = model.ops.flatten(dYs, pad=0) if dYs else model.ops.alloc2f(0, W.shape[0])
        model.inc_grad(EMISSION_W, matmul(model.ops, dY, X, trans1=True))
        model.inc_grad(EMISSION_B, dY.sum(axis=0))
        return model.ops.unflatten(matmul(model.ops, dY, W), lengths)

    return split_rows(model.ops, Y, lengths), backprop


class CRFGradient:
    """The gradient :func:`crf_loss` returns, what the CRF layer's backprop takes.

    d_emissions: per doc, the gradient of the emission scores ``[n_i, K]``
        (what the layers below the CRF receive).
    d_params: the gradients of the CRF layer's parameters by name
        (``crf_transitions`` ``[K, K]``, ``crf_start`` / ``crf_end`` ``[K]``).
    """

    __slots__ = ("d_emissions", "d_params")

    def __init__(self, d_emissions: Iterable[Floats2d], d_params: Dict[str, numpy.ndarray]) -> None:
        self.d_emissions: List[Floats2d] = list(d_emissions)
        self.d_params: Dict[str, numpy.ndarray] = dict(d_params)

    def __repr__(self) -> str:
        return f"CRFGradient({len(self.d_emissions)} docs, params={sorted(self.d_params)})"


def CRF(nO: Optional[int] = None, use_start_end: bool = True) -> Model[List[Floats2d], List[Floats2d]]:
    """The CRF's parameters. Identity in the forward pass; its backprop adds
    the parameter gradients that a :class:`CRFGradient` carries (see module doc)."""
    params = {TRANSITIONS: None}
    if use_start_end:
        params.update({START: None, END: None})
    return Model(
        "crf",
        _crf_forward,
        init=_crf_init,
        dims={"nO": nO},
        params=params,
        attrs={"use_start_end": use_start_end},
    )


def _crf_init(model: Model, X: Optional[List[Floats2d]] = None, Y=None) -> None:
    if model.maybe_get_dim("nO") is None:
        source = X if X is not None and len(X) else Y
        if source is None or not len(source):
            raise ValueError("The CRF layer needs nO (the number of tags) or sample data.")
        model.set_dim("nO", source[0].shape[1])
    nO = model.get_dim("nO")
    xp = model.ops.xp
    scale = TRANSITION_INIT_SCALE
    model.set_param(TRANSITIONS, xp.asarray(numpy.random.uniform(-scale, scale, (nO, nO)), dtype="f"))
    if model.attrs["use_start_end"]:
        model.set_param(START, xp.asarray(numpy.random.uniform(-scale, scale, (nO,)), dtype="f"))
        model.set_param(END, xp.asarray(numpy.random.uniform(-scale, scale, (nO,)), dtype="f"))


def _crf_forward(model: Model, X: List[Floats2d], is_train: bool):
    def backprop(dY: CRFGradient) -> List[Floats2d]:
        if not isinstance(dY, CRFGradient):
            raise TypeError(
                f"The CRF layer's backprop got a {type(dY).__name__}, not the CRFGradient that "
                "spacy_crf.ml.tagger_model.crf_loss returns: a layer between the CRF and the loss rebuilt the "
                "gradient, which would lose the gradients of the transitions."
            )
        for name, grad in dY.d_params.items():
            model.inc_grad(name, grad)
        return dY.d_emissions

    return X, backprop


# --- bridging thinc arrays and the torch maths --------------------------------


def _pad(scores: Sequence[Floats2d], requires_grad: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """List of [n_i, K] arrays -> (emissions [B, T, K], mask [B, T])."""
    lengths = [len(s) for s in scores]
    B, T = len(scores), max(lengths, default=0)
    K = scores[0].shape[1] if scores else 0
    xp = get_array_module(scores[0]) if scores else numpy
    padded = xp.zeros((B, T, K), dtype="float32")
    for i, s in enumerate(scores):
        padded[i, : len(s)] = s
    emissions = xp2torch(padded, requires_grad=requires_grad)
    mask = torch.arange(T, device=emissions.device)[None, :] < torch.tensor(lengths, device=emissions.device)[:, None]
    return emissions, mask


def _unpad(array, lengths: Sequence[int]) -> List:
    return [array[i, :n] for i, n in enumerate(lengths)]


def _crf_tensors(layer: Model, requires_grad: bool = False):
    def get(name):
        if not layer.has_param(name):
            return None
        return xp2torch(layer.get_param(name), requires_grad=requires_grad)

    return get(TRANSITIONS), get(START), get(END)


def torch_constraints(mask: Optional[TransitionMask], device=None) -> Optional[crf.Constraints]:
    if mask is None:
        return None
    return crf.Constraints(*(torch.as_tensor(numpy.asarray(m), dtype=torch.bool, device=device) for m in mask))


def _gold_tensor(gold: Sequence[Ints1d], T: int, device) -> torch.Tensor:
    tags = numpy.full((len(gold), T), -1, dtype="int64")
    for i, g in enumerate(gold):
        tags[i, : len(g)] = g
    return torch.as_tensor(tags, device=device)


def crf_loss(
    model: Model,
    scores: List[Floats2d],
    gold: List[Ints1d],
    constraints: Optional[TransitionMask] = None,
    constrain_training: bool = False,
) -> Tuple[float, Union[CRFGradient, List[Floats2d]]]:
    """Summed loss over the docs, and its gradient: a :class:`CRFGradient`
    with a CRF, the emission gradients ``[n_i, K]`` per doc without one.

    ``gold`` holds tag ids, -1 where the gold tag is unknown (misaligned or
    missing annotation): the CRF marginalises over those positions, the
    softmax head ignores them. Nothing is written to the model: with a CRF,
    the gradients of its parameters travel in the result's ``d_params`` and
    are added by the CRF layer's backprop.
    """
    lengths = [len(s) for s in scores]
    emissions, mask = _pad(scores, requires_grad=True)
    tags = _gold_tensor(gold, emissions.shape[1], emissions.device)
    if model.attrs.get("use_crf", True):
        layer = model.get_ref("crf")
        transitions, start, end = _crf_tensors(layer, requires_grad=True)
        nll = crf.nll(
            emissions,
            tags,
            mask,
            transitions,
            start,
            end,
            constraints=torch_constraints(constraints, emissions.device),
            constrain_training=constrain_training,
        )
        loss = nll.sum()
        loss.backward()
        d_params = {
            name: torch2xp(tensor.grad)
            for name, tensor in ((TRANSITIONS, transitions), (START, start), (END, end))
            if tensor is not None
        }
    else:
        log_probs = torch.log_softmax(emissions, dim=-1)
        loss = torch.nn.functional.nll_loss(
            log_probs.reshape(-1, log_probs.shape[-1]), tags.reshape(-1), ignore_index=-1, reduction="sum"
        )
        loss.backward()
        return float(loss.detach()), _unpad(torch2xp(emissions.grad), lengths)
    d_scores = _unpad(torch2xp(emissions.grad), lengths)
    return float(loss.detach()), CRFGradient(d_scores, d_params)


def _pad_tag_masks(
    tag_masks: Optional[Sequence[Optional[numpy.ndarray]]], emissions: torch.Tensor
) -> Optional[torch.Tensor]:
    """:func:`spacy_crf.ml.viterbi_numpy.pad_tag_masks`, as a tensor on the emissions' device."""
    padded = viterbi_numpy.pad_tag_masks(tag_masks, *emissions.shape)
    return None if padded is None else torch.as_tensor(padded, device=emissions.device)


def _inference(
    model: Model,
    scores: List[Floats2d],
    constraints: Optional[TransitionMask],
    crf_fn,
    softmax_fn,
    tag_masks: Optional[Sequence[Optional[numpy.ndarray]]] = None,
) -> List:
    """Run ``crf_fn`` (a CRF inference function of :mod:`spacy_crf.ml.crf`) or,
    for the softmax head, ``softmax_fn`` over the padded emissions; unpad.
    ``tag_masks`` restricts each doc's tags per position (forced tags)."""
    if not scores:
        return []
    lengths = [len(s) for s in scores]
    with torch.no_grad():
        emissions, mask = _pad(scores)
        tag_mask = _pad_tag_masks(tag_masks, emissions)
        if model.attrs.get("use_crf", True):
            transitions, start, end = _crf_tensors(model.get_ref("crf"))
            out = crf_fn(
                emissions,
                mask,
                transitions,
                start,
                end,
                constraints=torch_constraints(constraints, emissions.device),
                tag_mask=tag_mask,
            )
        else:
            if tag_mask is not None:
                emissions = emissions.masked_fill(~tag_mask, crf.IMPOSSIBLE)
            out = softmax_fn(emissions)
    out = out.cpu().numpy()
    return [out[i, :n] for i, n in enumerate(lengths)]


def decode(
    model: Model,
    scores: List[Floats2d],
    constraints: Optional[TransitionMask] = None,
    tag_masks: Optional[Sequence[Optional[numpy.ndarray]]] = None,
) -> List[Ints1d]:
    """Best tag ids per doc: constrained Viterbi, or argmax for the softmax head.

    tag_masks: per doc, None or a bool ``[n, K]`` array of the tags allowed at
        each position; a position with one allowed tag is forced, and the rest
        of the path is decoded around it (``crf.viterbi``'s ``tag_mask``)."""
    if model.attrs.get("use_crf", True) and scores and all(isinstance(s, numpy.ndarray) for s in scores):
        layer = model.get_ref("crf")  # on CPU: the same paths without torch's per-op cost
        start, end = (layer.get_param(n) if layer.has_param(n) else None for n in (START, END))
        return viterbi_numpy.decode(scores, layer.get_param(TRANSITIONS), start, end, constraints, tag_masks)
    return _inference(
        model,
        scores,
        constraints,
        lambda *a, **k: crf.viterbi(*a, **k)[0],
        lambda emissions: (
            emissions.argmax(dim=-1)
            if emissions.numel()
            else emissions.new_zeros(emissions.shape[:2], dtype=torch.long)
        ),
        tag_masks,
    )


def marginals(
    model: Model,
    scores: List[Floats2d],
    constraints: Optional[TransitionMask] = None,
    tag_masks: Optional[Sequence[Optional[numpy.ndarray]]] = None,
    temperature: float = 1.0,
) -> List[Floats2d]:
    """Per-token tag posteriors [n, K] per doc (softmax for the softmax head);
    ``tag_masks`` as in :func:`decode` (forbidden tags get probability 0).
    ``temperature`` T > 0 divides the emissions, transitions, start and end
    scores before the forward-backward (temperature scaling; 1: unchanged)."""
    t = float(temperature)

    def scaled(emissions, mask, transitions, start, end, **kwargs):
        start, end = (None if p is None else p / t for p in (start, end))
        return crf.marginals(emissions / t, mask, transitions / t, start, end, **kwargs)

    crf_fn = crf.marginals if t == 1.0 else scaled
    return _inference(model, scores, constraints, crf_fn, lambda em: torch.softmax(em / t, dim=-1), tag_masks)


def is_initialized(model: Model) -> bool:
    """Whether the model's output layers have their weights, and its lexicon
    features their dictionary (``initialize`` ran or weights were loaded)."""
    refs = ("emissions", "crf", lexfeat.REF, tagfeat.REF, context_fusion.REF)
    layers = [model.get_ref(ref) for ref in refs if model.has_ref(ref)]
    if model.has_ref(lexfeat.REF) and not lexfeat.has_lexicon(model.get_ref(lexfeat.REF)):
        return False
    if model.has_ref(tagfeat.REF) and not tagfeat.has_tagger(model.get_ref(tagfeat.REF)):
        return False
    return all(layer.has_param(name) is True for layer in layers for name in layer.param_names)


def transition_scores(model: Model) -> Tuple[numpy.ndarray, Optional[numpy.ndarray], Optional[numpy.ndarray]]:
    """The learned (transitions [K, K], start [K] or None, end [K] or None)."""
    if not model.attrs.get("use_crf", True):
        raise ValueError("This model has no CRF layer (use_crf = false): there are no transitions.")
    layer = model.get_ref("crf")
    if layer.has_param(TRANSITIONS) is not True:
        raise ValueError(
            "The CRF layer has no weights yet: the model is not initialized "
            "(call nlp.initialize() or load a trained pipeline)."
        )
    ops = layer.ops

    def get(name):
        return ops.to_numpy(layer.get_param(name)).copy() if layer.has_param(name) else None

    return get(TRANSITIONS), get(START), get(END)
