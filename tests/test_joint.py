"""Joint training of a segmenter and an NER tagger on one shared encoder:
``spacy_crf.JointCorpus.v1``, missing annotation on each side, and scoring."""

import numpy
import pytest
import spacy
from _configs import JOINT_CONFIG
from spacy.tokens import Doc, DocBin
from thinc.api import Config

from spacy_crf.corpora import JointCorpus
from spacy_crf.doc_keys import NO_GOLD_WORDS, has_gold_words
from spacy_crf.pipeline.gold_tags import bmes_gold
from spacy_crf.pipeline.scorers import score_words

WORDS = [["我", "在", "北京", "工作"], ["张三", "去", "上海"], ["今天", "天气", "好"]]
ENTS = [
    ("王五在广州", [(0, 2, "PER"), (3, 5, "LOC")]),
    ("赵六去深圳", [(0, 2, "PER"), (3, 5, "LOC")]),
    ("天气很好", []),
    ("我们在杭州", [(3, 5, "LOC")]),
    ("孙七回家", [(0, 2, "PER")]),
]


def write_corpora(tmp_path, words=WORDS, ents=ENTS):
    vocab = spacy.blank("zh").vocab
    DocBin(docs=[Doc(vocab, words=w, spaces=[False] * len(w)) for w in words]).to_disk(tmp_path / "words.spacy")
    nlp = spacy.blank("zh")
    docs = []
    for text, spans in ents:
        doc = nlp.make_doc(text)
        doc.ents = [doc.char_span(s, e, label=label) for s, e, label in spans]
        docs.append(doc)
    DocBin(docs=docs).to_disk(tmp_path / "ents.spacy")
    return tmp_path / "words.spacy", tmp_path / "ents.spacy"


def test_balanced_stream_alternates_and_marks_ner_docs(tmp_path):
    words_path, ents_path = write_corpora(tmp_path)
    nlp = spacy.blank("zh")
    examples = list(JointCorpus(words_path, ents_path)(nlp))
    # 3 CWS docs cycled to match the 5 NER docs, alternating
    assert len(examples) == 10
    cws, ner = examples[0::2], examples[1::2]
    assert [eg.reference.text for eg in cws] == [
        "我在北京工作",
        "张三去上海",
        "今天天气好",
        "我在北京工作",
        "张三去上海",
    ]
    assert [eg.reference.text for eg in ner] == [t for t, _ in ENTS]
    assert all(has_gold_words(eg.reference) and not eg.reference.has_annotation("ENT_IOB") for eg in cws)
    assert all(eg.reference.user_data[NO_GOLD_WORDS] for eg in ner)
    assert cws[3] is not cws[0] and cws[3].reference is not cws[0].reference  # repeats are copies
    assert [t.text for t in cws[3].reference] == WORDS[0]
    # dev: every doc once, nothing cycled
    dev = list(JointCorpus(words_path, ents_path, balance=False)(nlp))
    assert [eg.reference.text for eg in dev] == ["".join(w) for w in WORDS] + [t for t, _ in ENTS]


def test_sorted_dev_stream_is_the_same_docs_shortest_first(tmp_path):
    words_path, ents_path = write_corpora(tmp_path)
    nlp = spacy.blank("zh")
    plain = list(JointCorpus(words_path, ents_path, balance=False)(nlp))
    ranked = list(JointCorpus(words_path, ents_path, balance=False, sort_by_length=True)(nlp))
    texts = [eg.reference.text for eg in ranked]
    # stable: docs of equal length keep their stream order (CWS before NER)
    assert texts == sorted((eg.reference.text for eg in plain), key=len)
    assert texts[:3] == ["天气很好", "孙七回家", "张三去上海"]
    key = lambda eg: (eg.reference.text, [(e.start_char, e.end_char, e.label_) for e in eg.reference.ents])  # noqa: E731
    assert sorted(map(key, ranked)) == sorted(map(key, plain))
    assert all(eg.reference.user_data.get(NO_GOLD_WORDS) for eg in ranked if eg.reference.text in dict(ENTS))
    # the scores of an evaluation do not depend on the order
    for egs in (plain, ranked):
        for eg in egs:
            eg.predicted.ents = [eg.predicted.char_span(0, 2, label="PER")] if len(eg.predicted) > 4 else []
    assert score_words(plain) == score_words(ranked)
    from spacy.scorer import Scorer

    assert Scorer.score_spans(plain, "ents") == Scorer.score_spans(ranked, "ents")
    with pytest.raises(ValueError, match="sort_by_length is for dev sets"):
        JointCorpus(words_path, ents_path, balance=True, sort_by_length=True)


def test_char_corpus_sorts_a_dev_set_by_length(tmp_path):
    from spacy_crf.corpora.readers import create_char_corpus_reader

    _, ents_path = write_corpora(tmp_path)
    nlp = spacy.blank("zh")
    plain = [eg.reference.text for eg in create_char_corpus_reader(ents_path)(nlp)]
    ranked = [eg.reference.text for eg in create_char_corpus_reader(ents_path, sort_by_length=True)(nlp)]
    assert plain == [t for t, _ in ENTS]
    assert ranked == ["天气很好", "孙七回家", "王五在广州", "赵六去深圳", "我们在杭州"]


def test_ents_share_weights_the_stream_towards_ner(tmp_path):
    words_path, ents_path = write_corpora(tmp_path)
    nlp = spacy.blank("zh")
    examples = list(JointCorpus(words_path, ents_path, ents_share=0.75)(nlp))
    kinds = "".join("E" if eg.reference.user_data.get(NO_GOLD_WORDS) else "W" for eg in examples)
    assert kinds == "WEEE" * 3  # 3 of every 4 docs are NER; both sides seen whole
    assert [eg.reference.text for eg in examples if kinds[examples.index(eg)] == "W"] == ["".join(w) for w in WORDS]
    ner = [eg.reference.text for eg in examples[1:4] + examples[5:8] + examples[9:12]]
    assert ner == [t for t, _ in ENTS] + [t for t, _ in ENTS][:4]  # cycled
    default = list(JointCorpus(words_path, ents_path)(nlp))
    assert "".join("E" if eg.reference.user_data.get(NO_GOLD_WORDS) else "W" for eg in default) == "WE" * 5
    for bad in (0.0, 1.0, 1.5, float("nan")):
        with pytest.raises(ValueError, match="ents_share"):
            JointCorpus(words_path, ents_path, ents_share=bad)


def test_an_empty_side_is_an_error_naming_the_file(tmp_path):
    words_path, ents_path = write_corpora(tmp_path, ents=[])
    with pytest.raises(ValueError, match="ents corpus .*ents.spacy has no docs"):
        list(JointCorpus(words_path, ents_path)(spacy.blank("zh")))


def test_each_task_learns_nothing_from_the_other_tasks_docs(tmp_path):
    words_path, ents_path = write_corpora(tmp_path)
    nlp = spacy.blank("zh")
    examples = list(JointCorpus(words_path, ents_path, balance=False)(nlp))
    cws, ner = examples[0], examples[len(WORDS)]
    assert (bmes_gold(ner) == -1).all()
    assert (bmes_gold(cws) >= 0).all()
    _, biluo = cws.get_aligned_ents_and_ner()
    assert biluo == [None] * len(cws.predicted)  # unknown for the NER tagger, not "O"


def test_word_scores_skip_docs_without_gold_words(tmp_path):
    words_path, ents_path = write_corpora(tmp_path)
    nlp = spacy.blank("zh")
    examples = list(JointCorpus(words_path, ents_path, balance=False)(nlp))
    for eg in examples:  # predict perfect words for the CWS docs, characters elsewhere
        eg.predicted.spans["words"] = [eg.predicted.char_span(t.idx, t.idx + len(t)) for t in eg.reference]
    assert score_words(examples)["words_f"] == 1.0
    only_ner = [eg for eg in examples if not has_gold_words(eg.reference)]
    assert score_words(only_ner)["words_f"] is None


def test_one_shared_encoder_learns_both_tasks(tmp_path):
    words_path, ents_path = write_corpora(tmp_path)
    nlp = spacy.util.load_model_from_config(Config().from_str(JOINT_CONFIG), auto_fill=True)
    examples = list(JointCorpus(words_path, ents_path)(nlp))
    optimizer = nlp.initialize(lambda: examples)
    assert nlp.get_pipe("crf_ner").labels == ("LOC", "PER")
    rng = numpy.random.RandomState(0)
    for _ in range(60):
        order = rng.permutation(len(examples))
        nlp.update([examples[i] for i in order], sgd=optimizer, drop=0.0)
    dev = list(JointCorpus(words_path, ents_path, balance=False)(nlp))
    scores = nlp.evaluate(dev)
    assert scores["words_f"] == 1.0
    assert scores["ents_f"] == 1.0
    doc = nlp("王五在广州")
    assert [s.text for s in doc.spans["words"]] and [(e.text, e.label_) for e in doc.ents] == [
        ("王五", "PER"),
        ("广州", "LOC"),
    ]
