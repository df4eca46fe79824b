import random

import numpy
import pytest
import spacy
from _configs import NER_DATA, SMALL_TOK2VEC, crf_model_config
from spacy.tokens import Doc, Span
from spacy.training import Example

from spacy_crf.ml.schemes import is_valid
from spacy_crf.pipeline.crf_tagger import CRFTagger
from spacy_crf.pipeline.gold_tags import bmes_gold
from spacy_crf.training.optimizers import grouped_adam

SEG_DATA = [["我", "在", "北京", "工作"], ["张三", "去", "上海"], ["今天", "天气", "好"], ["李四", "住", "广州"]]


def ner_examples(nlp):
    return [Example.from_dict(nlp.make_doc(t), {"entities": ents}) for t, ents in NER_DATA]


def seg_examples(nlp):
    return [Example(nlp.make_doc("".join(w)), Doc(nlp.vocab, words=w, spaces=[False] * len(w))) for w in SEG_DATA]


def train(nlp, examples, steps=40):
    optimizer = nlp.initialize(lambda: examples)
    history = []
    for _ in range(steps):
        losses = {}
        nlp.update(examples, sgd=optimizer, losses=losses)
        history.append(sum(losses.values()))
    return history


@pytest.fixture
def ner_nlp():
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_tagger", config={"scheme": "bio", "model": crf_model_config()})
    losses = train(nlp, ner_examples(nlp))
    assert losses[-1] < losses[0] / 10
    return nlp


def test_factory_default_trains_standalone():
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_tagger")
    assert isinstance(pipe, CRFTagger) and pipe.scheme == "bio"
    train(nlp, ner_examples(nlp), steps=30)
    assert [(e.text, e.label_) for e in nlp("张三去上海").ents] == [("张三", "PER"), ("上海", "LOC")]


@pytest.mark.parametrize("scheme", ["bio", "bioes"])
def test_entities_are_learned_and_scored(scheme):
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_tagger", config={"scheme": scheme, "model": crf_model_config()})
    train(nlp, ner_examples(nlp))
    assert pipe.labels == ("LOC", "PER")
    for text, ents in NER_DATA:
        doc = nlp(text)
        assert [(e.start_char, e.end_char, e.label_) for e in doc.ents] == ents
    scores = nlp.evaluate(ner_examples(nlp))
    assert scores["ents_f"] == 1.0 and set(scores["ents_per_type"]) == {"LOC", "PER"}


def test_segmentation_learns_from_reference_tokens():
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_tagger", config={"scheme": "bmes", "model": crf_model_config()})
    examples = seg_examples(nlp)
    assert bmes_gold(examples[0]).tolist() == [3, 3, 0, 2, 0, 2]  # S S B E B E
    train(nlp, examples)
    doc = nlp("张三去上海")
    assert [t.text for t in doc] == list("张三去上海")  # not retokenized
    assert [s.text for s in doc.spans[pipe.cfg["spans_key"]]] == ["张三", "去", "上海"]
    scores = nlp.evaluate(seg_examples(nlp))
    assert scores["words_f"] == 1.0


def test_tag_scheme_writes_token_tags():
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_tagger", config={"scheme": "tag", "model": crf_model_config()})
    words = list("我在北京")
    tags = ["PN", "P", "NR", "NR"]
    examples = [Example(nlp.make_doc("我在北京"), Doc(nlp.vocab, words=words, tags=tags, spaces=[False] * 4))]
    train(nlp, examples, steps=30)
    assert [t.tag_ for t in nlp("我在北京")] == tags
    assert nlp.evaluate(examples)["tag_acc"] == 1.0


def test_serialization_round_trips_predict_the_same(ner_nlp, tmp_path):
    texts = ["张三去北京工作", "今天李四在上海", "他们是大学生"]
    expected = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in ner_nlp.pipe(texts)]
    pipe = ner_nlp.get_pipe("crf_tagger")
    marg = pipe.predict_marginals([ner_nlp.make_doc(t) for t in texts])
    ner_nlp.to_disk(tmp_path / "model")
    loaded = spacy.load(tmp_path / "model")
    got = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in loaded.pipe(texts)]
    assert got == expected
    numpy.testing.assert_allclose(
        loaded.get_pipe("crf_tagger").predict_marginals([loaded.make_doc(t) for t in texts])[0], marg[0], atol=1e-6
    )
    from_bytes = spacy.blank("zh")
    from_bytes.add_pipe("crf_tagger", config={"scheme": "bio", "model": crf_model_config()})
    from_bytes.from_bytes(ner_nlp.to_bytes())
    assert from_bytes.get_pipe("crf_tagger").labels == pipe.labels
    assert [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in from_bytes.pipe(texts)] == expected


def test_marginals_are_distributions(ner_nlp):
    pipe = ner_nlp.get_pipe("crf_tagger")
    probs = pipe.predict_marginals([ner_nlp.make_doc(t) for t in ["张三去上海", "好"]])
    assert [p.shape for p in probs] == [(5, len(pipe.tags)), (1, len(pipe.tags))]
    for p in probs:
        numpy.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-5)


def test_empty_whitespace_and_batch_edge_cases(ner_nlp):
    docs = list(ner_nlp.pipe(["", "   ", "张三 去 上海", "\u3000", "x"]))
    assert [d.text for d in docs] == ["", "   ", "张三 去 上海", "\u3000", "x"]
    assert docs[0].ents == () and docs[1].ents == ()
    assert ner_nlp("").text == ""
    # a batch of only empty docs
    assert [d.ents for d in ner_nlp.pipe(["", ""])] == [(), ()]


def test_batch_by_length_groups_sorted_indices_within_the_budget():
    from spacy_crf.util import batch_by_length

    lengths = [5, 1, 9, 1, 3, 20]
    groups = batch_by_length(lengths, max_items=10)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    flat = [lengths[i] for g in groups for i in g]
    assert flat == sorted(lengths)
    for g in groups:
        assert len(g) == 1 or max(lengths[i] for i in g) * len(g) <= 10
    assert groups[-1] == [5]  # longer than the budget: alone
    assert batch_by_length(lengths, 0) == [list(range(6))]
    assert batch_by_length([], 10) == []


@pytest.mark.parametrize("max_batch_items", [0, 6, 4096])
def test_pipe_sub_batches_keep_order_and_predictions(ner_nlp, max_batch_items):
    texts = ["张三去上海工作了很久", "好", "", "我在北京", "李四住广州和深圳", "x"] * 2
    expected = [[(e.start_char, e.end_char, e.label_) for e in ner_nlp(t).ents] for t in texts]
    pipe = ner_nlp.get_pipe("crf_tagger")
    before = pipe.cfg["max_batch_items"]
    pipe.cfg["max_batch_items"] = max_batch_items
    try:
        docs = list(ner_nlp.pipe(texts, batch_size=5))
    finally:
        pipe.cfg["max_batch_items"] = before
    assert [d.text for d in docs] == texts
    assert [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in docs] == expected


def test_multiprocessing(ner_nlp):
    texts = ["张三去上海", "我在北京工作", "", "李四住广州"] * 3
    single = [[(e.text, e.label_) for e in d.ents] for d in ner_nlp.pipe(texts)]
    multi = [[(e.text, e.label_) for e in d.ents] for d in ner_nlp.pipe(texts, n_process=2, batch_size=2)]
    assert multi == single


def test_initialize_without_examples_or_labels_is_a_clear_error():
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_tagger", config={"model": crf_model_config()})
    with pytest.raises(ValueError, match="no examples and no labels"):
        nlp.initialize(lambda: [])


def test_initialize_with_labels_that_do_not_fit_the_scheme():
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_tagger", config={"model": crf_model_config()})
    nlp.config["initialize"]["components"]["crf_tagger"] = {"labels": ["B-PER", "LOC"]}
    with pytest.raises(ValueError, match=r"\[crf_tagger\].*'B-PER' looks like a tag"):
        nlp.initialize(lambda: ner_examples(nlp))
    with pytest.raises(ValueError, match="Unknown tag scheme 'iob'"):
        spacy.blank("zh").add_pipe("crf_tagger", config={"scheme": "iob"})


def test_labels_from_config_are_used():
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_tagger", config={"scheme": "bioes", "model": crf_model_config()})
    nlp.config["initialize"]["components"]["crf_tagger"] = {"labels": ["ORG", "PER", "LOC"]}
    nlp.initialize(lambda: ner_examples(nlp))
    assert pipe.labels == ("LOC", "ORG", "PER") and len(pipe.tags) == 13
    assert pipe.model.get_ref("crf").get_param("crf_transitions").shape == (13, 13)


def test_misaligned_gold_entity_warns_naming_the_doc():
    nlp = spacy.blank("en")  # word tokens: a reference token boundary can fall inside one
    nlp.add_pipe("crf_tagger", config={"model": crf_model_config()})
    text = "Alice visited Berlinstadt today"
    reference = Doc(
        nlp.vocab,
        words=["Alice", "visited", "Berlin", "stadt", "today"],
        spaces=[True, True, False, True, False],
        ents=["B-PER", "O", "B-LOC", "O", "O"],
    )
    bad = Example(nlp.make_doc(text), reference)
    good = Example.from_dict(nlp.make_doc("Alice visited Paris"), {"entities": [(0, 5, "PER"), (14, 19, "LOC")]})
    optimizer = nlp.initialize(lambda: [good])
    with pytest.warns(UserWarning, match=r"doc 'Alice visited Berlinstadt today'.*'Berlin' \(LOC, chars 14-20\)"):
        losses = nlp.update([bad, good], sgd=optimizer)
    assert numpy.isfinite(losses["crf_tagger"])
    # offsets that fall inside a token: spaCy itself warns with the text; no crash
    with pytest.warns(UserWarning, match="Alice visited Berlinstadt today"):
        odd = Example.from_dict(nlp.make_doc(text), {"entities": [(0, 5, "PER"), (14, 20, "LOC")]})
    assert numpy.isfinite(nlp.update([odd], sgd=optimizer)["crf_tagger"])


def test_transition_table_and_heatmap(ner_nlp, tmp_path):
    table = ner_nlp.get_pipe("crf_tagger").transition_table()
    assert table.row_labels[0] == "<start>" and table.col_labels[-1] == "<end>"
    assert table.matrix.shape == (6, 6)
    assert table.score("<start>", "O") == pytest.approx(table.start[0])
    text = str(table)
    assert "B-LOC" in text and "<end>" in text
    assert 0.0 <= table.validity() <= 1.0
    png = table.plot(tmp_path / "t.png", title="test")
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_validity_and_violations_by_hand():
    from spacy_crf.ml.schemes import transition_mask
    from spacy_crf.ml.transitions import TransitionTable

    tags = ["B", "M", "E", "S"]
    allowed = transition_mask("bmes", tags)
    # possible moves score 1, impossible ones -1; start: B, S possible
    transitions = numpy.where(allowed.transitions, 1.0, -1.0)
    start = numpy.where(allowed.start, 1.0, -1.0)
    table = TransitionTable(tags, transitions, start, numpy.zeros(4), allowed)
    assert table.validity() == 1.0 and table.violations() == []
    transitions[3, 2] = 1.0  # S -> E as high as S -> B and S -> S
    table = TransitionTable(tags, transitions, start, numpy.zeros(4), allowed)
    assert sorted(table.violations()) == [("S", "E", "B"), ("S", "E", "S")]
    total = 2 * 2 + sum(int((~row).sum()) * int(row.sum()) for row in allowed.transitions)
    assert table.validity() == pytest.approx(1 - 2 / total)


def test_decoded_sequences_respect_the_scheme(ner_nlp):
    pipe = ner_nlp.get_pipe("crf_tagger")
    docs = [ner_nlp.make_doc(t) for t in ["去去去上上", "海海张张三李", "我"]]
    for ids in pipe.predict(docs):
        assert is_valid("bio", [pipe.tags[i] for i in ids])


def _structure_task(n_docs=60, seed=0):
    """Tags cycle X Y Z X Y Z ... over random characters: a token's own
    features say nothing about its tag, only the label order does."""
    rng = random.Random(seed)
    alphabet = list("我在北京工作张三去上海今天气好")
    data = []
    for _ in range(n_docs):
        n = rng.randint(6, 14)
        words = [rng.choice(alphabet) for _ in range(n)]
        tags = ["XYZ"[i % 3] for i in range(n)]
        data.append((words, tags))
    return data


def _accuracy_on_structure_task(use_crf):
    nlp = spacy.blank("zh")
    tok2vec = dict(SMALL_TOK2VEC, window_size=1, depth=1)
    nlp.add_pipe(
        "crf_tagger", config={"scheme": "tag", "model": {**crf_model_config(use_crf=use_crf), "tok2vec": tok2vec}}
    )

    def examples(data):
        return [
            Example(nlp.make_doc("".join(w)), Doc(nlp.vocab, words=w, tags=t, spaces=[False] * len(w))) for w, t in data
        ]

    train_set, test_set = examples(_structure_task(60, 1)), examples(_structure_task(30, 2))
    # The same optimizer for both heads; the CRF group's multiplier has no
    # parameters to act on in the softmax head.
    optimizer = nlp.initialize(lambda: train_set, sgd=grouped_adam(0.001, crf_lr_multiplier=100.0))
    for _ in range(15):
        for i in range(0, len(train_set), 10):
            nlp.update(train_set[i : i + 10], sgd=optimizer)
    return nlp.evaluate(test_set)["tag_acc"]


def test_crf_beats_softmax_when_only_label_order_disambiguates():
    crf_acc = _accuracy_on_structure_task(use_crf=True)
    softmax_acc = _accuracy_on_structure_task(use_crf=False)
    assert crf_acc > 0.95
    assert crf_acc > softmax_acc + 0.2


def test_add_label_before_and_after_initialize():
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_tagger", config={"scheme": "bio", "model": crf_model_config()})
    assert pipe.add_label("PER") == 1 and pipe.add_label("PER") == 0
    assert pipe.tags == ["O", "B-PER", "I-PER"]
    pipe.tags.append("X")  # a copy: the inventory is not changed through it
    assert pipe.add_label("LOC") == 1 and pipe.tags == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    with pytest.raises(Exception, match="looks like a tag"):
        pipe.add_label("B-LOC")
    nlp.initialize(lambda: ner_examples(nlp))
    with pytest.raises(ValueError, match="after the model was initialized"):
        pipe.add_label("ORG")
    seg = spacy.blank("zh").add_pipe("crf_tagger", config={"scheme": "bmes"})
    with pytest.raises(ValueError, match="no labels"):
        seg.add_label("X")


def test_softmax_head_segments_too():
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_tagger", config={"scheme": "bmes", "model": crf_model_config(use_crf=False)})
    train(nlp, seg_examples(nlp))
    assert not pipe.model.has_ref("crf")
    with pytest.raises(ValueError, match="no CRF layer"):
        pipe.transition_table()
    doc = nlp("张三去上海")
    assert "".join(s.text for s in doc.spans["words"]) == "张三去上海"  # every character in some word
    assert nlp.evaluate(seg_examples(nlp))["words_f"] == 1.0


# --- gold over whitespace (reliability item 1) ----------------------------------

BMES = "BMES"
WHITESPACE_CASES = [
    # (predicted text, expected gold per predicted token; "?" unknown) against 张三|去|上海
    ("张三去上海", "BESBE"),
    ("张三 去上海", "BESBE"),  # an ASCII space is the trailing whitespace of 三, not a token
    ("张三  去上海", "BE?SBE"),  # two spaces: a whitespace token
    ("张三\u3000去上海", "BE?SBE"),
    ("张三\n去\n上海\n", "BE?S?BE?"),
    ("张 三去上海", "BESBE"),  # a space inside a word
    ("张\u3000三去上\n海", "B?ESB?E"),
    ("\u3000 张三去上海", "?BESBE"),
]


@pytest.mark.parametrize("text,expected", WHITESPACE_CASES)
def test_bmes_gold_follows_the_alignment_when_the_predicted_text_has_more_whitespace(text, expected):
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_segmenter", config={"model": crf_model_config()})
    reference = Doc(nlp.vocab, words=["张三", "去", "上海"], spaces=[False] * 3)
    eg = Example(nlp.make_doc(text), reference)
    got = "".join("?" if i < 0 else BMES[i] for i in bmes_gold(eg))
    assert got == expected, [t.text for t in eg.predicted]
    nlp.initialize(lambda: [Example(nlp.make_doc("张三去上海"), reference)])
    scores = pipe.model.predict([eg.predicted])
    loss, _ = pipe.get_loss([eg], scores)
    assert 0 <= loss < 100  # a gold path that breaks the scheme costs ~1e30


def test_bmes_gold_on_reference_words_with_whitespace_and_spaces():
    nlp = spacy.blank("zh")
    # the reference has whitespace tokens / spaces the predicted text lacks
    reference = Doc(nlp.vocab, words=["张三", "\u3000", "去", "上海"], spaces=[True, False, False, False])
    eg = Example(nlp.make_doc("张三去上海"), reference)
    assert "".join(BMES[i] for i in bmes_gold(eg)) == "BESBE"


@pytest.mark.parametrize(
    "scheme,expected",
    [
        ("bio", ["B-PER", "I-PER", None, "O", "B-LOC", "I-LOC", None]),
        ("bioes", ["B-PER", "E-PER", None, "O", "B-LOC", "E-LOC", None]),
    ],
)
def test_entity_gold_leaves_whitespace_tokens_unknown(scheme, expected):
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_ner", config={"scheme": scheme, "model": crf_model_config()})
    reference = Doc(nlp.vocab, words=["张三", "去", "上海"], spaces=[False] * 3, ents=["B-PER", "O", "B-LOC"])
    eg = Example(nlp.make_doc("张三\u3000去上海\n"), reference)
    nlp.initialize(lambda: [eg])
    gold = pipe._gold_tag_ids(eg)
    assert [pipe.tags[i] if i >= 0 else None for i in gold] == expected
    loss, _ = pipe.get_loss([eg], pipe.model.predict([eg.predicted]))
    assert 0 <= loss < 100


def test_tag_gold_of_whitespace_tokens_comes_from_the_alignment():
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_tagger", config={"scheme": "tag", "model": crf_model_config()})
    reference = Doc(nlp.vocab, words=["张三", "去"], spaces=[False, False], tags=["NR", "VV"])
    eg = Example(nlp.make_doc("张三\u3000去"), reference)
    nlp.initialize(lambda: [eg])
    assert [pipe.tags[i] if i >= 0 else None for i in pipe._gold_tag_ids(eg)] == ["NR", "NR", None, "VV"]


def test_texts_that_cannot_be_aligned_are_an_error_naming_the_doc():
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_segmenter", config={"model": crf_model_config()})
    good = Example(nlp.make_doc("张三去上海"), Doc(nlp.vocab, words=["张三", "去", "上海"], spaces=[False] * 3))
    nlp.initialize(lambda: [good])
    bad = Example(nlp.make_doc("张三去北京"), Doc(nlp.vocab, words=["张三", "去", "上海"], spaces=[False] * 3))
    with pytest.raises(ValueError, match=r"\[crf_segmenter\].*'张三去上海'.*cannot be aligned"):
        pipe.get_loss([bad], pipe.model.predict([bad.predicted]))


def test_whitespace_tokens_are_decoded_outside(ner_nlp):
    pipe = ner_nlp.get_pipe("crf_tagger")
    texts = ["张三\u3000去上海", "张\u3000三去上\n海", "  张三  "]
    docs = [ner_nlp.make_doc(t) for t in texts]
    for doc, ids in zip(docs, pipe.predict(docs)):
        tags = [pipe.tags[i] for i in ids]
        assert is_valid("bio", tags)
        assert all(tag == "O" for tag, t in zip(tags, doc) if t.is_space)
    probs = pipe.predict_marginals(docs)
    for doc, p in zip(docs, probs):
        for t in doc:
            if t.is_space:
                assert p[t.i, 0] == pytest.approx(1.0)


# --- non-finite loss (reliability item 2) -----------------------------------------


def _params(pipe):
    return {
        (node.id, name): node.get_param(name).copy()
        for node in pipe.model.walk()
        for name in node.param_names
        if node.has_param(name)
    }


def _blow_up(pipe):
    """Emission weights so large that the scores overflow to infinity."""
    emissions = pipe.model.get_ref("emissions")
    W = emissions.get_param("crf_emission_W")
    emissions.set_param("crf_emission_W", numpy.where(W < 0, -3e38, 3e38).astype("float32"))


def _trained_ner(**config):
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_ner", config={"model": crf_model_config(), **config})
    examples = ner_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    nlp.update(examples, sgd=optimizer)
    return nlp, pipe, examples, optimizer


def test_a_nonfinite_loss_raises_naming_the_component_and_the_batch():
    nlp, pipe, examples, optimizer = _trained_ner()
    _blow_up(pipe)
    before = _params(pipe)
    with pytest.raises(
        ValueError, match=r"\[crf_ner\] the loss is (nan|inf).*4 docs starting with '我在北京工作'"
    ) as info:
        nlp.update(examples, sgd=optimizer)
    from spacy_crf.pipeline.load_checks import NonFiniteError

    assert isinstance(info.value, NonFiniteError) and "on_nonfinite" in str(info.value)
    after = _params(pipe)
    for key in before:
        numpy.testing.assert_array_equal(before[key], after[key], err_msg=str(key))


def test_on_nonfinite_skip_skips_the_batch_and_writes_nothing():
    nlp, pipe, examples, optimizer = _trained_ner(on_nonfinite="skip")
    assert pipe.cfg["on_nonfinite"] == "skip"
    W = pipe.model.get_ref("emissions").get_param("crf_emission_W").copy()
    _blow_up(pipe)
    before = _params(pipe)
    with pytest.warns(UserWarning, match=r"\[crf_ner\] the loss is .*'我在北京工作'.*batch skipped"):
        losses = nlp.update(examples, sgd=optimizer)
    assert losses["crf_ner"] == 0.0
    after = _params(pipe)
    for key in before:
        numpy.testing.assert_array_equal(before[key], after[key], err_msg=str(key))
    # nothing was accumulated either: the next good batch trains normally
    pipe.model.get_ref("emissions").set_param("crf_emission_W", W)
    losses = nlp.update(examples, sgd=optimizer)
    assert numpy.isfinite(losses["crf_ner"]) and losses["crf_ner"] > 0
    assert all(numpy.isfinite(v).all() for v in _params(pipe).values())


def test_a_nonfinite_parameter_gradient_is_caught_before_the_optimizer(monkeypatch):
    nlp, pipe, examples, optimizer = _trained_ner()
    from spacy_crf.ml import tagger_model as crf_model

    real = crf_model.crf_loss

    def nan_transition_grad(*args, **kwargs):
        loss, d_scores = real(*args, **kwargs)
        d_scores.d_params["crf_transitions"][0, 0] = numpy.nan
        return loss, d_scores

    monkeypatch.setattr(crf_model, "crf_loss", nan_transition_grad)
    before = _params(pipe)
    with pytest.raises(ValueError, match=r"\[crf_ner\] the gradient of 'crf_transitions' has 1 NaN"):
        nlp.update(examples, sgd=optimizer)
    after = _params(pipe)
    assert all(numpy.array_equal(before[k], after[k]) for k in before)


# --- entities already on the doc (reliability item 3) ------------------------------


def _ents(doc):
    return [(e.start_char, e.end_char, e.label_) for e in doc.ents]


@pytest.fixture(scope="module")
def bioes_nlp():
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_ner", name="ner", config={"model": crf_model_config()})
    examples = ner_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(40):
        nlp.update(examples, sgd=optimizer)
    assert _ents(nlp("张三去上海")) == [(0, 2, "PER"), (3, 5, "LOC")]
    return nlp


def test_preset_entities_are_kept_and_the_rest_is_decoded_around_them(bioes_nlp):
    nlp, pipe = bioes_nlp, bioes_nlp.get_pipe("ner")
    doc = nlp.make_doc("张三去上海")
    doc.set_ents([Span(doc, 2, 4, label="LOC")], default="missing")  # "去上", against the model
    doc = nlp(doc)
    assert (2, 4, "LOC") in _ents(doc) and (0, 2, "PER") in _ents(doc)
    ids = pipe.predict([doc])[0]
    assert [pipe.tags[i] for i in ids][2:4] == ["B-LOC", "E-LOC"]
    # a label the tagger does not know: kept, its tokens are outside for decoding
    doc = nlp.make_doc("张三去上海")
    doc.set_ents([Span(doc, 1, 3, label="ORG")], default="missing")
    doc = nlp(doc)
    assert (1, 3, "ORG") in _ents(doc)
    assert all(e.label_ == "ORG" or e.end <= 1 or e.start >= 3 for e in doc.ents)
    # blocked tokens stay blocked and are never part of a predicted entity
    doc = nlp.make_doc("张三去上海")
    doc.set_ents([], blocked=[Span(doc, 3, 5)], default="missing")
    doc = nlp(doc)
    assert _ents(doc) == [(0, 2, "PER")]
    assert [t.ent_iob_ for t in doc][3:] == ["B", "B"] and [t.ent_type for t in doc][3:] == [0, 0]


def test_an_entity_ruler_before_the_tagger_keeps_its_entities(bioes_nlp):
    nlp = spacy.blank("zh")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns(
        [{"label": "ORG", "pattern": "三去"}, {"label": "LOC", "pattern": "海"}, {"label": "PER", "pattern": "工作"}]
    )
    nlp.add_pipe("ner", source=bioes_nlp)
    texts = ["张三去上海", "李四住广州", "我在北京工作", "", "  ", "上海\u3000张三去北京"] * 2
    single = [nlp(t) for t in texts]
    assert {(1, 3, "ORG"), (4, 5, "LOC")} <= set(_ents(single[0]))
    assert _ents(single[1]) == [(0, 2, "PER"), (3, 5, "LOC")]  # the tagger still predicts: O is not forced
    assert (2, 4, "LOC") in _ents(single[2]) and (4, 6, "PER") in _ents(single[2])
    for batch_size in (1, 3, 50):
        assert [_ents(d) for d in nlp.pipe(texts, batch_size=batch_size)] == [_ents(d) for d in single]
    # marginals ignore the entities on the doc unless asked
    pipe = nlp.get_pipe("ner")
    free = pipe.predict_marginals([single[0]])[0]
    forced = pipe.predict_marginals([single[0]], respect_preset=True)[0]
    assert forced[1, 0] == pytest.approx(1.0) and forced[4, pipe.tags.index("S-LOC")] == pytest.approx(1.0)
    assert not numpy.allclose(free, forced)


# --- labels added before initialize (reliability item 4) ---------------------------


def test_labels_added_before_initialize_are_kept():
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_ner", config={"model": crf_model_config()})
    pipe.add_label("ORG")
    nlp.initialize(lambda: ner_examples(nlp))
    assert pipe.labels == ("LOC", "ORG", "PER") and len(pipe.tags) == 13
    assert pipe.model.get_ref("crf").get_param("crf_transitions").shape == (13, 13)
    # explicit labels from [initialize.components] still win, as in spaCy
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_ner", config={"model": crf_model_config()})
    pipe.add_label("ORG")
    nlp.config["initialize"]["components"]["crf_ner"] = {"labels": ["PER", "LOC"]}
    nlp.initialize(lambda: ner_examples(nlp))
    assert pipe.labels == ("LOC", "PER")


# --- broken model directories (reliability item 7) ---------------------------------


def _break(path, name, fix):
    import json

    cfg_path = path / name / "cfg"
    cfg = json.loads(cfg_path.read_text(encoding="utf8"))
    fix(cfg)
    cfg_path.write_text(json.dumps(cfg), encoding="utf8")


@pytest.mark.parametrize(
    "what,fix,message",
    [
        ("labels missing", lambda cfg: cfg.pop("labels"), "its cfg has no 'labels'"),
        (
            "one label more",
            lambda cfg: cfg["labels"].append("ORG"),
            r"score 5 tags \(output width\) but the labels give 7",
        ),
        ("one label less", lambda cfg: cfg["labels"].pop(), r"score 5 tags .* labels give 3.*transition matrix is 5x5"),
        ("other scheme", lambda cfg: cfg.update(scheme="bioes"), r"cfg has scheme 'bioes'.* made with scheme 'bio'"),
    ],
)
def test_a_cfg_that_does_not_match_the_weights_fails_at_load_time(ner_nlp, tmp_path, what, fix, message):
    ner_nlp.to_disk(tmp_path / "model")
    _break(tmp_path / "model", "crf_tagger", fix)
    with pytest.raises(ValueError, match=r"\[crf_tagger\] cannot load directory '.*model.crf_tagger'.*" + message):
        spacy.load(tmp_path / "model")


def test_a_missing_cfg_or_weights_file_fails_at_load_time(ner_nlp, tmp_path):
    ner_nlp.to_disk(tmp_path / "model")
    (tmp_path / "model" / "crf_tagger" / "cfg").unlink()
    with pytest.raises(ValueError, match=r"cannot load directory '.*crf_tagger': its 'cfg' file is missing"):
        spacy.load(tmp_path / "model")
    ner_nlp.to_disk(tmp_path / "model2")
    (tmp_path / "model2" / "crf_tagger" / "model").unlink()
    with pytest.raises(ValueError, match=r"its 'model' file \(the weights\) is missing"):
        spacy.load(tmp_path / "model2")
    ner_nlp.to_disk(tmp_path / "model3")
    (tmp_path / "model3" / "crf_tagger" / "cfg").write_text('{"scheme": "bio", "labels": [', encoding="utf8")
    with pytest.raises(ValueError, match=r"\[crf_tagger\] cannot read '.*model3.crf_tagger.cfg'"):
        spacy.load(tmp_path / "model3")
    import srsly

    data = srsly.msgpack_loads(ner_nlp.get_pipe("crf_tagger").to_bytes())
    del data["cfg"]
    other = spacy.blank("zh").add_pipe("crf_tagger", config={"model": crf_model_config()})
    with pytest.raises(ValueError, match=r"cannot load from bytes: no 'cfg' in the data"):
        other.from_bytes(srsly.msgpack_dumps(data))


def test_truncated_weights_name_the_file(ner_nlp, tmp_path):
    ner_nlp.to_disk(tmp_path / "model")
    weights = tmp_path / "model" / "crf_tagger" / "model"
    weights.write_bytes(weights.read_bytes()[: len(weights.read_bytes()) // 2])
    with pytest.raises(
        ValueError, match=r"\[crf_tagger\] cannot load the weights file '.*crf_tagger.model': it is truncated"
    ):
        spacy.load(tmp_path / "model")
    data = ner_nlp.get_pipe("crf_tagger").to_bytes()
    other = spacy.blank("zh").add_pipe("crf_tagger", config={"model": crf_model_config()})
    with pytest.raises(ValueError, match=r"\[crf_tagger\] cannot load from bytes"):
        other.from_bytes(data[: len(data) // 2])


def test_weights_damaged_after_saving_fail_at_load_time(ner_nlp, tmp_path):
    pipe = ner_nlp.get_pipe("crf_tagger")
    transitions = pipe.model.get_ref("crf").get_param("crf_transitions")
    ner_nlp.to_disk(tmp_path / "model")
    weights = tmp_path / "model" / "crf_tagger" / "model"
    assert (weights.parent / "model.sha256").read_text(encoding="utf8").strip()
    # one byte of one transition score changed: still a finite number, the file still parses
    data = bytearray(weights.read_bytes())
    at = data.find(transitions.tobytes())
    assert at > 0
    data[at + 1] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(
        ValueError, match=r"cannot load the weights file '.*crf_tagger.model': its bytes do not match the SHA-256"
    ) as err:
        spacy.load(tmp_path / "model")
    # the one innocent cause is named too: an older writer that left the digest stale
    assert "saved into this directory over a newer save" in str(err.value) and "delete that file" in str(err.value)
    # the same through bytes
    import srsly

    msg = srsly.msgpack_loads(pipe.to_bytes())
    msg["model"] = bytes(data)
    other = spacy.blank("zh").add_pipe("crf_tagger", config={"model": crf_model_config()})
    with pytest.raises(ValueError, match=r"cannot load the weights in the bytes: its bytes do not match"):
        other.from_bytes(srsly.msgpack_dumps(msg))
    # a save from before digests (no file) loads as it did
    (weights.parent / "model.sha256").unlink()
    ner_nlp.get_pipe("crf_tagger").to_disk(weights.parent)
    (weights.parent / "model.sha256").unlink()
    assert spacy.load(tmp_path / "model").get_pipe("crf_tagger").labels == pipe.labels


def test_nonfinite_weights_fail_at_load_time(ner_nlp, tmp_path):
    pipe = ner_nlp.get_pipe("crf_tagger")
    crf = pipe.model.get_ref("crf")
    transitions = crf.get_param("crf_transitions").copy()
    broken = transitions.copy()
    broken[1, 2] = numpy.nan
    crf.set_param("crf_transitions", broken)
    try:
        ner_nlp.to_disk(tmp_path / "model")
        data = pipe.to_bytes()
    finally:
        crf.set_param("crf_transitions", transitions)
    with pytest.raises(ValueError, match=r"cannot load directory .*'crf_transitions' of layer 'crf' has 1 NaN"):
        spacy.load(tmp_path / "model")
    other = spacy.blank("zh").add_pipe("crf_tagger", config={"model": crf_model_config()})
    with pytest.raises(ValueError, match=r"cannot load bytes: .*'crf_transitions'.* 1 NaN"):
        other.from_bytes(data)


# --- not initialized (reliability item 11) -----------------------------------------


def test_transition_table_before_initialize_says_so():
    pipe = spacy.blank("zh").add_pipe("crf_ner", config={"model": crf_model_config()})
    with pytest.raises(ValueError, match=r"\[crf_ner\] transition_table: the component is not initialized"):
        pipe.transition_table()


def test_skip_with_a_shared_encoder_upstream_keeps_every_weight_finite():
    """A listener upstream: the skipped tagger passes no gradient to the shared
    tok2vec, so nothing non-finite reaches the encoder either."""
    from _configs import pipeline_config
    from thinc.api import Config

    text = pipeline_config([("crf_ner", "crf_ner", "bioes")], encoder="tok2vec")
    text = text.replace('factory = "crf_ner"\n', 'factory = "crf_ner"\non_nonfinite = "skip"\n')
    nlp = spacy.util.load_model_from_config(Config().from_str(text), auto_fill=True, validate=True)
    examples = ner_examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    nlp.update(examples, sgd=optimizer)
    pipe = nlp.get_pipe("crf_ner")
    assert pipe.cfg["on_nonfinite"] == "skip"
    _blow_up(pipe)
    before = _params(pipe)
    with pytest.warns(UserWarning, match=r"\[crf_ner\] the loss is .*batch skipped"):
        nlp.update(examples, sgd=optimizer)
    after = _params(pipe)
    assert all(numpy.array_equal(before[k], after[k]) for k in before)
    tok2vec = nlp.get_pipe("tok2vec").model
    assert all(
        numpy.isfinite(node.get_param(name)).all()
        for node in tok2vec.walk()
        for name in node.param_names
        if node.has_param(name)
    )


# --- label order stored with the weights --------------------------------------------


def test_labels_other_than_the_weights_were_saved_with_fail_at_load_time(ner_nlp, tmp_path):
    """The tags come from the sorted labels, so a cfg listing the same labels
    in another order maps them as before; a cfg with a renamed label shifts
    the tags (PER -> ZZZ moves it last) and is refused."""
    labels = list(ner_nlp.get_pipe("crf_tagger").labels)
    assert labels == ["LOC", "PER"]
    ner_nlp.to_disk(tmp_path / "model")
    _break(tmp_path / "model", "crf_tagger", lambda cfg: cfg.update(labels=labels[::-1]))
    assert [(e.text, e.label_) for e in spacy.load(tmp_path / "model")("张三去上海").ents] == [
        ("张三", "PER"),
        ("上海", "LOC"),
    ]
    _break(tmp_path / "model", "crf_tagger", lambda cfg: cfg.update(labels=["AAA", "LOC"]))
    with pytest.raises(
        ValueError,
        match=r"\[crf_tagger\] cannot load directory '.*model.crf_tagger': output 1 of the "
        r"weights is 'B-LOC' but 'B-AAA' by the cfg's labels \(other labels than",
    ):
        spacy.load(tmp_path / "model")
    import srsly

    data = srsly.msgpack_loads(ner_nlp.get_pipe("crf_tagger").to_bytes())
    data["cfg"] = srsly.json_dumps({**srsly.json_loads(data["cfg"]), "labels": ["LOC", "ORG"]})
    other = spacy.blank("zh").add_pipe("crf_tagger", config={"model": crf_model_config()})
    with pytest.raises(
        ValueError, match=r"\[crf_tagger\] cannot load bytes: output 3 of the weights is 'B-PER' but 'B-ORG'"
    ):
        other.from_bytes(srsly.msgpack_dumps(data))


def test_a_save_without_the_tag_order_loads_with_a_warning(ner_nlp, tmp_path):
    from spacy_crf.pipeline.load_checks import OUTPUTS_ATTR

    ner_nlp.to_disk(tmp_path / "model")
    model = ner_nlp.get_pipe("crf_tagger").model
    saved = model.attrs.pop(OUTPUTS_ATTR)
    try:
        (tmp_path / "model" / "crf_tagger" / "model").write_bytes(model.to_bytes())  # as an older version wrote it
        (tmp_path / "model" / "crf_tagger" / "model.sha256").unlink()  # (with no digest)
    finally:
        model.attrs[OUTPUTS_ATTR] = saved
    with pytest.warns(UserWarning, match=r"\[crf_tagger\] directory .*saved without the order of their outputs"):
        loaded = spacy.load(tmp_path / "model")
    assert [(e.text, e.label_) for e in loaded("张三去上海").ents] == [
        (e.text, e.label_) for e in ner_nlp("张三去上海").ents
    ]


def test_a_diverging_crf_loss_warns_once():
    import warnings

    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_tagger", config={"scheme": "bio", "model": crf_model_config()})
    examples = ner_examples(nlp)
    nlp.initialize(lambda: examples)
    optimizer = grouped_adam(10.0, crf_lr_multiplier=100.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(8):
            nlp.update(examples, sgd=optimizer)
    diverging = [str(w.message) for w in caught if "diverging" in str(w.message)]
    assert len(diverging) == 1 and diverging[0].startswith("[crf_tagger] the training loss is diverging")


def test_decode_from_given_scores_is_predict_and_takes_an_extra_bias(ner_nlp):
    pipe = ner_nlp.get_pipe("crf_tagger")
    docs = [ner_nlp.make_doc(t) for t in ["张三去北京工作", "今天李四在上海"]]
    scores = pipe.emission_scores(docs)
    assert all((a == b).all() for a, b in zip(pipe.decode(docs, scores), pipe.predict(docs)))
    outside = pipe.tags.index("O")
    biased = [s.copy() for s in scores]
    for s in biased:
        s[:, outside] += 1e4  # a prior strong enough to win everywhere
    assert all((ids == outside).all() for ids in pipe.decode(docs, biased))
    with pytest.raises(ValueError, match=r"decode: expected one \[len\(doc\), \d+\] score array per doc"):
        pipe.decode(docs, scores[:1])
