"""The compiled kernels: built, and the same to the bit as the pure-Python
paths they replace (the numpy Viterbi search, the pyahocorasick automaton)."""

import random

import numpy
import pytest
import spacy
from test_viterbi_numpy import _case

from spacy_crf.ml import kernels, lexicon_features, lexicon_match, viterbi_numpy
from spacy_crf.ml.lexicon_match import TaggedLexicon, WordLexicon


def test_the_kernels_are_built():
    # pip builds them at install; without them prediction falls back to the
    # pure-Python paths, correct but slower, and the comparisons below
    # would compare those paths with themselves.
    assert kernels.built() == {"viterbi": True, "nbest": True, "partition": True, "word_trie": True, "pooling": True}


def test_the_environment_switch_turns_the_kernels_off(monkeypatch):
    assert kernels.enabled()
    monkeypatch.setenv(kernels.PURE_PYTHON, "1")
    assert not kernels.enabled()
    monkeypatch.setenv(kernels.PURE_PYTHON, "0")
    assert kernels.enabled()


@pytest.mark.parametrize("seed", range(6))
def test_compiled_decode_gives_the_numpy_paths_and_scores(seed):
    # Paths and best scores to the bit, on many ties, from each doc's own rows
    # of one flat array (the tagger's layout), against the padded numpy search.
    rng = numpy.random.default_rng(100 + seed)
    num_tags = int(rng.integers(1, 14))
    scores, transitions, start, end, constraints, _ = _case(rng, num_tags, 25, ties=seed % 2 == 0)
    transitions = viterbi_numpy._allowed(transitions, constraints[0])
    start, end = viterbi_numpy._allowed(start, constraints[1]), viterbi_numpy._allowed(end, constraints[2])
    lengths = numpy.array([len(s) for s in scores])
    flat = numpy.concatenate(scores)
    flat.flags.writeable = False  # the tagger's arrays are read-only views
    offsets = numpy.concatenate([[0], numpy.cumsum(lengths)]).astype("int64")
    paths, best = kernels.decode_flat(flat, offsets, transitions, start, end, None)
    T = int(lengths.max())
    emissions = numpy.zeros((T, num_tags, len(scores)), dtype="float32")
    for i, s in enumerate(scores):
        emissions[: len(s), :, i] = s
    expected_paths, expected_best = viterbi_numpy.best_paths(emissions, lengths, transitions, start, end)
    numpy.testing.assert_array_equal(best, expected_best)
    for i, n in enumerate(lengths):
        numpy.testing.assert_array_equal(paths[offsets[i] : offsets[i + 1]], expected_paths[i, :n])


def test_compiled_decode_checks_its_arguments():
    flat = numpy.zeros((3, 4), dtype="float32")
    square, row = numpy.zeros((4, 4), dtype="float32"), numpy.zeros(4, dtype="float32")
    with pytest.raises(ValueError, match="offsets run from 0 to 2, not 0 to 3"):
        kernels.decode_flat(flat, numpy.array([0, 2], dtype="int64"), square, row, row)
    with pytest.raises(ValueError, match="offsets decrease at doc 1"):
        kernels.decode_flat(flat, numpy.array([0, 4, 3], dtype="int64"), square, row, row)
    with pytest.raises(ValueError, match="transitions"):
        kernels.decode_flat(flat, numpy.array([0, 3], dtype="int64"), square[:3, :3].copy(), row, row)
    with pytest.raises(ValueError, match="rows but no tags"):
        empty = numpy.zeros((0, 0), dtype="float32")
        kernels.decode_flat(
            numpy.zeros((3, 0), dtype="float32"), numpy.array([0, 3], dtype="int64"), empty, row[:0], row[:0]
        )
    with pytest.raises(ValueError, match="allowed"):
        mask = numpy.ones((2, 4), dtype="uint8")
        kernels.decode_flat(flat, numpy.array([0, 3], dtype="int64"), square, row, row, mask)


def _random_words(rng: random.Random, alphabet: str, count: int, longest: int):
    return {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, longest))) for _ in range(count)}


# CJK, Latin, digits, an astral-plane character, one in no word ("\n" joins docs)
ALPHABET = "中国人民大学北京上海市长江大桥abcAB12😀"


@pytest.mark.parametrize("seed", range(8))
def test_the_trie_finds_what_the_automaton_finds_in_its_order(seed):
    rng = random.Random(seed)
    text = "".join(rng.choice(ALPHABET + "\n x") for _ in range(rng.randint(60, 3000)))
    longest = rng.choice([2, 4, 9])
    pieces = set()  # words that occur, some inside others, and words that may not
    for _ in range(rng.choice([5, 60, 400])):
        at = rng.randrange(len(text))
        pieces.add(text[at : at + rng.randint(2, longest)])
    lexicon = WordLexicon(
        {p for p in pieces if not any(c.isspace() for c in p)} | _random_words(rng, ALPHABET, 50, longest)
    )
    expected = lexicon.find(text, compiled=False)
    got = lexicon.find(text, compiled=True)
    assert len(expected[0]) > 0
    for g, e in zip(got, expected):
        assert g.dtype == numpy.int64
        numpy.testing.assert_array_equal(g, e)


def test_the_trie_on_edge_cases():
    lexicon = TaggedLexicon([("中", 1.0, "n"), ("中国", 2.0, "ns"), ("国人", 1.0, "n"), ("中国人", 1.0, "n")])
    for text in ["", "中", "x", "中国人", "中国人中国", "\n中\n国"]:
        for g, e in zip(lexicon.find(text, compiled=True), lexicon.find(text, compiled=False)):
            numpy.testing.assert_array_equal(g, e)
    ends, ids = lexicon.find("中国人", compiled=True)
    words = [lexicon.word_list[i] for i in ids.tolist()]
    assert list(zip(ends.tolist(), words)) == [(0, "中"), (1, "中国"), (2, "中国人"), (2, "国人")]
    empty = WordLexicon([])
    assert [len(a) for a in empty.find("中国", compiled=True)] == [0, 0]
    from_generator = kernels.WordTrie(w for w in ["中国", "国人"])  # read twice inside
    assert from_generator.find("中国人")[1].tolist() == [0, 1]
    with pytest.raises(ValueError, match="given twice"):
        kernels.WordTrie(["中国", "中国"])
    with pytest.raises(ValueError, match="empty"):
        kernels.WordTrie([""])


def test_a_lexicon_pickled_without_a_trie_builds_one(monkeypatch):
    import pickle

    lexicon = WordLexicon(["中国", "北京"])
    state = lexicon.__getstate__()
    del state["_trie"]  # as pickled by a version without the kernel
    restored = WordLexicon.__new__(WordLexicon)
    restored.__dict__.update(state)
    assert restored.find("在北京", compiled=True)[0].tolist() == [2]
    assert pickle.loads(pickle.dumps(lexicon)).find("中国", compiled=True)[0].tolist() == [1]


def test_lexicon_features_are_the_same_with_and_without_the_kernels(monkeypatch):
    nlp = spacy.blank("zh")
    rng = random.Random(3)
    entries = [
        (w, float(rng.randint(0, 50)), rng.choice(["n", "ns", "nr", "v"])) for w in _random_words(rng, ALPHABET, 300, 5)
    ]
    lexicon = TaggedLexicon(entries)
    texts = ["".join(rng.choice(ALPHABET + " ") for _ in range(rng.randint(0, 80))) for _ in range(40)]
    docs = [nlp.make_doc(t) for t in texts]
    with_kernels = lexicon_features._features(lexicon, docs, lexicon_match.token_bounds(docs))
    monkeypatch.setattr(kernels, "enabled", lambda: False)
    lexicon._batch_cache("_matches").clear()
    without = lexicon_features._features(lexicon, docs, lexicon_match.token_bounds(docs))
    assert with_kernels.tobytes() == without.tobytes()
    assert with_kernels.any()


def test_speed_warns_when_the_kernels_do_not_run(monkeypatch, capsys):
    from spacy_crf.cli import speed

    speed._report_kernels()
    assert "kernels" not in capsys.readouterr().out
    monkeypatch.setenv(kernels.PURE_PYTHON, "1")
    speed._report_kernels()
    assert "turned off by SPACY_CRF_PURE_PYTHON" in capsys.readouterr().out
    monkeypatch.delenv(kernels.PURE_PYTHON)
    monkeypatch.setattr(kernels, "WordTrie", None)
    speed._report_kernels()
    assert "compiled kernels not built (word_trie)" in capsys.readouterr().out


@pytest.mark.parametrize("seed", range(5))
def test_compiled_pooling_gives_reduce_means_of_the_gathered_rows_to_the_bit(seed):
    from thinc.api import NumpyOps

    rng = numpy.random.default_rng(seed)
    width = int(rng.choice([1, 7, 384]))
    sources, indices, lengths = [], [], []
    for _ in range(int(rng.integers(1, 9))):
        pieces = int(rng.integers(1, 30))
        source = rng.normal(size=(pieces, width)).astype("float32") * 10
        source[rng.random(source.shape) < 0.05] = -0.0  # a lone piece's -0.0 comes out +0.0, as in reduce_mean
        sources.append(source)
        counts = rng.integers(0, 4, size=int(rng.integers(0, 25))).astype("int32")  # a token of 0 pieces too
        lengths.append(counts)
        indices.append(rng.integers(0, pieces, size=int(counts.sum())).astype("int32"))  # repeats too
    gathered = numpy.concatenate([s[i] for s, i in zip(sources, indices)]).reshape(-1, width)
    expected = NumpyOps().reduce_mean(gathered, numpy.concatenate(lengths).astype("int32"))
    out = numpy.full((len(expected), width), numpy.nan, dtype="float32")
    kernels.mean_rows(sources, indices, lengths, out)
    assert out.tobytes() == expected.tobytes()


def test_compiled_pooling_checks_its_arguments():
    source = numpy.zeros((3, 4), dtype="float32")
    out = numpy.zeros((2, 4), dtype="float32")
    ok_index, ok_counts = numpy.array([0, 1, 2], dtype="int32"), numpy.array([1, 2], dtype="int32")
    kernels.mean_rows([source], [ok_index], [ok_counts], out)
    for index, counts, rows, message in [
        (numpy.array([0, 1, 3], dtype="int32"), ok_counts, 2, "indexes row 3 of 3"),
        (ok_index, numpy.array([1, 1], dtype="int32"), 2, "piece counts sum to 2, it has 3"),
        (ok_index, numpy.array([2, 2], dtype="int32"), 2, "do not fit"),
        (ok_index, ok_counts, 1, "too few for doc 0"),
        (ok_index, ok_counts, 3, "the docs have 2 tokens, the output 3 rows"),
    ]:
        with pytest.raises(ValueError, match=message):
            kernels.mean_rows([source], [index], [counts], numpy.zeros((rows, 4), dtype="float32"))
    with pytest.raises(ValueError, match="rows of 4 values, the output 5"):
        kernels.mean_rows([source], [ok_index], [ok_counts], numpy.zeros((2, 5), dtype="float32"))
    with pytest.raises(ValueError, match="one entry per doc"):
        kernels.mean_rows([source], [], [ok_counts], out)


def test_a_missing_kernel_is_reported_once_at_prediction(monkeypatch):
    import warnings

    transitions = numpy.zeros((4, 4), dtype="float32")
    scores = [numpy.ones((3, 4), dtype="float32")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # built: no warning
        viterbi_numpy.decode(scores, transitions, None, None)
    monkeypatch.setattr(kernels, "_warned", False)
    monkeypatch.setattr(kernels, "WordTrie", None)
    monkeypatch.setenv(kernels.PURE_PYTHON, "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # switched off on purpose: no warning either
        viterbi_numpy.decode(scores, transitions, None, None)
    monkeypatch.delenv(kernels.PURE_PYTHON)
    with pytest.warns(kernels.KernelsNotBuiltWarning, match=r"not built \(word_trie\)"):
        got = viterbi_numpy.decode(scores, transitions, None, None)
    assert [p.tolist() for p in got] == [[0, 0, 0]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        viterbi_numpy.decode(scores, transitions, None, None)
