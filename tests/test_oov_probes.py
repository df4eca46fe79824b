"""project/crf_project/oov_probes.py: decoding-bias, entity-join and stock-piece
probes of the OOV words, checked on hand-made cases and against independent
scoring of a small trained pipeline."""

from pathlib import Path

import pytest
import spacy
import srsly
from _configs import PROBE_WORDS as WORDS
from conftest import load_script, write_probe_inputs
from spacy.tokens import DocBin
from spacy.training import Example

from spacy_crf.pipeline.scorers import predicted_words, score_words

SCRIPT = Path(__file__).resolve().parents[1] / "project" / "crf_project" / "oov_probes.py"


@pytest.fixture(scope="module")
def script():
    return load_script(SCRIPT)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A half-trained segmenter + NER + merge pipeline, its dev and training words."""
    return write_probe_inputs(tmp_path_factory.mktemp("oov_probes"))


def _refs(nlp, path):
    return list(DocBin().from_disk(path).get_docs(nlp.vocab))


def _iv():
    return {w for words in WORDS for w in words}


def test_entities_join_the_whole_words_they_cover(script):
    words = {(0, 1), (1, 4), (4, 5), (5, 6)}  # 那|不勒斯|很|美
    assert script.joined_at_entities([(0, 4, "LOC")], words) == ({(0, 4), (4, 5), (5, 6)}, 1)
    assert script.joined_at_entities([(0, 4, "LOC")], words, ["PER"]) == (words, 0)
    assert script.joined_at_entities([(0, 2, "LOC")], words) == (words, 0)  # ends inside 不勒斯
    assert script.joined_at_entities([(4, 5, "LOC")], words) == (words, 0)  # one word already


def test_piece_counts_tell_a_cut_inside_a_piece_from_one_on_a_piece_edge(script):
    text = "得天独厚的那不勒斯"
    gold = {(0, 4), (4, 5), (5, 9)}  # 得天独厚 的 那不勒斯; only 的 is in the training words
    counts = script.PieceCounts()
    # the model cut 得|天独厚 inside the piece 得天, and found 那不勒斯
    counts.add(text, gold, {(0, 1), (1, 4), (4, 5), (5, 9)}, [(0, 2), (2, 4), (4, 5), (5, 9)], {"的"})
    assert counts.as_dict() == {
        "oov_words": 2,
        "one_piece": 1,
        "one_piece_share": 0.5,
        "on_piece_edges": 2,
        "on_piece_edges_share": 1.0,
        "split_misses": 1,
        "cut_inside_pieces_only": 1,
    }
    counts = script.PieceCounts()
    # 得|天|独厚: one cut inside 得天, one on a piece edge that no piece feature could veto;
    # 那不勒斯 joined to 的
    counts.add(text, gold, {(0, 1), (1, 2), (2, 4), (4, 9)}, [(0, 2), (2, 4), (4, 5), (5, 9)], {"的"})
    assert (counts.split_misses, counts.cut_inside_pieces_only) == (1, 0)


def test_probes_agree_with_independent_scoring(script, trained):
    nlp = spacy.load(trained / "pipeline", exclude=["merge_words"])
    refs = _refs(nlp, trained / "dev.spacy")
    iv = _iv()
    result = script.probe(
        nlp, refs, iv, biases=[0.0, 1e4, -1e4], pieces=lambda text: [(i, i + 1) for i in range(len(text))], batch_size=3
    )
    assert result["segmenter"] == "segmenter"
    docs = list(nlp.pipe(r.text for r in refs))
    own = score_words([Example(d, r) for d, r in zip(docs, refs)], iv_words=iv)
    bias = {row["bias"]: row for row in result["boundary_bias"]}
    assert {k: bias[0.0][k] for k in own} == own
    # a huge bias on M/E makes every doc one word (only 好 is right); a huge negative one, every character
    assert bias[1e4]["words_p"] == pytest.approx(1 / 4)
    chars = sum(len(r.text) for r in refs)
    singles = sum(len(t) == 1 for r in refs for t in r)
    assert bias[-1e4]["words_p"] == pytest.approx(singles / chars)
    # one-character pieces are the every-character segmentation
    pieces = result["stock_pieces"]
    assert {k: pieces["pieces_as_words"][k] for k in own} == {k: bias[-1e4][k] for k in own}
    oov = [t.text for r in refs for t in r if t.text not in iv]
    assert pieces["oov_words"] == len(oov) and pieces["one_piece"] == sum(len(w) == 1 for w in oov)
    # the entity rows: the model's words joined under its entities, scored independently
    for row in result["entity_joins"]:
        labels = None if row["labels"] == "all" else row["labels"].split("+")
        examples, joins = [], 0
        for doc, ref in zip(docs, refs):
            ents = [(e.start_char, e.end_char, e.label_) for e in doc.ents]
            joined, n = script.joined_at_entities(ents, predicted_words(doc), labels)
            joins += n
            examples.append(Example(script.with_words(nlp, ref.text, joined, "words"), ref))
        assert row["joins"] == joins
        assert {k: row[k] for k in own} == score_words(examples, iv_words=iv)


def test_cli_writes_the_results_and_names_what_is_wrong(script, trained, tmp_path, monkeypatch, capsys):
    argv = [
        "oov_probes.py",
        str(trained / "pipeline"),
        str(trained / "dev.spacy"),
        "--words",
        str(trained / "train.spacy"),
        "--no-pieces",
        "--biases",
        "0,2",
        "--output",
        str(tmp_path / "out.json"),
    ]
    monkeypatch.setattr("sys.argv", argv)
    script.main()
    out = srsly.read_json(tmp_path / "out.json")
    assert [row["bias"] for row in out["boundary_bias"]] == [0.0, 2.0] and out["stock_pieces"] is None
    assert "| +2 |" in capsys.readouterr().out
    monkeypatch.setattr("sys.argv", argv[:-4] + ["--biases", "0,x"])
    with pytest.raises(SystemExit):
        script.main()
    assert "--biases" in capsys.readouterr().err
    no_segmenter = spacy.blank("zh")
    no_segmenter.to_disk(tmp_path / "blank")
    monkeypatch.setattr("sys.argv", ["oov_probes.py", str(tmp_path / "blank")] + argv[2:])
    with pytest.raises(SystemExit):
        script.main()
    assert "no bmes crf_tagger" in capsys.readouterr().err


def test_tables_print_a_dash_for_the_recall_of_no_words(script, capsys):
    scores = {"words_p": 0.5, "words_r": 0.25, "words_f": 1 / 3, "words_oov_recall": None, "words_iv_recall": 0.25}
    script.print_tables({"boundary_bias": [{"bias": 0.0, **scores}], "entity_joins": [], "stock_pieces": None})
    assert "| +0 | 33.33 (50.00 / 25.00) | – | 25.00 |" in capsys.readouterr().out
