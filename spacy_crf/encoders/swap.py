"""What the inference-only encoders share (:mod:`.quantize`, torch dynamic
quantization; :mod:`.onnx_backend`, ONNX Runtime; :mod:`.openvino_backend`):
their shim's base (:class:`InferenceOnlyShim`: no training, CPU only),
putting their shim in place of the ``HFShim`` of a spacy-transformers
``TransformerModel``, building the stock architectures with that shim, and
finding and rewriting the config blocks of a pipeline's transformers, so
that ``nlp.to_disk`` / ``spacy.load`` rebuild the swapped encoder, and the
load errors that name the component and file of such an encoder
(:func:`load_from_disk`, :func:`load_from_bytes`).
"""

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Type

import torch
from spacy.language import Language
from spacy_transformers.architectures import create_TransformerModel_v3, transformer_tok2vec_v3
from spacy_transformers.layers import TransformerModel
from spacy_transformers.layers.hf_shim import HFShim
from thinc.api import Model, get_torch_default_device

from .._compat import (
    hf_shim_state,
    pipeline_nodes,
    set_grad_scaler,
    stock_replace_listener_cfg,
    wrap_method,
)
from ..ml import fast_align

Block = Tuple[Tuple[str, ...], Dict[str, Any]]  # (path in the config, block)

#: spacy-transformers' transformer architectures, and the kind each is
TORCH_ARCHS = {
    **{f"spacy-transformers.TransformerModel.v{v}": "model" for v in (1, 2, 3)},
    **{f"spacy-transformers.Tok2VecTransformer.v{v}": "tok2vec" for v in (1, 2, 3)},
}


class CPUOnlyError(ValueError):
    """An inference-only encoder asked to run on another device than the CPU."""


def check_cpu(what: str, kind: str) -> None:
    """An error naming ``what`` unless torch's default device is the CPU:
    ``kind`` encoders (``"ONNX"``, ``"quantized"``) run on CPU only."""
    device = get_torch_default_device()
    if device.type != "cpu":
        raise CPUOnlyError(
            f"{what}: {kind} encoders run on CPU only, but the default torch device is {device}. "
            f"Load {kind} pipelines without spacy.require_gpu()/prefer_gpu()."
        )


class SavedEncoderError(ValueError):
    """A saved inference-only encoder that cannot be loaded; the message
    says why (damaged, or saved by another kind of encoder)."""


class InferenceOnlyShim(HFShim):
    """An ``HFShim`` whose model only predicts (exported or quantized): a
    training pass raises :attr:`training_error`, saying how to train instead;
    it runs on CPU only. Subclasses say what they are (:meth:`description`,
    :attr:`kind`) and how to train (:meth:`how_to_train`)."""

    training_error: Type[Exception] = RuntimeError
    #: for errors: "ONNX encoders run on CPU only"
    kind = "inference-only"

    def description(self) -> str:
        """What the encoder is, after "This transformer": "runs in ONNX Runtime"."""
        raise NotImplementedError

    def how_to_train(self) -> str:
        """A sentence: how to get a pipeline like this one trained."""
        raise NotImplementedError

    def use_encoder(self, encoder: torch.nn.Module) -> None:
        """Make ``encoder`` the model the shim runs."""
        self._model = encoder
        self._hfmodel.transformer = encoder

    def begin_update(self, inputs):
        raise self.training_error(
            f"This transformer {self.description()} and is inference-only: it cannot be trained. "
            f"{self.how_to_train()}; to train other components on top of it, freeze it ([training] "
            "frozen_components and annotating_components)."
        )

    def finish_update(self, optimizer):
        self.begin_update(None)

    def to_device(self, device_type: str, device_id: int):
        if device_type != "cpu":
            raise ValueError(f"This transformer {self.description()}: it runs on CPU only.")
        super().to_device(device_type, device_id)

    def from_bytes(self, bytes_data):
        check_cpu(f"Loading a transformer that {self.description()}", self.kind)
        return super().from_bytes(bytes_data)


def _inference_only_shim(component) -> Optional[InferenceOnlyShim]:
    """The shim of a ``Transformer`` component whose encoder is inference-only; None for the others."""
    model = component.model
    shim = model.layers[0].shims[0] if isinstance(model, TransformerModel) and model.layers[0].shims else None
    return shim if isinstance(shim, InferenceOnlyShim) else None


@contextmanager
def _load_errors_named(what: str, saved: str) -> Iterator[None]:
    """An error loading an inference-only encoder as one ``ValueError`` line
    starting with ``what`` (which names the component and where from); the
    ``saved`` bytes (``"the file is"``) are said to be truncated or damaged
    unless the error says why itself (a damaged or other kind of save). A
    runtime to install or a device to leave passes as it is: its message
    says which."""
    try:
        yield
    except (ImportError, CPUOnlyError):
        raise
    except SavedEncoderError as e:
        raise ValueError(f"{what}: {e}") from None
    except Exception as e:
        reason = " ".join(f"{type(e).__name__}: {e}".split())[:300]
        raise ValueError(
            f"{what}: {saved} truncated or damaged ({reason}). Copy or reinstall the pipeline again."
        ) from None


def load_from_disk(stock_from_disk: Callable, component, path, *, exclude: Iterable[str] = ()):
    """``Transformer.from_disk`` for a transformer whose encoder is
    inference-only (the others load as spacy-transformers loads them): a
    missing, truncated or damaged ``model`` file is a one-line ``ValueError``
    naming the component and the file, not msgpack's "Unpack failed" or a
    bare ``FileNotFoundError``."""
    shim = _inference_only_shim(component)
    if shim is None or "model" in exclude:
        return stock_from_disk(component, path, exclude=exclude)
    model_file = Path(path) / "model"
    what = f"Cannot load the {shim.kind} encoder of component {component.name!r} from {str(model_file)!r}"
    if not model_file.is_file():
        raise ValueError(f"{what}: the file is missing. Copy or reinstall the pipeline again.")
    stock_from_disk(component, path, exclude=[*exclude, "model"])
    with _load_errors_named(what, "the file is"):
        component.model.from_bytes(model_file.read_bytes())  # what spacy-transformers' own from_disk does
    return component


def load_from_bytes(stock_from_bytes: Callable, component, bytes_data: bytes, *, exclude: Iterable[str] = ()):
    """``Transformer.from_bytes`` (``nlp.from_bytes``) for a transformer whose
    encoder is inference-only: truncated or damaged bytes are a one-line
    ``ValueError`` naming the component, as :func:`load_from_disk`."""
    shim = _inference_only_shim(component)
    if shim is None or "model" in exclude:
        return stock_from_bytes(component, bytes_data, exclude=exclude)
    with _load_errors_named(
        f"Cannot load the {shim.kind} encoder of component {component.name!r} from bytes", "they are"
    ):
        return stock_from_bytes(component, bytes_data, exclude=exclude)


def swap_hf_shim(
    model: TransformerModel,
    shim_cls: type,
    settings: Mapping[str, Any],
    set_transformer: Callable,
    tok2vec_arch: str,
) -> None:
    """Replace ``model``'s ``HFShim`` by ``shim_cls(hf objects, **settings, ...)``,
    which takes over its HF objects, config, optimizer, mixed-precision flag
    and gradient scaler; ``set_transformer`` is what ``initialize`` calls with
    a float model, and ``replace_listeners`` writes ``tok2vec_arch`` into a
    listener's config."""
    wrapper = model.layers[0]
    shim = wrapper.shims[0]
    assert isinstance(shim, HFShim), type(shim)
    state = hf_shim_state(shim)
    new = shim_cls(
        state["model"],
        **settings,
        config=shim.cfg,
        optimizer=state["optimizer"],
        mixed_precision=state["mixed_precision"],
        grad_scaler_config={},  # a fresh dict: HFShim writes into it
        config_cls=shim.config_cls,
        tokenizer_cls=shim.tokenizer_cls,
    )
    set_grad_scaler(new, state["grad_scaler"])
    wrapper.shims[0] = new
    model.attrs["set_transformer"] = set_transformer

    def replace_listener_cfg(tok2vec_model_cfg, listener_model_cfg):
        result = stock_replace_listener_cfg(tok2vec_model_cfg, listener_model_cfg)
        if result["@architectures"] == "spacy-transformers.Tok2VecTransformer.v3":
            result["@architectures"] = tok2vec_arch
        return result

    model.attrs["replace_listener_cfg"] = replace_listener_cfg


def build_transformer_model(
    name,
    get_spans,
    tokenizer_config,
    transformer_config,
    mixed_precision,
    grad_scaler_config,
    install: Callable[[TransformerModel], None],
) -> Model:
    """``spacy-transformers.TransformerModel.v3`` with ``install`` applied to
    it; its ``transformer`` component names itself (and the file) in load errors."""
    fast_align.install()
    wrap_method("spacy_transformers.pipeline_component.Transformer", "from_disk", load_from_disk)
    wrap_method("spacy_transformers.pipeline_component.Transformer", "from_bytes", load_from_bytes)
    model = create_TransformerModel_v3(
        name, get_spans, tokenizer_config, transformer_config, mixed_precision, dict(grad_scaler_config)
    )
    install(model)
    return model


def build_tok2vec_transformer(
    name,
    get_spans,
    tokenizer_config,
    pooling,
    grad_factor,
    transformer_config,
    mixed_precision,
    grad_scaler_config,
    install: Callable[[TransformerModel], None],
) -> Model:
    """``spacy-transformers.Tok2VecTransformer.v3`` with ``install`` applied to its transformer."""
    fast_align.install()
    model = transformer_tok2vec_v3(
        name,
        get_spans,
        tokenizer_config,
        pooling,
        grad_factor,
        transformer_config,
        mixed_precision,
        dict(grad_scaler_config),
    )
    for node in model.walk():
        if isinstance(node, TransformerModel):
            install(node)
    return model


def transformer_blocks(cfg: Any, archs: Any, path: Tuple[str, ...] = ()) -> List[Block]:
    """(path, block) of every config block naming one of ``archs``."""
    found = []
    if isinstance(cfg, dict):
        if cfg.get("@architectures") in archs:
            found.append((path, cfg))
        for key, value in cfg.items():
            found.extend(transformer_blocks(value, archs, path + (key,)))
    return found


def plan_swap(nlp: Language, archs: Any, action: str, result: str) -> List[Tuple[List[TransformerModel], List[Block]]]:
    """Per component with transformers: its ``TransformerModel`` nodes and the
    config blocks that build them (``archs``: the architectures that may).
    A component whose config does not name one block per transformer could
    not be rebuilt from its saved config: ``ValueError``, ``action``
    (e.g. "quantize component {name!r}") saying what was refused and
    ``result`` (e.g. "quantized") what could not be rebuilt."""
    by_component: Dict[str, List[TransformerModel]] = {}
    for name, node in pipeline_nodes(nlp, once=False):
        if isinstance(node, TransformerModel):
            by_component.setdefault(name, []).append(node)
    plan = []
    for name, models in by_component.items():
        blocks = transformer_blocks(nlp.get_pipe_config(name), archs)
        if len(blocks) != len(models):
            raise ValueError(
                f"Cannot {action.format(name=name)}: its model has {len(models)} transformer(s) but its "
                f"config names {len(blocks)} spacy-transformers TransformerModel/Tok2VecTransformer block(s) "
                f"({', '.join('.'.join(p) or '(root)' for p, _ in blocks) or 'none'}), so the saved config "
                f"could not rebuild the {result} model."
            )
        plan.append((models, blocks))
    if not plan:
        raise ValueError(f"No spacy-transformers transformer found in the pipeline {nlp.pipe_names}.")
    return plan


def rewrite_blocks(blocks: List[Block], arch_by_kind: Mapping[str, str], settings: Mapping[str, Any]) -> None:
    """Point every stock block at its swapped architecture (``arch_by_kind``:
    "model" and "tok2vec") with ``settings``; swapped blocks stay as they are."""
    for _, block in blocks:
        kind = TORCH_ARCHS.get(block["@architectures"])
        if kind is not None:
            block["@architectures"] = arch_by_kind[kind]
            block.update(settings)
