"""How much of a dev or test split training has seen: the rate functions,
the corpus manifest's rates and ``project/crf_project/dev_rates.py``."""

import json
import sys
from pathlib import Path

import pytest
import spacy
from conftest import PROJECT_PACKAGE, load_script
from spacy.tokens import Doc, DocBin, Span
from typer.testing import CliRunner

from crf_project.paths import load_manifest
from spacy_crf.corpora.rates import (
    doc_mentions,
    doc_words,
    file_rates,
    mention_set,
    oov_rate,
    seen_entity_rate,
    split_rates,
)
from spacy_crf.doc_keys import NO_GOLD_WORDS
from spacy_crf.pipeline.scorers import score_ents_seen, score_words


@pytest.fixture(scope="module")
def nlp():
    return spacy.blank("zh")


def words_doc(nlp, words):
    return Doc(nlp.vocab, words=words, spaces=[False] * len(words))


def test_oov_rate_counts_word_tokens_not_types():
    train = [["上海", "推"], ["今天", "好"]]
    dev = [["上海", "浦东", "浦东"], ["好", "天气"]]
    # 5 tokens, 3 of them unseen (浦东 twice, 天气); a type count would say 2 of 4
    assert oov_rate(train, dev) == {"words": 5, "oov": 3, "oov_rate": 0.6}
    assert oov_rate(train, []) == {"words": 0, "oov": 0, "oov_rate": None}


def test_oov_rate_is_the_share_that_oov_recall_is_scored_on(nlp):
    # the words whose recall `words_oov_recall` measures are exactly the ones counted OOV
    from spacy.training import Example

    train = [words_doc(nlp, ["上海", "推", "今天"])]
    dev = [words_doc(nlp, ["上海", "浦东", " ", "今天", "天气"])]
    assert doc_words(dev[0]) == ["上海", "浦东", "今天", "天气"]  # a whitespace token is never a word
    rates = split_rates("cws", train, dev)
    assert rates == {"words": 4, "oov": 2, "oov_rate": 0.5}
    # a model that finds only the in-vocabulary words: OOV recall 0 over those 2 words, IV recall 1
    pred = words_doc(nlp, ["上海", "浦", "东", " ", "今天", "天", "气"])
    scores = score_words([Example(pred, dev[0])], spans_key=None, iv_words={t for d in train for t in doc_words(d)})
    assert scores["words_oov_recall"] == 0 and scores["words_iv_recall"] == 1
    ner = words_doc(nlp, ["北", "京"])
    ner.user_data[NO_GOLD_WORDS] = True  # an NER doc in a joint corpus has no gold words
    assert doc_words(ner) == []


def test_seen_entity_rate_by_text_and_label_and_by_text():
    train = [[("北京", "LOC"), ("张三", "PER")], [("中国银行", "ORG")]]
    dev = [[("北京", "LOC"), ("北京", "ORG"), ("李四", "PER")], [], [("中国银行", "ORG")]]
    rates = seen_entity_rate(train, dev)
    # 北京/ORG: the name was seen, but not as an organisation
    assert rates == {"entities": 4, "seen": 2, "seen_rate": 0.5, "seen_text": 3, "seen_text_rate": 0.75}
    assert seen_entity_rate(train, [[]])["seen_rate"] is None


def test_rates_of_spacy_files(tmp_path, nlp):
    def ner_doc(text, spans):
        doc = nlp.make_doc(text)
        doc.ents = [Span(doc, s, e, label=l) for s, e, l in spans]
        return doc

    train = [ner_doc("我在北京", [(2, 4, "LOC")]), ner_doc("张三来了", [(0, 2, "PER")])]
    test = [ner_doc("北京张三", [(0, 2, "LOC"), (2, 4, "ORG")])]
    DocBin(docs=train).to_disk(tmp_path / "train.spacy")
    DocBin(docs=test).to_disk(tmp_path / "test.spacy")
    assert doc_mentions(test[0]) == [("北京", "LOC"), ("张三", "ORG")]
    rates = file_rates("ner", tmp_path / "train.spacy", tmp_path / "test.spacy")
    assert (rates["seen_rate"], rates["seen_text_rate"]) == (0.5, 1.0)


def test_seen_and_unseen_entity_recall_split_the_dev_as_its_seen_rate_does(nlp):
    """The entity counterpart of IV/OOV recall: a reference entity counts as
    seen exactly when seen_entity_rate counts it (text and label)."""
    from spacy.training import Example

    def ner_doc(text, spans):
        doc = nlp.make_doc(text)
        doc.ents = [Span(doc, s, e, label=l) for s, e, l in spans]
        return doc

    train = [ner_doc("我在北京", [(2, 4, "LOC")]), ner_doc("张三来了", [(0, 2, "PER")])]
    seen = mention_set(train)
    assert seen == {("北京", "LOC"), ("张三", "PER")}
    # 北京/LOC and 张三/PER seen; 北京/ORG (the name, not as an organisation) and 李四/PER unseen
    gold = [ner_doc("北京张三李四", [(0, 2, "LOC"), (2, 4, "PER"), (4, 6, "PER")]), ner_doc("北京队", [(0, 3, "ORG")])]
    # found: 北京/LOC (seen) and 李四/PER (unseen); 张三 predicted as ORG, 北京队 cut short
    pred = [ner_doc("北京张三李四", [(0, 2, "LOC"), (2, 4, "ORG"), (4, 6, "PER")]), ner_doc("北京队", [(0, 2, "ORG")])]
    rates = seen_entity_rate(map(doc_mentions, train), map(doc_mentions, gold))
    assert (rates["entities"], rates["seen"]) == (4, 2)
    scores = score_ents_seen([Example(p, g) for p, g in zip(pred, gold)], seen)
    assert scores == {"ents_seen_recall": 0.5, "ents_unseen_recall": 0.5}
    # a doc without entity annotation is skipped, as spaCy's NER scorer skips it
    bare = nlp.make_doc("北京")
    assert score_ents_seen([Example(ner_doc("北京", [(0, 2, "LOC")]), bare)], seen) == {
        "ents_seen_recall": None,
        "ents_unseen_recall": None,
    }
    # a side with no reference entity has no recall
    only_seen = score_ents_seen([Example(gold[0], ner_doc("北京", [(0, 2, "LOC")]))], seen)
    assert only_seen == {"ents_seen_recall": 1.0, "ents_unseen_recall": None}


SXU = "".join(f"文{a}  的  词{a}  。\n" for a in range(20) for _ in range(10))  # 20 articles of 10 lines
MSRA = "".join(f"名\tB-PER\n{chr(0x4E00 + a)}\tI-PER\n说\tO\n\n" for a in range(20) for _ in range(10))


def test_dev_rates_script_measures_each_carve(tmp_path):
    assets = tmp_path / "assets"
    (assets / "cws" / "sxu").mkdir(parents=True)
    (assets / "ner" / "msra").mkdir(parents=True)
    (assets / "cws" / "sxu" / "train.txt").write_text(SXU, encoding="utf8")
    (assets / "ner" / "msra" / "msra_train_bio").write_text(MSRA, encoding="utf8")
    script = load_script(PROJECT_PACKAGE / "dev_rates.py")
    import typer

    app = typer.Typer()
    app.command()(script.main)
    out = tmp_path / "rates.json"
    result = CliRunner().invoke(
        app,
        [
            "--assets",
            str(assets),
            "--out",
            str(out),
            "--corpora",
            "sxu,msra",
            "--block-sizes",
            "10,20",
            "--seeds",
            "0,1,2",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text(encoding="utf8"))
    sxu, msra = data["corpora"]["sxu"], data["corpora"]["msra"]
    assert sxu["docs"] == 200 and sxu["dev_docs"] == 20
    assert set(sxu["carves"]) == {"lines", "blocks:10", "blocks:20", "tail"}
    assert sorted(sxu["carves"]["lines"]["seeds"]) == ["0", "1", "2"] and list(sxu["carves"]["tail"]["seeds"]) == ["0"]
    # single lines leave every article in training; the last 20 lines are two whole unseen articles
    assert sxu["carves"]["lines"]["summary"]["oov_rate"]["max"] == 0
    assert sxu["carves"]["tail"]["summary"]["oov_rate"]["mean"] == pytest.approx(0.5)  # 文a and 词a of 4 words
    assert msra["carves"]["tail"]["summary"]["seen_rate"]["mean"] == 0
    assert msra["carves"]["lines"]["summary"]["seen_rate"]["min"] == 1
    summary = sxu["carves"]["blocks:20"]["summary"]["oov_rate"]
    assert summary["min"] <= summary["mean"] <= summary["max"] and summary["mean"] > 0
    assert sxu["test"] == {"oov_rate": 0.0512} and msra["test"] == {"seen_rate": 0.713}
    assert "blocks:20" in result.output and "5.12" in result.output and "71.30" in result.output
    result = CliRunner().invoke(app, ["--assets", str(assets), "--out", str(out), "--corpora", "weibo"])
    assert result.exit_code == 2 and "not a corpus with a carved dev" in " ".join(result.output.split())


def test_manifest_reports_the_rates_of_every_dev_split(tmp_path, monkeypatch, capsys):
    assets = tmp_path / "assets"
    (assets / "cws" / "sxu").mkdir(parents=True)
    (assets / "cws" / "sxu" / "train.txt").write_text(SXU, encoding="utf8")
    (assets / "cws" / "sxu" / "test.txt").write_text("文0  的  新词  。\n", encoding="utf8")
    out = tmp_path / "corpus"
    script = load_script(PROJECT_PACKAGE / "convert_corpora.py")
    monkeypatch.setattr(
        sys,
        "argv",
        ["convert_corpora.py", "--assets", str(assets), "--out", str(out), "--only", "sxu", "--block-size", "20"],
    )
    # the counts differ from the data README's (a tiny file): exit 1 after the manifest is written
    with pytest.raises(SystemExit, match="counts differ"):
        script.main()
    entry = json.loads((out / "manifest.json").read_text(encoding="utf8"))["sxu"]
    assert entry["carve"] == {"carve": "blocks", "dev_ratio": 0.1, "seed": 0, "block_size": 20}
    assert entry["rates"]["dev"]["words"] == 80 and entry["rates"]["dev"]["oov_rate"] >= 0.25
    assert entry["rates"]["test"] == {"words": 4, "oov": 1, "oov_rate": 0.25}
    assert "sxu: dev OOV rate" in capsys.readouterr().out


def test_manifest_with_a_line_dev_reports_both_carves_against_one_training_part(tmp_path, monkeypatch):
    assets = tmp_path / "assets"
    (assets / "cws" / "sxu").mkdir(parents=True)
    (assets / "cws" / "sxu" / "train.txt").write_text(SXU, encoding="utf8")
    out = tmp_path / "corpus"
    script = load_script(PROJECT_PACKAGE / "convert_corpora.py")
    argv = ["convert_corpora.py", "--assets", str(assets), "--out", str(out), "--only", "sxu", "--block-size", "20"]
    monkeypatch.setattr(sys, "argv", argv + ["--lines-dev"])
    with pytest.raises(SystemExit, match="counts differ"):  # a tiny file, as above
        script.main()
    written = json.loads((out / "manifest.json").read_text(encoding="utf8"))["sxu"]
    # files named relative to the manifest, read back as paths from here
    assert written["dev_lines"] == "sxu/dev_lines.spacy" and written["paths"] == "manifest"
    entry = load_manifest(out / "manifest.json")["sxu"]
    assert Path(entry["dev_lines"]).resolve() == (out / "sxu" / "dev_lines.spacy").resolve()
    assert "dev_lines" in entry["dev_note"]
    assert entry["carve"]["lines_dev"] == 20
    assert entry["rates"]["dev_lines"] == file_rates("cws", entry["train"], entry["dev_lines"])
    assert entry["rates"]["dev"] == file_rates("cws", entry["train"], entry["dev"])
    # 20 articles of 10 lines: a block of 20 lines is two unseen articles, a single line never is
    assert entry["rates"]["dev_lines"]["oov_rate"] == 0 and entry["rates"]["dev"]["oov_rate"] >= 0.25
    monkeypatch.setattr(sys, "argv", argv[:-2] + ["--carve", "lines", "--lines-dev"])
    with pytest.raises(SystemExit) as exc:
        script.main()
    assert exc.value.code == 2
