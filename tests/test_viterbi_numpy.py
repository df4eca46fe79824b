"""The numpy decoder used for prediction on CPU gives the paths of crf.viterbi."""

import numpy
import pytest
import torch

from spacy_crf import util
from spacy_crf.ml import crf, viterbi_numpy


def _case(rng, num_tags, batch_size, ties):
    lengths = rng.integers(0, 30, size=batch_size)
    if ties:  # small integers: many equal scores, so tie-breaking must agree too
        scores = [rng.integers(-2, 3, size=(n, num_tags)).astype("float32") for n in lengths]
        transitions = rng.integers(-1, 2, size=(num_tags, num_tags)).astype("float32")
        start, end = (rng.integers(-1, 2, size=num_tags).astype("float32") for _ in range(2))
    else:
        scores = [rng.normal(size=(n, num_tags)).astype("float32") * 5 for n in lengths]
        transitions = rng.normal(size=(num_tags, num_tags)).astype("float32")
        start, end = (rng.normal(size=num_tags).astype("float32") for _ in range(2))
    allowed = rng.random((num_tags, num_tags)) < 0.7
    allowed[numpy.arange(num_tags), numpy.arange(num_tags)] = True
    constraints = (allowed, rng.random(num_tags) < 0.8, rng.random(num_tags) < 0.8)
    tag_masks = []
    for n in lengths:
        if rng.random() < 0.5:
            tag_masks.append(None)
            continue
        mask = numpy.ones((n, num_tags), dtype=bool)
        forced = rng.random(n) < 0.2
        mask[forced] = False
        mask[forced, rng.integers(0, num_tags, size=int(forced.sum()))] = True
        tag_masks.append(mask)
    return scores, transitions, start, end, constraints, tag_masks


#: crf.viterbi's torch decoder, which on CPU decodes steps larger than the numpy decoder's
TORCH_DECODER = crf._decode_with(crf._search_torch, crf._backtrace_numpy)


def _torch_paths(scores, transitions, start, end, constraints, tag_masks):
    lengths = [len(s) for s in scores]
    num_tags = len(transitions)
    T = max(lengths)
    emissions = numpy.zeros((len(scores), T, num_tags), dtype="float32")
    mask = numpy.zeros((len(scores), T), dtype=bool)
    for i, s in enumerate(scores):
        emissions[i, : len(s)], mask[i, : len(s)] = s, True
    tag_mask = viterbi_numpy.pad_tag_masks(tag_masks, len(scores), T, num_tags)
    paths, _ = crf.viterbi(
        torch.from_numpy(emissions),
        torch.from_numpy(mask),
        torch.from_numpy(transitions),
        None if start is None else torch.from_numpy(start),
        None if end is None else torch.from_numpy(end),
        constraints=crf.Constraints(*(torch.from_numpy(m) for m in constraints)),
        tag_mask=None if tag_mask is None else torch.from_numpy(tag_mask),
    )
    return [p[:n].numpy() for p, n in zip(paths, lengths)]


@pytest.mark.parametrize("use_numpy", [True, False], ids=["numpy", "compiled"])
@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("num_tags,batch_size", [(4, 1), (4, 37), (9, 20), (17, 30)])
def test_numpy_decode_matches_torch_viterbi(seed, num_tags, batch_size, use_numpy, monkeypatch):
    monkeypatch.setattr(crf, "_viterbi_decoder", lambda device, step_size: TORCH_DECODER)
    rng = numpy.random.default_rng(seed)
    scores, transitions, start, end, constraints, tag_masks = _case(rng, num_tags, batch_size, ties=seed % 2 == 0)
    if max(len(s) for s in scores) == 0:
        scores[0] = numpy.zeros((3, num_tags), dtype="float32")
        tag_masks[0] = None
    if seed % 3 == 0:
        start = end = None
    expected = _torch_paths(scores, transitions, start, end, constraints, tag_masks)
    got = viterbi_numpy.decode(scores, transitions, start, end, constraints, tag_masks, use_numpy=use_numpy)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        numpy.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("use_numpy", [True, False], ids=["numpy", "compiled"])
def test_numpy_decode_of_empty_docs_and_bad_masks(use_numpy):
    transitions = numpy.zeros((4, 4), dtype="float32")
    assert viterbi_numpy.decode([], transitions, None, None, use_numpy=use_numpy) == []
    empty = viterbi_numpy.decode(
        [numpy.zeros((0, 4), dtype="float32")] * 2, transitions, None, None, use_numpy=use_numpy
    )
    assert [len(p) for p in empty] == [0, 0]
    with pytest.raises(ValueError, match="tag mask 0"):
        viterbi_numpy.decode(
            [numpy.zeros((2, 4), dtype="float32")], transitions, None, None, None, [numpy.ones((2, 3))], use_numpy
        )


def test_compiled_decode_reads_row_blocks_and_short_masks():
    rng = numpy.random.default_rng(7)
    flat = rng.normal(size=(11, 5)).astype("float32")
    blocks = util.split_rows(None, flat, [4, 0, 7])
    transitions = rng.normal(size=(5, 5)).astype("float32")
    masks = [numpy.array([[False, True, False, False, False]]), None, None]  # a mask shorter than its doc
    got = viterbi_numpy.decode(blocks, transitions, None, None, None, masks)
    want = viterbi_numpy.decode(list(blocks), transitions, None, None, None, masks, use_numpy=True)
    assert got[0][0] == 1
    for g, w in zip(got, want):
        numpy.testing.assert_array_equal(g, w)
