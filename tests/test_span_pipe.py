"""The span_ner component: nested entities learned from span groups and
doc.ents, the overlap rule for doc.ents, gold cells, scoring, serialization,
empty and 1-character docs, and a listener on a shared transformer."""

import numpy
import pytest
import spacy
from _configs import LISTENERS, NER_DATA, SMALL_TOK2VEC, TRAIN_CFG, pipeline_config
from spacy.tokens import Doc, Span
from spacy.training import Example
from thinc.api import Config

from spacy_crf.ml.span_model import NEGATIVE, POSITIVE, UNKNOWN
from spacy_crf.pipeline.span_ner import gold_cells, write_greedy_entities
from spacy_crf.training.optimizers import grouped_adam

#: nested gold (span group "sc"): 北京大学 ORG contains 北京 LOC
NESTED = [
    ("我在北京大学工作", [(2, 6, "ORG"), (2, 4, "LOC")]),
    ("他去上海", [(2, 4, "LOC")]),
    ("张三在北京", [(3, 5, "LOC")]),
    ("清华大学很好", [(0, 4, "ORG")]),
    ("上海大学生", [(0, 4, "ORG"), (0, 2, "LOC")]),
]


def span_model(width=16):
    return {"@architectures": "spacy_crf.SpanPointer.v1", "width": width, "tok2vec": dict(SMALL_TOK2VEC)}


def span_nlp(**config):
    nlp = spacy.blank("zh")
    nlp.add_pipe("span_ner", config={"model": span_model(), **config})
    return nlp


def nested_examples(nlp, data=NESTED, key="sc"):
    examples = []
    for text, spans in data:
        ref = nlp.make_doc(text)
        ref.spans[key] = [ref.char_span(s, e, label=label) for s, e, label in spans]
        examples.append(Example(nlp.make_doc(text), ref))
    return examples


def ents_examples(nlp, data=NER_DATA):
    return [Example.from_dict(nlp.make_doc(text), {"entities": ents}) for text, ents in data]


def train(nlp, examples, steps=40, learn_rate=0.01):
    nlp.initialize(lambda: examples)
    optimizer = grouped_adam(learn_rate, param_groups={"span": {"patterns": ["span_*"], "lr_multiplier": 2.0}})
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer)
    return nlp


@pytest.fixture(scope="module")
def trained():
    nlp = span_nlp()
    return train(nlp, nested_examples(nlp) + ents_examples(nlp))


def test_nested_spans_are_learned_from_span_groups_and_ents(trained):
    ner = trained.get_pipe("span_ner")
    assert ner.labels == ("LOC", "ORG", "PER")
    doc = trained("我在北京大学工作")
    group = doc.spans["sc"]
    assert sorted((s.text, s.label_) for s in group) == [("北京", "LOC"), ("北京大学", "ORG")]
    scores = group.attrs["scores"]
    assert len(scores) == 2 and (scores > 0).all() and list(scores) == sorted(scores, reverse=True)
    best = group[0]
    assert [(e.text, e.label_) for e in doc.ents] == [(best.text, best.label_)]  # one of the nested pair
    doc = trained("张三去上海")  # learned from doc.ents only
    assert [(e.text, e.label_) for e in doc.ents] == [("张三", "PER"), ("上海", "LOC")]
    scores = trained.evaluate(nested_examples(trained) + ents_examples(trained))
    assert scores["spans_sc_f"] == 1.0 and scores["ents_f"] == 1.0
    assert set(scores["spans_sc_per_type"]) == {"LOC", "ORG"}
    table = ner.span_scores([trained.make_doc("我在北京大学工作")])[0]
    assert table.shape == (3, 8, 8) and table[1, 2, 5] > 0 > table[1, 2, 4]


def test_overlap_rule_keeps_the_best_span_and_preset_entities():
    nlp = spacy.blank("zh")
    doc = nlp.make_doc("我在北京大学工作")
    write_greedy_entities(doc, [(2, 4, "LOC"), (2, 6, "ORG"), (5, 8, "X"), (6, 8, "Y")])
    assert [(e.text, e.label_) for e in doc.ents] == [("北京", "LOC"), ("学工作", "X")]
    assert doc[0].ent_iob_ == "O"
    doc = nlp.make_doc("我在北京大学工作")
    doc.set_ents([Span(doc, 0, 1, label="PER")], default="missing")
    write_greedy_entities(doc, [(0, 2, "ORG"), (6, 8, "ORG")])
    assert [(e.text, e.label_) for e in doc.ents] == [("我", "PER"), ("工作", "ORG")]
    assert doc[1].ent_iob_ == "O"


def test_gold_cells_from_span_groups_ents_missing_and_misaligned():
    nlp = spacy.blank("zh")
    labels = ["LOC", "ORG"]
    eg = nested_examples(nlp)[0]
    cells = gold_cells(eg, labels, "sc")
    assert cells.shape == (2, 8, 8)
    assert cells[0, 2, 3] == cells[1, 2, 5] == POSITIVE and (cells == POSITIVE).sum() == 2
    eg = Example.from_dict(nlp.make_doc("我在北京工作"), {"entities": [(2, 4, "LOC")]})
    assert gold_cells(eg, labels, "sc")[0, 2, 3] == POSITIVE
    assert gold_cells(Example(nlp.make_doc("我在"), nlp.make_doc("我在")), labels, "sc") is None
    ref = nlp.make_doc("我在北京工作")
    ref.set_ents([Span(ref, 2, 4, label="LOC")], missing=[ref[5:6]], default="outside")
    cells = gold_cells(Example(nlp.make_doc("我在北京工作"), ref), labels, "sc")
    assert (cells[:, 5, :] == UNKNOWN).all() and (cells[:, :, 5] == UNKNOWN).all() and cells[0, 2, 3] == POSITIVE
    ref = nlp.make_doc("我在北京工作")
    ref.ents = [Span(ref, 2, 4, label="LOC")]
    predicted = Doc(nlp.vocab, words=["我在", "北京工作"], spaces=[False, False])  # 北京 misaligned
    cells = gold_cells(Example(predicted, ref), labels, "sc")
    assert cells[0].tolist() == [[NEGATIVE, UNKNOWN], [UNKNOWN, UNKNOWN]] and (cells[1] == NEGATIVE).all()


def test_serialization_round_trip(trained, tmp_path):
    texts = ["我在北京大学工作", "上海大学生", "李四住广州"]
    expected = [[(s.start, s.end, s.label_) for s in doc.spans["sc"]] for doc in trained.pipe(texts)]
    trained.to_disk(tmp_path / "span")
    loaded = spacy.load(tmp_path / "span")
    assert loaded.get_pipe("span_ner").cfg == trained.get_pipe("span_ner").cfg
    for nlp in (loaded, span_nlp().from_bytes(trained.to_bytes())):
        docs = list(nlp.pipe(texts))
        assert [[(s.start, s.end, s.label_) for s in doc.spans["sc"]] for doc in docs] == expected
        assert numpy.allclose(docs[0].spans["sc"].attrs["scores"], trained(texts[0]).spans["sc"].attrs["scores"])


def test_empty_and_one_character_docs(trained):
    for text in ["", " ", "\n"]:
        doc = trained(text)
        assert len(doc.spans["sc"]) == 0 and len(doc.spans["sc"].attrs["scores"]) == 0 and not doc.ents
    doc = trained("京")
    assert [(s.start, s.end) for s in doc.spans["sc"]] in ([], [(0, 1)]) and len(doc.ents) <= 1
    docs = list(trained.pipe(["", "京", "张三去上海", ""]))
    assert [(e.text, e.label_) for e in docs[2].ents] == [("张三", "PER"), ("上海", "LOC")]
    nlp = span_nlp()
    examples = nested_examples(nlp, [("北", [(0, 1, "LOC")]), ("", [])])
    train(nlp, examples, steps=2)
    losses = nlp.update([Example(nlp.make_doc(""), nlp.make_doc(""))], sgd=grouped_adam(0.01))
    assert losses["span_ner"] == 0.0
    assert nlp.get_pipe("span_ner").predict([nlp.make_doc("")]) == [[]]


def test_a_nonfinite_loss_raises_before_the_weights_change():
    from spacy_crf.pipeline.load_checks import NonFiniteError

    nlp = span_nlp()
    examples = nested_examples(nlp)
    nlp.initialize(lambda: examples)
    layer = nlp.get_pipe("span_ner").model.get_ref("span_projection")
    W = layer.get_param("span_start_W")
    W[0, 0] = float("nan")
    before = nlp.get_pipe("span_ner").model.to_bytes()
    with pytest.raises(NonFiniteError, match=r"\[span_ner\] the loss is nan .*'我在北京大学工作'"):
        nlp.update(examples, sgd=grouped_adam(0.01))
    assert nlp.get_pipe("span_ner").model.to_bytes() == before


def test_on_nonfinite_skip_skips_the_batch_then_trains_on():
    nlp = span_nlp(on_nonfinite="skip")
    pipe = nlp.get_pipe("span_ner")
    assert pipe.cfg["on_nonfinite"] == "skip"
    examples = nested_examples(nlp)
    nlp.initialize(lambda: examples)
    optimizer = grouped_adam(0.01)
    layer = pipe.model.get_ref("span_projection")
    W = layer.get_param("span_start_W").copy()
    broken = W.copy()
    broken[0, 0] = float("inf")
    layer.set_param("span_start_W", broken)
    before = pipe.model.to_bytes()
    with pytest.warns(UserWarning, match=r"\[span_ner\] .*'我在北京大学工作'.*batch skipped"):
        losses = nlp.update(examples, sgd=optimizer)
    assert losses["span_ner"] == 0.0
    assert pipe.model.to_bytes() == before  # no optimizer step, not even Adam's momentum
    layer.set_param("span_start_W", W)
    losses = nlp.update(examples, sgd=optimizer)
    assert numpy.isfinite(losses["span_ner"]) and losses["span_ner"] > 0
    with pytest.raises(ValueError, match="on_nonfinite must be one of"):
        span_nlp(on_nonfinite="ignore")


def test_factory_settings_and_errors():
    nlp = spacy.blank("zh")
    nlp.add_pipe("span_ner")
    meta = nlp.get_pipe_meta("span_ner")
    assert meta.assigns == ["doc.ents", "token.ent_iob", "token.ent_type", "doc.spans"]
    assert meta.default_score_weights["ents_f"] == 1.0 and meta.default_score_weights["spans_sc_f"] == 0.0
    assert nlp.config["components"]["span_ner"]["model"]["@architectures"] == "spacy_crf.SpanPointer.v1"
    with pytest.raises(ValueError, match="max_length must be >= 0"):
        spacy.blank("zh").add_pipe("span_ner", config={"max_length": -1})
    with pytest.raises(ValueError, match="not initialized"):
        nlp("北京")
    with pytest.raises(ValueError, match="found no entity labels"):
        nlp.initialize(lambda: [Example(nlp.make_doc("北京"), nlp.make_doc("北京"))])


def test_span_ner_listens_to_a_shared_transformer_beside_a_segmenter(tiny_bert_dir, tmp_path):
    text = pipeline_config([("segmenter", "crf_segmenter", "")], name=tiny_bert_dir)
    text = text.replace('"segmenter"]', '"segmenter", "span_ner"]')
    text += (
        '\n[components.span_ner]\nfactory = "span_ner"\n\n[components.span_ner.model]\n'
        '@architectures = "spacy_crf.SpanPointer.v1"\nwidth = 8\n'
        + LISTENERS["transformer"].replace("{component}", "span_ner")
    )
    config = Config().from_str(text).merge(Config().from_str(TRAIN_CFG))
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    assert "span_ner" in nlp.get_pipe("transformer").listening_components
    examples = nested_examples(nlp, NESTED[:2])
    optimizer = nlp.initialize(lambda: examples)
    embeddings = next(
        shim._model for node in nlp.get_pipe("transformer").model.walk() for shim in node.shims
    ).embeddings.word_embeddings.weight
    before = embeddings.detach().clone()
    for _ in range(3):
        losses = nlp.update(examples, sgd=optimizer, losses={})
    assert losses["span_ner"] > 0
    assert not (before == embeddings.detach()).all()  # the span head's gradient reached the shared encoder
    doc = nlp("我在北京大学工作")
    assert "words" in doc.spans and "sc" in doc.spans
    expected = nlp.get_pipe("span_ner").span_scores([doc])[0]  # a doc the transformer ran over
    assert numpy.abs(expected).max() > 0.1
    nlp.to_disk(tmp_path / "joint")
    loaded = spacy.load(tmp_path / "joint")
    assert numpy.allclose(loaded.get_pipe("span_ner").span_scores([loaded(doc.text)])[0], expected, atol=1e-5)
    nlp.replace_listeners("transformer", "span_ner", ["model.tok2vec"])
    assert numpy.allclose(nlp.get_pipe("span_ner").span_scores([nlp(doc.text)])[0], expected, atol=1e-5)


def test_spacy_training_loop_with_nested_gold_in_a_docbin(tmp_path):
    from spacy.cli.train import train as spacy_train
    from spacy.tokens import DocBin

    nlp = span_nlp()
    DocBin(docs=[eg.reference for eg in nested_examples(nlp) + ents_examples(nlp)], store_user_data=True).to_disk(
        tmp_path / "train.spacy"
    )
    config = Config().from_str(TRAIN_CFG, interpolate=False)
    config["nlp"] = {"lang": "zh", "pipeline": ["span_ner"]}
    config["components"] = {"span_ner": {"factory": "span_ner", "model": span_model(width=8)}}
    filled = spacy.util.load_model_from_config(config, auto_fill=True, validate=True).config
    filled.to_disk(tmp_path / "config.cfg")
    spacy_train(
        tmp_path / "config.cfg",
        tmp_path / "out",
        overrides={"paths.train": str(tmp_path / "train.spacy"), "paths.dev": str(tmp_path / "train.spacy")},
    )
    meta = spacy.util.load_meta(tmp_path / "out" / "model-best" / "meta.json")
    assert meta["performance"]["spans_sc_f"] is not None and meta["performance"]["ents_f"] is not None
    assert spacy.load(tmp_path / "out" / "model-last").get_pipe("span_ner").labels == ("LOC", "ORG", "PER")


# --- load checks, shared with crf_tagger (pipeline/load_checks.py) --------------------


def _rewrite_cfg(path, fix):
    import json

    cfg = json.loads((path / "cfg").read_text(encoding="utf8"))
    fix(cfg)
    (path / "cfg").write_text(json.dumps(cfg), encoding="utf8")


def test_span_ner_truncated_or_empty_weights_name_the_file(trained, tmp_path):
    for name, cut in (("truncated", lambda b: b[: len(b) // 2]), ("empty", lambda b: b"")):
        trained.to_disk(tmp_path / name)
        weights = tmp_path / name / "span_ner" / "model"
        weights.write_bytes(cut(weights.read_bytes()))
        with pytest.raises(
            ValueError, match=rf"\[span_ner\] cannot load the weights file '.*{name}.span_ner.model': it is {name}"
        ):
            spacy.load(tmp_path / name)
    data = trained.get_pipe("span_ner").to_bytes()
    with pytest.raises(ValueError, match=r"\[span_ner\] cannot load from bytes"):
        span_nlp().get_pipe("span_ner").from_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    "what,fix,message",
    [
        ("labels missing", lambda cfg: cfg.pop("labels"), "its cfg has no 'labels'"),
        (
            "one label more",
            lambda cfg: cfg["labels"].append("GPE"),
            r"score 3 labels \(output width\) but the labels give 4",
        ),
        ("one label less", lambda cfg: cfg["labels"].pop(), r"score 3 labels .* labels give 2"),
    ],
)
def test_span_ner_cfg_that_does_not_match_the_weights_fails_at_load_time(trained, tmp_path, what, fix, message):
    trained.to_disk(tmp_path / "m")
    _rewrite_cfg(tmp_path / "m" / "span_ner", fix)
    with pytest.raises(ValueError, match=r"\[span_ner\] cannot load directory '.*m.span_ner'.*" + message):
        spacy.load(tmp_path / "m")


def test_span_ner_missing_cfg_fails_at_load_time(trained, tmp_path):
    trained.to_disk(tmp_path / "m")
    (tmp_path / "m" / "span_ner" / "cfg").unlink()
    with pytest.raises(ValueError, match=r"\[span_ner\] cannot load directory '.*span_ner': its 'cfg' file is missing"):
        spacy.load(tmp_path / "m")
    trained.to_disk(tmp_path / "n")
    (tmp_path / "n" / "span_ner" / "model").unlink()
    with pytest.raises(ValueError, match=r"\[span_ner\] .*its 'model' file \(the weights\) is missing"):
        spacy.load(tmp_path / "n")


def test_span_ner_nan_weights_fail_at_load_time(trained, tmp_path):
    pipe = trained.get_pipe("span_ner")
    layer = pipe.model.get_ref("span_projection")
    W = layer.get_param("span_end_W").copy()
    layer.set_param("span_end_W", numpy.full_like(W, numpy.nan))
    try:
        trained.to_disk(tmp_path / "m")
        data = pipe.to_bytes()
    finally:
        layer.set_param("span_end_W", W)
    with pytest.raises(
        ValueError,
        match=rf"\[span_ner\] cannot load directory .*'span_end_W' of layer 'span_projection' has {W.size} NaN",
    ):
        spacy.load(tmp_path / "m")
    with pytest.raises(ValueError, match=r"\[span_ner\] cannot load bytes: .*'span_end_W'"):
        span_nlp().get_pipe("span_ner").from_bytes(data)


def test_span_ner_permuted_labels_fail_at_load_time(trained, tmp_path):
    labels = list(trained.get_pipe("span_ner").labels)
    trained.to_disk(tmp_path / "m")
    _rewrite_cfg(tmp_path / "m" / "span_ner", lambda cfg: cfg.update(labels=labels[1:] + labels[:1]))
    with pytest.raises(
        ValueError,
        match=r"\[span_ner\] cannot load directory '.*m.span_ner': output 0 of the "
        rf"weights is '{labels[0]}' but '{labels[1]}' .*the labels are in another order",
    ):
        spacy.load(tmp_path / "m")
    import srsly

    data = srsly.msgpack_loads(trained.get_pipe("span_ner").to_bytes())
    data["cfg"] = srsly.json_dumps({**srsly.json_loads(data["cfg"]), "labels": labels[::-1]})
    with pytest.raises(ValueError, match=r"\[span_ner\] cannot load bytes: output 0 .*another order"):
        span_nlp().get_pipe("span_ner").from_bytes(srsly.msgpack_dumps(data))


def test_span_ner_saved_without_the_label_order_still_loads_with_a_warning(trained, tmp_path):
    from spacy_crf.pipeline.load_checks import OUTPUTS_ATTR

    trained.to_disk(tmp_path / "m")
    model = trained.get_pipe("span_ner").model
    saved = model.attrs.pop(OUTPUTS_ATTR)
    try:
        (tmp_path / "m" / "span_ner" / "model").write_bytes(model.to_bytes())  # as an older version wrote it
        (tmp_path / "m" / "span_ner" / "model.sha256").unlink()  # (with no digest)
    finally:
        model.attrs[OUTPUTS_ATTR] = saved
    with pytest.warns(UserWarning, match=r"\[span_ner\] directory .*saved without the order of their outputs"):
        loaded = spacy.load(tmp_path / "m")
    assert [(e.text, e.label_) for e in loaded("张三去上海").ents] == [
        (e.text, e.label_) for e in trained("张三去上海").ents
    ]


def test_a_diverging_finite_loss_warns_once():
    """Adam at learning rate 10: the loss per token goes from about 2 to
    millions and stays finite, so the non-finite guard never fires."""
    import warnings

    nlp = span_nlp()
    examples = nested_examples(nlp) + ents_examples(nlp)
    nlp.initialize(lambda: examples)
    optimizer = grouped_adam(10.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(6):
            nlp.update(examples, sgd=optimizer)
    diverging = [str(w.message) for w in caught if "diverging" in str(w.message)]
    assert len(diverging) == 1, diverging
    assert diverging[0].startswith("[span_ner] the training loss is diverging: ")
    assert "over 1000 times the first batch's" in diverging[0] and "'我在北京大学工作'" in diverging[0]


def test_a_converging_loss_does_not_warn():
    import warnings

    nlp = span_nlp()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*diverging")
        train(nlp, nested_examples(nlp) + ents_examples(nlp), steps=20)


# --- bounded output ------------------------------------------------------------------


def test_span_ner_default_max_length_is_finite():
    from spacy_crf.pipeline.span_ner import DEFAULT_MAX_LENGTH

    nlp = span_nlp()
    assert nlp.config["components"]["span_ner"]["max_length"] == DEFAULT_MAX_LENGTH == 64
    assert nlp.get_pipe("span_ner").cfg["max_length"] == 64
    assert spacy.blank("zh").add_pipe("span_ner").cfg["max_length"] == 64
    assert span_nlp(max_length=0).get_pipe("span_ner").cfg["max_length"] == 0  # unbounded when asked


@pytest.mark.parametrize("max_length", [None, 0])
def test_span_ner_output_is_bounded_on_a_long_doc(max_length):
    """An untrained head scores about half of all cells above 0: without a
    bound, 49,187 spans for these 308 characters and 2 labels."""
    import warnings

    nlp = span_nlp(**({} if max_length is None else {"max_length": max_length}))
    examples = nested_examples(nlp)
    nlp.initialize(lambda: examples)
    pipe = nlp.get_pipe("span_ner")
    text = "我在北京大学工作，他去上海。" * 22  # 308 characters
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        docs = [nlp(text), nlp(text)]
    n, n_labels = len(docs[0]), len(pipe.labels)
    assert len(docs[0].spans["sc"]) <= n * n_labels
    if max_length is None:
        assert max(len(s) for s in docs[0].spans["sc"]) <= 64
    capped = [str(w.message) for w in caught if "the cap allows" in str(w.message)]
    assert len(capped) == 1 and capped[0].startswith("[span_ner] doc '我在北京大学工作")
    assert f"({n * n_labels}: 1 per token and label)" in capped[0]
