"""The factories over CRFTagger: crf_tagger (general), crf_ner and crf_segmenter
(exact assigns and default score weights, so configs need no score_weights)."""

from pathlib import Path

import pytest
import spacy
from _configs import JOINT_CONFIG, crf_model_config
from thinc.api import Config

ROOT = Path(__file__).resolve().parent.parent
ENTS = {"ents_f": 1.0, "ents_p": 0.0, "ents_r": 0.0, "ents_per_type": None}
WORDS = {"words_f": 1.0, "words_p": 0.0, "words_r": 0.0}


def test_variants_declare_what_they_write_and_score():
    nlp = spacy.blank("zh")
    ner = nlp.add_pipe("crf_ner")
    seg = nlp.add_pipe("crf_segmenter")
    assert ner.scheme == "bioes" and seg.scheme == "bmes"
    assert nlp.get_pipe_meta("crf_ner").assigns == ["doc.ents", "token.ent_iob", "token.ent_type"]
    assert nlp.get_pipe_meta("crf_segmenter").assigns == ["doc.spans"]
    assert nlp.get_pipe_meta("crf_ner").default_score_weights == ENTS
    assert nlp.get_pipe_meta("crf_segmenter").default_score_weights == WORDS
    assert nlp.add_pipe("crf_ner", name="bio_ner", config={"scheme": "bio"}).scheme == "bio"


@pytest.mark.parametrize("factory,scheme", [("crf_ner", "bmes"), ("crf_ner", "tag"), ("crf_segmenter", "bio")])
def test_variants_refuse_other_schemes(factory, scheme):
    with pytest.raises(ValueError, match=f"factory '{factory}' takes scheme"):
        spacy.blank("zh").add_pipe(factory, config={"scheme": scheme})


def test_a_crf_ner_config_needs_no_score_weights():
    config = Config().from_str(
        JOINT_CONFIG.replace('"segmenter", ', "").split("[components.segmenter]")[0]
        + JOINT_CONFIG[JOINT_CONFIG.index("[components.crf_ner]") :]
    )
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    assert nlp.pipe_names == ["tok2vec", "crf_ner"]
    assert nlp.config["training"]["score_weights"] == ENTS
    joint = spacy.util.load_model_from_config(Config().from_str(JOINT_CONFIG), auto_fill=True, validate=True)
    assert joint.config["training"]["score_weights"] == {
        **{k: v and v / 2 for k, v in WORDS.items()},
        **{k: v and v / 2 for k, v in ENTS.items()},
    }


#: scores the segmenter configs log at every evaluation without weighting them
LOGGED = {"words_oov_recall": 0.0, "words_iv_recall": 0.0}


@pytest.mark.parametrize(
    "name,weights",
    [
        ("cws", {**WORDS, **LOGGED}),
        ("ner", ENTS),
        (
            "joint",
            {
                "words_f": 0.5,
                "words_p": 0.0,
                "words_r": 0.0,
                "ents_f": 0.5,
                "ents_p": 0.0,
                "ents_r": 0.0,
                "ents_per_type": None,
                **LOGGED,
            },
        ),
    ],
)
def test_project_configs_get_the_weights_they_used_to_set(name, weights):
    config = spacy.util.load_config(ROOT / "configs" / f"{name}.cfg")
    # the factories weight the scores; a config only adds the logged, unweighted ones
    assert dict(config["training"].get("score_weights", {})) == ({} if name == "ner" else LOGGED)
    del config["corpora"]  # the readers need existing paths; the weights do not
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    assert nlp.config["training"]["score_weights"] == weights


def test_a_pipeline_saved_with_the_general_factory_still_loads(tmp_path):
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_tagger", name="segmenter", config={"scheme": "bmes", "model": crf_model_config()})
    nlp.initialize()
    nlp.to_disk(tmp_path / "old")
    loaded = spacy.load(tmp_path / "old")
    assert loaded.get_pipe_meta("segmenter").factory == "crf_tagger"
    doc = loaded("张三去上海")
    assert "".join(s.text for s in doc.spans["words"]) == "张三去上海"


def test_on_nonfinite_and_respect_ents_settings():
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_ner")
    nlp.add_pipe("crf_segmenter", config={"respect_ents": True, "on_nonfinite": "skip"})
    assert nlp.config["components"]["crf_ner"]["on_nonfinite"] == "raise"
    assert nlp.config["components"]["crf_ner"]["respect_ents"] is False
    seg = nlp.get_pipe("crf_segmenter")
    assert seg.cfg["respect_ents"] is True and seg.cfg["on_nonfinite"] == "skip"
    with pytest.raises(ValueError, match=r"\[crf_tagger\] on_nonfinite must be 'raise' or 'skip', not 'ignore'"):
        spacy.blank("zh").add_pipe("crf_tagger", config={"on_nonfinite": "ignore"})
    with pytest.raises(ValueError, match=r"respect_ents applies to scheme 'bmes'"):
        spacy.blank("zh").add_pipe("crf_tagger", config={"scheme": "bioes", "respect_ents": True})


def test_a_pipeline_saved_before_the_new_settings_still_loads(tmp_path):
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_segmenter", name="segmenter", config={"model": crf_model_config()})
    nlp.initialize()
    nlp.to_disk(tmp_path / "old")
    config = (tmp_path / "old" / "config.cfg").read_text(encoding="utf8")
    stripped = "\n".join(
        line for line in config.splitlines() if not line.startswith(("on_nonfinite", "respect_ents", "user_dict"))
    )
    assert stripped != config
    (tmp_path / "old" / "config.cfg").write_text(stripped, encoding="utf8")
    loaded = spacy.load(tmp_path / "old")
    assert loaded.get_pipe("segmenter").cfg["respect_ents"] is False
    doc = loaded("张三去上海")
    assert "".join(s.text for s in doc.spans["words"]) == "张三去上海"


@pytest.fixture(scope="module")
def saved_heads(tmp_path_factory):
    """A segmenter and a span_ner saved with the default settings."""
    from _configs import SMALL_TOK2VEC
    from spacy.tokens import Doc
    from spacy.training import Example

    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_segmenter", name="segmenter", config={"model": crf_model_config()})
    span_model = {"@architectures": "spacy_crf.SpanPointer.v1", "width": 16, "tok2vec": dict(SMALL_TOK2VEC)}
    nlp.add_pipe("span_ner", name="spans", config={"model": span_model})
    examples = []
    for words, ents in [(["张三", "去", "上海"], ["B-PER", "O", "B-LOC"]), (["我", "在", "北京"], ["O", "O", "B-LOC"])]:
        ref = Doc(nlp.vocab, words=words, spaces=[False] * len(words), ents=ents)
        examples.append(Example(nlp.make_doc(ref.text), ref))
    nlp.initialize(lambda: examples)
    path = tmp_path_factory.mktemp("heads") / "nlp"
    nlp.to_disk(path)
    return path


@pytest.mark.parametrize(
    "component,setting,value",
    [
        ("segmenter", "max_batch_items", 7),
        ("segmenter", "respect_ents", True),
        ("segmenter", "spans_key", "my_words"),
        ("segmenter", "on_nonfinite", "skip"),
        ("segmenter", "constrain_training", False),
        ("spans", "threshold", 1e9),
        ("spans", "max_length", 1),
        ("spans", "spans_key", "mine"),
        ("spans", "on_nonfinite", "skip"),
    ],
)
def test_a_setting_given_at_load_is_the_one_the_loaded_pipe_uses(saved_heads, component, setting, value):
    from spacy.tokens import Span

    saved = spacy.load(saved_heads).get_pipe(component).cfg[setting]
    assert saved != value
    nlp = spacy.load(saved_heads, config={"components": {component: {setting: value}}})
    pipe = nlp.get_pipe(component)
    assert pipe.cfg[setting] == value and nlp.config["components"][component][setting] == value
    assert pipe.labels == spacy.load(saved_heads).get_pipe(component).labels  # the rest comes from the save
    doc = nlp.make_doc("张三去上海")
    if setting == "respect_ents":
        doc.set_ents([Span(doc, 1, 3, label="PER")])
        assert pipe.tag_mask(doc) is not None  # the entity's boundaries are forced
    elif setting == "spans_key":
        assert value in nlp(doc.text).spans
    elif setting == "threshold":
        assert len(nlp(doc.text).spans["sc"]) == 0
    elif setting == "max_length":
        pipe.cfg["threshold"] = -1e9  # every span it scores is predicted: none longer than one token
        predicted = nlp(doc.text)
        assert {len(span) for span in predicted.spans["sc"]} == {1}
    # loading bytes into a pipe keeps that pipe's settings too
    other = spacy.load(saved_heads, config={"components": {component: {setting: value}}})
    other.get_pipe(component).from_bytes(spacy.load(saved_heads).get_pipe(component).to_bytes())
    assert other.get_pipe(component).cfg[setting] == value
