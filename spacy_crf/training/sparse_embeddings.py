"""Sparse gradients for the encoder's embedding tables, before training.

A batch of Chinese text touches about 1,500 of the offline encoder's 92,851
wordpiece rows, but ``torch.nn.Embedding`` builds a dense gradient of the
whole table in every backward pass, and thinc's PyTorch shim then zeroes all
of it. GroupedAdam's ``lazy_rows`` already updates only the rows with a
gradient; this removes the dense gradient as well. The matching tables get
``sparse = True``, so the backward pass yields the batch's rows only, and the
component's torch shim hands those rows to the optimizer's ``update_rows``
(which must be lazy for the table: ``lazy_rows`` in
``spacy_crf.GroupedAdam.v1``). The update is then the same as the lazy update
of the dense gradient; only the arithmetic order of summed duplicate rows
differs.

An optimizer without a lazy path for the table (thinc's ``Adam``, or
GroupedAdam without ``lazy_rows``) gets the gradient densified, with a
warning: the result is the dense update and there is no speed-up. The lazy
path runs on numpy arrays, so on a GPU the gradient is densified too.

In a training config::

    [initialize.after_init]
    @callbacks = "spacy_crf.sparse_embeddings.v1"
    patterns = ["embeddings.word_embeddings.weight"]

The patterns are glob patterns over the parameter names of the Hugging Face
model, as in ``spacy_crf.freeze_parameters.v1``. Only the ``weight`` of a
``torch.nn.Embedding`` can have a sparse gradient. Mixed precision (gradient
scaling) is refused: thinc's scaler does not unscale sparse tensors.
"""

import warnings
from typing import Callable, List, Sequence

import torch
from spacy.language import Language
from spacy.util import registry
from thinc.api import Optimizer, torch2xp
from thinc.shims import PyTorchShim

from .._compat import mix_in, scales_gradients, torch_module
from .freeze import matching_parameters


class SparseRowsShim:
    """Mixed into a torch shim's class: the sparse gradients first, then the
    shim's own (dense) ``finish_update`` for every other parameter."""

    def finish_update(self, optimizer: Optimizer) -> None:
        update_sparse_rows(self, optimizer)  # type: ignore[arg-type]  # mixed into a PyTorchShim
        super().finish_update(optimizer)  # type: ignore[misc]


def update_sparse_rows(shim: PyTorchShim, optimizer: Optimizer) -> None:
    """Update each parameter of ``shim`` that holds a sparse gradient lazily, then
    drop the gradient; one without a lazy update gets its gradient made dense, for
    the shim's own ``finish_update``."""
    densified = shim.__dict__.setdefault("_spacy_crf_densified", set())
    is_lazy = getattr(optimizer, "is_lazy", None)
    for name, param in torch_module(shim).named_parameters():
        grad = param.grad
        if grad is None or not grad.is_sparse:
            continue
        key = (shim.id, name)
        weights = torch2xp(param.data)
        if is_lazy is not None and is_lazy(name, weights):
            grad = grad.coalesce()
            rows = torch2xp(grad.indices()[0])
            optimizer.update_rows(key, weights, rows, torch2xp(grad.values()))  # type: ignore[attr-defined]  # GroupedAdam
        else:
            if name not in densified:
                densified.add(name)
                warnings.warn(
                    f"spacy_crf.sparse_embeddings.v1: the optimizer has no lazy update for "
                    f"{name!r}, so its sparse gradient is made dense (the dense update, no "
                    f"speed-up). Add it to spacy_crf.GroupedAdam.v1's lazy_rows (CPU only).",
                    stacklevel=2,
                )
            # The shim's own finish_update, which runs next, makes the dense update.
            param.grad = grad.to_dense()
            continue
        param.grad = None


def sparse_embeddings(nlp: Language, patterns: Sequence[str]) -> List[str]:
    """Give every ``torch.nn.Embedding`` weight whose name matches a pattern a
    sparse gradient, and route it to the optimizer's lazy row update.

    Returns ``component:parameter`` of the tables. Raises ``ValueError`` when a
    pattern matches nothing, when a match is not an embedding table's weight,
    or when the shim scales gradients (mixed precision).
    """
    who = "spacy_crf.sparse_embeddings.v1"
    tables = []
    shims = {}
    for component, shim, param_name, param in matching_parameters(nlp, patterns, who):
        module = torch_module(shim)
        owner_name, _, attr = param_name.rpartition(".")
        owner = module.get_submodule(owner_name)
        if not isinstance(owner, torch.nn.Embedding) or attr != "weight":
            raise ValueError(
                f"{who}: {component}:{param_name} is not the weight of a torch.nn.Embedding "
                f"({type(owner).__name__}); only embedding tables can have sparse gradients."
            )
        if scales_gradients(shim):
            raise ValueError(
                f"{who}: {component} uses gradient scaling (mixed precision), which does not unscale sparse gradients."
            )
        shims[id(shim)] = shim
        tables.append((owner, param, f"{component}:{param_name}"))
    # Every match is checked before anything changes.
    for owner, param, _ in tables:
        owner.sparse = True
        param.grad = None
    for shim in shims.values():
        mix_in(shim, SparseRowsShim)
    return [name for _, _, name in tables]


@registry.callbacks("spacy_crf.sparse_embeddings.v1")
def make_sparse_embeddings(patterns: List[str]) -> Callable[[Language], Language]:
    """An ``[initialize.after_init]`` callback that gives the matching embedding
    tables sparse gradients (see the module docstring)."""

    def after_init(nlp: Language) -> Language:
        sparse_embeddings(nlp, patterns)
        return nlp

    return after_init
