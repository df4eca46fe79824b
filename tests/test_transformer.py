"""The intended use: a transformer (here a tiny random BERT saved locally)
feeding crf_tagger through a listener."""

import subprocess
import sys

import numpy
import pytest
import spacy
from _configs import NER_DATA, PIPELINE_CFG, write_ner_training_files
from spacy.training import Example
from thinc.api import Config

from spacy_crf.training.optimizers import grouped_adam


def make_nlp(name):
    config = Config().from_str(PIPELINE_CFG.replace("{name}", str(name)))
    return spacy.util.load_model_from_config(config, auto_fill=True, validate=True)


def examples(nlp):
    return [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]


@pytest.fixture(scope="module")
def trained(tiny_bert_dir):
    nlp = make_nlp(tiny_bert_dir)
    optimizer = nlp.initialize(lambda: examples(nlp), sgd=grouped_adam(1e-3, crf_lr_multiplier=100.0))
    losses = []
    for _ in range(25):
        step = {}
        nlp.update(examples(nlp), sgd=optimizer, losses=step)
        losses.append(step["crf_tagger"])
    return nlp, losses


def test_loss_falls_through_the_listener(trained):
    nlp, losses = trained
    assert losses[-1] < 0.5 * losses[0]
    assert all(numpy.isfinite(losses))


def test_crf_group_moves_transitions_faster_than_encoder(trained):
    nlp, _ = trained
    table = nlp.get_pipe("crf_tagger").transition_table()
    # transitions started in [-0.1, 0.1]; at lr 1e-3 x 100 they must have moved far
    assert numpy.abs(table.transitions).max() > 0.5


def test_to_disk_and_load_predict_the_same(trained, tmp_path):
    nlp, _ = trained
    texts = ["张三去北京工作", "李四住上海", "今天天气好" * 8]  # the last is longer than the window
    before = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in nlp.pipe(texts)]
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    after = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in loaded.pipe(texts)]
    assert after == before


def test_doc_longer_than_the_window_and_edge_cases(trained):
    nlp, _ = trained
    long_text = "张三去上海，李四住广州。" * 20  # 240 chars, window is 16 pieces
    doc = nlp(long_text)
    assert doc.text == long_text
    # every character token got transformer features across the strided windows
    assert len(doc._.trf_data.align) == len(doc) == len(long_text)
    assert (doc._.trf_data.align.lengths >= 1).all()
    assert all(0 <= e.start_char < e.end_char <= len(long_text) for e in doc.ents)
    assert [d.text for d in nlp.pipe(["", " ", "x"])] == ["", " ", "x"]


def test_multiprocessing_with_transformer(trained):
    nlp, _ = trained
    texts = ["张三去上海", "我在北京工作", "李四住广州", "今天"]
    single = [[(e.text, e.label_) for e in d.ents] for d in nlp.pipe(texts)]
    multi = [[(e.text, e.label_) for e in d.ents] for d in nlp.pipe(texts, n_process=2, batch_size=2)]
    assert multi == single


def test_spacy_train_with_grouped_optimizer(tiny_bert_dir, tmp_path):
    write_ner_training_files(tiny_bert_dir, tmp_path)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "spacy",
            "train",
            str(tmp_path / "config.cfg"),
            "--output",
            str(tmp_path / "out"),
            "--paths.train",
            str(tmp_path / "train.spacy"),
            "--paths.dev",
            str(tmp_path / "train.spacy"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (tmp_path / "out" / "model-last" / "crf_tagger" / "model").exists()
    assert "ENTS_F" in result.stdout
    loaded = spacy.load(tmp_path / "out" / "model-last")
    assert loaded.get_pipe("crf_tagger").labels == ("LOC", "PER")
