"""spacy_crf.freeze_parameters.v1: frozen encoder parameters get no gradient and never move."""

import pytest
import spacy
import torch
from _configs import NER_DATA, PIPELINE_CFG
from spacy.training import Example
from thinc.api import Config

from spacy_crf.training.freeze import freeze_parameters
from spacy_crf.training.optimizers import grouped_adam


def _nlp(tiny_bert_dir, after_init=""):
    text = PIPELINE_CFG.replace("{name}", str(tiny_bert_dir)) + after_init
    return spacy.util.load_model_from_config(Config().from_str(text), auto_fill=True, validate=True)


def _examples(nlp):
    return [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]


def _hf_model(nlp):
    return next(shim._model for node in nlp.get_pipe("transformer").model.walk() for shim in node.shims)


def _hf_params(nlp):
    module = _hf_model(nlp)
    return {name: p.detach().clone() for name, p in module.named_parameters()}


def test_frozen_parameters_do_not_move_and_get_no_gradient(tiny_bert_dir):
    nlp = _nlp(tiny_bert_dir)
    examples = _examples(nlp)
    optimizer = nlp.initialize(lambda: examples, sgd=grouped_adam(1e-2))
    frozen = freeze_parameters(nlp, ["embeddings.word_embeddings.*"])
    assert frozen == ["transformer:embeddings.word_embeddings.weight"]
    before = _hf_params(nlp)
    for _ in range(3):
        nlp.update(examples, sgd=optimizer)
    after = _hf_params(nlp)
    assert torch.equal(before["embeddings.word_embeddings.weight"], after["embeddings.word_embeddings.weight"])
    moved = [n for n in before if not torch.equal(before[n], after[n])]
    assert "encoder.layer.0.attention.self.query.weight" in moved
    module = _hf_model(nlp)
    assert module.embeddings.word_embeddings.weight.grad is None
    assert not [key for key in optimizer.mom1 if "word_embeddings" in key[1]]


def test_after_init_callback_in_a_config(tiny_bert_dir):
    block = """
[initialize]

[initialize.after_init]
@callbacks = "spacy_crf.freeze_parameters.v1"
patterns = ["embeddings.word_embeddings.*", "embeddings.position_embeddings.*"]
"""
    nlp = _nlp(tiny_bert_dir, block)
    nlp.initialize(lambda: _examples(nlp))
    module = _hf_model(nlp)
    assert not module.embeddings.word_embeddings.weight.requires_grad
    assert not module.embeddings.position_embeddings.weight.requires_grad
    assert module.encoder.layer[0].attention.self.query.weight.requires_grad


def test_a_pattern_that_matches_nothing_is_an_error(tiny_bert_dir):
    nlp = _nlp(tiny_bert_dir)
    nlp.initialize(lambda: _examples(nlp))
    with pytest.raises(ValueError, match=r"matches \['embedings\.\*'\]"):
        freeze_parameters(nlp, ["embedings.*"])
    with pytest.raises(ValueError, match="list of glob patterns"):
        freeze_parameters(nlp, "embeddings.*")
