"""What the encoder backends' tests share: a tiny pipeline, its training
examples, and what a pipeline predicts (hidden states, tags, entities)."""

import numpy
import spacy
from _configs import NER_DATA, PIPELINE_CFG
from spacy.training import Example
from thinc.api import Config

from spacy_crf.training.optimizers import grouped_adam

TEXTS = ["张三去北京工作", "李四住上海", "今天天气好" * 8, "他们的大学生在广州", "", "中国人"]


def make_nlp(name):
    config = Config().from_str(PIPELINE_CFG.replace("{name}", str(name)))
    return spacy.util.load_model_from_config(config, auto_fill=True, validate=True)


def examples(nlp):
    return [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]


def outputs(nlp, texts=TEXTS, **pipe_kwargs):
    """(hidden states, tag ids, entities) per text."""
    docs = list(nlp.pipe(texts, **pipe_kwargs))
    tags = [ids.tolist() for ids in nlp.get_pipe("crf_tagger").predict(docs)]
    ents = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in docs]
    hidden = [numpy.array(d._.trf_data.tensors[0]) if len(d) else None for d in docs]
    return hidden, tags, ents


def max_diff(a, b):
    return max(float(numpy.abs(x - y).max()) for x, y in zip(a, b) if x is not None)


def encoders(nlp):
    from spacy_transformers.layers import TransformerModel

    return [
        node.transformer
        for _, component in nlp.components
        if hasattr(component, "model")
        for node in component.model.walk()
        if isinstance(node, TransformerModel)
    ]


def trained_float_pipeline(bert_dir, path):
    """A torch pipeline trained a little (so its tags are not all one), saved to ``path``."""
    nlp = make_nlp(bert_dir)
    optimizer = nlp.initialize(lambda: examples(nlp), sgd=grouped_adam(1e-3, crf_lr_multiplier=100.0))
    for _ in range(15):
        nlp.update(examples(nlp), sgd=optimizer)
    nlp.to_disk(path)
    return path


def _ents_in_child(nlp, queue):
    """In a forked child: whether its encoder's session came from the parent,
    and the entities of ``TEXTS``."""
    (encoder,) = encoders(nlp)
    inherited = encoder.session_started
    queue.put((inherited, [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in nlp.pipe(TEXTS)]))


def forked_child_ents(nlp, ents):
    """Start ``nlp``'s (one) encoder session, fork a child that predicts
    ``TEXTS``; check that the child started its own session and found
    ``ents``, and that the parent's session was let go before the fork."""
    import multiprocessing

    (encoder,) = encoders(nlp)
    nlp(TEXTS[0])
    assert encoder.session_started
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_ents_in_child, args=(nlp, queue))
    child.start()
    inherited, child_ents = queue.get(timeout=120)
    child.join(timeout=60)
    assert child.exitcode == 0
    assert not inherited and child_ents == ents
    assert not encoder.session_started  # dropped before the fork; the next call starts a new one


def assert_a_damaged_encoder_file_is_named_at_load(pipeline_dir, tmp_path, kind):
    """A copy of ``pipeline_dir`` whose ``transformer/model`` (a ``kind``
    encoder) is truncated, then missing, fails ``spacy.load`` with one line
    naming the file, not with msgpack's "Unpack failed" or a bare
    ``FileNotFoundError``. Returns the copy, whole again."""
    import re
    import shutil

    import pytest

    copy = tmp_path / "damaged"
    shutil.copytree(pipeline_dir, copy)
    model = copy / "transformer" / "model"
    data = model.read_bytes()
    named = f"Cannot load the {kind} encoder of component 'transformer' from {re.escape(repr(str(model)))}: "
    for cut in (len(data) // 2, len(data) - 1, 0):
        model.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=named + "the file is truncated or damaged") as error:
            spacy.load(copy)
        assert "\n" not in str(error.value)
    model.unlink()
    with pytest.raises(ValueError, match=named + "the file is missing") as error:
        spacy.load(copy)
    assert "\n" not in str(error.value)
    model.write_bytes(data)
    return copy


def assert_damaged_encoder_bytes_are_named_at_load(pipeline_dir, kind):
    """``nlp.from_bytes`` of the bytes of ``pipeline_dir`` (a ``kind``
    encoder) whose transformer's ``model`` entry, or the transformer's
    bytes as a whole, is truncated, fails with one line naming the
    component, not with msgpack's "Unpack failed" naming nothing."""
    import re

    import pytest
    import srsly

    nlp = spacy.load(pipeline_dir)
    data = srsly.msgpack_loads(nlp.to_bytes())
    component = srsly.msgpack_loads(data["transformer"])
    named = f"Cannot load the {kind} encoder of component 'transformer' from bytes: "
    model = component["model"]
    damaged = [srsly.msgpack_dumps({**component, "model": model[:cut]}) for cut in (len(model) // 2, len(model) - 1, 0)]
    damaged.append(data["transformer"][: len(data["transformer"]) // 2])
    for transformer in damaged:
        with pytest.raises(ValueError, match=re.escape(named)) as error:
            spacy.load(pipeline_dir).from_bytes(srsly.msgpack_dumps({**data, "transformer": transformer}))
        assert "\n" not in str(error.value)
    spacy.load(pipeline_dir).from_bytes(srsly.msgpack_dumps(data))  # whole again: loads


def assert_a_gpu_device_is_named_at_load_not_a_damaged_file(pipeline_dir, monkeypatch, kind):
    """Loading a ``kind`` pipeline while torch's default device is not the
    CPU fails saying so, not that its encoder's file is damaged."""
    import pytest
    import torch

    from spacy_crf.encoders import swap

    monkeypatch.setattr(swap, "get_torch_default_device", lambda: torch.device("meta"))
    with pytest.raises(ValueError, match=f"{kind} encoders run on CPU only") as error:
        spacy.load(pipeline_dir)
    assert "damaged" not in str(error.value)
