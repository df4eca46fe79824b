"""project/crf_project/entity_policies.py: the three ways of reconciling words and
entities, checked against the merge step's own split and keep_words."""

from pathlib import Path

import pytest
import spacy
from conftest import load_script
from spacy.tokens import Doc, Span
from spacy.training import Example

from spacy_crf.pipeline.merge_words import merge_words

SCRIPT = Path(__file__).resolve().parents[1] / "project" / "crf_project" / "entity_policies.py"
TEXT = "美方代表在北京开会"


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


def predicted(vocab):
    """The segmenter's words 美方 代表 在北京 开会 and the entities 美 (LOC, MSRA's
    standard) and 北京 (LOC), each crossing a word boundary."""
    doc = Doc(vocab, words=list(TEXT), spaces=[False] * len(TEXT))
    doc.spans["words"] = [doc[0:2], doc[2:4], doc[4:7], doc[7:9]]
    doc.ents = [Span(doc, 0, 1, label="LOC"), Span(doc, 5, 7, label="LOC")]
    return doc


def test_policies_match_the_merge_step_and_expand_widens(script):
    vocab = spacy.blank("zh").vocab
    words = script.policy_words(predicted(vocab))
    ents = script.policy_entities(predicted(vocab))
    split = merge_words(predicted(vocab), "words")
    assert words["split"] == {(t.idx, t.idx + len(t)) for t in split}
    assert ents["split"] == [(e.start_char, e.end_char, e.label_) for e in split.ents]
    kept = merge_words(predicted(vocab), "words", entity_policy="keep_words")
    assert words["keep_words"] == words["expand"] == {(t.idx, t.idx + len(t)) for t in kept}
    assert ents["keep_words"] == [(e.start_char, e.end_char, e.label_) for e in kept.ents] == []
    assert ents["expand"] == [(0, 2, "LOC"), (4, 7, "LOC")]  # 美方, 在北京


def test_expand_drops_an_entity_that_would_overlap_the_one_before(script):
    doc = Doc(spacy.blank("zh").vocab, words=list("中美关系"), spaces=[False] * 4)
    doc.spans["words"] = [doc[0:2], doc[2:4]]
    doc.ents = [Span(doc, 0, 1, label="LOC"), Span(doc, 1, 2, label="LOC")]
    assert script.policy_entities(doc)["expand"] == [(0, 2, "LOC")]


@spacy.Language.component("_test_fixed_words_and_ents")
def _fixed(doc):
    fixed = predicted(doc.vocab) if doc.text == TEXT else doc
    if fixed is not doc:
        doc.spans["words"] = [doc[s.start : s.end] for s in fixed.spans["words"]]
        doc.ents = [Span(doc, e.start, e.end, label=e.label_) for e in fixed.ents]
    return doc


def test_score_policies_scores_each_policy_on_its_task(script):
    nlp = spacy.blank("zh")
    nlp.add_pipe("_test_fixed_words_and_ents")
    gold_words = Doc(nlp.vocab, words=["美方", "代表", "在", "北京", "开会"], spaces=[False] * 5)
    gold_ents = Example.from_dict(nlp.make_doc(TEXT), {"entities": [(0, 1, "LOC"), (5, 7, "LOC")]}).reference
    table = script.score_policies(nlp, [gold_words], [gold_ents])
    # words: the model's 美方 代表 在北京 开会 has 3 of 5 right; split gives 美|方|代表|在|北京|开会, 4 of 5
    assert table["model"]["words"]["r"] == table["keep_words"]["words"]["r"] == pytest.approx(3 / 5)
    assert table["split"]["words"]["p"] == pytest.approx(4 / 6) and table["split"]["words"]["r"] == 0.8
    # entities: split keeps both (right), keep_words none, expand widens both (wrong)
    assert table["split"]["ents"]["f"] == table["model"]["ents"]["f"] == 1.0
    assert table["keep_words"]["ents"]["f"] == table["expand"]["ents"]["f"] == 0.0


def test_cli_leaves_out_the_merge_and_writes_the_table(script, tmp_path, monkeypatch, capsys):
    import srsly
    from spacy.tokens import DocBin

    nlp = spacy.blank("zh")
    nlp.add_pipe("_test_fixed_words_and_ents")
    nlp.add_pipe("crf_merge_words", name="merge_words")
    nlp.to_disk(tmp_path / "model")
    DocBin(docs=[Doc(nlp.vocab, words=["美方", "代表", "在", "北京", "开会"], spaces=[False] * 5)]).to_disk(
        tmp_path / "words.spacy"
    )
    ents = Example.from_dict(nlp.make_doc(TEXT), {"entities": [(0, 1, "LOC"), (5, 7, "LOC")]}).reference
    DocBin(docs=[ents]).to_disk(tmp_path / "ents.spacy")
    argv = [
        "entity_policies.py",
        str(tmp_path / "model"),
        str(tmp_path / "words.spacy"),
        str(tmp_path / "ents.spacy"),
        "--output",
        str(tmp_path / "out.json"),
    ]
    monkeypatch.setattr("sys.argv", argv)
    script.main()
    table = srsly.read_json(tmp_path / "out.json")["policies"]
    # with the merge left in, the model's words would already be split
    assert table["model"]["words"]["r"] == pytest.approx(3 / 5) and table["split"]["words"]["r"] == 0.8
    assert "| expand | " in capsys.readouterr().out
    monkeypatch.setattr("sys.argv", argv[:2] + [str(tmp_path / "missing.spacy"), argv[3]])
    with pytest.raises(SystemExit):
        script.main()
