"""Length-sorted batching for inference (spacy_crf.batching.pipe_sorted): the
same docs as nlp.pipe, in input order, from batches of like length."""

import random

import pytest
import spacy
from _configs import crf_model_config
from spacy.language import Language

from spacy_crf.batching import pipe_sorted, sorted_buffers


class _Recorder:
    """A component whose pipe records the text lengths of each batch it gets."""

    def __init__(self):
        self.batches = []

    def __call__(self, doc):
        self.batches.append([len(doc.text)])
        return doc

    def pipe(self, docs, batch_size=128):
        from spacy.util import minibatch

        for batch in minibatch(docs, size=batch_size):
            self.batches.append([len(d.text) for d in batch])
            yield from batch


@Language.factory("test_batch_recorder")
def make_recorder(nlp, name):
    return _Recorder()


@pytest.fixture(scope="module")
def nlp():
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_segmenter", config={"model": crf_model_config()})
    nlp.add_pipe("crf_ner", config={"model": crf_model_config()})
    nlp.add_pipe("crf_merge_words")
    nlp.add_pipe("test_batch_recorder")
    nlp.get_pipe("crf_ner").add_label("PER")
    nlp.initialize()
    return nlp


def texts(n=37, seed=0):
    rng = random.Random(seed)
    chars = "我在北京工作张三去上海今天天气好 。"
    return ["".join(rng.choice(chars) for _ in range(rng.choice([0, 1, 3, 10, 40, 90]))) for _ in range(n)]


def view(doc):
    return doc.text, [t.text for t in doc], [(e.start_char, e.end_char, e.label_) for e in doc.ents]


@pytest.mark.parametrize("batch_size,buffer", [(1, 1), (4, 1), (4, 3), (8, 100), (5, 0)])
def test_pipe_sorted_gives_the_docs_of_nlp_pipe_in_input_order(nlp, batch_size, buffer):
    data = texts()
    expected = [view(d) for d in nlp.pipe(data, batch_size=batch_size)]
    assert [view(d) for d in pipe_sorted(nlp, data, batch_size=batch_size, buffer=buffer)] == expected
    pairs = list(
        pipe_sorted(nlp, [(t, i) for i, t in enumerate(data)], batch_size=batch_size, buffer=buffer, as_tuples=True)
    )
    assert [(view(d), c) for d, c in pairs] == [(e, i) for i, e in enumerate(expected)]


def test_pipe_sorted_batches_hold_texts_sorted_within_each_buffer(nlp):
    data = texts(n=24, seed=1)
    recorder = nlp.get_pipe("test_batch_recorder")
    recorder.batches = []
    list(pipe_sorted(nlp, data, batch_size=4, buffer=3))
    lengths = [n for batch in recorder.batches for n in batch]
    assert all(len(b) == 4 for b in recorder.batches)
    for first in (0, 12):  # two buffers of 3 batches of 4
        assert lengths[first : first + 12] == sorted(len(t) for t in data[first : first + 12])


def test_pipe_sorted_with_two_processes(nlp):
    data = texts(n=20, seed=2)
    expected = [view(d) for d in nlp.pipe(data, batch_size=3)]
    assert [view(d) for d in pipe_sorted(nlp, data, batch_size=3, buffer=2, n_process=2)] == expected


def test_sorted_buffers_are_stable_and_cover_every_item():
    items = ["bb", "a", "cc", "", "d", "eee", "ff"]
    buffers = list(sorted_buffers(items, 3, len))
    assert [size for size, _ in buffers] == [3, 3, 1]
    assert buffers[0][1] == [(1, "a"), (0, "bb"), (2, "cc")]
    assert buffers[1][1] == [(0, ""), (1, "d"), (2, "eee")]


@pytest.mark.parametrize("buffer", [-1, 1.5, True])
def test_pipe_sorted_refuses_a_bad_buffer(nlp, buffer):
    with pytest.raises(ValueError, match="buffer must be an integer >= 0"):
        list(pipe_sorted(nlp, ["我"], buffer=buffer))
