"""The one place where spacy-crf touches private parts of spaCy, thinc,
spacy-transformers and torch.

Autocast, sparse embedding gradients, freezing and quantization all change
the torch models inside a pipeline's thinc shims; the lazy-row Adam extends
thinc's Adam state; the merge copies a ``Doc``'s private fields; srsly's
msgpack hooks are looked up without re-reading the entry points;
``Transformer.from_disk``/``from_bytes`` and ``HFShim.predict`` are wrapped (:func:`wrap_method`).
Those reaches are listed in :data:`PRIVATE_API`, and
:func:`check_private_api` checks every entry against the installed
libraries (run by the test suite), so that an upgrade that renames one fails
with a message naming it instead of silently disabling a feature. Code
outside this module goes through the helpers below rather than the private
names (a test scans the package for stray ones).
"""

import importlib
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from spacy.language import Language
from thinc.api import Model
from thinc.shims import PyTorchShim


class PrivateAPI(NamedTuple):
    """A private attribute the package relies on: ``owner`` (a class or a
    module, by dotted name) has ``name``; ``why`` says what for, ``users``
    which modules depend on it."""

    owner: str
    name: str
    why: str
    users: Tuple[str, ...]


PRIVATE_API: Tuple[PrivateAPI, ...] = (
    PrivateAPI(
        "thinc.shims.PyTorchShim",
        "_model",
        "the torch module a shim wraps",
        ("freeze", "sparse_embeddings", "quantize", "autocast"),
    ),
    PrivateAPI(
        "thinc.shims.PyTorchShim", "_mixed_precision", "whether the shim runs CUDA autocast", ("autocast", "quantize")
    ),
    PrivateAPI(
        "thinc.shims.PyTorchShim", "_grad_scaler", "the shim's gradient scaler", ("sparse_embeddings", "quantize")
    ),
    PrivateAPI(
        "thinc.shims.pytorch_grad_scaler.PyTorchGradScaler",
        "_enabled",
        "whether gradients are scaled (sparse ones are not unscaled)",
        ("sparse_embeddings",),
    ),
    PrivateAPI(
        "spacy_transformers.layers.hf_shim.HFShim", "_hfmodel", "the HFObjects a transformer shim holds", ("quantize",)
    ),
    PrivateAPI(
        "spacy_transformers.layers.hf_shim.HFShim",
        "_optimizer",
        "the shim's own torch optimizer, copied to the quantized shim",
        ("quantize",),
    ),
    PrivateAPI(
        "spacy_transformers.layers._util",
        "replace_listener_cfg",
        "what replace_listeners writes into a listener's config",
        ("quantize",),
    ),
    PrivateAPI("thinc.optimizers.Optimizer", "mom1", "Adam's first moments, updated row by row", ("optimizers",)),
    PrivateAPI("thinc.optimizers.Optimizer", "mom2", "Adam's second moments, updated row by row", ("optimizers",)),
    PrivateAPI("thinc.optimizers.Optimizer", "nr_update", "Adam's step count per parameter", ("optimizers",)),
    PrivateAPI("spacy.tokens.Doc", "_context", "copied to the merged doc", ("merge",)),
    PrivateAPI("spacy.tokens.Doc", "_vector", "copied to the merged doc", ("merge",)),
    PrivateAPI("spacy.tokens.Doc", "_vector_norm", "copied to the merged doc", ("merge",)),
    PrivateAPI("spacy.cli._util", "app", "spaCy's typer app, which `spacy crf` joins", ("cli.plugin",)),
    PrivateAPI(
        "spacy_transformers.layers.transformer_model",
        "get_alignment_via_offset_mapping",
        "the alignment TransformerModel's forward pass looks up, replaced by an equal one in numpy",
        ("ml.fast_align",),
    ),
    PrivateAPI(
        "spacy_transformers.layers.transformer_model",
        "huggingface_tokenize",
        "the tokenization TransformerModel's forward pass looks up, replaced by one with the same output",
        ("ml.fast_align",),
    ),
    PrivateAPI(
        "thinc.model.Model",
        "_func",
        "a layer's forward function: two listener chains with the same ones pool alike",
        ("ml.shared_listener",),
    ),
    PrivateAPI(
        "catalogue",
        "REGISTRY",
        "the functions registered in code, where srsly's msgpack hooks are read from",
        ("enable_speed_ups",),
    ),
    PrivateAPI("srsly.msgpack", "msgpack_encoders", "srsly's encoder hooks", ("enable_speed_ups",)),
    PrivateAPI("srsly.msgpack", "msgpack_decoders", "srsly's decoder hooks", ("enable_speed_ups",)),
    PrivateAPI(
        "torch.ops.mkldnn",
        "_is_mkldnn_bf16_supported",
        "whether torch's CPU matrix products run bfloat16 through oneDNN or in its far slower reference loop",
        ("autocast",),
    ),
)


# --- the CPU ----------------------------------------------------------------------


def cpu_runs_bfloat16_natively() -> bool:
    """Whether torch runs bfloat16 matrix products on this CPU through oneDNN
    (AVX-512 or AMX), as its own dispatch decides. Elsewhere (AVX2 only) it
    falls back to a reference loop: a training step under bfloat16 autocast
    took 17x as long as in float32 on such a CPU (docs/results.md)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # torch built without oneDNN
        return False


# --- walking a pipeline's torch models ------------------------------------------


def pipeline_nodes(nlp: Language, once: bool = True) -> Iterator[Tuple[str, Model]]:
    """(component name, thinc node) for every node of every component's
    model. ``once``: a node shared by components is seen under its first
    owner only; otherwise under each."""
    seen = set()
    for name, component in nlp.components:
        model = getattr(component, "model", None)
        if not isinstance(model, Model):
            continue
        for node in model.walk():
            if not once or id(node) not in seen:
                seen.add(id(node))
                yield name, node


def torch_shims(nlp: Language, built: bool = True) -> Iterator[Tuple[str, PyTorchShim]]:
    """(component name, shim) for every PyTorch shim in the pipeline, once
    each. ``built``: only shims that hold their torch module already (a
    transformer's is built by ``initialize``)."""
    seen = set()
    for name, node in pipeline_nodes(nlp):
        for shim in node.shims:
            if isinstance(shim, PyTorchShim) and id(shim) not in seen and (not built or torch_module(shim) is not None):
                seen.add(id(shim))
                yield name, shim


def torch_module(shim: PyTorchShim):
    """The ``torch.nn.Module`` a shim wraps (None while it has none)."""
    module = shim._model
    return module if hasattr(module, "named_parameters") else None


def uses_mixed_precision(shim: PyTorchShim) -> bool:
    """Whether the shim runs CUDA autocast with gradient scaling."""
    return bool(shim._mixed_precision)


def scales_gradients(shim: PyTorchShim) -> bool:
    """Whether the shim's gradient scaler is on."""
    scaler = shim._grad_scaler
    return scaler is not None and bool(scaler._enabled)


def hf_shim_state(shim) -> Dict[str, object]:
    """What a replacement of a spacy-transformers ``HFShim`` must take over:
    its HF objects, optimizer, mixed-precision flag and gradient scaler."""
    return {
        "model": shim._hfmodel,
        "optimizer": shim._optimizer,
        "mixed_precision": shim._mixed_precision,
        "grad_scaler": shim._grad_scaler,
    }


def set_grad_scaler(shim: PyTorchShim, scaler) -> None:
    """Give ``shim`` another shim's gradient scaler (its constructor builds a new one)."""
    shim._grad_scaler = scaler


def spacy_cli_app():
    """spaCy's typer app (``spacy ...``), which ``spacy crf`` joins."""
    from spacy.cli._util import app

    return app


def stock_replace_listener_cfg(tok2vec_model_cfg, listener_model_cfg):
    """spacy-transformers' own ``replace_listener_cfg``."""
    from spacy_transformers.layers._util import replace_listener_cfg

    return replace_listener_cfg(tok2vec_model_cfg, listener_model_cfg)


#: spacy-transformers' own helpers, kept when replace_transformer_helpers replaces them
_STOCK_TRANSFORMER_HELPERS: Dict[str, Callable] = {}


def replace_transformer_helpers(align: Callable, tokenize: Callable) -> None:
    """Make spacy-transformers' ``TransformerModel`` forward pass align tokens
    to wordpieces with ``align`` and tokenize with ``tokenize`` (same
    signatures and results as its ``get_alignment_via_offset_mapping`` and
    ``huggingface_tokenize``, which its module looks up as globals at every
    call). Doing it again changes nothing."""
    from spacy_transformers.layers import transformer_model

    for name, new in (("get_alignment_via_offset_mapping", align), ("huggingface_tokenize", tokenize)):
        current = getattr(transformer_model, name)
        if current is not new:
            _STOCK_TRANSFORMER_HELPERS.setdefault(name, current)
            setattr(transformer_model, name, new)


def stock_transformer_helper(name: str) -> Callable:
    """spacy-transformers' own ``get_alignment_via_offset_mapping`` or
    ``huggingface_tokenize``, replaced or not."""
    from spacy_transformers.layers import transformer_model

    return _STOCK_TRANSFORMER_HELPERS.get(name, getattr(transformer_model, name))


def wrap_method(owner: str, name: str, wrapper: Callable) -> None:
    """Make the method ``name`` of a library's class ``owner`` (``"module.Class"``)
    ``wrapper(stock, self, *args, **kwargs)``, ``stock`` the library's own (spacy-transformers'
    ``Transformer.from_disk``/``from_bytes``, ``HFShim.predict``). Doing it again changes nothing."""
    module, _, class_name = owner.rpartition(".")
    cls = getattr(importlib.import_module(module), class_name)
    current = getattr(cls, name)
    if getattr(current, "wrapped_by_spacy_crf", None) is wrapper:
        return
    stock = getattr(current, "stock_method", current)

    def method(self, *args, **kwargs):
        return wrapper(stock, self, *args, **kwargs)

    method.__doc__ = stock.__doc__
    method.stock_method = stock  # type: ignore[attr-defined]
    method.wrapped_by_spacy_crf = wrapper  # type: ignore[attr-defined]
    setattr(cls, name, method)


def layer_forward(layer: Model) -> Callable:
    """The forward function a thinc layer was built with (no public accessor)."""
    return layer._func


def transformer_data(doc):
    """``doc._.trf_data``, spacy-transformers' output for ``doc`` (a public
    extension attribute; read here because ``doc._`` is a private-looking
    reach to the package's own check)."""
    return doc._.trf_data


def copy_doc_private_fields(source, target) -> None:
    """Copy the ``Doc`` fields that have no public setter."""
    target._context = source._context
    target._vector = source._vector
    target._vector_norm = source._vector_norm


# --- srsly's msgpack hooks -------------------------------------------------------


def speed_up_msgpack_hooks() -> None:
    """Make srsly's ``msgpack_dumps`` and ``msgpack_loads`` find their hooks
    in microseconds, not a third of a millisecond (only the opt-in
    :func:`spacy_crf.enable_speed_ups` calls it). srsly asks catalogue for
    every hook at every call, which reads the entry points and walks its
    registry: five or so calls per ``Doc.to_bytes`` or ``from_bytes``, which
    halved ``nlp.pipe(n_process > 1)``. The same hooks come back in the same
    order: entry points read once per process (a package installed later is
    not seen), hooks registered in code at every call. Idempotent; a srsly or
    catalogue without what it replaces keeps its slower lookup (the test
    suite names the missing part, see :data:`PRIVATE_API`)."""
    import catalogue
    from srsly import msgpack

    registries: List[Any] = [getattr(msgpack, name, None) for name in ("msgpack_encoders", "msgpack_decoders")]
    if not isinstance(getattr(catalogue, "REGISTRY", None), dict) or not all(
        isinstance(r, catalogue.Registry) and hasattr(r, "namespace") and hasattr(r, "entry_points") for r in registries
    ):
        return
    for registry in registries:
        if not isinstance(registry.get_all, _HookLookup):
            registry.get_all = _HookLookup(registry)


def msgpack_hooks_sped_up() -> bool:
    """Whether :func:`speed_up_msgpack_hooks` replaced srsly's encoder lookup."""
    encoders = importlib.import_module("srsly.msgpack").msgpack_encoders
    return isinstance(getattr(encoders, "get_all", None), _HookLookup)


def restore_msgpack_hooks() -> None:
    """catalogue's own lookup again (for a benchmark of the difference)."""
    from srsly import msgpack

    for registry in (msgpack.msgpack_encoders, msgpack.msgpack_decoders):
        if isinstance(registry.get_all, _HookLookup):
            del registry.get_all


class _HookLookup:
    """``registry.get_all`` of a catalogue registry, its entry points read once.

    Which of catalogue's keys are the registry's is worked out again only
    when its key set may have changed: registering a new name appends a key,
    so the number of keys or the last one changes (a name registered again
    keeps its key; its function is read at every call)."""

    def __init__(self, registry) -> None:
        self.namespace = tuple(registry.namespace)
        self.entry_points = dict(registry.get_entry_points()) if registry.entry_points else {}
        self._seen: Tuple[int, object] = (-1, None)
        self._keys: Tuple[Tuple[str, ...], ...] = ()

    def __call__(self) -> Dict[str, Any]:
        import catalogue

        registered = catalogue.REGISTRY
        n = len(self.namespace)
        # (a snapshot of the keys, as catalogue takes: another thread may register)
        state = (len(registered), next(reversed(registered), None))
        if state != self._seen:
            keys = tuple(registered)
            self._keys = tuple(key for key in keys if len(key) == n + 1 and key[:n] == self.namespace)
            self._seen = state
        hooks = dict(self.entry_points)
        for key in self._keys:
            func = registered.get(key, _GONE)
            if func is _GONE:  # removed (catalogue._remove) and another name added since: look again
                self._seen = (-1, None)
                return self()
            hooks[key[n]] = func
        return hooks


_GONE = object()


# --- changing a shim's behaviour in place ---------------------------------------

_MIXED_CLASSES: Dict[Tuple[type, type], type] = {}


def mix_in(obj: object, mixin: type) -> None:
    """Give ``obj`` the methods of ``mixin`` by swapping its class for a
    subclass of both (cached per pair, so that objects stay comparable by
    type). Doing it twice changes nothing. The shims are built by spaCy and
    spacy-transformers from the config, so wrapping them is not an option:
    their owners hold them by reference."""
    cls = type(obj)
    if issubclass(cls, mixin):
        return
    key = (mixin, cls)
    if key not in _MIXED_CLASSES:
        _MIXED_CLASSES[key] = type(f"{mixin.__name__.removesuffix('Shim')}{cls.__name__}", (mixin, cls), {})
    obj.__class__ = _MIXED_CLASSES[key]


# --- checking the list against the installed libraries --------------------------


def _instances() -> Dict[str, Callable[[], object]]:
    """How to build an object of each class in :data:`PRIVATE_API` (instance
    attributes only exist on instances)."""
    import numpy
    import torch
    from spacy.tokens import Doc
    from spacy.vocab import Vocab
    from spacy_transformers.data_classes import HFObjects
    from spacy_transformers.layers.hf_shim import HFShim
    from thinc.api import Adam
    from thinc.shims.pytorch_grad_scaler import PyTorchGradScaler

    def adam():
        optimizer = Adam(0.001)
        optimizer((0, "W"), numpy.zeros(2, dtype="f"), numpy.ones(2, dtype="f"))
        return optimizer

    return {
        "thinc.shims.PyTorchShim": lambda: PyTorchShim(torch.nn.Linear(2, 2)),
        "thinc.shims.pytorch_grad_scaler.PyTorchGradScaler": PyTorchGradScaler,
        "spacy_transformers.layers.hf_shim.HFShim": lambda: HFShim(HFObjects(None, None, None, {}, {})),
        "thinc.optimizers.Optimizer": adam,
        "spacy.tokens.Doc": lambda: Doc(Vocab(), words=["a"]),
        "torch.ops.mkldnn": lambda: torch.ops.mkldnn,
        "thinc.model.Model": lambda: Model("x", lambda model, X, is_train: (X, lambda dY: dY)),
    }


def check_entry(entry: PrivateAPI, instances: Optional[Dict[str, Callable[[], object]]] = None) -> Optional[str]:
    """None if the installed libraries still have ``entry``; else what broke."""
    instances = _instances() if instances is None else instances
    try:
        owner = instances[entry.owner]() if entry.owner in instances else importlib.import_module(entry.owner)
    except Exception as e:  # an upgrade can break the constructor as well
        return f"{entry.owner} could not be built to check {entry.name!r}: {type(e).__name__}: {e}"
    if not hasattr(owner, entry.name):
        return (
            f"{entry.owner} has no {entry.name!r} any more ({entry.why}); spacy_crf's "
            f"{', '.join(entry.users)} rely on it: see spacy_crf/_compat.py"
        )
    return None


def check_private_api() -> List[str]:
    """Every entry of :data:`PRIVATE_API` the installed libraries lack, as messages."""
    instances = _instances()
    return [problem for entry in PRIVATE_API if (problem := check_entry(entry, instances)) is not None]
