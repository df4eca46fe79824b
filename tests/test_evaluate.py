"""project/scripts/evaluate.py: word scores with OOV/IV recall (also from a
softmax tagger's BMES tags), entity scores, train_meta.json, --manifest."""
import json

import pytest
import spacy
from spacy.tokens import Doc, DocBin
from typer.testing import CliRunner

from evaluate import evaluate, evaluate_cli, evaluate_cws, load_word_set

from _configs import WORDS


def word_doc(vocab, words):
    return Doc(vocab, words=words, spaces=[False] * len(words))


def test_load_word_set_from_spacy_and_list(tmp_path):
    nlp = spacy.blank("zh")
    DocBin(docs=[word_doc(nlp.vocab, w) for w in WORDS]).to_disk(tmp_path / "train.spacy")
    assert load_word_set(tmp_path / "train.spacy") == {w for ws in WORDS for w in ws}
    (tmp_path / "words.utf8").write_text("北京\n上海\n", encoding="utf8")
    assert load_word_set(tmp_path / "words.utf8") == {"北京", "上海"}


@spacy.Language.component("_test_char_tagger")
def _char_tagger(doc):
    """Predicts the words of a fixed lexicon (greedy longest match), as BMES tags."""
    lexicon = {"张三", "上海", "北京", "工作", "今天"}
    i, tags = 0, []
    while i < len(doc):
        if doc[i : i + 2].text in lexicon:
            tags += ["B", "E"]
            i += 2
        else:
            tags.append("S")
            i += 1
    for token, tag in zip(doc, tags):
        token.tag_ = tag
    return doc


def test_evaluate_cws_with_oov_recall_from_tags():
    nlp = spacy.blank("zh")
    nlp.add_pipe("_test_char_tagger")
    refs = [word_doc(nlp.vocab, w) for w in WORDS]
    result = evaluate_cws(nlp, refs, iv_words={"张三", "北京", "去", "我"})
    s = result["scores"]
    # predicted: 张三 去 上海 | 我 在 北京 工作 | 今天 天 气 好: 9 of 10 gold words, 9 of 11 predicted
    assert s["words_r"] == pytest.approx(9 / 10)
    assert s["words_p"] == pytest.approx(9 / 11)
    assert s["words_iv_recall"] == 1.0  # 张三 去 我 北京
    assert s["words_oov_recall"] == pytest.approx(5 / 6)  # 天气 is missed
    assert result["speed"]["chars"] == sum(len("".join(w)) for w in WORDS)


def _untrained_segmenter(path):
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_segmenter")
    nlp.initialize()
    path.parent.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(path)
    DocBin(docs=[word_doc(nlp.vocab, w) for w in WORDS]).to_disk(path.parent / "cws.spacy")
    return path


def test_evaluate_writes_scores_with_train_meta(tmp_path):
    model = _untrained_segmenter(tmp_path / "training" / "model-best")
    data = tmp_path / "training" / "cws.spacy"
    (tmp_path / "training" / "train_meta.json").write_text(json.dumps({"train_seconds": 1.5}), encoding="utf8")
    result = evaluate("cws", model, data, words=data, split="dev", note="test file absent")
    assert result["split"] == "dev" and result["train"] == {"train_seconds": 1.5}
    assert result["scores"]["words_oov_recall"] is None  # every word is in the dictionary
    assert 0 <= result["scores"]["words_f"] <= 1
    assert result["hardware"]["cpu_count"] >= 1


def test_cli_reads_eval_file_split_and_note_from_the_manifest(tmp_path):
    import typer

    model = _untrained_segmenter(tmp_path / "training" / "model-best")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"sxu": {"task": "cws", "eval": str(tmp_path / "training" / "cws.spacy"),
                                            "eval_split": "dev", "eval_note": "held back"}}), encoding="utf8")
    app = typer.Typer()
    app.command()(evaluate_cli)
    out = tmp_path / "metrics" / "cws_sxu_{split}.json"
    result = CliRunner().invoke(app, ["cws", str(model), "sxu", "--manifest", str(manifest), "--output", str(out)])
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "metrics" / "cws_sxu_dev.json").read_text(encoding="utf8"))
    assert written["split"] == "dev" and written["note"] == "held back"
    assert written["data"] == str(tmp_path / "training" / "cws.spacy")
