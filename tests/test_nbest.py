"""Exact n-best Viterbi (spacy_crf.ml.nbest) against brute-force enumeration,
and the pipe's predict_nbest with its doc._.crf_nbest extension."""

import itertools

import numpy
import pytest
import spacy
import torch
from _configs import NER_DATA, crf_model_config
from spacy.tokens import Doc, DocBin, Span
from spacy.training import Example

from spacy_crf.ml import crf, nbest, viterbi_numpy
from spacy_crf.pipeline import nbest as pipe_nbest
from spacy_crf.pipeline.confidence import set_temperature

# --- the maths on small lattices ---------------------------------------------


def _lattice(rng, num_tags, lengths, ties=False, constrained=True, masked=True):
    if ties:  # small integers: many equal scores
        scores = [rng.integers(-2, 3, size=(n, num_tags)).astype("float32") for n in lengths]
        transitions = rng.integers(-1, 2, size=(num_tags, num_tags)).astype("float32")
        start, end = (rng.integers(-1, 2, size=num_tags).astype("float32") for _ in range(2))
    else:
        scores = [rng.normal(size=(n, num_tags)).astype("float32") * 2 for n in lengths]
        transitions = rng.normal(size=(num_tags, num_tags)).astype("float32")
        start, end = (rng.normal(size=num_tags).astype("float32") for _ in range(2))
    constraints = None
    if constrained:
        allowed = rng.random((num_tags, num_tags)) < 0.7
        constraints = (allowed, rng.random(num_tags) < 0.8, rng.random(num_tags) < 0.8)
    tag_masks = None
    if masked:
        tag_masks = []
        for n in lengths:
            if rng.random() < 0.3:
                tag_masks.append(None)
                continue
            mask = rng.random((n, num_tags)) < 0.8
            forced = rng.random(n) < 0.2  # forced tags: one allowed
            mask[forced] = False
            mask[forced, rng.integers(0, num_tags, size=int(forced.sum()))] = True
            tag_masks.append(mask)
    return scores, transitions, start, end, constraints, tag_masks


def _brute_force(scores, transitions, start, end, constraints, mask):
    """Every allowed path of one doc with its float64 score, best first."""
    n, num_tags = scores.shape
    found = []
    for path in itertools.product(range(num_tags), repeat=n):
        if constraints is not None and not (
            constraints[1][path[0]]
            and constraints[2][path[-1]]
            and all(constraints[0][a, b] for a, b in zip(path, path[1:]))
        ):
            continue
        if mask is not None and not all(mask[t, y] for t, y in enumerate(path)):
            continue
        score = float(start[path[0]]) + float(end[path[-1]])
        score += sum(float(scores[t, y]) for t, y in enumerate(path))
        score += sum(float(transitions[a, b]) for a, b in zip(path, path[1:]))
        found.append((score, path))
    found.sort(key=lambda item: -item[0])
    return found


def _torch_log_z(scores, transitions, start, end, constraints, mask, temperature=1.0):
    """log Z of one doc by crf.log_partition, over the allowed paths, every score divided by ``temperature``."""
    emissions = torch.from_numpy(scores[None] / numpy.float32(temperature))
    tag_mask = None if mask is None else torch.from_numpy(numpy.asarray(mask, dtype=bool)[None])
    limits = (
        None if constraints is None else crf.Constraints(*(torch.from_numpy(numpy.asarray(m)) for m in constraints))
    )
    t, s, e = (torch.from_numpy(a / numpy.float32(temperature)) for a in (transitions, start, end))
    t, s, e = crf.constrain(t, s, e, limits)
    return float(crf.log_partition(emissions, None, t, s, e, tag_mask=tag_mask)[0])


#: each test of the maths runs the compiled kernels and the numpy list Viterbi
WAYS = pytest.mark.parametrize("use_numpy", [False, True], ids=["compiled", "numpy"])


@WAYS
@pytest.mark.parametrize("seed", range(16))
def test_nbest_equals_the_brute_force_top_k(seed, use_numpy):
    rng = numpy.random.default_rng(seed)
    num_tags = int(rng.integers(1, 5))
    lengths = rng.integers(0, 7, size=int(rng.integers(1, 6)))  # padding: rows of different lengths
    ties = seed % 4 == 3
    case = _lattice(rng, num_tags, lengths, ties=ties, constrained=seed % 3 != 0, masked=seed % 2 == 0)
    scores, transitions, start, end, constraints, tag_masks = case
    k = int(rng.integers(1, 9))
    T = [1.0, 0.5, 2.5][seed % 3]  # the probabilities' temperature; the paths do not depend on it
    results = nbest.decode(
        scores, transitions, start, end, k, constraints, tag_masks, temperature=T, use_numpy=use_numpy
    )
    assert len(results) == len(scores)
    for i, result in enumerate(results):
        if lengths[i] == 0:
            assert result.paths.shape == (1, 0) and result.scores.tolist() == [0.0]
            assert result.probabilities.tolist() == [1.0]
            continue
        mask = None if tag_masks is None else tag_masks[i]
        every = _brute_force(scores[i], transitions, start, end, constraints, mask)
        expected = every[:k]
        assert len(result.paths) == len(expected)  # fewer than k where fewer are allowed
        assert result.paths.shape == (len(expected), lengths[i])
        numpy.testing.assert_allclose(result.scores, [s for s, _ in expected], rtol=1e-5, atol=1e-4)
        assert len({tuple(p) for p in result.paths.tolist()}) == len(result.paths)  # no path twice
        by_path = dict((p, s) for s, p in every)
        for rank, (path, score) in enumerate(zip(result.paths.tolist(), result.scores.tolist())):
            assert tuple(path) in by_path  # an allowed path, with its own score
            assert by_path[tuple(path)] == pytest.approx(score, abs=1e-4)
            distinct = all(abs(s - expected[rank][0]) > 1e-3 for r, (s, _) in enumerate(every) if r != rank)
            if distinct:
                assert tuple(path) == expected[rank][1]
        if len(expected):
            total = sum(numpy.exp(s / T) for s, _ in every)  # every allowed path, at T
            numpy.testing.assert_allclose(
                result.probabilities, numpy.exp(result.scores.astype(float) / T) / total, rtol=1e-4
            )
            log_z = _torch_log_z(scores[i], transitions, start, end, constraints, mask, T)
            numpy.testing.assert_allclose(
                result.probabilities, numpy.exp(result.scores.astype(float) / T - log_z), rtol=1e-4
            )
            assert result.probabilities.sum() <= 1 + 1e-5  # (float32 sums, and the kernel's float32 exp)
            assert numpy.all(numpy.diff(result.scores) <= 0)
            if k >= len(every):
                assert result.probabilities.sum() == pytest.approx(1.0, abs=1e-5)


@WAYS
@pytest.mark.parametrize("viterbi_numpy_search", [True, False], ids=["numpy", "compiled"])
@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("num_tags,batch_size", [(4, 1), (4, 37), (9, 20), (17, 12)])
def test_the_first_path_is_the_viterbi_path(seed, num_tags, batch_size, viterbi_numpy_search, use_numpy):
    rng = numpy.random.default_rng(seed)
    lengths = rng.integers(0, 30, size=batch_size)
    lengths[0] = max(int(lengths[0]), 1)
    case = _lattice(rng, num_tags, lengths, ties=seed % 2 == 0)
    scores, transitions, start, end, constraints, tag_masks = case
    for allowed in constraints:  # all 0s is allowed, so the first doc (no mask) has a path
        allowed[(0,) * allowed.ndim] = True
    tag_masks[0] = None
    if seed % 3 == 0:
        start = end = None
    viterbi = viterbi_numpy.decode(
        scores, transitions, start, end, constraints, tag_masks, use_numpy=viterbi_numpy_search
    )
    results = nbest.decode(
        scores, transitions, start, end, 3, constraints, tag_masks, probabilities=False, use_numpy=use_numpy
    )
    checked = 0
    for path, result in zip(viterbi, results):
        if len(result.paths):  # (none where the masks and the constraints allow no path)
            numpy.testing.assert_array_equal(result.paths[0], path)
            checked += 1
    assert checked


@WAYS
def test_k_larger_than_the_paths_there_are(use_numpy):
    scores = [numpy.zeros((2, 2), dtype="float32"), numpy.zeros((1, 2), dtype="float32")]
    transitions = numpy.zeros((2, 2), dtype="float32")
    results = nbest.decode(scores, transitions, None, None, 10, use_numpy=use_numpy)
    assert [len(r.paths) for r in results] == [4, 2]
    numpy.testing.assert_allclose([r.probabilities.sum() for r in results], [1.0, 1.0])
    numpy.testing.assert_allclose(results[0].probabilities, 0.25)
    allowed = numpy.array([[True, True], [False, True]])  # 1 -> 0 forbidden
    constraints = (allowed, numpy.array([True, True]), numpy.array([False, True]))  # must end in 1
    results = nbest.decode(scores[:1], transitions, None, None, 10, constraints, use_numpy=use_numpy)
    assert sorted(map(tuple, results[0].paths.tolist())) == [(0, 1), (1, 1)]


@WAYS
def test_no_allowed_path_gives_no_paths(use_numpy):
    scores = [numpy.zeros((2, 2), dtype="float32")]
    constraints = (numpy.array([[True, False], [False, True]]), numpy.ones(2, bool), numpy.ones(2, bool))
    forced = numpy.array([[True, False], [False, True]])  # 0 then 1: a forbidden move
    results = nbest.decode(
        scores, numpy.zeros((2, 2), "float32"), None, None, 5, constraints, [forced], use_numpy=use_numpy
    )
    assert results[0].paths.shape == (0, 2) and len(results[0].scores) == len(results[0].probabilities) == 0


@WAYS
def test_empty_docs_and_batches(use_numpy):
    transitions = numpy.zeros((3, 3), dtype="float32")
    assert nbest.decode([], transitions, None, None, 5, use_numpy=use_numpy) == []
    results = nbest.decode([numpy.zeros((0, 3), "float32")] * 2, transitions, None, None, 5, use_numpy=use_numpy)
    assert [(r.paths.shape, r.scores.tolist(), r.probabilities.tolist()) for r in results] == [
        ((1, 0), [0.0], [1.0])
    ] * 2
    mixed = nbest.decode(
        [numpy.zeros((0, 3), "float32"), numpy.ones((2, 3), "float32")], transitions, None, None, 2, use_numpy=use_numpy
    )
    assert mixed[0].paths.shape == (1, 0) and mixed[1].paths.shape == (2, 2)


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "5"])
def test_k_must_be_a_positive_integer(k):
    with pytest.raises(ValueError, match="k must be a positive integer"):
        nbest.decode([numpy.zeros((2, 2), "float32")], numpy.zeros((2, 2), "float32"), None, None, k)


@pytest.mark.parametrize("temperature", [0, -1.0, float("nan"), float("inf"), True, "2"])
def test_the_temperature_must_be_a_positive_number(temperature):
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        nbest.decode(
            [numpy.zeros((2, 2), "float32")], numpy.zeros((2, 2), "float32"), None, None, 2, temperature=temperature
        )


@pytest.mark.parametrize("scale", [1, 10, 400])
def test_log_partition_equals_crf_s(scale):
    """The scaled forward pass in float64 and crf's log-space one in float32
    agree, also where scores hundreds apart send rows to crf's."""
    rng = numpy.random.default_rng(scale)
    for _ in range(10):
        num_tags, batch_size, steps = int(rng.integers(1, 14)), int(rng.integers(1, 12)), int(rng.integers(1, 40))
        lengths = rng.integers(1, steps + 1, size=batch_size)
        emissions = (rng.normal(size=(steps, num_tags, batch_size)) * scale).astype("float32")
        emissions = numpy.where(rng.random(emissions.shape) < 0.8, emissions, numpy.float32(crf.IMPOSSIBLE))
        transitions = (rng.normal(size=(num_tags, num_tags)) * scale / 5).astype("float32")
        transitions = numpy.where(rng.random(transitions.shape) < 0.7, transitions, numpy.float32(crf.IMPOSSIBLE))
        start, end = (rng.normal(size=num_tags).astype("float32") for _ in range(2))
        got = nbest.log_partition(emissions, lengths, transitions, start, end)
        expected = nbest._torch_log_partition(emissions, lengths, transitions, start, end)
        some = expected > nbest.FORBIDDEN_BELOW  # rows with an allowed path
        numpy.testing.assert_allclose(got[some], expected[some], rtol=1e-5, atol=1e-3)


# --- the pipe ------------------------------------------------------------------


def _trained(scheme, steps=15, **config):
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_tagger", config={"scheme": scheme, "model": crf_model_config(), **config})
    if scheme == "bmes":
        words = [["我", "在", "北京", "工作"], ["张三", "去", "上海"], ["今天", "天气", "好"]]
        examples = [Example(nlp.make_doc("".join(w)), Doc(nlp.vocab, words=w, spaces=[False] * len(w))) for w in words]
    else:
        examples = [Example.from_dict(nlp.make_doc(t), {"entities": e}) for t, e in NER_DATA]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer)
    return nlp, pipe


@pytest.fixture(scope="module")
def ner():
    return _trained("bioes")


@pytest.fixture(scope="module")
def segmenter():
    return _trained("bmes")


def test_predict_nbest_for_entities(ner):
    nlp, pipe = ner
    texts = ["张三去上海", "我在北京工作", "李四 住广州"]
    docs = [nlp.make_doc(t) for t in texts]
    analyses = pipe.predict_nbest(docs, k=4)
    assert len(analyses) == len(docs)
    for text, doc, found in zip(texts, docs, analyses):
        assert 1 <= len(found) <= 4
        probabilities = [p for p, _ in found]
        assert probabilities == sorted(probabilities, reverse=True) and sum(probabilities) <= 1 + 1e-6
        expected = [(e.start_char, e.end_char, e.label_) for e in nlp(text).ents]
        assert found[0][1] == expected  # the first analysis is what the pipe writes
        assert len({tuple(ents) for _, ents in found}) == len(found)  # distinct analyses
        for _, ents in found:
            assert all(isinstance(s, int) and isinstance(e, int) and " " not in doc.text[s:e] for s, e, _ in ents)
        assert doc._.crf_nbest[pipe.name] == found
    assert not docs[0].ents  # predict_nbest annotates nothing else


def test_predict_nbest_for_words(segmenter):
    nlp, pipe = segmenter
    docs = [nlp.make_doc(t) for t in ["张三去上海", "今天 天气好"]]
    analyses = pipe.predict_nbest(docs, k=3)
    for doc, found in zip(docs, analyses):
        annotated = nlp(doc.text)
        expected = [(s.start_char, s.end_char) for s in annotated.spans[pipe.cfg["spans_key"]]]
        assert found[0][1] == expected
        for _, words in found:
            covered = "".join(doc.text[s:e] for s, e in words)  # spans' offsets: a token's trailing space is inside
            assert covered.replace(" ", "") == doc.text.replace(" ", "")  # every character in one word
        assert doc._.crf_nbest == {pipe.name: found}
    assert len(analyses[0]) == 3


def test_predict_nbest_for_token_tags():
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_tagger", config={"scheme": "tag", "model": crf_model_config()})
    tags = ["PN", "P", "NR", "NR"]
    examples = [
        Example(nlp.make_doc("我在北京"), Doc(nlp.vocab, words=list("我在北京"), tags=tags, spaces=[False] * 4))
    ]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(10):
        nlp.update(examples, sgd=optimizer)
    found = pipe.predict_nbest([nlp.make_doc("我在北京")], k=3)[0]
    assert len(found) == 3 and found[0][1] == [t.tag_ for t in nlp("我在北京")]
    assert all(len(analysis) == 4 and set(analysis) <= set(tags) for _, analysis in found)


def test_probabilities_sum_to_one_over_all_paths(segmenter):
    nlp, pipe = segmenter
    doc = nlp.make_doc("张三去")  # 3 characters: 4 segmentations
    found = pipe.predict_nbest([doc], k=50)[0]
    assert len(found) == 4
    assert sum(p for p, _ in found) == pytest.approx(1.0, abs=1e-5)
    marginals = pipe.predict_marginals([doc])[0]  # the same distribution, per token
    s_tag = pipe.tags.index("S")
    single_first = sum(p for p, words in found if words[0] == (0, 1))
    assert single_first == pytest.approx(float(marginals[0, s_tag]), abs=1e-4)


def test_probabilities_use_the_pipes_calibration_temperature(segmenter):
    nlp, pipe = segmenter
    doc = nlp.make_doc("张三去")  # 3 characters: 4 segmentations, all of them among the 50 best
    plain = pipe.predict_nbest([doc], k=50)[0]
    s_tag = pipe.tags.index("S")
    set_temperature(pipe, 2.5)
    try:
        tempered = pipe.predict_nbest([doc], k=50)[0]
        marginals = pipe.predict_marginals([doc])[0]  # calibrated at the same T
    finally:
        set_temperature(pipe, 1.0)
    assert [words for _, words in tempered] == [words for _, words in plain]  # the same analyses, in order
    p1, pt = numpy.array([p for p, _ in plain]), numpy.array([p for p, _ in tempered])
    # p_T(path) = exp(score / T) / Z_T, so p_T is p_1 ** (1 / T), normalised
    numpy.testing.assert_allclose(pt, p1 ** (1 / 2.5) / (p1 ** (1 / 2.5)).sum(), rtol=1e-4)
    assert pt.sum() == pytest.approx(1.0, abs=1e-5)
    assert pt[0] < p1[0] and pt[-1] > p1[-1]  # T > 1 spreads the probability
    single_first = sum(p for p, words in tempered if words[0] == (0, 1))
    assert single_first == pytest.approx(float(marginals[0, s_tag]), abs=1e-4)
    assert pipe.predict_nbest([doc], k=50)[0] == plain  # back at T = 1


def test_preset_entities_and_forced_user_entries_are_kept(ner):
    nlp, pipe = ner
    doc = nlp.make_doc("张三去上海")
    doc.ents = [Span(doc, 3, 5, label="ORG")]  # a label the tagger does not have: kept as it is
    found = pipe.predict_nbest([doc], k=5)[0]
    assert all((3, 5, "ORG") in ents for _, ents in found)
    assert all(s >= 5 or e <= 3 for _, ents in found for s, e, _ in ents if (s, e) != (3, 5))
    free = pipe.predict_nbest([doc], k=5, respect_preset=False)[0]
    assert not any((3, 5, "ORG") in ents for _, ents in free)
    pipe.add_user_entities([("去上", "LOC")])
    try:
        forced = pipe.predict_nbest([nlp.make_doc("张三去上海")], k=5)[0]
        assert forced and all((2, 4, "LOC") in ents for _, ents in forced)
    finally:
        pipe.user_dict.clear()


def _as_lists(value):
    return [_as_lists(v) for v in value] if isinstance(value, (list, tuple)) else value


def test_empty_docs_and_the_extension_round_trip(ner):
    nlp, pipe = ner
    docs = [nlp.make_doc(t) for t in ["", "张三"]]
    analyses = pipe.predict_nbest(docs, k=2)
    assert analyses[0] == [(1.0, [])]
    assert pipe.predict_nbest([nlp.make_doc("")], k=3) == [[(1.0, [])]]
    as_lists = _as_lists(analyses[1])  # (msgpack may give tuples back as lists)
    assert _as_lists(Doc(nlp.vocab).from_bytes(docs[1].to_bytes())._.crf_nbest[pipe.name]) == as_lists
    stored = DocBin(store_user_data=True, docs=docs).to_bytes()
    assert _as_lists(list(DocBin().from_bytes(stored).get_docs(nlp.vocab))[1]._.crf_nbest[pipe.name]) == as_lists
    assert nlp.make_doc("x")._.crf_nbest == {}
    with pytest.raises(ValueError, match="k must be a positive integer"):
        pipe.predict_nbest(docs, k=0)


def test_predict_nbest_needs_a_crf_and_weights():
    nlp = spacy.blank("zh")
    pipe = nlp.add_pipe("crf_tagger", config={"scheme": "bio", "model": crf_model_config()})
    with pytest.raises(ValueError, match="not initialized"):
        pipe.predict_nbest([nlp.make_doc("张三")])
    softmax = spacy.blank("zh").add_pipe("crf_tagger", config={"model": crf_model_config(use_crf=False)})
    with pytest.raises(ValueError, match="needs a CRF layer"):
        softmax.predict_nbest([nlp.make_doc("张三")])


def test_register_extension_is_idempotent():
    pipe_nbest.register_extension()
    pipe_nbest.register_extension()
    assert Doc.has_extension("crf_nbest")
