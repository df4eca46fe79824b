"""Typed mention replacement (spacy_crf.mention_replacement.v1): entities get
mentions of their own type, everything else in the doc stays, offsets follow,
docs without entity annotation pass, the draws follow the seed, and the joint
corpus applies it to its training stream."""

import pytest
import spacy
from spacy.tokens import Doc, DocBin
from spacy.training import Example

from spacy_crf.corpora.readers import JointCorpus
from spacy_crf.training.mention_replacement import make_mention_replacement

NER = [("张三去上海", [(0, 2, "PER"), (3, 5, "LOC")]), ("李四住在广州市", [(0, 2, "PER"), (4, 7, "LOC")])]
DICTIONARY = "欧阳修 10 nr\n那不勒斯 5 ns\n北京大学 8 nt\n工作 100 vn\n"


def _ner_corpus(nlp, path):
    docs = []
    for text, ents in NER:
        doc = nlp.make_doc(text)
        doc.ents = [doc.char_span(s, e, label=label) for s, e, label in ents]
        docs.append(doc)
    DocBin(docs=docs).to_disk(path)
    return path


def _example(nlp, text, ents):
    return Example.from_dict(nlp.make_doc(text), {"entities": ents})


def test_every_entity_gets_a_mention_of_its_type_and_the_rest_stays(tmp_path):
    nlp = spacy.blank("zh")
    (tmp_path / "dict.txt").write_text(DICTIONARY, encoding="utf8")
    augment = make_mention_replacement(1.0, _ner_corpus(nlp, tmp_path / "ner.spacy"), tmp_path / "dict.txt", seed=3)
    pool = {"PER": {"张三", "李四", "欧阳修"}, "LOC": {"上海", "广州市", "那不勒斯"}}
    seen = set()
    for _ in range(30):
        (out,) = augment(nlp, _example(nlp, "王五去北京工作", [(0, 2, "PER"), (3, 5, "LOC")]))
        ref = out.reference
        assert [e.label_ for e in ref.ents] == ["PER", "LOC"]
        per, loc = ref.ents
        assert per.text in pool["PER"] and loc.text in pool["LOC"]
        assert ref.text == per.text + "去" + loc.text + "工作" == out.predicted.text
        seen.add(per.text)
    assert seen == pool["PER"]  # the corpus's mentions and the dictionary's


def test_docs_without_entity_annotation_or_share_pass_unchanged(tmp_path):
    nlp = spacy.blank("zh")
    corpus = _ner_corpus(nlp, tmp_path / "ner.spacy")
    words = Example(nlp.make_doc("我在北京"), Doc(nlp.vocab, words=["我", "在", "北京"], spaces=[False] * 3))
    assert next(iter(make_mention_replacement(1.0, corpus)(nlp, words))) is words
    example = _example(nlp, "王五去北京", [(0, 2, "PER")])
    assert next(iter(make_mention_replacement(0.0, corpus)(nlp, example))) is example


def test_the_same_seed_gives_the_same_docs(tmp_path):
    nlp = spacy.blank("zh")
    corpus = _ner_corpus(nlp, tmp_path / "ner.spacy")

    def run(seed):
        augment = make_mention_replacement(0.5, corpus, seed=seed)
        return [next(iter(augment(nlp, _example(nlp, t, e)))).reference.text for t, e in NER * 10]

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_the_joint_corpus_augments_its_training_stream(tmp_path):
    nlp = spacy.blank("zh")
    corpus = _ner_corpus(nlp, tmp_path / "ner.spacy")
    words = [Doc(nlp.vocab, words=["我", "在", "北京"], spaces=[False] * 3)]
    DocBin(docs=words).to_disk(tmp_path / "words.spacy")
    augment = make_mention_replacement(1.0, corpus, seed=0)
    stream = list(JointCorpus(tmp_path / "words.spacy", corpus, augmenter=augment)(nlp))
    assert len(stream) == 4
    ner = [eg for eg in stream if eg.reference.has_annotation("ENT_IOB")]
    assert {e.label_ for eg in ner for e in eg.reference.ents} == {"PER", "LOC"}
    assert {eg.reference.text for eg in stream if not eg.reference.has_annotation("ENT_IOB")} == {"我在北京"}


def test_a_mentions_file_it_cannot_read_is_named(tmp_path):
    with pytest.raises(ValueError, match="ents .*nope.spacy.*no such file"):
        make_mention_replacement(0.3, tmp_path / "nope.spacy")
    (tmp_path / "bad.spacy").write_bytes(b"garbage")
    with pytest.raises(ValueError, match="ents .*bad.spacy.*not a .spacy file"):
        make_mention_replacement(0.3, tmp_path / "bad.spacy")
    with pytest.raises(ValueError, match="lexicon .*nope.txt.*no such file"):
        make_mention_replacement(0.3, None, tmp_path / "nope.txt")
