"""The compiled n-best kernels (spacy_crf/ml/_nbest.pyx, _partition.pyx)
against the numpy list Viterbi and crf.log_partition, on lattices too long
for brute force (tests/test_nbest.py checks both ways against it)."""

import numpy
import pytest
from test_nbest import _lattice

from spacy_crf.ml import crf, kernels, nbest


def _flat(scores, tag_masks, num_tags):
    lengths = numpy.array([len(s) for s in scores], dtype=numpy.int64)
    offsets = numpy.concatenate([[0], numpy.cumsum(lengths)]).astype(numpy.int64)
    flat = numpy.concatenate(scores).reshape(-1, num_tags).astype(numpy.float32)
    flat.flags.writeable = False  # (the tagger's arrays are read-only views)
    masks = None if tag_masks is None else [m for m in tag_masks]
    return flat, offsets, nbest.viterbi_numpy.flat_tag_masks(masks, lengths, int(lengths.max()), num_tags)


@pytest.mark.parametrize("seed", range(12))
def test_the_kernel_finds_the_list_viterbis_paths(seed):
    rng = numpy.random.default_rng(1000 + seed)
    num_tags = int(rng.integers(1, 18))
    lengths = rng.integers(0, 40, size=int(rng.integers(1, 20)))
    scores, transitions, start, end, constraints, tag_masks = _lattice(rng, num_tags, lengths)
    k, T = int(rng.integers(1, 13)), float(rng.choice([0.4, 1.0, 3.0]))
    args = (scores, transitions, start, end, k, constraints, tag_masks)
    compiled = nbest.decode(*args, temperature=T)
    reference = nbest.decode(*args, temperature=T, use_numpy=True)
    for got, expected in zip(compiled, reference):
        assert got.paths.shape == expected.paths.shape
        numpy.testing.assert_allclose(got.scores, expected.scores, rtol=1e-5, atol=1e-3)
        numpy.testing.assert_allclose(got.probabilities, expected.probabilities, rtol=1e-4, atol=1e-12)
        if not len(expected.paths):
            continue
        apart = numpy.abs(numpy.diff(expected.scores)) > 1e-3  # (near-ties may come in either order)
        distinct = numpy.concatenate([[True], apart]) & numpy.concatenate([apart, [True]])
        numpy.testing.assert_array_equal(got.paths[distinct], expected.paths[distinct])


@pytest.mark.parametrize("temperature", [1.0, 0.3, 4.0])
@pytest.mark.parametrize("scale", [1, 10, 40, 400])
def test_the_log_partition_kernel_equals_crf_s(scale, temperature):
    """Scores tens apart (the fast exp's range: float32, down to exp(-80)),
    hundreds apart (libm's in float64) and thousands (log space) agree with
    crf.log_partition; forbidden moves and tags count 0, a doc with no
    allowed path has -inf and an empty doc 0."""
    rng = numpy.random.default_rng(scale)
    for _ in range(8):
        num_tags, batch_size, steps = int(rng.integers(1, 40)), int(rng.integers(1, 12)), int(rng.integers(1, 40))
        lengths = rng.integers(0, steps + 1, size=batch_size)
        emissions = (rng.normal(size=(steps, num_tags, batch_size)) * scale).astype("float32")
        allowed = rng.random(emissions.shape) < 0.8
        transitions = (rng.normal(size=(num_tags, num_tags)) * scale / 5).astype("float32")
        transitions = numpy.where(rng.random(transitions.shape) < 0.7, transitions, numpy.float32(crf.IMPOSSIBLE))
        start, end = (rng.normal(size=num_tags).astype("float32") for _ in range(2))
        scores = [emissions[:n, :, b] for b, n in enumerate(lengths)]
        masks = [allowed[:n, :, b] for b, n in enumerate(lengths)]
        flat, offsets, flat_mask = _flat(scores, masks, num_tags)
        got = kernels.log_partition_flat(flat, offsets, transitions, start, end, flat_mask, temperature)
        masked = numpy.where(allowed, emissions, numpy.float32(crf.IMPOSSIBLE))
        tempered = (nbest._tempered(a, temperature) for a in (masked, transitions, start, end))
        real = lengths > 0
        expected = numpy.zeros(batch_size)
        expected[real] = nbest._torch_log_partition(next(tempered)[:, :, real], lengths[real], *tempered)
        some = expected > nbest.FORBIDDEN_BELOW  # (crf's is about IMPOSSIBLE where no path is allowed)
        assert (got[~some] == -numpy.inf).all() and (got[~real] == 0).all() and numpy.isfinite(got[some]).all()
        numpy.testing.assert_allclose(got[some], expected[some], rtol=1e-5, atol=1e-4 * max(1, scale))


def test_the_kernels_take_empty_docs_and_batches():
    transitions, row = numpy.zeros((3, 3), "float32"), numpy.zeros(3, "float32")
    for offsets in ([0], [0, 0, 0]):
        offsets = numpy.array(offsets, dtype=numpy.int64)
        paths, scores, counts = kernels.nbest_flat(numpy.zeros((0, 3), "float32"), offsets, transitions, row, row, 4)
        assert len(paths) == 0 and counts.tolist() == [1] * (len(offsets) - 1)
        assert scores[:, 0].tolist() == [0.0] * (len(offsets) - 1)
        log_z = kernels.log_partition_flat(numpy.zeros((0, 3), "float32"), offsets, transitions, row, row)
        assert log_z.tolist() == [0.0] * (len(offsets) - 1)


@pytest.mark.parametrize("kernel", ["nbest_flat", "log_partition_flat"])
def test_the_kernels_check_their_arguments(kernel):
    call = getattr(kernels, kernel)
    extra = (2,) if kernel == "nbest_flat" else ()
    flat = numpy.zeros((3, 4), dtype="float32")
    square, row = numpy.zeros((4, 4), dtype="float32"), numpy.zeros(4, dtype="float32")
    with pytest.raises(ValueError, match="offsets run from 0 to 2, not 0 to 3"):
        call(flat, numpy.array([0, 2], dtype="int64"), square, row, row, *extra)
    with pytest.raises(ValueError, match="offsets decrease at doc 1"):
        call(flat, numpy.array([0, 4, 3], dtype="int64"), square, row, row, *extra)
    with pytest.raises(ValueError, match="transitions"):
        call(flat, numpy.array([0, 3], dtype="int64"), square[:3, :3].copy(), row, row, *extra)
    with pytest.raises(ValueError, match="allowed"):
        call(flat, numpy.array([0, 3], dtype="int64"), square, row, row, *extra, numpy.ones((2, 4), dtype="uint8"))
    if kernel == "nbest_flat":
        with pytest.raises(ValueError, match="k must be at least 1"):
            call(flat, numpy.array([0, 3], dtype="int64"), square, row, row, 0)
    else:
        with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
            call(flat, numpy.array([0, 3], dtype="int64"), square, row, row, None, 0.0)
