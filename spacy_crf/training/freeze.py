"""Freeze parameters of a pipeline's PyTorch models by name, before training.

The word-embedding table of the offline encoder holds most of its weights
(about 93k pieces x 384), but a batch of Chinese text touches a few hundred
rows of it. Fine-tuning it anyway costs, every step, a dense gradient of the
whole table in the backward pass and an Adam update over all of it. Frozen
parameters (``requires_grad = False``) get no gradient, so the backward pass
skips them and thinc's PyTorch shim never hands them to the optimizer.

In a training config::

    [initialize.after_init]
    @callbacks = "spacy_crf.freeze_parameters.v1"
    patterns = ["embeddings.word_embeddings.*"]

The patterns are glob patterns over the parameter names of the Hugging Face
model (``embeddings.word_embeddings.weight``,
``encoder.layer.0.attention.self.query.weight``, ...), as in
``spacy_crf.GroupedAdam.v1``'s ``param_groups``.
"""

from fnmatch import fnmatchcase
from typing import Any, Callable, List, Sequence, Tuple

from spacy.language import Language
from spacy.util import registry
from thinc.shims import PyTorchShim

from .._compat import torch_module, torch_shims


def matching_parameters(nlp: Language, patterns: Sequence[str], who: str) -> List[Tuple[str, PyTorchShim, str, Any]]:
    """(component, shim, parameter name, parameter) for every PyTorch parameter
    whose name matches one of the glob patterns.

    Raises ``ValueError``, naming ``who``, when ``patterns`` is a string or a
    pattern matches nothing, before anything is changed, so that a typo does
    not silently leave the model as it was.
    """
    if isinstance(patterns, str):
        raise ValueError(f"{who}: patterns must be a list of glob patterns, got the string {patterns!r}")
    found: List[Tuple[str, PyTorchShim, str, Any]] = []
    used = set()
    for component, shim in torch_shims(nlp):
        module = torch_module(shim)
        assert module is not None  # torch_shims gives built shims only
        for param_name, param in module.named_parameters():
            hits = [p for p in patterns if fnmatchcase(param_name, p)]
            if hits:
                used.update(hits)
                found.append((component, shim, param_name, param))
    unused = [p for p in patterns if p not in used]
    if unused:
        raise ValueError(
            f"{who}: no parameter of the pipeline's PyTorch models matches {unused}. "
            "Parameter names look like 'embeddings.word_embeddings.weight'."
        )
    return found


def freeze_parameters(nlp: Language, patterns: Sequence[str]) -> List[str]:
    """Set ``requires_grad = False`` on every parameter whose name matches a pattern.

    Returns ``component:parameter`` of what was frozen. Raises ``ValueError``
    when a pattern matches nothing, so that a typo does not silently train
    everything.
    """
    frozen: List[str] = []
    for component, _, param_name, param in matching_parameters(nlp, patterns, "spacy_crf.freeze_parameters.v1"):
        param.requires_grad_(False)
        param.grad = None
        frozen.append(f"{component}:{param_name}")
    return frozen


@registry.callbacks("spacy_crf.freeze_parameters.v1")
def make_freeze_parameters(patterns: List[str]) -> Callable[[Language], Language]:
    """An ``[initialize.after_init]`` callback that freezes the matching parameters."""

    def after_init(nlp: Language) -> Language:
        freeze_parameters(nlp, patterns)
        return nlp

    return after_init
