"""project/crf_project/evaluate_pipeline.py scores what users get from nlp.pipe.

Its figures are checked against an independent computation: spacy.load the
saved pipeline, run each reference text through it, and count word and
entity matches by character offsets.
"""

from pathlib import Path

import pytest
import spacy
from conftest import half_trained_pipeline, load_script
from spacy.tokens import Doc, DocBin
from spacy.training import Example

from spacy_crf.batching import DEFAULT_SORT_BUFFER

SCRIPT = Path(__file__).resolve().parents[1] / "project" / "crf_project" / "evaluate_pipeline.py"

WORDS = [
    ["张三", "去", "上海"],
    ["我", "在", "北京", "工作"],
    ["李四", "住", "广州"],
    ["今天", "天气", "好"],
    ["北京大学", "在", "北京"],
    ["上海", "人"],
]
ENTS = [
    ("张三去上海", [(0, 2, "PER"), (3, 5, "LOC")]),
    ("我在北京工作", [(2, 4, "LOC")]),
    ("李四住广州", [(0, 2, "PER"), (3, 5, "LOC")]),
    ("北京大学在北京", [(0, 2, "LOC"), (5, 7, "LOC")]),
]


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """A saved segmenter + NER + merge pipeline and two .spacy reference files."""
    path = tmp_path_factory.mktemp("evaluate_pipeline")
    nlp, word_refs, ent_refs = half_trained_pipeline(WORDS, ENTS)
    nlp.to_disk(path / "pipeline")
    DocBin(docs=word_refs).to_disk(path / "words.spacy")
    DocBin(docs=ent_refs).to_disk(path / "ents.spacy")
    DocBin(docs=word_refs[:3]).to_disk(path / "train_words.spacy")
    return path


def _prf(pred, gold):
    tp = len(pred & gold)
    p = tp / len(pred) if pred else 0.0
    r = tp / len(gold) if gold else 0.0
    return p, r, 2 * p * r / (p + r) if p + r else 0.0


def test_scores_agree_with_an_independent_spacy_load(script, corpus):
    result = script.evaluate_pipeline(
        str(corpus / "pipeline"),
        corpus / "words.spacy",
        corpus / "ents.spacy",
        dictionary=corpus / "train_words.spacy",
        batch_size=2,
    )
    nlp = spacy.load(corpus / "pipeline")
    pred_words, gold_words, pred_ents, gold_ents = set(), set(), set(), set()
    for i, words in enumerate(WORDS):
        text = "".join(words)
        doc = nlp(text)
        pred_words |= {(i, t.idx, t.idx + len(t)) for t in doc}
        offsets = [0]
        for w in words:
            offsets.append(offsets[-1] + len(w))
        gold_words |= {(i, a, b) for a, b in zip(offsets, offsets[1:])}
    for i, (text, ents) in enumerate(ENTS):
        doc = nlp(text)
        pred_ents |= {(i, e.start_char, e.end_char, e.label_) for e in doc.ents}
        gold_ents |= {(i, *e) for e in ents}
    p, r, f = _prf(pred_words, gold_words)
    assert round(100 * result["words"]["words_p"], 2) == round(100 * p, 2)
    assert round(100 * result["words"]["words_r"], 2) == round(100 * r, 2)
    assert round(100 * result["words"]["words_f"], 2) == round(100 * f, 2)
    p, r, f = _prf(pred_ents, gold_ents)
    assert round(100 * result["ents"]["ents_f"], 2) == round(100 * f, 2)
    assert round(100 * result["ents"]["ents_p"], 2) == round(100 * p, 2)
    # OOV recall: gold words absent from the training words, found by the tokens.
    train_words = {w for words in WORDS[:3] for w in words}
    oov = {(i, a, b) for (i, a, b) in gold_words if "".join(WORDS[i])[a:b] not in train_words}
    expected_oov = len(oov & pred_words) / len(oov)
    assert result["words"]["words_oov_recall"] == pytest.approx(expected_oov)
    assert result["segmenter_words"] is not None
    # timed as `spacy crf speed` times: length-sorted batches (docs scored in input order above)
    assert result["speed"]["words_data"]["sort_buffer"] == DEFAULT_SORT_BUFFER
    assert result["speed"]["ents_data"]["batch_size"] == 2


def test_overrides_reach_the_loaded_pipeline(script, corpus):
    overrides = script.parse_overrides(["components.crf_ner.max_batch_items=7"])
    assert overrides == {"components.crf_ner.max_batch_items": 7}
    result = script.evaluate_pipeline(
        str(corpus / "pipeline"), corpus / "words.spacy", corpus / "ents.spacy", overrides=overrides, limit=2
    )
    assert result["overrides"] == overrides and result["limit"] == 2
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        script.parse_overrides(["no-equals-sign"])


def test_keep_words_scores_every_entity_by_offsets(script, corpus):
    overrides = {"components.merge_words.entity_policy": "keep_words"}
    result = script.evaluate_pipeline(
        str(corpus / "pipeline"), corpus / "words.spacy", corpus / "ents.spacy", overrides=overrides
    )
    split = script.evaluate_pipeline(str(corpus / "pipeline"), corpus / "words.spacy", corpus / "ents.spacy")
    assert split["ents_all"] is None
    # keep_words loses no entity: every predicted entity is in doc.ents or the unaligned group,
    # so scoring them all by offsets gives the split policy's entity figures
    assert result["ents_all"]["ents_f"] == pytest.approx(split["ents"]["ents_f"])
    assert result["ents"]["ents_f"] <= result["ents_all"]["ents_f"] + 1e-9


def test_merge_cuts_name_the_right_words_cut_at_entity_boundaries(script):
    from spacy_crf.pipeline.merge_words import merge_words

    nlp = spacy.blank("zh")
    # gold 美方 | 代表 | 在 | 北京 | 开会; the segmenter got 美方, 代表 and 在北京 (wrong), and
    # the NER model found 美 (LOC, MSRA's standard) and 北京 (LOC): the merge cuts 美方, a right
    # word, and makes 在 and 北京 right
    text = "美方代表在北京开会"
    doc = nlp.make_doc(text)
    doc.spans["words"] = [doc[0:2], doc[2:4], doc[4:7], doc[7:9]]
    doc.ents = [spacy.tokens.Span(doc, 0, 1, label="LOC"), spacy.tokens.Span(doc, 5, 7, label="LOC")]
    merged = merge_words(doc, "words")
    assert [t.text for t in merged] == ["美", "方", "代表", "在", "北京", "开会"]
    gold = Doc(nlp.vocab, words=["美方", "代表", "在", "北京", "开会"], spaces=[False] * 5)
    cuts = script.merge_cuts([Example(merged, gold)])
    assert cuts == {"right_words_cut": 1, "by_label": {"LOC": 1}, "words_made_right": 2, "top": [["美方", 1, "美|方"]]}


def test_merge_cuts_are_reported_with_the_scores(script, corpus):
    result = script.evaluate_pipeline(str(corpus / "pipeline"), corpus / "words.spacy", corpus / "ents.spacy")
    cuts = result["merge_cuts"]
    assert cuts["right_words_cut"] == sum(cuts["by_label"].values()) == sum(c for _, c, _ in cuts["top"])
    # the merge's change in right words is what it made right less what it cut
    n_gold = sum(len(words) for words in WORDS)
    change = round((result["words"]["words_r"] - result["segmenter_words"]["words_r"]) * n_gold)
    assert change == cuts["words_made_right"] - cuts["right_words_cut"]


def test_cli_names_a_missing_manifest_in_one_line(script, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(
        "sys.argv",
        [
            "evaluate_pipeline.py",
            "zh_crf_pipeline",
            "--manifest",
            str(tmp_path / "manifest.json"),
            "--words",
            "sxu",
            "--ents",
            "msra",
            "--output",
            str(tmp_path / "out.json"),
        ],
    )
    with pytest.raises(SystemExit, match="manifest.json: no such file"):
        script.main()
    monkeypatch.setattr(
        "sys.argv",
        [
            "evaluate_pipeline.py",
            "zh_crf_pipeline",
            "--words",
            "sxu",
            "--ents",
            "msra",
            "--output",
            str(tmp_path / "out.json"),
            "--limit",
            "x",
        ],
    )
    with pytest.raises(SystemExit) as exc:
        script.main()
    assert exc.value.code == 2 and "--limit" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()
