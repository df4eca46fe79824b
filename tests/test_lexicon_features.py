"""Lexicon features (spacy_crf.LexiconFeatures.v1, CRFTagger.v1's lexicon_width):
the features against their definition, the projection's gradient and
training, the dictionary saved in the weights, the switch, and the reader."""

import json
import pickle
import random
from pathlib import Path

import numpy
import pytest
import spacy
from _configs import NER_DATA, SMALL_TOK2VEC, WORDS, crf_model_config, joint_recipe_overrides
from conftest import load_script, segmentation_examples
from spacy.tokens import Doc
from spacy.training import Example

from spacy_crf.ml.lexicon_features import (
    N_FEATURES,
    NOT_INITIALIZED,
    POSITIONS,
    PROJECTION_B,
    PROJECTION_W,
    LexiconFeatures,
    lexicon_features,
)
from spacy_crf.ml.lexicon_match import TAG_CLASSES, TaggedLexicon, tag_class
from spacy_crf.ml.tagger_model import build_crf_tagger
from spacy_crf.pipeline.lexicon import read_tagged_lexicon
from spacy_crf.training.optimizers import grouped_adam

ROOT = Path(__file__).resolve().parent.parent
DICTIONARY = "张三 50 nr\n上海 900 ns\n上海市 40 ns\n北京 800 ns\n北京大学 30 nt\n工作 500 vn\n今天 400 t\n天气 300 n\n去 600 v\n市 200 n\n海 100 n\n"
TAGS = ["nr", "nrt", "ns", "nt", "nz", "n", "v", ""]


def _dictionary(tmp_path) -> Path:
    path = tmp_path / "dict.txt"
    path.write_text(DICTIONARY, encoding="utf8")
    return path


def _brute_force(lexicon: TaggedLexicon, doc: Doc) -> numpy.ndarray:
    # the module doc's definition, one token span at a time (small docs only)
    table = {w: (f, c) for w, f, c in zip(lexicon.word_list, lexicon.freqs, lexicon.classes)}
    counts = numpy.zeros((len(doc), len(POSITIONS), len(TAG_CLASSES)))
    for start in range(len(doc)):
        for end in range(start + 1, len(doc) + 1):
            span = doc[start:end]
            if any(t.is_space for t in span) or any(t.whitespace_ for t in span[:-1]):
                break
            if span.text not in table:
                continue
            freq, cls = table[span.text]
            for i in range(start, end):
                p = "single" if end - start == 1 else "begin" if i == start else "end" if i == end - 1 else "middle"
                counts[i, POSITIONS.index(p), cls] += 1 + numpy.log1p(float(freq))
    counts = counts.reshape(len(doc), N_FEATURES)
    total = counts.sum(axis=1, keepdims=True)
    return counts / numpy.where(total > 0, total, 1)


def test_features_equal_the_brute_force_definition_on_random_docs():
    rng = random.Random(0)
    chars = "上海市长江大桥一二"
    words = {"".join(rng.choice(chars) for _ in range(rng.randint(1, 4))) for _ in range(40)}
    lexicon = TaggedLexicon((w, rng.choice([0, 1, 7, 1e6]), rng.choice(TAGS)) for w in sorted(words))
    vocab = spacy.blank("zh").vocab
    docs = []
    for _ in range(120):
        tokens = [
            "".join(rng.choice(chars) for _ in range(rng.choice([1, 1, 1, 2, 3]))) for _ in range(rng.randint(0, 20))
        ]
        tokens = [t if rng.random() > 0.05 else " " for t in tokens]  # space tokens
        docs.append(Doc(vocab, words=tokens, spaces=[rng.random() < 0.1 for _ in tokens]))
    found = lexicon_features(lexicon, docs)  # one batch: every doc's tokens, in order
    assert found.dtype == numpy.float32 and found.shape == (sum(len(d) for d in docs), N_FEATURES)
    expected = numpy.concatenate([_brute_force(lexicon, d) for d in docs])
    numpy.testing.assert_allclose(found, expected, rtol=1e-6, atol=1e-7)
    for doc in docs[:20]:  # and doc by doc
        numpy.testing.assert_allclose(lexicon_features(lexicon, [doc]), _brute_force(lexicon, doc), rtol=1e-6)


def test_multi_character_tokens_match_on_token_boundaries_by_position_and_class():
    lexicon = TaggedLexicon([("上海", 900, "ns"), ("上海市", 40, "ns"), ("海", 1, "n"), ("市", 0, "n")])
    doc = Doc(spacy.blank("zh").vocab, words=["上海", "市"], spaces=[False, False])
    F = lexicon_features(lexicon, [doc]).reshape(2, len(POSITIONS), len(TAG_CLASSES))
    place, other = TAG_CLASSES.index("place"), TAG_CLASSES.index("other")
    z = {w: 1 + numpy.log1p(f) for w, f in [("上海", 900), ("上海市", 40), ("市", 0)]}
    # 上海: one token, so "single"; 上海市 begins there; 海 is inside a token: no match
    assert F[0, POSITIONS.index("single"), place] == pytest.approx(z["上海"] / (z["上海"] + z["上海市"]))
    assert F[0, POSITIONS.index("begin"), place] == pytest.approx(z["上海市"] / (z["上海"] + z["上海市"]))
    assert F[1, POSITIONS.index("end"), place] == pytest.approx(z["上海市"] / (z["上海市"] + z["市"]))
    assert F[1, POSITIONS.index("single"), other] == pytest.approx(z["市"] / (z["上海市"] + z["市"]))
    assert numpy.count_nonzero(F) == 4 and F.sum() == pytest.approx(2.0)


def test_the_last_batch_is_reused_only_for_the_same_docs_and_tokens():
    lexicon = TaggedLexicon([("上海", 9, "ns"), ("上海市", 3, "ns"), ("市", 1, "n")])
    nlp = spacy.blank("zh")
    docs = [nlp.make_doc("去上海市"), nlp.make_doc("上海")]
    first = lexicon_features(lexicon, docs)
    assert lexicon_features(lexicon, docs) is first  # the second head of a joint pipeline
    # the first head does every sub-batch of a batch before the second starts
    other = lexicon_features(lexicon, [nlp.make_doc("市")])
    assert lexicon_features(lexicon, docs) is first and lexicon_features(lexicon, [nlp.make_doc("市")]) is not other
    assert not first.flags.writeable
    again = lexicon_features(lexicon, [nlp.make_doc("去上海市"), docs[1]])  # equal text, another doc
    assert again is not first
    numpy.testing.assert_array_equal(again, first)
    for doc, (start, end) in ((docs[0], (1, 3)), (docs[1], (0, 2))):
        with doc.retokenize() as retokenizer:  # the same doc objects, other tokens
            retokenizer.merge(doc[start:end])
        found = lexicon_features(lexicon, docs)
        numpy.testing.assert_allclose(found, numpy.concatenate([_brute_force(lexicon, d) for d in docs]), rtol=1e-6)
    assert found.shape == (3 + 1, N_FEATURES)


def test_tag_classes_follow_the_jieba_tag_prefixes():
    assert [TAG_CLASSES[tag_class(t)] for t in ["nr", "nrt", "nrfg", "ns", "nt", "nz", "n", "ng", "v", ""]] == [
        "person",
        "person",
        "person",
        "place",
        "organisation",
        "other_name",
        "other",
        "other",
        "other",
        "other",
    ]


def test_projection_gradient_matches_finite_differences():
    lexicon = TaggedLexicon([("上海", 9, "ns"), ("海市", 3, "n"), ("上", 1, "n"), ("张三", 5, "nr")])
    layer = LexiconFeatures(width=3)
    layer.attrs["lexicon"] = lexicon
    docs = [spacy.blank("zh").make_doc(t) for t in ["张三去上海市", "上海"]]
    layer.initialize(X=docs)
    layer.set_param(PROJECTION_B, numpy.asarray([0.1, -0.2, 0.3], dtype="f"))
    R = [numpy.random.RandomState(i).normal(size=(len(d), 3)).astype("f") for i, d in enumerate(docs)]

    def loss() -> float:
        return float(sum((h.astype("float64") * r).sum() for h, r in zip(layer.predict(docs), R)))

    _, backprop = layer.begin_update(docs)
    assert backprop(R) == []
    for name in (PROJECTION_W, PROJECTION_B):
        param = layer.get_param(name)
        analytic, numeric = layer.get_grad(name).ravel(), numpy.zeros(param.size)
        for k in range(param.size):
            for sign in (1, -1):
                shifted = param.copy()
                shifted.ravel()[k] += sign * 1e-2
                layer.set_param(name, shifted)
                numeric[k] += sign * loss() / 2e-2
            layer.set_param(name, param)
        numpy.testing.assert_allclose(analytic, numeric, rtol=2e-2, atol=2e-3)
    assert numpy.abs(layer.get_grad(PROJECTION_W)).sum() > 0


def test_an_uninitialized_layer_says_so_at_predict():
    layer = LexiconFeatures(width=4)
    with pytest.raises(ValueError, match="has no dictionary: it was never initialized") as err:
        layer.predict([spacy.blank("zh").make_doc("上海")])
    assert str(err.value) == NOT_INITIALIZED and "\n" not in NOT_INITIALIZED
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="width must be a whole number >= 1"):
            LexiconFeatures(width=bad)


# --- in a pipeline ------------------------------------------------------------------


def _pipeline(dict_path, width: int = 8):
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_segmenter", name="segmenter", config={"model": crf_model_config(lexicon_width=width)})
    nlp.add_pipe("crf_ner", name="ner", config={"model": crf_model_config(lexicon_width=width)})
    for name in ("segmenter", "ner"):
        nlp.config["initialize"]["components"][name] = {
            "lexicon_features": {"@readers": "spacy_crf.read_tagged_lexicon.v1", "path": str(dict_path)}
        }
    ner_examples = [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    return nlp, segmentation_examples(nlp, WORDS) + ner_examples


def test_both_heads_train_with_the_features_and_their_projection_moves(tmp_path):
    nlp, examples = _pipeline(_dictionary(tmp_path))
    optimizer = nlp.initialize(lambda: examples, sgd=grouped_adam(1e-2, crf_lr_multiplier=10))
    layers = {name: nlp.get_pipe(name).model.get_ref("lexicon_features") for name in ("segmenter", "ner")}
    before = {name: layer.get_param(PROJECTION_W).copy() for name, layer in layers.items()}
    for _ in range(3):
        losses = nlp.update(examples, sgd=optimizer)
    assert all(numpy.isfinite(v) for v in losses.values())
    for name, layer in layers.items():
        assert not numpy.allclose(layer.get_param(PROJECTION_W), before[name]), name
        assert len(layer.attrs["lexicon"]) == len(DICTIONARY.splitlines())


def test_the_projection_learns_with_the_emissions():
    optimizer = grouped_adam(1e-3, crf_lr_multiplier=100, crf_includes_emissions=True)
    assert optimizer.group_of(PROJECTION_W) == optimizer.group_of("crf_emission_W") == ("crf", 100.0)
    optimizer = grouped_adam(1e-3, crf_lr_multiplier=100)
    assert optimizer.group_of(PROJECTION_B) == optimizer.group_of("crf_emission_b") == (None, 1.0)


def _predictions(nlp, texts):
    docs = list(nlp.pipe(texts))
    return [([s.text for s in d.spans["words"]], [(e.text, e.label_) for e in d.ents]) for d in docs], [
        nlp.get_pipe("ner").predict_marginals([d])[0] for d in docs
    ]


def test_the_dictionary_is_saved_with_the_pipeline(tmp_path):
    dict_path = _dictionary(tmp_path)
    nlp, examples = _pipeline(dict_path)
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(3):
        nlp.update(examples, sgd=optimizer)
    texts = ["张三去上海市工作", "今天北京大学天气好", "上海"]
    expected, marginals = _predictions(nlp, texts)
    nlp.to_disk(tmp_path / "pipeline")
    data = nlp.to_bytes()
    dict_path.unlink()  # loading needs no dictionary file
    loaded = spacy.load(tmp_path / "pipeline")
    again = spacy.blank("zh").from_config(nlp.config).from_bytes(data)
    for other in (loaded, again):
        found, found_marginals = _predictions(other, texts)
        assert found == expected
        for a, b in zip(found_marginals, marginals):
            numpy.testing.assert_array_equal(a, b)
    lexicon = loaded.get_pipe("segmenter").model.get_ref("lexicon_features").attrs["lexicon"]
    assert lexicon is loaded.get_pipe("ner").model.get_ref("lexicon_features").attrs["lexicon"]  # shared
    copy = pickle.loads(pickle.dumps(lexicon))  # worker processes
    doc = nlp.make_doc("张三去上海市")
    numpy.testing.assert_array_equal(lexicon_features(copy, [doc]), lexicon_features(lexicon, [doc]))


def test_the_switch_off_is_the_old_architecture(tmp_path):
    def names(model):
        return [node.name for node in model.walk()]

    old = build_crf_tagger(spacy.registry.resolve({"t": SMALL_TOK2VEC})["t"])
    off = build_crf_tagger(spacy.registry.resolve({"t": SMALL_TOK2VEC})["t"], lexicon_width=0)
    assert names(off) == names(old) and not off.has_ref("lexicon_features")
    assert sorted(p for n in off.walk() for p in n.param_names) == sorted(p for n in old.walk() for p in n.param_names)
    # a pipeline saved from a config without the setting (every earlier save) loads
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_segmenter", name="segmenter", config={"model": crf_model_config()})
    examples = segmentation_examples(nlp, WORDS)
    nlp.initialize(lambda: examples)
    del nlp.config["components"]["segmenter"]["model"]["lexicon_width"]
    nlp.to_disk(tmp_path / "old")
    assert (
        "lexicon_width"
        not in spacy.util.load_config(tmp_path / "old" / "config.cfg")["components"]["segmenter"]["model"]
    )
    loaded = spacy.load(tmp_path / "old")
    assert loaded.config["components"]["segmenter"]["model"]["lexicon_width"] == 0  # the default fills in
    a, b = loaded("张三去上海"), nlp("张三去上海")
    assert [s.text for s in a.spans["words"]] == [s.text for s in b.spans["words"]]


def test_a_bad_lexicon_width_is_refused_naming_the_setting():
    tok2vec = spacy.registry.resolve({"t": SMALL_TOK2VEC})["t"]
    for bad in (-1, 1.5, True, "8"):
        with pytest.raises(ValueError, match="CRFTagger.v1: lexicon_width must be a whole number >= 0"):
            build_crf_tagger(tok2vec, lexicon_width=bad)


def test_a_saved_dictionary_that_does_not_fit_is_refused():
    saved = TaggedLexicon([("上海", 9, "ns"), ("去", 1, "v")]).to_dict()
    assert TaggedLexicon.from_dict(saved).word_list == ("上海", "去")
    with pytest.raises(ValueError, match="saved with the tag classes .* this version has"):
        TaggedLexicon.from_dict({**saved, "class_names": ["person", "other"]})
    with pytest.raises(ValueError, match="do not line up"):
        TaggedLexicon.from_dict({**saved, "freqs": saved["freqs"][:1]})
    with pytest.raises(ValueError, match="bad frequency or tag class"):
        TaggedLexicon.from_dict({**saved, "classes": numpy.asarray([0, 9], dtype="uint8")})


def test_initialize_needs_a_dictionary_exactly_when_the_model_has_the_features(tmp_path):
    nlp, examples = _pipeline(_dictionary(tmp_path))
    nlp.config["initialize"]["components"]["ner"] = {}
    with pytest.raises(ValueError, match=r"\[ner\] the model has lexicon features \(lexicon_width = 8\) but"):
        nlp.initialize(lambda: examples)
    with pytest.raises(ValueError, match=r"\[ner\] .*not initialized"):
        nlp.get_pipe("ner").predict([nlp.make_doc("上海")])
    nlp, examples = _pipeline(_dictionary(tmp_path), width=0)
    with pytest.raises(ValueError, match=r"\[segmenter\] initialize got a lexicon_features dictionary, but"):
        nlp.initialize(lambda: examples)


# --- the dictionary file ---------------------------------------------------------------


def test_read_tagged_lexicon_reads_word_freq_tag_lines(tmp_path):
    path = tmp_path / "dict.txt"
    path.write_text("\ufeff上海 9 ns\n\n北京大学 nt\n张三\n上海 3 nr\n去 1.5\n", encoding="utf8")
    lexicon = read_tagged_lexicon(path)
    table = {w: (float(f), TAG_CLASSES[c]) for w, f, c in zip(lexicon.word_list, lexicon.freqs, lexicon.classes)}
    assert table == {
        "上海": (3.0, "person"),  # a later line replaces an earlier one
        "北京大学": (0.0, "organisation"),
        "张三": (0.0, "other"),
        "去": (1.5, "other"),
    }
    assert read_tagged_lexicon(None) is None


@pytest.mark.parametrize(
    "text,message",
    [
        ("上海 9 ns\n北京 9 ns x\n", r"line 2: 4 fields; expected `word \[frequency\] \[tag\]`"),
        ("上海 9 ns\n北京 -3 ns\n", r"line 2: the frequency '-3' must be a finite number >= 0"),
        ("上海 nine ns\n", r"line 1: the frequency 'nine' is not a number"),
        ("上海 1e999\n", r"line 1: the frequency '1e999' must be a finite number"),
        ("上海\n" + "甲" * 101 + "\n", r"line 2: the word has 101 characters"),
        ("\n \n", r"no words"),
    ],
)
def test_a_bad_dictionary_file_is_refused_naming_the_line(tmp_path, text, message):
    path = tmp_path / "bad.txt"
    path.write_text(text, encoding="utf8")
    with pytest.raises(ValueError, match=r"lexicon '.*bad.txt'(, )?.*" + message) as err:
        read_tagged_lexicon(path)
    assert "\n" not in str(err.value)


def test_a_dictionary_file_that_is_not_utf8_or_missing_is_refused(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes("上海 3 ns\n".encode("utf8") + b"\xff\xfe 3 n\n")
    with pytest.raises(ValueError, match=r"bad.txt', line 2: not UTF-8"):
        read_tagged_lexicon(path)
    with pytest.raises(ValueError, match=r"missing.txt': no such file"):
        read_tagged_lexicon(tmp_path / "missing.txt")


def test_jiebas_dictionary_reads_whole():
    jieba = pytest.importorskip("jieba")
    lexicon = read_tagged_lexicon(Path(jieba.__file__).parent / "dict.txt")
    assert len(lexicon) > 300_000
    index = lexicon.word_list.index("北京大学")
    assert TAG_CLASSES[lexicon.classes[index]] == "organisation"


def test_the_benchmark_reports_the_share_of_the_features(tmp_path, capsys, monkeypatch):
    texts = tmp_path / "texts.txt"
    texts.write_text("张三  去  上海市\n\n今天  北京  天气  好\n", encoding="utf8")
    script = load_script(ROOT / "scripts" / "bench_lexicon_features.py")
    argv = [str(texts), "--dictionary", str(_dictionary(tmp_path)), "--layers", "1", "--hidden", "32"]
    argv += ["--heads", "2", "--width", "4", "--repeats", "2", "--out", str(tmp_path / "bench.json")]
    monkeypatch.setattr("sys.argv", ["bench_lexicon_features.py"] + argv)
    script.main()
    out = capsys.readouterr().out
    assert "2 texts, 13 chars" in out and "lexicon features (both heads):" in out and "target <= 5 %" in out
    record = json.loads((tmp_path / "bench.json").read_text(encoding="utf8"))
    assert len(record["passes"]) == 2
    assert all(0 < p["lexicon_features_s"] < p["pipeline_s"] for p in record["passes"])


# --- configs/joint.cfg switched on by overrides ------------------------------------------


def test_the_joint_config_trains_the_features_at_the_width_an_override_gives(tiny_bert_dir, tiny_tagger_dir, tmp_path):
    from spacy.cli.train import train

    overrides = {
        **joint_recipe_overrides(tmp_path, tiny_bert_dir, _dictionary(tmp_path), tiny_tagger_dir),
        "components.segmenter.model.lexicon_width": 8,
        "components.crf_ner.model.lexicon_width": 8,
    }
    train(ROOT / "configs" / "joint.cfg", tmp_path / "out", overrides=overrides)
    trained = spacy.load(tmp_path / "out" / "model-last")
    for name in ("segmenter", "crf_ner"):
        assert trained.config["components"][name]["model"]["lexicon_width"] == 8
        assert len(trained.get_pipe(name).model.get_ref("lexicon_features").attrs["lexicon"]) == 11
    assert trained("张三去上海").text == "张三去上海"
    shipped = spacy.util.load_config(ROOT / "configs" / "joint.cfg")
    assert shipped["components"]["segmenter"]["model"]["lexicon_width"] == 32  # the recipe's (the ablation's)
    assert shipped["components"]["crf_ner"]["model"]["lexicon_width"] == 32
    assert shipped["paths"]["lexicon_features"] is None  # a run must name its dictionary
    assert shipped["paths"]["char_tagger"] is None  # and its tagger
    for name in ("segmenter", "crf_ner"):  # the recipe's (the tagger ablation's)
        assert shipped["components"][name]["model"]["tagger_features"]["outputs"] == ["marginals"]
        assert trained.get_pipe(name).model.get_ref("tagger_features").attrs["char_tagger"].meta["name"] == "tiny"


def test_the_prior_reads_its_occurrences_from_the_features_dictionary_when_it_holds_every_word(monkeypatch):
    """A segmenter's prior over a subset of the features' dictionary takes
    its occurrences from that dictionary's matches (no second automaton):
    the same biases as its own matching; a prior with a word the dictionary
    lacks matches on its own."""
    from spacy_crf.pipeline.lexicon import Lexicon

    entries = [(w, 5, "n") for w in ["北京", "北京大学", "大学", "大学生", "学生", "上海", "海", "张三", "三"]]
    source = TaggedLexicon(entries)
    nlp = spacy.blank("zh")
    rng = random.Random(5)
    texts = ["".join(rng.choice("北京大学生上海张三 a") for _ in range(rng.randint(0, 30))) for _ in range(60)]
    tags = ["B", "M", "E", "S"]
    for words, derived in ((["北京", "北京大学", "大学生", "张三"], True), (["北京", "学生会"], False)):
        prior = Lexicon(words)
        docs = [nlp.make_doc(t) for t in texts]
        own = prior.emission_biases(docs, tags, 0.7)
        if derived:  # the prior's own automaton is not used
            monkeypatch.setattr(prior, "match_arrays", lambda *a, **k: pytest.fail("matched twice"))
        shared = prior.emission_biases(docs, tags, 0.7, source=source)
        assert all(numpy.array_equal(a, b) for a, b in zip(own, shared)), words
        monkeypatch.undo()
    # the dictionary's matches are kept for the batch, read-only
    first = source.batch_matches(docs)
    assert source.batch_matches(docs) is first and not first[0].flags.writeable
