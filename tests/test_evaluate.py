"""project/crf_project/evaluate.py: word scores with OOV/IV recall (also from a
softmax tagger's BMES tags), entity scores, train_meta.json, --manifest."""

import json

import pytest
import spacy
from _configs import WORDS
from spacy.tokens import Doc, DocBin
from typer.testing import CliRunner

from crf_project.evaluate import evaluate, evaluate_cli, evaluate_cws


def word_doc(vocab, words):
    return Doc(vocab, words=words, spaces=[False] * len(words))


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
    manifest.write_text(
        json.dumps(
            {
                "sxu": {
                    "task": "cws",
                    "eval": str(tmp_path / "training" / "cws.spacy"),
                    "eval_split": "dev",
                    "eval_note": "held back",
                }
            }
        ),
        encoding="utf8",
    )
    app = typer.Typer()
    app.command()(evaluate_cli)
    out = tmp_path / "metrics" / "cws_sxu_{split}.json"
    result = CliRunner().invoke(app, ["cws", str(model), "sxu", "--manifest", str(manifest), "--output", str(out)])
    assert result.exit_code == 0, result.output
    written = json.loads((tmp_path / "metrics" / "cws_sxu_dev.json").read_text(encoding="utf8"))
    assert written["split"] == "dev" and written["note"] == "held back"
    assert written["data"] == str(tmp_path / "training" / "cws.spacy")


def _evaluate_cli(args):
    import typer

    app = typer.Typer()
    app.command()(evaluate_cli)
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result, " ".join(result.output.split())


def _snapshot(path):
    return {str(p): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_cli_never_writes_over_an_input(tmp_path):
    model = _untrained_segmenter(tmp_path / "training" / "model-best")
    data = tmp_path / "training" / "cws.spacy"
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"sxu": {"task": "cws", "eval": str(data), "eval_split": "dev"}}), encoding="utf8")
    (tmp_path / "words.utf8").write_text("北京\n", encoding="utf8")
    before = _snapshot(tmp_path)
    for args in (
        ["cws", model, data, "--output", data],
        ["cws", model, data, "--output", tmp_path / "training" / ".." / "training" / "cws.spacy"],
        ["cws", model, data, "--output", model / "meta.json"],
        ["cws", model, data, "--output", model],
        ["cws", model, data, "--words", tmp_path / "words.utf8", "--output", tmp_path / "words.utf8"],
        ["cws", model, "sxu", "--manifest", manifest, "--output", manifest],
        ["cws", model, data, "--output", tmp_path / "training" / "train_meta.json"],
    ):
        result, text = _evaluate_cli(args)
        assert result.exit_code == 1, (args, text)
        assert any(n in text for n in ("overwrite the input", "existing directory", "inside the input directory"))
        assert "Traceback" not in text, text
        assert _snapshot(tmp_path) == before


def test_cli_clear_errors_for_empty_or_missing_inputs(tmp_path):
    model = _untrained_segmenter(tmp_path / "training" / "model-best")
    DocBin().to_disk(tmp_path / "empty.spacy")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"sxu": {}}), encoding="utf8")
    out = tmp_path / "metrics" / "out.json"
    for args, needle in (
        (["cws", model, tmp_path / "empty.spacy"], "empty.spacy: no docs"),
        (["cws", model, tmp_path / "missing.spacy"], "missing.spacy: no such file"),
        (["cws", model, tmp_path / "training" / "cws.spacy", "--words", tmp_path / "nowords.utf8"], "nowords.utf8"),
        (["cws", model, "msra", "--manifest", manifest], "no corpus 'msra'"),
    ):
        result, text = _evaluate_cli([*args, "--output", out])
        assert result.exit_code == 1 and needle in text and "Traceback" not in text, (args, text)
        assert not out.parent.exists()
    result, text = _evaluate_cli(["cws", model, tmp_path / "training" / "cws.spacy", "--limit", "-1", "--output", out])
    assert result.exit_code == 2 and "--limit" in result.output
    with pytest.raises(ValueError, match="limit"):
        evaluate("cws", model, tmp_path / "training" / "cws.spacy", limit=-1)


def _ner_files(tmp_path):
    """A rule-based NER model (finds 北京/LOC and 李四/PER), training docs
    with 北京/LOC and 张三/PER, and a dev doc with all three."""
    from spacy.tokens import Span

    nlp = spacy.blank("zh")
    nlp.add_pipe("entity_ruler").add_patterns(
        [{"label": "LOC", "pattern": "北京"}, {"label": "PER", "pattern": "李四"}]
    )
    nlp.to_disk(tmp_path / "ner-model")

    def ner_doc(text, spans):
        doc = nlp.make_doc(text)
        doc.ents = [Span(doc, s, e, label=l) for s, e, l in spans]
        return doc

    DocBin(docs=[ner_doc("我在北京", [(2, 4, "LOC")]), ner_doc("张三来了", [(0, 2, "PER")])]).to_disk(
        tmp_path / "train.spacy"
    )
    DocBin(docs=[ner_doc("北京张三李四", [(0, 2, "LOC"), (2, 4, "PER"), (4, 6, "PER")])]).to_disk(
        tmp_path / "dev.spacy"
    )
    return tmp_path / "ner-model", tmp_path / "train.spacy", tmp_path / "dev.spacy"


def test_evaluate_ner_scores_entities_seen_and_unseen_in_training(tmp_path):
    model, train, dev = _ner_files(tmp_path)
    out = tmp_path / "metrics" / "ner.json"
    result, text = _evaluate_cli(["ner", model, dev, "--train-ents", train, "--output", out])
    assert result.exit_code == 0, text
    written = json.loads(out.read_text(encoding="utf8"))
    s = written["scores"]
    # seen: 北京/LOC found, 张三/PER missed; unseen: 李四/PER found
    assert (s["ents_seen_recall"], s["ents_unseen_recall"]) == (0.5, 1.0)
    assert s["ents_r"] == pytest.approx(2 / 3)
    assert written["training_entities"] == {"path": str(train), "entities": 2}
    assert "ents_seen_recall=0.5000, ents_unseen_recall=1.0000" in text
    # without the training corpus: no such keys, as before
    assert "ents_seen_recall" not in evaluate("ner", model, dev)["scores"]


def test_evaluate_refuses_a_training_file_of_the_other_task(tmp_path):
    model, train, dev = _ner_files(tmp_path)
    with pytest.raises(ValueError, match="for the cws task, not ner"):
        evaluate("ner", model, dev, words=train)
    with pytest.raises(ValueError, match="for the ner task, not cws"):
        evaluate("cws", model, dev, train_ents=train)
    DocBin(docs=[spacy.blank("zh").make_doc("北京")]).to_disk(tmp_path / "plain.spacy")
    with pytest.raises(ValueError, match="plain.spacy: no entities"):
        evaluate("ner", model, dev, train_ents=tmp_path / "plain.spacy")
    with pytest.raises(ValueError, match="missing.spacy: no such file"):
        evaluate("ner", model, dev, train_ents=tmp_path / "missing.spacy")


def test_evaluate_all_checks_its_options_first(tmp_path, monkeypatch, capsys):
    import sys

    from crf_project import evaluate_all

    for argv, needle in (
        (["--out", str(tmp_path), "--eval-limit", "-1"], "--eval-limit"),
        (["--out", str(tmp_path)], "manifest.json: no such file"),
        (["--out", str(tmp_path), "--models", "joint,nope"], "--models"),
    ):
        monkeypatch.setattr(sys, "argv", ["evaluate_all.py", *argv])
        with pytest.raises(SystemExit) as exc:
            evaluate_all.main()
        assert exc.value.code == 2 and needle in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_evaluate_all_scores_only_the_models_named(tmp_path, monkeypatch):
    # the ship project scores `joint` alone: a single-task model the study
    # project trained beside it must not change what `all` writes
    import sys

    import srsly

    from crf_project import evaluate_all

    for model in ("joint", "cws"):
        (tmp_path / "training" / model / "model-best").mkdir(parents=True)
    entry = {"task": "cws", "eval": "sxu.spacy", "dictionary": "words.spacy", "eval_split": "dev"}
    (tmp_path / "corpus").mkdir()
    srsly.write_json(tmp_path / "corpus" / "manifest.json", {"sxu": entry})
    scores = {"words_p": 0.5, "words_r": 0.5, "words_f": 0.5}
    fake = {"scores": scores, "train": {}, "hardware": {"cpu_count": 2}, "speed": {"chars_per_s": 1.0}}
    monkeypatch.setattr(evaluate_all, "evaluate", lambda *args, **kwargs: dict(fake))
    monkeypatch.setattr(sys, "argv", ["evaluate_all.py", "--out", str(tmp_path), "--models", "joint"])
    evaluate_all.main()
    assert sorted(p.name for p in (tmp_path / "metrics").glob("*.json")) == ["joint_sxu_dev.json"]
    assert "single-task" not in (tmp_path / "metrics" / "summary.md").read_text(encoding="utf8")


def test_evaluate_all_scores_msra_against_its_training_entities(tmp_path, monkeypatch):
    import sys

    import srsly

    from crf_project import evaluate_all

    (tmp_path / "training" / "joint" / "model-best").mkdir(parents=True)
    entry = {"task": "ner", "train": "msra-train.spacy", "eval": "msra-dev.spacy", "eval_split": "dev"}
    (tmp_path / "corpus").mkdir()
    srsly.write_json(tmp_path / "corpus" / "manifest.json", {"msra": entry})
    calls = []
    scores = {"ents_p": 0.9, "ents_r": 0.9, "ents_f": 0.9, "ents_seen_recall": 0.97, "ents_unseen_recall": 0.75}
    fake = {"scores": scores, "train": {}, "hardware": {"cpu_count": 2}, "speed": {"chars_per_s": 1.0}}

    def fake_evaluate(*args, **kwargs):
        calls.append(kwargs)
        return dict(fake)

    monkeypatch.setattr(evaluate_all, "evaluate", fake_evaluate)
    monkeypatch.setattr(sys, "argv", ["evaluate_all.py", "--out", str(tmp_path), "--models", "joint"])
    evaluate_all.main()
    assert calls[0]["train_ents"].name == "msra-train.spacy" and calls[0]["words"] is None
    assert "seen-R 97.00, unseen-R 75.00" in (tmp_path / "metrics" / "summary.md").read_text(encoding="utf8")


def test_evaluate_cws_breaks_down_the_oov_words():
    nlp = spacy.blank("zh")
    nlp.add_pipe("_test_char_tagger")
    refs = [word_doc(nlp.vocab, w) for w in WORDS]
    oov = evaluate_cws(nlp, refs, iv_words={"张三", "北京", "去", "我"})["oov"]
    # OOV: 上海 在 工作 今天 天气 好; 天气 is cut into 天|气 by "今天" of the lexicon
    assert oov["oov_words"] == 6 and oov["oov_recall"] == pytest.approx(5 / 6)
    assert oov["by_length"]["1"] == {"words": 2, "recall": 1.0}
    assert oov["by_length"]["2"] == {"words": 4, "recall": 0.75}
    assert oov["by_length"]["4+"] == {"words": 0, "recall": None}
    assert oov["misses"] == {"split": 1, "split_into_iv": 0, "joined": 0}
    assert oov["top_missed"] == [["天气", 1, "天|气"]]
    assert evaluate_cws(nlp, refs)["scores"]["words_f"] > 0 and "oov" not in evaluate_cws(nlp, refs)


def test_oov_breakdown_tells_split_from_joined_misses():
    from spacy.training import Example

    from crf_project.oov import oov_breakdown, summary_lines, word_kind

    vocab = spacy.blank("zh").vocab
    pairs = [
        (["李四", "在", "2024", "年", "，"], ["李", "四在", "2024年", "，"]),
        (["北京大学", "好"], ["北京", "大学", "好"]),
        (["北京大学"], ["北京大学"]),
    ]
    examples = [Example(word_doc(vocab, pred), word_doc(vocab, ref)) for ref, pred in pairs]
    oov = oov_breakdown(examples, {"李", "在", "年", "北京", "大学", "好"}, spans_key=None)
    # OOV: 李四 (split, one piece runs past it), 2024 (joined with 年), ， (found), 北京大学 (split
    # into training words, then found)
    assert oov["oov_words"] == 5 and oov["oov_recall"] == pytest.approx(2 / 5)
    assert oov["misses"] == {"split": 2, "split_into_iv": 1, "joined": 1}
    assert oov["by_kind"]["digits_latin"] == {"words": 1, "recall": 0.0}
    assert oov["by_kind"]["other"] == {"words": 1, "recall": 1.0}
    assert oov["by_kind"]["han"] == {"words": 3, "recall": pytest.approx(1 / 3)}
    assert oov["by_length"]["4+"] == {"words": 3, "recall": pytest.approx(1 / 3)}
    assert ["李四", 1, "李|四在"] in oov["top_missed"] and ["2024", 1, "2024年"] in oov["top_missed"]
    assert ["北京大学", 1, "北京|大学"] in oov["top_missed"]
    lines = summary_lines(oov)
    assert "split 2 (into training words only: 1), joined 1" in lines[2]
    assert [word_kind(w) for w in ("天气", "２０２４", "iPhone", "，", "3.5%")] == [
        "han",
        "digits_latin",
        "digits_latin",
        "other",
        "digits_latin",
    ]
