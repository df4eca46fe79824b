"""Bad input at the public entry points that was accepted, or failed with a
traceback, and is now refused when it is given, in one line naming the
component or file (docs/refusals.md lists every refusal and its test)."""

import json

import pytest
import spacy
import srsly
from conftest import tiny_tagger

from spacy_crf.ml.char_tagger import CharTagger
from spacy_crf.ml.tagger_folder import _READ, read_char_tagger, write_char_tagger


@pytest.fixture
def segmenter():
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_segmenter", name="segmenter")
    nlp.initialize()
    return nlp


@pytest.mark.parametrize("factory", ["crf_tagger", "crf_ner", "crf_segmenter"])
def test_a_negative_max_batch_items_is_refused_when_the_pipe_is_made(factory, tmp_path):
    # (spaCy's config check refuses a value that is not an int)
    bad = -1
    with pytest.raises(ValueError, match=rf"^\[{factory}\] max_batch_items must be a whole number >= 0"):
        spacy.blank("zh").add_pipe(factory, config={"max_batch_items": bad})
    nlp = spacy.blank("zh")
    nlp.add_pipe(factory)
    nlp.to_disk(tmp_path / "p")
    with pytest.raises(ValueError, match=rf"^\[{factory}\] max_batch_items must be"):
        spacy.load(tmp_path / "p", config={"components": {factory: {"max_batch_items": bad}}})


@pytest.mark.parametrize(
    "ner,found",
    [
        ("nope", "is no component of the pipeline"),
        ("sents", "is a Sentencizer"),
        ("seg", "is a CRFTagger with scheme 'bmes'"),
    ],
)
def test_ent_confidence_refuses_a_ner_that_is_not_an_entity_tagger_when_added(ner, found):
    import spacy_crf.annotate.records  # noqa: F401  (registers the factory)

    nlp = spacy.blank("zh")
    nlp.add_pipe("sentencizer", name="sents")
    nlp.add_pipe("crf_segmenter", name="seg")
    nlp.add_pipe("crf_ner", name="ner")
    with pytest.raises(ValueError, match=rf"^\[crf_ent_confidence\] ner '{ner}' {found}.*\(those: \['ner'\]\)$"):
        nlp.add_pipe("crf_ent_confidence", config={"ner": ner})
    assert nlp.add_pipe("crf_ent_confidence", config={"ner": "ner"}).tagger is nlp.get_pipe("ner")


def test_a_pipe_saved_onto_a_file_is_refused_and_the_file_kept(segmenter, tmp_path):
    mine = tmp_path / "mine"
    mine.write_text("keep me", encoding="utf8")
    with pytest.raises(ValueError, match=r"^\[segmenter\] cannot save to '.*mine': it is a file"):
        segmenter.get_pipe("segmenter").to_disk(mine)
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "segmenter").write_text("keep me too", encoding="utf8")
    with pytest.raises(ValueError, match=r"^\[segmenter\] cannot save to '.*p.segmenter': it is a file"):
        segmenter.to_disk(tmp_path / "p")
    with pytest.raises(NotADirectoryError, match="mine"):  # spaCy's own, at the tokenizer, before any pipe
        segmenter.to_disk(mine)
    assert mine.read_text(encoding="utf8") == "keep me"
    assert (tmp_path / "p" / "segmenter").read_text(encoding="utf8") == "keep me too"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "p"]  # nothing moved aside


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("format", "x", "not a spacy_crf.char_tagger.v1 file"),
        ("chars", None, "the saved tagger has no 'chars'"),
        ("chars", 7, "the saved tagger's 'chars' is of type int, not list"),
        ("oov", "a", "the saved tagger's 'oov' is of type str, not int"),
        ("oov", 10_000, r"oov id 10000 is not an id of its \d+ characters"),
        ("transitions", [[1.0]], r"transitions of shape \(1, 1\) for \d+ tags"),
        ("normalise", [1], "the saved tagger's 'normalise' is of type list, not dict"),
        ("sha256", "0" * 64, r"the model's bytes have sha256 \w+, not the recorded 0{64}"),
    ],
)
def test_a_hand_edited_tagger_json_is_refused_naming_the_folder_and_field(tmp_path, field, value, message):
    write_char_tagger(tiny_tagger(), tmp_path / "t")
    meta = json.loads((tmp_path / "t" / "tagger.json").read_text(encoding="utf8"))
    if value is None:
        del meta[field]
    else:
        meta[field] = value
    (tmp_path / "t" / "tagger.json").write_text(json.dumps(meta), encoding="utf8")
    _READ.clear()
    with pytest.raises(ValueError, match=f"^char tagger '[^']*': {message}"):
        read_char_tagger(tmp_path / "t")
    if field != "format":  # the same fields, saved in a pipeline's weights
        data = srsly.msgpack_loads(tiny_tagger().to_bytes())
        data = {k: v for k, v in data.items() if k != field} if value is None else {**data, field: value}
        with pytest.raises(ValueError, match=f"^char tagger: {message}"):
            CharTagger.from_bytes(srsly.msgpack_dumps(data))
