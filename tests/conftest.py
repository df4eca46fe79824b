"""Shared fixtures: tiny models built locally, never downloaded.

Config text and tiny data sets shared by several test modules are in
``_configs.py``. The project's scripts (``project/scripts``) import each
other as siblings, as they do when the project runs them; the directory is
put on ``sys.path`` here so that their tests can import them the same way.
"""
import random
import sys
from pathlib import Path

import numpy
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
PROJECT_SCRIPTS = ROOT / "project" / "scripts"
if str(PROJECT_SCRIPTS) not in sys.path:
    sys.path.insert(0, str(PROJECT_SCRIPTS))

CHARS = list("我在北京工作张三去上海今天天气好李四住广州他们的是了人有中国大学生")


def load_script(path: Path):
    """A script file (``scripts/``, ``project/scripts/``) as a module, without running its main."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
