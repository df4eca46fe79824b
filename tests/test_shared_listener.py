"""Heads listening to the same transformer the same way pool its output once
per batch at prediction (spacy_crf.ml.shared_listener), and a batch's texts
are read once for both dictionaries (lexicon_match.batch_texts)."""

import numpy
import pytest
import spacy
from _configs import NER_DATA, WORDS, pipeline_config
from conftest import segmentation_examples
from spacy.training import Example
from thinc.api import Config

from spacy_crf.ml import lexicon_match, shared_listener

DICTIONARY = "张三 50 nr\n上海 900 ns\n北京 800 ns\n北京大学 30 nt\n工作 500 vn\n去 600 v\n"
TEXTS = ["张三去上海工作", "我在北京大学", "今天天气很好", "", "北京"]


@pytest.fixture(scope="module")
def nlp(tiny_bert_dir, tmp_path_factory):
    dict_path = tmp_path_factory.mktemp("dict") / "dict.txt"
    dict_path.write_text(DICTIONARY, encoding="utf8")
    text = pipeline_config([("segmenter", "crf_segmenter", ""), ("ner", "crf_ner", "bioes")])
    config = Config().from_str(text.replace("{name}", str(tiny_bert_dir)))
    for name in ("segmenter", "ner"):
        config["components"][name]["model"]["lexicon_width"] = 8
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    for name in ("segmenter", "ner"):
        nlp.config["initialize"]["components"][name] = {
            "lexicon_features": {"@readers": "spacy_crf.read_tagged_lexicon.v1", "path": str(dict_path)}
        }
    examples = segmentation_examples(nlp, WORDS) + [
        Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA
    ]
    nlp.initialize(lambda: examples)
    return nlp


def tok2vecs(nlp):
    return [nlp.get_pipe(name).model.get_ref("tok2vec") for name in ("segmenter", "ner")]


def outputs(nlp, texts):
    docs = list(nlp.pipe(texts, batch_size=2))
    return [([s.text for s in d.spans["words"]], [(e.start_char, e.end_char, e.label_) for e in d.ents]) for d in docs]


def test_two_heads_listening_alike_share_a_signature_and_others_do_not(nlp):
    first, second = tok2vecs(nlp)
    assert first is not second
    assert shared_listener.signature(first) == shared_listener.signature(second) is not None
    other = max_pooled_listener()
    assert shared_listener.signature(other) not in (None, shared_listener.signature(first))
    tok2vec = spacy.registry.resolve({"t": {"@architectures": "spacy.HashEmbedCNN.v2", **_HASH}})["t"]
    assert shared_listener.signature(tok2vec) is None


def max_pooled_listener():
    """A transformer listener that pools with reduce_max: not the stock chain."""
    return spacy.registry.resolve(
        {
            "t": {
                "@architectures": "spacy-transformers.TransformerListener.v1",
                "grad_factor": 1.0,
                "upstream": "*",
                "pooling": {"@layers": "reduce_max.v1"},
            }
        }
    )["t"]


_HASH = dict(
    pretrained_vectors=None,
    width=16,
    depth=1,
    embed_size=50,
    window_size=1,
    maxout_pieces=2,
    subword_features=False,
)


def test_the_second_head_gets_the_first_heads_pooling_for_the_same_batch_only(nlp):
    first, second = tok2vecs(nlp)
    docs = list(nlp.pipe(TEXTS[:3]))
    pooled = shared_listener.predict(first, docs)
    assert shared_listener.predict(second, docs) is pooled  # same docs, same trf_data: shared
    assert all(numpy.array_equal(a, b) for a, b in zip(pooled, second.predict(docs)))
    assert all(not array.flags.writeable for array in pooled)
    # the transformer ran again: new trf_data objects, pooled anew
    trf = nlp.get_pipe("transformer")
    again = list(trf.pipe(docs))
    assert shared_listener.predict(second, again) is not pooled
    # other doc objects with the same texts: pooled anew
    assert shared_listener.predict(second, list(nlp.pipe(TEXTS[:3]))) is not pooled
    # a doc without transformer output is not shared (the listener's zeros)
    bare = [nlp.make_doc("北京")]
    assert shared_listener.predict(first, bare) is not shared_listener.predict(second, bare)


def test_sharing_changes_no_prediction(nlp, monkeypatch):
    calls = []
    predict = shared_listener.predict

    def counted(tok2vec, docs):
        result = predict(tok2vec, docs)
        calls.append(result)
        return result

    monkeypatch.setattr(shared_listener, "predict", counted)
    shared = outputs(nlp, TEXTS)
    # the NER head reused the segmenter's pooling in every batch
    assert len(calls) == 6 and all(a is b for a, b in zip(calls[::2], calls[1::2]))  # 3 batches, 2 heads
    monkeypatch.setattr(shared_listener, "signature", lambda tok2vec: None)
    assert outputs(nlp, TEXTS) == shared


def test_batch_texts_are_read_once_per_batch(nlp):
    docs = [nlp.make_doc(t) for t in ["北京 工作", "张三"]]
    texts = lexicon_match.batch_texts(docs)
    assert texts == [d.text for d in docs]
    assert lexicon_match.batch_texts(docs) is texts
    assert lexicon_match.batch_texts(docs[:1]) == [docs[0].text]
    assert lexicon_match.batch_texts([nlp.make_doc("北京 工作"), docs[1]]) is not texts


def test_the_batch_cache_keeps_the_last_batches_up_to_a_token_budget():
    from spacy_crf.ml.batch_cache import BatchCache

    cache = BatchCache(max_tokens=10)
    a, b, c = object(), object(), object()
    computed = []

    def get(objects, tokens, extra=None):
        return cache.get(objects, extra, tokens, lambda: computed.append(objects) or len(computed))

    assert get([a], 4) == 1 and get([b], 4) == 2
    assert get([a], 4) == 1 and get([b], 4) == 2 and len(computed) == 2  # both kept: 8 tokens
    assert get([a], 4, extra="other") == 3  # another extra, another result
    assert len(cache) == 2  # 12 tokens > 10: the oldest ([a]) went
    assert get([a], 4) == 4
    assert get([a, b], 4) == 5 and get([b, a], 4) == 6  # order matters
    assert get([c], 50) == 7 and len(cache) == 1  # the newest stays, whatever its size
    cache.clear()
    assert len(cache) == 0 and get([c], 1) == 8


def test_every_sub_batch_of_a_batch_is_shared(nlp, monkeypatch):
    """The heads split each batch into the same length-sorted sub-batches and
    the first head does all of them before the second starts: the second
    head finds every one of them."""
    from spacy_crf.ml.batch_cache import BatchCache

    computed = []

    class Counting(BatchCache):
        def get(self, objects, extra, n_tokens, compute):
            return super().get(objects, extra, n_tokens, lambda: computed.append(len(objects)) or compute())

    monkeypatch.setattr(shared_listener, "_pooled", Counting())
    for name in ("segmenter", "ner"):
        monkeypatch.setitem(nlp.get_pipe(name).cfg, "max_batch_items", 8)  # several sub-batches per batch
    calls = []
    predict = shared_listener.predict
    monkeypatch.setattr(shared_listener, "predict", lambda t, d: calls.append(len(d)) or predict(t, d))
    texts = [t * k for t in TEXTS if t for k in (1, 2, 3)]
    shared = outputs(nlp, texts)
    assert len(calls) > 4 and len(computed) == len(calls) // 2  # the segmenter's sub-batches only
    monkeypatch.setattr(shared_listener, "signature", lambda tok2vec: None)
    assert outputs(nlp, texts) == shared


def test_a_segmenter_prior_within_the_features_dictionary_decodes_as_with_its_own_matches(nlp, monkeypatch):
    from spacy_crf.pipeline.lexicon import Lexicon

    segmenter = nlp.get_pipe("segmenter")
    segmenter.set_lexicon(["北京大学", "上海", "工作"], 2.0)
    derived = []
    within = Lexicon._words_within
    monkeypatch.setattr(Lexicon, "_words_within", lambda self, source: derived.append(1) or within(self, source))
    shared = outputs(nlp, TEXTS)
    assert (
        derived
        and segmenter.lexicon._words_within(segmenter.model.get_ref("lexicon_features").attrs["lexicon"]) is not None
    )
    monkeypatch.setattr(Lexicon, "_words_within", lambda self, source: None)  # its own automaton
    assert outputs(nlp, TEXTS) == shared
    segmenter.set_lexicon(None)


def test_the_batched_mean_pooling_is_the_listeners_to_the_bit(nlp):
    from spacy_crf._compat import transformer_data

    first, _ = tok2vecs(nlp)
    docs = list(nlp.pipe(["张三去上海工作 , 今天 天气很好" * 4, "北京", "我在北京大学", " 北京 ", "ABC xyz 123"] * 3))
    data = [transformer_data(doc) for doc in docs]
    pooled = shared_listener.mean_pooled(first, data)
    assert pooled is not None  # the stock chain, float32 outputs: the batched path
    expected = first.predict(docs)
    assert (
        [p.shape for p in pooled]
        == [e.shape for e in expected]
        == [(len(doc), e.shape[1]) for doc, e in zip(docs, expected)]
    )
    assert all(numpy.array_equal(p, e) for p, e in zip(pooled, expected))
    # strided windows overlap: tokens there are the mean of two rows; spaces have none
    lengths = numpy.concatenate([d.align.lengths for d in data])
    assert {0, 1, 2} <= set(lengths.tolist())
    # an empty doc's trf_data has no hidden state: the listener's own path for the batch
    empty = list(nlp.pipe([""]))
    assert shared_listener.mean_pooled(first, [transformer_data(d) for d in empty + docs[:1]]) is None
    other = max_pooled_listener()
    assert shared_listener.mean_pooled(other, data) is None
