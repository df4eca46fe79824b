"""Shared fixtures: tiny models built locally, never downloaded.

Config text and tiny data sets shared by several test modules are in
``_configs.py``. The project's commands are the package ``project/crf_project``;
``project/`` is put on ``sys.path`` here so that their tests import them as
``crf_project.NAME``, as the commands import each other.
"""

import random
import sys
from pathlib import Path

import numpy
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
PROJECT_PACKAGE = ROOT / "project" / "crf_project"
if str(PROJECT_PACKAGE.parent) not in sys.path:
    sys.path.insert(0, str(PROJECT_PACKAGE.parent))

CHARS = list("我在北京工作张三去上海今天天气好李四住广州他们的是了人有中国大学生")


def load_script(path: Path):
    """A script file (``scripts/``, ``project/crf_project/``) as a module, without running its main.
    A ``scripts/`` file loads with its folder on ``sys.path``, as when Python runs it: the
    benchmarks import their siblings (``bench_common``)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    folder = str(path.parent)
    added = path.parent.name == "scripts" and folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    finally:
        if added:
            sys.path.remove(folder)
    return module


def tiny_ner_pipeline(tiny_bert_dir):
    """The transformer + ``crf_tagger`` pipeline of ``PIPELINE_CFG`` over the tiny
    BERT, not initialized, and its NER examples; seeded."""
    import spacy
    from _configs import NER_DATA, PIPELINE_CFG
    from spacy.training import Example
    from spacy.util import fix_random_seed
    from thinc.api import Config

    fix_random_seed(0)
    text = PIPELINE_CFG.replace("{name}", str(tiny_bert_dir))
    nlp = spacy.util.load_model_from_config(Config().from_str(text), auto_fill=True, validate=True)
    examples = [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    return nlp, examples


def hf_model(nlp):
    """The Hugging Face model inside ``nlp``'s (first) torch shim."""
    from spacy_crf._compat import torch_shims

    return next(shim._model for _, shim in torch_shims(nlp))


def half_trained_pipeline(words, ents, updates: int = 4):
    """A blank ``zh`` segmenter + NER + merge pipeline after a few updates on
    ``words`` (lists of gold words) and ``ents`` ((text, [(start, end, label)])):
    some words and entities right, some wrong. Returns it with the word and
    entity reference docs."""
    import spacy
    from spacy.tokens import Doc
    from spacy.training import Example

    from spacy_crf.training.optimizers import grouped_adam

    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_tagger", name="segmenter", config={"scheme": "bmes"})
    nlp.add_pipe("crf_tagger", name="crf_ner", config={"scheme": "bioes"})
    nlp.add_pipe("crf_merge_words", name="merge_words")
    word_refs = [Doc(nlp.vocab, words=w, spaces=[False] * len(w)) for w in words]
    ent_refs = [Example.from_dict(nlp.make_doc(t), {"entities": e}).reference for t, e in ents]
    examples = [Example(nlp.make_doc(r.text), r) for r in word_refs + ent_refs]
    optimizer = nlp.initialize(lambda: examples, sgd=grouped_adam(1e-2, crf_lr_multiplier=10))
    for _ in range(updates):
        nlp.update(examples, sgd=optimizer)
    return nlp, word_refs, ent_refs


def write_probe_inputs(path: Path) -> Path:
    """``path/pipeline`` (:func:`half_trained_pipeline` on ``PROBE_WORDS`` and
    ``PROBE_ENTS``), ``path/dev.spacy`` (``PROBE_DEV``) and
    ``path/train.spacy`` (the training words); returns ``path``."""
    from _configs import PROBE_DEV, PROBE_ENTS, PROBE_WORDS
    from spacy.tokens import Doc, DocBin

    nlp, word_refs, _ = half_trained_pipeline(PROBE_WORDS, PROBE_ENTS)
    nlp.to_disk(path / "pipeline")
    DocBin(docs=[Doc(nlp.vocab, words=w, spaces=[False] * len(w)) for w in PROBE_DEV]).to_disk(path / "dev.spacy")
    DocBin(docs=word_refs).to_disk(path / "train.spacy")
    return path


def segmentation_examples(nlp, words):
    """Examples of ``words`` (lists of gold words): character docs against word-tokenized references."""
    from spacy.tokens import Doc
    from spacy.training import Example

    return [Example(nlp.make_doc("".join(w)), Doc(nlp.vocab, words=w, spaces=[False] * len(w))) for w in words]


def trained_segmenter(words, updates: int = 40):
    """A blank ``zh`` pipeline with one ``crf_segmenter`` (``segmenter``, a
    small tok2vec) trained on ``words`` until it segments them."""
    import spacy
    from _configs import crf_model_config

    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_segmenter", name="segmenter", config={"model": crf_model_config()})
    examples = segmentation_examples(nlp, words)
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(updates):
        nlp.update(examples, sgd=optimizer)
    return nlp


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same random state (numpy, torch, random)."""
    from spacy.util import fix_random_seed

    fix_random_seed(0)
    random.seed(0)
    numpy.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory):
    """A 2-layer random BERT with a character vocabulary, saved to a temp dir."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path = tmp_path_factory.mktemp("tiny_bert")
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    ascii_pieces = list("abcdefghijklmnopqrstuvwxyz0123456789,.!?")
    vocab = specials + sorted(set(CHARS)) + ascii_pieces + ["，", "。"]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf8")
    tokenizer = BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True, tokenize_chinese_chars=True)
    tokenizer.save_pretrained(str(path))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    BertModel(config).save_pretrained(str(path))
    return path


TAGGER_CHARS = [" ", "张", "三", "去", "上", "海", "A", "北", "京", "OOV"]
TAGGER_TAGS = ["PER-B", "PER-I", "LOC-B", "LOC-I", "O"]
TAGGER_HIDDEN = 3


def tiny_tagger(seed: int = 0):
    """A random character tagger (spacy_crf.ml.char_tagger) of the same interface as LAC's graph (no context: each
    character's rows depend on its id only), with one dead emission column."""
    from onnx import TensorProto, helper

    from spacy_crf.ml.char_tagger import CharTagger

    rng = numpy.random.default_rng(seed)
    V, E, K = len(TAGGER_CHARS), 4, len(TAGGER_TAGS) + 1

    def const(name, shape):
        return helper.make_tensor(name, TensorProto.FLOAT, shape, rng.normal(size=shape).astype("f").ravel())

    nodes = [
        helper.make_node("Gather", ["emb", "token_ids"], ["x"]),
        helper.make_node("MatMul", ["x", "wh"], ["h0"]),
        helper.make_node("Tanh", ["h0"], ["hidden"]),
        helper.make_node("MatMul", ["hidden", "wo"], ["e0"]),
        helper.make_node("Add", ["e0", "bo"], ["emissions"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_tagger",
        [
            helper.make_tensor_value_info("token_ids", TensorProto.INT64, ["b", "t"]),
            helper.make_tensor_value_info("length", TensorProto.INT64, ["b"]),
        ],
        [
            helper.make_tensor_value_info("emissions", TensorProto.FLOAT, ["b", "t", K]),
            helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["b", "t", TAGGER_HIDDEN]),
        ],
        [const("emb", [V, E]), const("wh", [E, TAGGER_HIDDEN]), const("wo", [TAGGER_HIDDEN, K]), const("bo", [K])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    transitions = rng.normal(size=(len(TAGGER_TAGS), len(TAGGER_TAGS))).astype("f")
    meta = {"name": "tiny", "licence": "MIT"}
    return CharTagger(
        model.SerializeToString(), TAGGER_CHARS, TAGGER_CHARS.index("OOV"), TAGGER_TAGS, transitions, {"Ａ": "A"}, meta
    )


@pytest.fixture(scope="session")
def tiny_tagger_dir(tmp_path_factory):
    """:func:`tiny_tagger`'s folder, as `spacy crf extract-tagger` writes one."""
    from spacy_crf.ml.tagger_folder import write_char_tagger

    path = tmp_path_factory.mktemp("tiny_tagger") / "tagger"
    write_char_tagger(tiny_tagger(), path)
    return path


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance (2 CPUs) for the whole test session, shared by
    every test module that runs the Ray engine."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=True, logging_level="warning")
    yield ray
    ray.shutdown()
