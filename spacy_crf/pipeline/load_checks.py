"""Validation at the boundaries: finite losses, gradients and weights, and
weights that match the labels they are loaded with.

The pipes (``CRFTagger`` and ``SpanNER``) call these in ``update`` (nothing
NaN or infinite may reach the weights) and save and load through
:func:`save_to_disk` / :func:`load_from_disk` (and the bytes variants), so
that a broken saved pipe fails at load time, naming the file and what is
wrong, rather than at predict time. A pipe's *outputs* are what its output
layer scores, in order: the CRF tagger's tags, the span head's labels. They
are stored inside the weights file (the model's ``spacy_crf_outputs``
attribute) and compared with the ``cfg``'s at load, so a cfg whose labels
are permuted (or renamed) is refused instead of predicting the wrong labels.
Beside the weights goes their SHA-256 (``model.sha256``): a byte changed in
a weight or in the lexicon features' dictionary still parses and loads, and
only the digest tells (a save from before digests has none: not checked).
"""

import hashlib
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional

import numpy
import srsly
from spacy import util
from thinc.api import Model, get_array_module

from ..ml.schemes import SchemeError
from ..ml.tagger_model import END, START, TRANSITIONS
from .confidence import load_temperature
from .fixed_settings import architecture_settings, check_architecture, check_scheme
from .lexicon import Lexicon, check_weight


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


#: the model attribute that stores the outputs the weights were saved with
OUTPUTS_ATTR = "spacy_crf_outputs"


def output_names(pipe) -> List[str]:
    """What the pipe's output layer scores, in order: the tags of a CRF
    tagger (``pipe.tags``, from its scheme and labels), else the labels."""
    if getattr(type(pipe), "tags", None) is not None:
        return list(pipe.tags)
    return list(pipe.labels)


def _output_layer(model: Model) -> Model:
    return model.get_ref("emissions") if model.has_ref("emissions") else model.get_ref("span_projection")


def check_weights(model: Model, n_tags: int) -> List[str]:
    """What is wrong with a model that should score ``n_tags`` outputs (tags,
    or labels for a span head): an output width or transition size that
    differ from ``n_tags``, and parameters holding NaN or infinity (thinc
    parameters only: the weights of a torch model wrapped inside, such as an
    embedded transformer, are not read). An empty list when nothing is
    wrong. A model without weights yet (never initialized) is not checked."""
    problems: List[str] = []
    what = "tags" if model.has_ref("emissions") else "labels"
    width = _output_layer(model).maybe_get_dim("nO")
    if width is not None and width != n_tags:
        problems.append(f"the weights score {width} {what} (output width) but the labels give {n_tags}")
    if model.has_ref("crf"):
        layer = model.get_ref("crf")
        if layer.has_param(TRANSITIONS) is True:
            shape = tuple(layer.get_param(TRANSITIONS).shape)
            if shape != (n_tags, n_tags):
                problems.append(
                    f"the transition matrix is {shape[0]}x{shape[1] if len(shape) > 1 else '?'} "
                    f"but the labels give {n_tags} tags"
                )
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


def model_bytes(pipe) -> bytes:
    """The pipe's weights, with the outputs they score stored inside."""
    pipe.model.attrs[OUTPUTS_ATTR] = output_names(pipe)
    return pipe.model.to_bytes()


#: the file (or bytes key) beside ``model`` with its SHA-256, in hex
DIGEST_KEY = "model.sha256"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_digest(pipe, data: bytes, digest: Optional[str], what: str) -> None:
    if digest is not None and digest.strip() != _digest(data):
        raise ValueError(
            f"[{pipe.name}] cannot load {what}: its bytes do not match the SHA-256 saved beside them "
            f"({DIGEST_KEY!r}): the file was damaged after it was saved. Copy or reinstall the pipeline again. "
            f"(If a spacy-crf from before weight digests saved into this directory over a newer save, "
            f"the {DIGEST_KEY!r} beside it is stale: delete that file.)"
        )


def _lexicon_to_disk(pipe, p: Path) -> None:
    if pipe.lexicon is None:
        # a stale file from an earlier save into the same directory would contradict the cfg
        if p.exists():
            p.unlink()
        return
    srsly.write_msgpack(p, sorted(pipe.lexicon.words))


def save_to_disk(pipe, path: Path, exclude: Iterable[str], extra: Optional[Dict[str, Callable]] = None) -> None:
    """Save ``cfg``, ``vocab`` and ``model`` (the weights, with their outputs),
    the lexicon's words (a pipe with a ``lexicon``) and the ``extra`` writers."""

    def write_model(p):
        data = model_bytes(pipe)
        p.write_bytes(data)
        p.with_name(DIGEST_KEY).write_text(_digest(data) + "\n", encoding="utf8")

    serialize = {
        "cfg": lambda p: srsly.write_json(p, pipe.cfg),
        "vocab": lambda p: pipe.vocab.to_disk(p, exclude=exclude),
        "model": write_model,
    }
    if hasattr(pipe, "lexicon"):
        serialize["lexicon"] = lambda p: _lexicon_to_disk(pipe, p)
    serialize.update(extra or {})
    util.to_disk(path, serialize, exclude)


def save_to_bytes(pipe, exclude: Iterable[str], extra: Optional[Dict[str, Callable]] = None) -> bytes:
    """:func:`save_to_disk` as bytes (no ``lexicon`` key without a lexicon)."""
    serialize = {
        "cfg": lambda: srsly.json_dumps(pipe.cfg),
        "vocab": lambda: pipe.vocab.to_bytes(exclude=exclude),
    }
    if "model" not in exclude:
        weights = model_bytes(pipe)
        serialize["model"] = lambda: weights
        serialize[DIGEST_KEY] = lambda: _digest(weights)
    if getattr(pipe, "lexicon", None) is not None:
        serialize["lexicon"] = lambda: srsly.msgpack_dumps(sorted(pipe.lexicon.words))
    serialize.update(extra or {})
    return util.to_bytes(serialize, exclude)


def load_from_disk(pipe, path: Path, exclude: Iterable[str]):
    """``from_disk`` of both pipes: load ``cfg`` and ``model`` (and the
    lexicon, for a pipe that has one) from ``path``, checking that the pipe
    is whole: the cfg has the labels, the weights load, score as many
    outputs as the labels give, in the order they were saved with, and are
    finite; the lexicon settings are valid and match the lexicon file.
    Errors name the directory (or the file)."""
    where = f"directory {str(path)!r}"

    def load_cfg(p: Path) -> None:
        if not p.exists():
            raise ValueError(
                f"[{pipe.name}] cannot load {where}: its 'cfg' file is missing (it holds the labels and the settings)."
            )
        try:
            cfg = srsly.read_json(p)
        except Exception as e:
            raise ValueError(f"[{pipe.name}] cannot read {str(p)!r}: {e}") from None
        _load_cfg(pipe, cfg, where)

    def load_model(p: Path) -> None:
        if not p.exists():
            raise ValueError(f"[{pipe.name}] cannot load {where}: its 'model' file (the weights) is missing.")
        data, digest = p.read_bytes(), p.with_name(DIGEST_KEY)
        what = f"the weights file {str(p)!r}"
        _load_model(pipe, data, what)  # (first: a truncated file is named as truncated)
        _check_digest(pipe, data, digest.read_text(encoding="utf8") if digest.exists() else None, what)

    def load_lexicon(p: Path) -> None:
        words = None
        if p.exists():
            try:
                words = srsly.read_msgpack(p)
            except Exception as e:
                raise ValueError(f"[{pipe.name}] cannot read the lexicon {str(p)!r}: {e}") from None
        _load_lexicon(pipe, words, where, f"the lexicon file {str(p)!r}")

    deserialize: Dict[str, Callable[[Path], Any]] = {
        "cfg": load_cfg,
        "vocab": lambda p: pipe.vocab.from_disk(p, exclude=exclude),
        "model": load_model,
    }
    if hasattr(pipe, "lexicon"):
        deserialize["lexicon"] = load_lexicon
    util.from_disk(path, deserialize, exclude)
    _check_loaded(pipe, where, exclude)
    return pipe


def load_from_bytes(pipe, bytes_data: bytes, exclude: Iterable[str]):
    """``from_bytes`` of both pipes, with the checks of :func:`load_from_disk`."""
    where = "bytes"
    try:
        msg = srsly.msgpack_loads(bytes_data)
    except Exception as e:
        raise ValueError(f"[{pipe.name}] cannot load from bytes: not a serialized pipe ({e})") from None
    if not isinstance(msg, dict):
        raise ValueError(f"[{pipe.name}] cannot load from bytes: not a serialized pipe.")
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
        _check_digest(pipe, msg["model"], msg.get(DIGEST_KEY), "the weights in the bytes")
    if "lexicon" not in exclude and hasattr(pipe, "lexicon"):
        try:
            words = srsly.msgpack_loads(msg["lexicon"]) if "lexicon" in msg else None
        except Exception as e:
            raise ValueError(f"[{pipe.name}] cannot load from bytes: unreadable lexicon ({e})") from None
        _load_lexicon(pipe, words, where, "the lexicon in the bytes")
    _check_loaded(pipe, where, exclude)
    return pipe


def _load_cfg(pipe, cfg, where: str) -> None:
    if not isinstance(cfg, dict) or not isinstance(cfg.get("labels"), list):
        raise ValueError(
            f"[{pipe.name}] cannot load {where}: its cfg has no 'labels' (the labels the weights were trained with)."
        )
    # The settings the pipe was made with come from its config, with any
    # override given at load: the user's, not replaced by the saved ones.
    made_with = {key: pipe.cfg[key] for key in getattr(pipe, "config_settings", ()) if key in pipe.cfg}
    check_scheme(pipe, cfg, where)  # a setting too, but fixed by training: refused if other, not replaced
    pipe.cfg.update(cfg)
    pipe.cfg.update(made_with)
    load_temperature(pipe, cfg, where)


def _check_lexicon_cfg(pipe, where: str) -> int:
    """The cfg's ``lexicon_size``, once it and ``lexicon_weight`` are valid
    (as ``set_lexicon`` would have them)."""
    try:
        check_weight(pipe.name, pipe.cfg.get("lexicon_weight", 0.0))
    except ValueError as e:
        raise ValueError(f"[{pipe.name}] cannot load {where}: its cfg's {str(e).split('] ', 1)[-1]}") from None
    size = pipe.cfg.get("lexicon_size", 0)
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(
            f"[{pipe.name}] cannot load {where}: its cfg's lexicon_size must be a whole number >= 0, got {size!r}."
        )
    if size and pipe.cfg.get("scheme") != "bmes":
        raise ValueError(
            f"[{pipe.name}] cannot load {where}: its cfg announces a lexicon, which applies "
            f"to scheme 'bmes' only, not {pipe.cfg.get('scheme')!r}."
        )
    return size


def _load_lexicon(pipe, words, where: str, what: str) -> None:
    """Restore the lexicon the cfg announces (``lexicon_size`` words), or none."""
    expected = _check_lexicon_cfg(pipe, where)
    if not expected:
        if words is not None:
            found = len(words) if isinstance(words, list) else type(words).__name__
            raise ValueError(
                f"[{pipe.name}] cannot load {where}: its cfg says there is no lexicon "
                f"(lexicon_size 0), but {what} holds {found} words: the files are from "
                "different saves (remove the file, or fix lexicon_size)."
            )
        pipe.lexicon = None
        return
    if words is None:
        raise ValueError(
            f"[{pipe.name}] cannot load {where}: its cfg announces a lexicon of {expected} "
            "words, but the 'lexicon' file is missing."
        )
    if not isinstance(words, list) or len(words) != expected:
        found = len(words) if isinstance(words, list) else type(words).__name__
        raise ValueError(
            f"[{pipe.name}] cannot load {where}: {what} has {found} words, "
            f"its cfg says {expected}: the files are from different saves."
        )
    try:
        lexicon = Lexicon(words)
    except ValueError as e:
        raise ValueError(f"[{pipe.name}] cannot load {where}: {what}: {e}") from None
    if len(lexicon) != expected:
        raise ValueError(
            f"[{pipe.name}] cannot load {where}: {what} holds {expected - len(lexicon)} "
            "unusable entries (shorter than two characters, or with whitespace)."
        )
    pipe.lexicon = lexicon


def _load_model(pipe, data: bytes, what: str) -> None:
    # a stale record from an earlier save must not stand in for the file's
    pipe.model.attrs.pop(OUTPUTS_ATTR, None)
    if not data:
        raise ValueError(f"[{pipe.name}] cannot load {what}: it is empty.")
    made = architecture_settings(pipe.model)
    try:
        pipe.model.from_bytes(data)
    except Exception as e:
        raise ValueError(
            f"[{pipe.name}] cannot load {what}: it is truncated, corrupt or from "
            f"another model ({type(e).__name__}: {e})"
        ) from None
    check_architecture(pipe, made, what)


def _check_outputs(pipe, outputs: List[str], where: str) -> List[str]:
    """The outputs stored with the weights against those the cfg gives."""
    saved = pipe.model.attrs.get(OUTPUTS_ATTR)
    if saved is None:
        if _output_layer(pipe.model).maybe_get_dim("nO") is not None:  # weights were loaded
            warnings.warn(
                f"[{pipe.name}] {where}: the weights were saved without the order of their "
                "outputs (an older version), so the labels' order cannot be checked; "
                "save the pipeline again to store it.",
                stacklevel=2,
            )
        return []
    saved = list(saved)
    if len(saved) != len(outputs):
        return [f"the weights were saved for {len(saved)} outputs {saved}, the cfg's labels give {len(outputs)}"]
    for i, (a, b) in enumerate(zip(saved, outputs)):
        if a != b:
            why = "the labels are in another order" if sorted(saved) == sorted(outputs) else "other labels"
            return [
                f"output {i} of the weights is {a!r} but {b!r} by the cfg's labels ({why} than "
                "the weights were saved with: it would predict the wrong labels)"
            ]
    return []


def _check_loaded(pipe, where: str, exclude: Iterable[str]) -> None:
    try:
        outputs = output_names(pipe)
    except SchemeError as e:
        raise ValueError(f"[{pipe.name}] cannot load {where}: {e}") from None
    problems = check_weights(pipe.model, len(outputs))
    if not problems and "model" not in exclude:
        problems = _check_outputs(pipe, outputs, where)
    if problems:
        scheme = f"scheme {pipe.cfg['scheme']!r}, " if "scheme" in pipe.cfg else ""
        raise ValueError(
            f"[{pipe.name}] cannot load {where}: " + "; ".join(problems) + f" ({scheme}labels {list(pipe.labels)})."
        )
