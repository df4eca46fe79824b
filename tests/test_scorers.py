"""Word scores against the training words: ``read_word_set`` and
``spacy_crf.words_scorer.v2`` (OOV and IV recall at every dev evaluation)."""

import pytest
import spacy
from _configs import JOINT_CONFIG, WORDS
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from spacy.util import registry
from thinc.api import Config

from spacy_crf.corpora import read_word_set
from spacy_crf.doc_keys import NO_GOLD_WORDS
from spacy_crf.pipeline.scorers import score_words


def word_doc(vocab, words):
    return Doc(vocab, words=words, spaces=[False] * len(words))


def write_train(path, words=WORDS, no_gold=()):
    """A word-tokenized training corpus, plus docs marked as having no gold words."""
    vocab = spacy.blank("zh").vocab
    docs = [word_doc(vocab, w) for w in words]
    for text in no_gold:  # an NER doc of a joint corpus: its tokens are characters, not words
        doc = word_doc(vocab, list(text))
        doc.user_data[NO_GOLD_WORDS] = True
        docs.append(doc)
    DocBin(docs=docs, store_user_data=True).to_disk(path)
    return path


def test_read_word_set_from_spacy_and_list(tmp_path):
    path = write_train(tmp_path / "train.spacy", no_gold=["广州"])
    assert read_word_set(path) == {w for ws in WORDS for w in ws}  # not 广 or 州
    (tmp_path / "words.utf8").write_text("北京\n上海\n", encoding="utf8")
    assert read_word_set(tmp_path / "words.utf8") == {"北京", "上海"}


def examples_with_words(nlp, gold_and_pred):
    """Examples whose predicted docs carry the given words in ``doc.spans["words"]``."""
    examples = []
    for gold, pred in gold_and_pred:
        eg = Example(nlp.make_doc("".join(gold)), word_doc(nlp.vocab, gold))
        starts = [0]
        for w in pred:
            starts.append(starts[-1] + len(w))
        eg.predicted.spans["words"] = [eg.predicted.char_span(s, e) for s, e in zip(starts, starts[1:])]
        examples.append(eg)
    return examples


# gold words: 张三 去 上海 | 李四 在 广州 工作; training words: WORDS (张三 去 上海 我 在 北京 工作 今天 天气 好)
# predicted: 张三 去 上 海 | 李四 在 广 州 工作 -> IV found 张三 去 在 工作 (4 of 5), OOV found 李四 (1 of 2)
GOLD_AND_PRED = [
    (["张三", "去", "上海"], ["张三", "去", "上", "海"]),
    (["李四", "在", "广州", "工作"], ["李四", "在", "广", "州", "工作"]),
]


def test_v2_scores_oov_and_iv_recall_against_the_training_words(tmp_path):
    nlp = spacy.blank("zh")
    examples = examples_with_words(nlp, GOLD_AND_PRED)
    score = registry.scorers.get("spacy_crf.words_scorer.v2")(iv_words=write_train(tmp_path / "train.spacy"))
    scores = score(examples)
    assert scores["words_oov_recall"] == pytest.approx(1 / 2)
    assert scores["words_iv_recall"] == pytest.approx(4 / 5)
    assert scores["words_r"] == pytest.approx(5 / 7) and scores["words_p"] == pytest.approx(5 / 9)
    # without a word list it is v1: P/R/F only
    plain = registry.scorers.get("spacy_crf.words_scorer.v2")()(examples)
    assert plain == registry.scorers.get("spacy_crf.words_scorer.v1")()(examples) == score_words(examples)
    assert "words_oov_recall" not in plain


def test_v2_reads_the_list_at_the_first_scoring_and_warns_if_it_is_missing(tmp_path):
    nlp = spacy.blank("zh")
    examples = examples_with_words(nlp, GOLD_AND_PRED)
    path = tmp_path / "words.utf8"
    score = registry.scorers.get("spacy_crf.words_scorer.v2")(iv_words=path)  # not there yet: building is fine
    path.write_text("\n".join(w for ws in WORDS for w in ws) + "\n", encoding="utf8")
    assert score(examples)["words_oov_recall"] == pytest.approx(1 / 2)
    path.unlink()  # read once: later evaluations do not reread it
    assert score(examples)["words_iv_recall"] == pytest.approx(4 / 5)

    missing = registry.scorers.get("spacy_crf.words_scorer.v2")(iv_words=tmp_path / "nowhere.spacy")
    with pytest.warns(UserWarning, match="nowhere.spacy"):
        scores = missing(examples)
    assert scores == score_words(examples)


def test_a_config_passes_its_training_words_to_the_segmenter_scorer(tmp_path):
    path = write_train(tmp_path / "train.spacy")
    cfg = Config().from_str(
        JOINT_CONFIG + "\n[paths]\ntrain_words = null\n"
        '\n[components.segmenter.scorer]\n@scorers = "spacy_crf.words_scorer.v2"\n'
        "iv_words = ${paths.train_words}\n",
        overrides={"paths.train_words": str(path)},
    )
    nlp = spacy.util.load_model_from_config(cfg, auto_fill=True, validate=True)
    scores = nlp.get_pipe("segmenter").score(examples_with_words(nlp, GOLD_AND_PRED))
    assert scores["words_oov_recall"] == pytest.approx(1 / 2)
    assert scores["words_iv_recall"] == pytest.approx(4 / 5)
