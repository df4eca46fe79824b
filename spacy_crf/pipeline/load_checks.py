"""Validation at the boundaries: finite losses, gradients and weights, and
weights that match the labels they are loaded with.

The pipe calls these in ``update`` (nothing NaN or infinite may reach the
weights) and in ``from_disk``/``from_bytes`` (a broken saved pipe fails at
load time, naming what is wrong, rather than at predict time).
"""
from pathlib import Path
from typing import Iterable, List

import numpy
import srsly
from spacy import util
from thinc.api import Model, get_array_module

from .lexicon import Lexicon
from ..ml.tagger_model import END, START, TRANSITIONS
from ..ml.schemes import SchemeError


class NonFiniteError(ValueError):
    """A NaN or infinite loss or gradient in a training batch."""


def nonfinite_count(array) -> int:
    """How many entries of a (numpy or cupy) array are NaN or infinite; 0 for integer arrays."""
    if not numpy.issubdtype(array.dtype, numpy.floating):
        return 0
    xp = get_array_module(array)
    return int(array.size - int(xp.isfinite(array).sum()))


def nonfinite_in_loss(loss: float, d_scores) -> str:
    """What is not finite in a loss and its gradient (a list of score
    gradients, or a ``CRFGradient``: emission gradients plus ``d_params``);
    empty when all is finite."""
    if not numpy.isfinite(loss):
        return f"the loss is {loss}"
    for d in getattr(d_scores, "d_emissions", d_scores):
        bad = nonfinite_count(d)
        if bad:
            return f"the gradient of the scores has {bad} NaN or infinite values"
    for name, d in getattr(d_scores, "d_params", {}).items():
        bad = nonfinite_count(d)
        if bad:
            return f"the gradient of {name!r} has {bad} NaN or infinite values"
    return ""


def nonfinite_grads(model: Model) -> str:
    """The first parameter gradient of ``model`` with NaN or infinite values
    (thinc parameters only), described; empty when there is none."""
    for node in model.walk():
        for name in node.param_names:
            if node.has_grad(name):
                bad = nonfinite_count(node.get_grad(name))
                if bad:
                    return f"the gradient of {name!r} (layer {node.name!r}) has {bad} NaN or infinite values"
    return ""


def zero_grads(model: Model) -> None:
    """Reset every accumulated parameter gradient of ``model`` to zero."""
    for node in model.walk():
        for name in node.param_names:
            if node.has_grad(name):
                grad = node.get_grad(name)
                node.set_grad(name, node.ops.alloc(grad.shape, dtype=grad.dtype))


def check_weights(model: Model, n_tags: int) -> List[str]:
    """What is wrong with a model that should score ``n_tags`` tags: output
    width or transition size that differ from ``n_tags``, and parameters
    holding NaN or infinity (thinc parameters only: the weights of a torch
    model wrapped inside, such as an embedded transformer, are not read).
    An empty list when nothing is wrong. A model without weights yet
    (never initialized) is not checked."""
    problems: List[str] = []
    emissions = model.get_ref("emissions")
    width = emissions.maybe_get_dim("nO")
    if width is not None and width != n_tags:
        problems.append(f"the weights score {width} tags (output width) but the labels give {n_tags}")
    if model.has_ref("crf"):
        layer = model.get_ref("crf")
        if layer.has_param(TRANSITIONS) is True:
            shape = tuple(layer.get_param(TRANSITIONS).shape)
            if shape != (n_tags, n_tags):
                problems.append(f"the transition matrix is {shape[0]}x{shape[1] if len(shape) > 1 else '?'} "
                                f"but the labels give {n_tags} tags")
            for name in (START, END):
                if layer.has_param(name) is True and tuple(layer.get_param(name).shape) != (n_tags,):
                    problems.append(f"{name} has shape {tuple(layer.get_param(name).shape)}, not ({n_tags},)")
    for node in model.walk():
        for name in node.param_names:
            if node.has_param(name) is not True:
                continue
            bad = nonfinite_count(node.get_param(name))
            if bad:
                problems.append(f"parameter {name!r} of layer {node.name!r} has {bad} NaN or infinite values")
    return problems


def load_from_disk(pipe, path: Path, exclude: Iterable[str]):
    """``CRFTagger.from_disk``: load ``cfg`` and ``model`` from ``path``,
    checking that the pipe is whole: the cfg has the labels, the weights
    load, their tag count matches the labels and they are finite. Errors
    name the directory (or the weights file)."""
    where = f"directory {str(path)!r}"

    def load_cfg(p: Path) -> None:
        if not p.exists():
            raise ValueError(f"[{pipe.name}] cannot load {where}: its 'cfg' file is missing "
                             "(it holds the scheme and the labels).")
        try:
            cfg = srsly.read_json(p)
        except Exception as e:
            raise ValueError(f"[{pipe.name}] cannot read {str(p)!r}: {e}") from None
        _load_cfg(pipe, cfg, where)

    def load_model(p: Path) -> None:
        if not p.exists():
            raise ValueError(f"[{pipe.name}] cannot load {where}: its 'model' file (the weights) is missing.")
        _load_model(pipe, p.read_bytes(), f"the weights file {str(p)!r}")

    def load_lexicon(p: Path) -> None:
        words = None
        if p.exists():
            try:
                words = srsly.read_msgpack(p)
            except Exception as e:
                raise ValueError(f"[{pipe.name}] cannot read the lexicon {str(p)!r}: {e}") from None
        _load_lexicon(pipe, words, where)

    deserialize = {
        "cfg": load_cfg,
        "vocab": lambda p: pipe.vocab.from_disk(p, exclude=exclude),
        "model": load_model,
        "lexicon": load_lexicon,
    }
    util.from_disk(path, deserialize, exclude)
    _check_loaded(pipe, where)
    return pipe


def load_from_bytes(pipe, bytes_data: bytes, exclude: Iterable[str]):
    """``CRFTagger.from_bytes``, with the checks of :func:`load_from_disk`."""
    where = "bytes"
    try:
        msg = srsly.msgpack_loads(bytes_data)
    except Exception as e:
        raise ValueError(f"[{pipe.name}] cannot load from bytes: not a serialized pipe ({e})") from None
    for key in ("cfg", "model"):
        if key not in exclude and key not in msg:
            raise ValueError(f"[{pipe.name}] cannot load from bytes: no {key!r} in the data.")
    if "cfg" not in exclude:
        try:
            cfg = srsly.json_loads(msg["cfg"])
        except Exception as e:
            raise ValueError(f"[{pipe.name}] cannot load from bytes: unreadable cfg ({e})") from None
        _load_cfg(pipe, cfg, where)
    if "vocab" not in exclude and "vocab" in msg:
        pipe.vocab.from_bytes(msg["vocab"], exclude=exclude)
    if "model" not in exclude:
        _load_model(pipe, msg["model"], "the weights in the bytes")
    if "lexicon" not in exclude:
        try:
            words = srsly.msgpack_loads(msg["lexicon"]) if "lexicon" in msg else None
        except Exception as e:
            raise ValueError(f"[{pipe.name}] cannot load from bytes: unreadable lexicon ({e})") from None
        _load_lexicon(pipe, words, where)
    _check_loaded(pipe, where)
    return pipe


def _load_cfg(pipe, cfg, where: str) -> None:
    if not isinstance(cfg, dict) or "labels" not in cfg:
        raise ValueError(f"[{pipe.name}] cannot load {where}: its cfg has no 'labels' "
                         "(the tag set the weights were trained with).")
    pipe.cfg.update(cfg)


def _load_lexicon(pipe, words, where: str) -> None:
    """Restore the lexicon the cfg announces (``lexicon_size`` words), or none."""
    expected = pipe.cfg.get("lexicon_size", 0)
    if not expected:
        pipe.lexicon = None
        return
    if words is None:
        raise ValueError(f"[{pipe.name}] cannot load {where}: its cfg announces a lexicon of {expected} "
                         "words, but the 'lexicon' file is missing.")
    if not isinstance(words, list) or len(words) != expected:
        found = len(words) if isinstance(words, list) else type(words).__name__
        raise ValueError(f"[{pipe.name}] cannot load {where}: its lexicon has {found} words, "
                         f"its cfg says {expected}: the files are from different saves.")
    lexicon = Lexicon(words)
    if len(lexicon) != expected:
        raise ValueError(f"[{pipe.name}] cannot load {where}: its lexicon holds {expected - len(lexicon)} "
                         "unusable entries (shorter than two characters, or with whitespace).")
    pipe.lexicon = lexicon


def _load_model(pipe, data: bytes, what: str) -> None:
    try:
        pipe.model.from_bytes(data)
    except Exception as e:
        raise ValueError(f"[{pipe.name}] cannot load {what}: it is truncated, corrupt or from "
                         f"another model ({type(e).__name__}: {e})") from None


def _check_loaded(pipe, where: str) -> None:
    try:
        n_tags = len(pipe.tags)
    except SchemeError as e:
        raise ValueError(f"[{pipe.name}] cannot load {where}: {e}") from None
    problems = check_weights(pipe.model, n_tags)
    if problems:
        raise ValueError(
            f"[{pipe.name}] cannot load {where}: " + "; ".join(problems)
            + f" (scheme {pipe.scheme!r}, labels {list(pipe.labels)})."
        )
