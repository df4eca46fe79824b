"""The private parts of spaCy, thinc, spacy-transformers and torch the package
relies on (spacy_crf._compat): every listed one is still there, an upgrade
that removes one fails with its name, and no module reaches past the list."""

import ast
from pathlib import Path

import pytest
import torch
from thinc.shims import PyTorchShim

import spacy_crf
from spacy_crf import _compat
from spacy_crf._compat import PRIVATE_API, PrivateAPI, check_entry, mix_in

PACKAGE = Path(spacy_crf.__file__).parent


@pytest.mark.parametrize("entry", PRIVATE_API, ids=lambda e: f"{e.owner}.{e.name}")
def test_every_private_attribute_the_package_uses_is_still_there(entry):
    assert check_entry(entry) is None


def test_a_renamed_private_attribute_fails_with_its_owner_name_and_users():
    # as if an upgrade renamed PyTorchShim._model
    entry = PrivateAPI("thinc.shims.PyTorchShim", "_renamed_model", "what for", ("autocast",))
    problem = check_entry(entry)
    assert problem is not None
    assert "thinc.shims.PyTorchShim has no '_renamed_model'" in problem and "autocast" in problem
    missing_module_attr = PrivateAPI("spacy.cli._util", "no_such_app", "x", ("cli.plugin",))
    assert "no_such_app" in check_entry(missing_module_attr)


def _private_reaches(path: Path):
    """``obj._name`` where ``obj`` is not ``self``/``cls`` and ``_name`` is not
    a dunder: attribute reaches into another object's private state."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                continue
            yield node.lineno, node.attr
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and any(part.startswith("_") for part in node.module.split("."))
            and node.level == 0
        ):
            yield node.lineno, node.module


# The package's own private names that its modules share on purpose (the user
# dictionary's state, read by its decoding module).
OWN_PRIVATE = {"_entries", "_compiled", "_update", "_to_list", "_replace_saved"}


def test_no_module_reaches_private_library_state_outside_compat():
    stray = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_compat.py":
            continue
        for line, name in _private_reaches(path):
            if name not in OWN_PRIVATE:
                stray.append(f"{path.relative_to(PACKAGE)}:{line}: {name}")
    assert not stray, "reach through spacy_crf._compat instead: " + "; ".join(stray)


def test_the_pipeline_walkers_are_in_one_place():
    # autocast, freezing, sparse embeddings and quantization walk with _compat's walker
    for name in (
        "training/autocast.py",
        "training/freeze.py",
        "training/sparse_embeddings.py",
        "encoders/quantize.py",
        "encoders/onnx_backend.py",
        "encoders/swap.py",
    ):
        text = (PACKAGE / name).read_text(encoding="utf-8")
        assert "nlp.components" not in text, name


def test_mix_in_swaps_the_class_once_and_keeps_behaviour():
    class Loud:
        def begin_update(self, inputs):
            output, backprop = super().begin_update(inputs)
            return output * 2, backprop

    a, b = PyTorchShim(torch.nn.Linear(2, 2)), PyTorchShim(torch.nn.Linear(2, 2))
    mix_in(a, Loud)
    mix_in(a, Loud)
    mix_in(b, Loud)
    assert type(a) is type(b) and type(a).__mro__[1:3] == (Loud, PyTorchShim)
    assert type(a).__name__ == "LoudPyTorchShim"
    assert _compat._MIXED_CLASSES[(Loud, PyTorchShim)] is type(a)


def test_srsly_msgpack_hooks_are_the_same_and_the_entry_points_read_once(monkeypatch):
    import catalogue
    import srsly
    from spacy.tokens import Doc, Span
    from spacy.vocab import Vocab
    from srsly import msgpack

    registries = (msgpack.msgpack_encoders, msgpack.msgpack_decoders)
    stock = [catalogue.Registry.get_all(registry) for registry in registries]
    _compat.speed_up_msgpack_hooks()
    lookups = [registry.get_all for registry in registries]
    _compat.speed_up_msgpack_hooks()  # again: changes nothing
    assert [registry.get_all for registry in registries] == lookups
    for registry, hooks in zip(registries, stock):
        assert list(registry.get_all().items()) == list(hooks.items())  # same hooks, same order
    # entry points are not read again, however many docs cross
    reads = []
    for registry in registries:
        monkeypatch.setattr(registry, "get_entry_points", lambda: reads.append(1) or {})
    doc = Doc(Vocab(), words=["北京", "大学", "很", "大"], spaces=[False] * 4)
    doc.ents = [Span(doc, 0, 2, label="ORG")]
    doc.spans["words"] = [Span(doc, i, i + 1) for i in range(4)]
    for _ in range(3):
        back = Doc(Vocab()).from_bytes(doc.to_bytes())
    assert reads == []
    assert back.text == doc.text and [(e.text, e.label_) for e in back.ents] == [("北京大学", "ORG")]
    assert [s.text for s in back.spans["words"]] == ["北京", "大学", "很", "大"]

    # a hook registered in code afterwards is used, as with catalogue's own lookup
    class Point:
        def __init__(self, x):
            self.x = x

    def encode(obj, chain=None):
        return {"__point__": obj.x} if isinstance(obj, Point) else (obj if chain is None else chain(obj))

    def decode(obj, chain=None):
        return Point(obj["__point__"]) if "__point__" in obj else (obj if chain is None else chain(obj))

    srsly.msgpack_encoders.register("spacy_crf_test_point", func=encode)
    srsly.msgpack_decoders.register("spacy_crf_test_point", func=decode)
    try:
        assert srsly.msgpack_loads(srsly.msgpack_dumps({"p": Point(3)}))["p"].x == 3

        # registered again under the same name: the new function is used
        def encode_tenfold(obj, chain=None):
            return {"__point__": 10 * obj.x} if isinstance(obj, Point) else (obj if chain is None else chain(obj))

        srsly.msgpack_encoders.register("spacy_crf_test_point", func=encode_tenfold)
        assert srsly.msgpack_loads(srsly.msgpack_dumps({"p": Point(3)}))["p"].x == 30
        for registry, hooks in zip(registries, stock):
            assert list(registry.get_all()) == [*hooks, "spacy_crf_test_point"]
            assert registry.get_all() == catalogue.Registry.get_all(registry)
    finally:
        for registry in registries:
            del catalogue.REGISTRY[(*registry.namespace, "spacy_crf_test_point")]
    # removed: gone from the lookup too
    for registry, hooks in zip(registries, stock):
        assert registry.get_all() == hooks


def test_a_crf_pipe_leaves_the_msgpack_hooks_alone():
    import spacy
    from srsly import msgpack

    _compat.restore_msgpack_hooks()
    try:
        spacy.blank("zh").add_pipe("crf_merge_words")
        assert not isinstance(msgpack.msgpack_encoders.get_all, _compat._HookLookup)
        assert not isinstance(msgpack.msgpack_decoders.get_all, _compat._HookLookup)
        assert not _compat.msgpack_hooks_sped_up()
    finally:
        _compat.speed_up_msgpack_hooks()
    assert _compat.msgpack_hooks_sped_up()


def test_the_msgpack_hook_lookup_follows_names_removed_and_added_between_calls():
    import catalogue
    from srsly import msgpack

    _compat.speed_up_msgpack_hooks()
    registry = msgpack.msgpack_encoders
    names = ["spacy_crf_test_a", "spacy_crf_test_b", "spacy_crf_test_c"]
    try:
        for name in names[:2]:
            registry.register(name, func=lambda obj, chain=None, name=name: obj)
        assert {"spacy_crf_test_a", "spacy_crf_test_b"} <= set(registry.get_all())
        # as many keys as before and the same last one, but another set of them
        for name in names[:2]:
            del catalogue.REGISTRY[(*registry.namespace, name)]
        registry.register("spacy_crf_test_c", func=lambda obj, chain=None: obj)
        registry.register("spacy_crf_test_b", func=lambda obj, chain=None: obj)
        assert registry.get_all() == catalogue.Registry.get_all(registry)
        assert "spacy_crf_test_a" not in registry.get_all() and "spacy_crf_test_c" in registry.get_all()
    finally:
        for name in names:
            catalogue.REGISTRY.pop((*registry.namespace, name), None)


def test_without_what_it_replaces_the_msgpack_lookup_is_left_alone(monkeypatch):
    import catalogue
    from srsly import msgpack

    _compat.restore_msgpack_hooks()
    try:
        monkeypatch.delattr(catalogue, "REGISTRY")
        _compat.speed_up_msgpack_hooks()  # a future catalogue: nothing to replace, no error
        assert not isinstance(msgpack.msgpack_encoders.get_all, _compat._HookLookup)
        monkeypatch.undo()
        monkeypatch.setattr(msgpack, "msgpack_decoders", object())
        _compat.speed_up_msgpack_hooks()
        assert not isinstance(msgpack.msgpack_encoders.get_all, _compat._HookLookup)
    finally:
        monkeypatch.undo()
        _compat.speed_up_msgpack_hooks()
    assert isinstance(msgpack.msgpack_encoders.get_all, _compat._HookLookup)
