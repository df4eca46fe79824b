"""project/crf_project/baselines.py: BMES tag data for spaCy's tagger, and words
decoded from its tags (through spacy_crf.ml.schemes)."""

import spacy
from _configs import WORDS
from spacy.tokens import Doc, DocBin

from crf_project.baselines import bmes_tags, create_bmes_tag_corpus_reader, words_from_tags
from spacy_crf.pipeline.scorers import word_offsets_from_tags


def word_doc(vocab, words):
    return Doc(vocab, words=words, spaces=[False] * len(words))


def test_bmes_tags_and_back():
    nlp = spacy.blank("zh")
    ref = word_doc(nlp.vocab, ["张三", "去", "上海市", "a"])
    pred = nlp.make_doc(ref.text)
    tags = bmes_tags(pred, ref)
    assert tags == ["B", "E", "S", "B", "M", "E", "S"]
    assert word_offsets_from_tags(tags, pred) == [(0, 2), (2, 3), (3, 6), (6, 7)]
    # softmax outputs need not be well formed: decoding is greedy and total
    assert word_offsets_from_tags(["M", "E", "E", "B", "B", "X"], nlp.make_doc("abcdef")) == [
        (0, 2),
        (2, 3),
        (3, 4),
        (4, 5),
        (5, 6),
    ]
    doc = words_from_tags(Doc(nlp.vocab, words=list("张三去"), spaces=[False] * 3, tags=["B", "E", "S"]))
    assert [s.text for s in doc.spans["words"]] == ["张三", "去"]


def test_bmes_tag_reader_gives_char_examples(tmp_path):
    nlp = spacy.blank("zh")
    DocBin(docs=[word_doc(nlp.vocab, w) for w in WORDS]).to_disk(tmp_path / "cws.spacy")
    reader = create_bmes_tag_corpus_reader(tmp_path / "cws.spacy")
    examples = list(reader(nlp))
    assert len(examples) == 3
    eg = examples[0]
    assert [t.text for t in eg.reference] == [t.text for t in eg.predicted] == list("张三去上海")
    assert [t.tag_ for t in eg.reference] == ["B", "E", "S", "B", "E"]


def test_the_tagger_is_scored_on_the_words_its_tags_encode():
    """spacy_crf.bmes_tag_words_scorer.v1 (configs/cws_softmax.cfg): tag_acc and
    word P/R/F, from the reference's tags or, without tags, its tokens."""
    from spacy.training import Example
    from spacy.util import registry

    nlp = spacy.blank("zh")
    score = registry.scorers.get("spacy_crf.bmes_tag_words_scorer.v1")()
    chars = list("张三去上海")
    gold = Doc(nlp.vocab, words=chars, spaces=[False] * 5, tags=["B", "E", "S", "B", "E"])
    pred = Doc(nlp.vocab, words=chars, spaces=[False] * 5, tags=["B", "E", "S", "S", "S"])  # 上海 split
    scores = score([Example(pred, gold)])
    assert scores["tag_acc"] == 0.6
    assert (scores["words_p"], scores["words_r"]) == (2 / 4, 2 / 3)
    # a word-tokenized reference without tags: its tokens are the gold words
    scores = score([Example(pred, word_doc(nlp.vocab, ["张三", "去", "上海"]))])
    assert (scores["words_p"], scores["words_r"]) == (2 / 4, 2 / 3)
    assert score([])["words_f"] is None
