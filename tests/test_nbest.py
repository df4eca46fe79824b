"""Exact n-best Viterbi (spacy_crf.ml.nbest) against brute-force enumeration."""

import itertools

import numpy
import pytest
import torch

from spacy_crf.ml import crf, nbest, viterbi_numpy

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


def _torch_log_z(scores, transitions, start, end, constraints, mask):
    """log Z of one doc by crf.log_partition, over the allowed paths."""
    emissions = torch.from_numpy(scores[None])
    tag_mask = None if mask is None else torch.from_numpy(numpy.asarray(mask, dtype=bool)[None])
    limits = (
        None if constraints is None else crf.Constraints(*(torch.from_numpy(numpy.asarray(m)) for m in constraints))
    )
    t, s, e = crf.constrain(torch.from_numpy(transitions), torch.from_numpy(start), torch.from_numpy(end), limits)
    return float(crf.log_partition(emissions, None, t, s, e, tag_mask=tag_mask)[0])


@pytest.mark.parametrize("seed", range(16))
def test_nbest_equals_the_brute_force_top_k(seed):
    rng = numpy.random.default_rng(seed)
    num_tags = int(rng.integers(1, 5))
    lengths = rng.integers(0, 7, size=int(rng.integers(1, 6)))  # padding: rows of different lengths
    ties = seed % 4 == 3
    case = _lattice(rng, num_tags, lengths, ties=ties, constrained=seed % 3 != 0, masked=seed % 2 == 0)
    scores, transitions, start, end, constraints, tag_masks = case
    k = int(rng.integers(1, 9))
    results = nbest.decode(scores, transitions, start, end, k, constraints, tag_masks)
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
            total = sum(numpy.exp(s) for s, _ in every)
            numpy.testing.assert_allclose(
                result.probabilities, numpy.exp(result.scores.astype(float)) / total, rtol=1e-4
            )
            log_z = _torch_log_z(scores[i], transitions, start, end, constraints, mask)
            numpy.testing.assert_allclose(
                result.probabilities, numpy.exp(result.scores.astype(float) - log_z), rtol=1e-4
            )
            assert result.probabilities.sum() <= 1 + 1e-6
            assert numpy.all(numpy.diff(result.scores) <= 0)
            if k >= len(every):
                assert result.probabilities.sum() == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("use_numpy", [True, False], ids=["numpy", "compiled"])
@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("num_tags,batch_size", [(4, 1), (4, 37), (9, 20), (17, 12)])
def test_the_first_path_is_the_viterbi_path(seed, num_tags, batch_size, use_numpy):
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
    viterbi = viterbi_numpy.decode(scores, transitions, start, end, constraints, tag_masks, use_numpy=use_numpy)
    results = nbest.decode(scores, transitions, start, end, 3, constraints, tag_masks, probabilities=False)
    checked = 0
    for path, result in zip(viterbi, results):
        if len(result.paths):  # (none where the masks and the constraints allow no path)
            numpy.testing.assert_array_equal(result.paths[0], path)
            checked += 1
    assert checked


def test_k_larger_than_the_paths_there_are():
    scores = [numpy.zeros((2, 2), dtype="float32"), numpy.zeros((1, 2), dtype="float32")]
    transitions = numpy.zeros((2, 2), dtype="float32")
    results = nbest.decode(scores, transitions, None, None, 10)
    assert [len(r.paths) for r in results] == [4, 2]
    numpy.testing.assert_allclose([r.probabilities.sum() for r in results], [1.0, 1.0])
    numpy.testing.assert_allclose(results[0].probabilities, 0.25)
    allowed = numpy.array([[True, True], [False, True]])  # 1 -> 0 forbidden
    constraints = (allowed, numpy.array([True, True]), numpy.array([False, True]))  # must end in 1
    results = nbest.decode(scores[:1], transitions, None, None, 10, constraints)
    assert sorted(map(tuple, results[0].paths.tolist())) == [(0, 1), (1, 1)]


def test_no_allowed_path_gives_no_paths():
    scores = [numpy.zeros((2, 2), dtype="float32")]
    constraints = (numpy.array([[True, False], [False, True]]), numpy.ones(2, bool), numpy.ones(2, bool))
    forced = numpy.array([[True, False], [False, True]])  # 0 then 1: a forbidden move
    results = nbest.decode(scores, numpy.zeros((2, 2), "float32"), None, None, 5, constraints, [forced])
    assert results[0].paths.shape == (0, 2) and len(results[0].scores) == len(results[0].probabilities) == 0


def test_empty_docs_and_batches():
    transitions = numpy.zeros((3, 3), dtype="float32")
    assert nbest.decode([], transitions, None, None, 5) == []
    results = nbest.decode([numpy.zeros((0, 3), "float32")] * 2, transitions, None, None, 5)
    assert [(r.paths.shape, r.scores.tolist(), r.probabilities.tolist()) for r in results] == [
        ((1, 0), [0.0], [1.0])
    ] * 2
    mixed = nbest.decode([numpy.zeros((0, 3), "float32"), numpy.ones((2, 3), "float32")], transitions, None, None, 2)
    assert mixed[0].paths.shape == (1, 0) and mixed[1].paths.shape == (2, 2)


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "5"])
def test_k_must_be_a_positive_integer(k):
    with pytest.raises(ValueError, match="k must be a positive integer"):
        nbest.decode([numpy.zeros((2, 2), "float32")], numpy.zeros((2, 2), "float32"), None, None, k)


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
