"""Tests for the CRF maths in spacy_crf.ml.crf.

Most checks compare against brute force: enumerate all K^T tag paths in
float64 and compute partition functions, best paths and marginals directly.
"""

import itertools
from typing import List, Sequence, Tuple

import pytest
import torch

from spacy_crf.ml import crf
from spacy_crf.ml.crf import (
    IMPOSSIBLE,
    Constraints,
    LinearChainCRF,
    constrain,
    log_partition,
    marginals,
    nll,
    path_score,
    viterbi,
)

# ---------------------------------------------------------------- helpers


def allowed_from_pairs(tags: Sequence[str], pairs, starts, ends) -> Constraints:
    index = {tag: i for i, tag in enumerate(tags)}
    transitions = torch.zeros(len(tags), len(tags), dtype=torch.bool)
    for a, b in pairs:
        transitions[index[a], index[b]] = True
    start = torch.tensor([tag in starts for tag in tags])
    end = torch.tensor([tag in ends for tag in tags])
    return Constraints(transitions, start, end)


BMES_TAGS = ["B", "M", "E", "S"]


def bmes() -> Constraints:
    pairs = [("B", "M"), ("B", "E"), ("M", "M"), ("M", "E"), ("E", "B"), ("E", "S"), ("S", "B"), ("S", "S")]
    return allowed_from_pairs(BMES_TAGS, pairs, starts={"B", "S"}, ends={"E", "S"})


def bio(types=("PER", "LOC")) -> Tuple[List[str], Constraints]:
    tags = ["O"] + [f"{p}-{t}" for t in types for p in "BI"]
    pairs = []
    for a in tags:
        for b in tags:
            if not b.startswith("I-") or a in (f"B-{b[2:]}", b):
                pairs.append((a, b))
    starts = {t for t in tags if not t.startswith("I-")}
    return tags, allowed_from_pairs(tags, pairs, starts, ends=set(tags))


def bioes(types=("PER", "LOC")) -> Tuple[List[str], Constraints]:
    tags = ["O"] + [f"{p}-{t}" for t in types for p in "BIES"]
    pairs = []
    for a in tags:
        for b in tags:
            if a.startswith(("B-", "I-")):
                ok = b in (f"I-{a[2:]}", f"E-{a[2:]}")
            else:  # O, E-x, S-x: outside any entity
                ok = b == "O" or b.startswith(("B-", "S-"))
            if ok:
                pairs.append((a, b))
    starts = {t for t in tags if t == "O" or t.startswith(("B-", "S-"))}
    ends = {t for t in tags if t == "O" or t.startswith(("E-", "S-"))}
    return tags, allowed_from_pairs(tags, pairs, starts, ends)


def is_valid(path: Sequence[int], constraints: Constraints) -> bool:
    if len(path) == 0:
        return True
    if not constraints.start[path[0]] or not constraints.end[path[-1]]:
        return False
    return all(constraints.transitions[a, b] for a, b in zip(path, path[1:]))


def all_paths(num_tags: int, length: int) -> torch.Tensor:
    """All K^n paths as [K^n, n] (one empty path when n = 0)."""
    paths = list(itertools.product(range(num_tags), repeat=length))
    return torch.tensor(paths, dtype=torch.long).view(len(paths), length)


def brute_force(emissions, transitions, start, end, constraints=None, tag_mask=None):
    """Enumerate every path of one sequence in float64.

    emissions [n, K]; tag_mask optional [n, K]. Returns (paths [P, n],
    scores [P] with -inf for excluded paths).
    """
    length, num_tags = emissions.shape
    emissions, transitions = emissions.double(), transitions.double()
    start = torch.zeros(num_tags, dtype=torch.float64) if start is None else start.double()
    end = torch.zeros(num_tags, dtype=torch.float64) if end is None else end.double()
    paths = all_paths(num_tags, length)
    if length == 0:
        return paths, torch.zeros(1, dtype=torch.float64)
    scores = start[paths[:, 0]] + end[paths[:, -1]]
    scores = scores + emissions[torch.arange(length), paths].sum(1)
    scores = scores + transitions[paths[:, :-1], paths[:, 1:]].sum(1)
    excluded = torch.zeros(len(paths), dtype=torch.bool)
    if constraints is not None:
        excluded |= ~torch.tensor([is_valid(p.tolist(), constraints) for p in paths])
    if tag_mask is not None:
        excluded |= ~tag_mask[torch.arange(length), paths].all(1)
    return paths, scores.masked_fill(excluded, float("-inf"))


def brute_marginals(paths, scores, num_tags):
    probs = torch.softmax(scores, 0)
    length = paths.shape[1]
    out = torch.zeros(length, num_tags, dtype=torch.float64)
    for t in range(length):
        out[t].index_add_(0, paths[:, t], probs)
    return out


def random_constraints(num_tags: int, generator) -> Constraints:
    """Random allowed moves (about 70%); resampled until a path of every
    length 1..5 exists."""
    while True:
        c = Constraints(
            torch.rand(num_tags, num_tags, generator=generator) < 0.7,
            torch.rand(num_tags, generator=generator) < 0.7,
            torch.rand(num_tags, generator=generator) < 0.7,
        )
        ok = True
        for length in range(1, 6):
            paths = all_paths(num_tags, length)
            ok = ok and any(is_valid(p.tolist(), c) for p in paths)
        if ok:
            return c


def padded_batch(rows: List[torch.Tensor], fill=float("nan"), extra_columns: int = 0):
    """Stack [n_i, K] emissions into [B, T, K] with garbage (NaN) padding,
    T = longest row + extra_columns."""
    num_tags = rows[0].shape[1]
    length = max(len(r) for r in rows) + extra_columns
    emissions = torch.full((len(rows), length, num_tags), fill)
    mask = torch.zeros(len(rows), length, dtype=torch.bool)
    for i, r in enumerate(rows):
        emissions[i, : len(r)] = r
        mask[i, : len(r)] = True
    return emissions, mask


KERNELS = {
    "torch search, bulk backtrace": crf._decode_with(crf._search_torch, crf._backtrace_bulk),
    "torch search, numpy backtrace": crf._decode_with(crf._search_torch, crf._backtrace_numpy),
    "numpy": crf._decode_numpy,
    "compiled": crf._decode_compiled,
}


@pytest.fixture(params=sorted(KERNELS))
def backtrace(request, monkeypatch):
    """Run a test with each of Viterbi's decoders (accelerators, large and small CPU steps)."""
    monkeypatch.setattr(crf, "_viterbi_decoder", lambda device, step_size: KERNELS[request.param])
    return request.param


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("num_tags,batch_size", [(4, 1), (4, 32), (21, 32), (21, 40)])
def test_decoders_give_identical_tags_and_scores(num_tags, batch_size, ties):
    # (21, 40) is past the numpy decoder's step size: the default CPU choice is torch there.
    g = torch.Generator().manual_seed(num_tags + batch_size + ties)
    lengths = torch.randint(0, 20, (batch_size,), generator=g)
    lengths[0] = 20
    mask = torch.arange(23)[None, :] < lengths[:, None]  # three all-padding columns
    if ties:  # small integers: many equal scores, so tie-breaking must agree too
        emissions = torch.randint(-2, 3, (batch_size, 23, num_tags), generator=g).float()
        transitions, start, end = (
            torch.randint(-1, 2, shape, generator=g).float()
            for shape in [(num_tags, num_tags), (num_tags,), (num_tags,)]
        )
    else:
        emissions = torch.randn(batch_size, 23, num_tags, generator=g) * 3
        transitions, start, end = (
            torch.randn(shape, generator=g) for shape in [(num_tags, num_tags), (num_tags,), (num_tags,)]
        )
    emissions[~mask] = float("nan")  # padding is never read into a result
    allowed = torch.rand(num_tags, num_tags, generator=g) < 0.7
    allowed.fill_diagonal_(True)  # every row has an allowed path
    constraints = Constraints(allowed, torch.rand(num_tags, generator=g) < 0.7, torch.ones(num_tags, dtype=torch.bool))
    constraints.start[0] = True
    results = {}
    for name, decoder in [("default", None), *KERNELS.items()]:
        with pytest.MonkeyPatch.context() as patch:
            if decoder is not None:
                patch.setattr(crf, "_viterbi_decoder", lambda device, step_size, decoder=decoder: decoder)
            results[name] = viterbi(emissions, mask, transitions, start, end, constraints)
    tags, scores = results["default"]
    assert tags.shape == (batch_size, 23) and (tags[~mask] == -1).all() and (scores[lengths == 0] == 0).all()
    for name, (other_tags, other_scores) in results.items():
        assert torch.equal(other_tags, tags), name
        assert torch.equal(other_scores, scores), name


# ---------------------------------------------------------- brute force


@pytest.mark.parametrize(
    "num_tags,constraint_kind",
    [(2, "none"), (2, "random"), (3, "none"), (3, "random"), (4, "none"), (4, "random"), (4, "bmes")],
)
@pytest.mark.parametrize("use_start_end", [True, False])
def test_against_brute_force(num_tags, constraint_kind, use_start_end, backtrace):
    g = torch.Generator().manual_seed(num_tags * 10 + use_start_end)
    transitions = torch.randn(num_tags, num_tags, generator=g)
    start = torch.randn(num_tags, generator=g) if use_start_end else None
    end = torch.randn(num_tags, generator=g) if use_start_end else None
    constraints = {
        "none": None,
        "random": random_constraints(num_tags, g),
        "bmes": bmes(),
    }[constraint_kind]
    for length in range(1, 6):
        # Row 0 alone (no padding), then a padded batch: rows of length T, a
        # shorter one, length 1 and length 0 (empty document).
        row_lengths = [length, max(length - 2, 1), 1, 0]
        rows = [torch.randn(n, num_tags, generator=g) * 2 for n in row_lengths]
        for batch_rows in (rows[:1], rows):
            emissions, mask = padded_batch(batch_rows)
            log_z = log_partition(emissions, mask, *constrain(transitions, start, end, constraints))
            tags, best = viterbi(emissions, mask, transitions, start, end, constraints)
            probs = marginals(emissions, mask, transitions, start, end, constraints)
            assert log_z.dtype == best.dtype == probs.dtype == torch.float32
            for i, row in enumerate(batch_rows):
                n = len(row)
                paths, scores = brute_force(row, transitions, start, end, constraints)
                expected_log_z = torch.logsumexp(scores, 0)
                assert log_z[i].item() == pytest.approx(expected_log_z.item(), abs=1e-5)
                # Viterbi: the decoded path is allowed and attains the best score.
                decoded = tags[i, :n].tolist()
                assert (tags[i, n:] == -1).all()
                best_index = int(scores.argmax())
                assert best[i].item() == pytest.approx(scores[best_index].item(), abs=1e-5)
                if n > 0:
                    decoded_index = int((paths == torch.tensor(decoded)).all(1).nonzero())
                    assert scores[decoded_index].item() == pytest.approx(scores.max().item(), abs=1e-5)
                    if constraints is not None:
                        assert is_valid(decoded, constraints)
                    runner_up = scores.topk(2).values if len(scores) > 1 else scores
                    if len(scores) == 1 or runner_up[0] - runner_up[1] > 1e-4:
                        assert decoded == paths[best_index].tolist()
                # Marginals: sum to one, equal the brute-force ones, zero on padding.
                assert torch.allclose(probs[i, :n].double(), brute_marginals(paths, scores, num_tags), atol=1e-5)
                assert torch.allclose(probs[i, :n].sum(-1), torch.ones(n), atol=1e-5)
                assert (probs[i, n:] == 0).all()


@pytest.mark.parametrize("num_tags", [2, 3, 4])
def test_tag_mask_partition_against_brute_force(num_tags):
    g = torch.Generator().manual_seed(num_tags)
    transitions = torch.randn(num_tags, num_tags, generator=g)
    start, end = torch.randn(num_tags, generator=g), torch.randn(num_tags, generator=g)
    for length in range(1, 6):
        rows = [torch.randn(n, num_tags, generator=g) for n in (length, max(1, length - 1), 0)]
        emissions, mask = padded_batch(rows)
        tag_mask = torch.rand(emissions.shape, generator=g) < 0.5
        tag_mask[..., 0] |= ~tag_mask.any(-1)  # at least one tag per position
        for constraints in (None, bmes() if num_tags == 4 else None):
            got = log_partition(emissions, mask, *constrain(transitions, start, end, constraints), tag_mask=tag_mask)
            for i, row in enumerate(rows):
                _, scores = brute_force(row, transitions, start, end, constraints, tag_mask[i, : len(row)])
                expected = torch.logsumexp(scores, 0).item()
                if expected == float("-inf"):
                    # No path is consistent: a hugely negative but finite score.
                    assert torch.isfinite(got[i]) and got[i] < IMPOSSIBLE / 2
                else:
                    assert got[i].item() == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("num_tags", [3, 4])
def test_forced_tags_viterbi_and_marginals_against_brute_force(num_tags, backtrace):
    """A tag_mask forces tags at some positions; Viterbi and the marginals
    are then those of the paths that respect it (and the constraints)."""
    g = torch.Generator().manual_seed(100 + num_tags)
    transitions = torch.randn(num_tags, num_tags, generator=g)
    start, end = torch.randn(num_tags, generator=g), torch.randn(num_tags, generator=g)
    constraints = bmes() if num_tags == 4 else None
    for length in range(1, 6):
        rows = [torch.randn(n, num_tags, generator=g) * 2 for n in (length, max(1, length - 2), 0)]
        emissions, mask = padded_batch(rows)
        tag_mask = torch.ones(emissions.shape, dtype=torch.bool)
        for i, row in enumerate(rows):
            if len(row):
                # Force a random tag at one position.
                position = int(torch.randint(len(row), (1,), generator=g))
                forced = int(torch.randint(num_tags, (1,), generator=g))
                tag_mask[i, position] = False
                tag_mask[i, position, forced] = True
        tags, best = viterbi(emissions, mask, transitions, start, end, constraints, tag_mask=tag_mask)
        probs = marginals(emissions, mask, transitions, start, end, constraints, tag_mask=tag_mask)
        for i, row in enumerate(rows):
            n = len(row)
            paths, scores = brute_force(row, transitions, start, end, constraints, tag_mask[i, :n])
            if n == 0:
                assert best[i].item() == 0.0
                continue
            if scores.max() == float("-inf"):
                # The forced tag contradicts the constraints: a finite, hugely negative score.
                assert torch.isfinite(best[i]) and best[i] < IMPOSSIBLE / 2
                continue
            assert best[i].item() == pytest.approx(scores.max().item(), abs=1e-4)
            decoded = tags[i, :n]
            assert tag_mask[i, torch.arange(n), decoded].all()
            expected = brute_marginals(paths, scores, num_tags)
            assert torch.allclose(probs[i, :n].double(), expected, atol=1e-5)
            assert (probs[i, :n][~tag_mask[i, :n]] == 0).all()


def test_tag_mask_shape_is_checked():
    emissions = torch.zeros(1, 3, 4)
    with pytest.raises(ValueError, match="tag_mask shape"):
        viterbi(emissions, None, torch.zeros(4, 4), tag_mask=torch.ones(1, 3, 3, dtype=torch.bool))


@pytest.mark.parametrize("constrain_training", [False, True])
@pytest.mark.parametrize("unknown_fraction", [0.0, 0.4, 1.0])
def test_nll_with_unknown_labels_against_brute_force(constrain_training, unknown_fraction):
    num_tags = 4
    g = torch.Generator().manual_seed(7)
    transitions = torch.randn(num_tags, num_tags, generator=g)
    start, end = torch.randn(num_tags, generator=g), torch.randn(num_tags, generator=g)
    constraints = bmes()
    # Gold paths that satisfy BMES, so that constrained training has a finite loss.
    gold_rows = [[3, 0, 1, 2, 3], [0, 2, 3], [3], []]
    rows = [torch.randn(len(r), num_tags, generator=g) for r in gold_rows]
    emissions, mask = padded_batch(rows)
    tags = torch.full(mask.shape, -1, dtype=torch.long)  # -1 also in padding
    for i, r in enumerate(gold_rows):
        tags[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    tags[(torch.rand(tags.shape, generator=g) < unknown_fraction) & mask] = -1
    losses = nll(emissions, tags, mask, transitions, start, end, constraints, constrain_training)
    active = constraints if constrain_training else None
    for i, row in enumerate(rows):
        n = len(row)
        known = torch.ones(n, num_tags, dtype=torch.bool)
        for t in range(n):
            if tags[i, t] >= 0:
                known[t] = False
                known[t, tags[i, t]] = True
        _, all_scores = brute_force(row, transitions, start, end, active)
        _, gold_scores = brute_force(row, transitions, start, end, active, tag_mask=known)
        expected = torch.logsumexp(all_scores, 0) - torch.logsumexp(gold_scores, 0)
        assert losses[i].item() == pytest.approx(expected.item(), abs=1e-5)
    assert losses[-1].item() == 0.0  # the empty row


def test_path_score_against_brute_force():
    g = torch.Generator().manual_seed(3)
    num_tags = 3
    transitions = torch.randn(num_tags, num_tags, generator=g)
    start, end = torch.randn(num_tags, generator=g), torch.randn(num_tags, generator=g)
    rows = [torch.randn(n, num_tags, generator=g) for n in (4, 2, 1, 0)]
    emissions, mask = padded_batch(rows)
    tags = torch.randint(num_tags, mask.shape, generator=g).masked_fill(~mask, -1)
    got = path_score(emissions, tags, mask, transitions, start, end)
    for i, row in enumerate(rows):
        paths, scores = brute_force(row, transitions, start, end)
        if len(row) == 0:
            assert got[i].item() == 0.0
            continue
        index = int((paths == tags[i, : len(row)]).all(1).nonzero())
        assert got[i].item() == pytest.approx(scores[index].item(), abs=1e-5)


# ------------------------------------------------------------ gradients


def central_differences(fn, tensor: torch.Tensor, eps: float) -> torch.Tensor:
    grad = torch.zeros_like(tensor)
    flat, grad_flat = tensor.view(-1), grad.view(-1)
    for k in range(flat.numel()):
        original = flat[k].item()
        flat[k] = original + eps
        plus = fn().item()
        flat[k] = original - eps
        minus = fn().item()
        flat[k] = original
        grad_flat[k] = (plus - minus) / (2 * eps)
    return grad


@pytest.mark.parametrize("case", ["full", "unknown_labels", "constrained_training"])
def test_nll_gradients_match_finite_differences(case):
    # The CRF computes in float32 by design, so torch.autograd.gradcheck (which
    # needs float64 end to end) does not apply: use central differences with a
    # step large enough for float32 rounding (error ~1e-5 here) but small
    # enough for truncation error (~eps^2 = 1e-4); a wrong gradient term is
    # off by 0.01-1.
    g = torch.Generator().manual_seed(11)
    num_tags = 4
    emissions = torch.randn(3, 4, num_tags, generator=g)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    tags = torch.tensor([[3, 0, 2, 3], [0, 2, -1, -1], [3, -1, -1, -1]])
    if case == "unknown_labels":
        tags[0, 1] = tags[0, 2] = tags[1, 0] = -1
    params = {
        "emissions": emissions,
        "transitions": torch.randn(num_tags, num_tags, generator=g),
        "start": torch.randn(num_tags, generator=g),
        "end": torch.randn(num_tags, generator=g),
    }
    constraints = bmes() if case == "constrained_training" else None

    def loss():
        return nll(
            params["emissions"],
            tags,
            mask,
            params["transitions"],
            params["start"],
            params["end"],
            constraints=constraints,
            constrain_training=constraints is not None,
        ).sum()

    for p in params.values():
        p.requires_grad_()
    loss().backward()
    with torch.no_grad():
        for name, p in params.items():
            numeric = central_differences(loss, p, eps=1e-2)
            assert torch.allclose(p.grad, numeric, atol=2e-3, rtol=1e-2), name
    if constraints is not None:
        # Forbidden moves are fixed at IMPOSSIBLE: no gradient reaches them.
        assert (params["transitions"].grad[~constraints.transitions] == 0).all()
        assert (params["start"].grad[~constraints.start] == 0).all()
        assert (params["end"].grad[~constraints.end] == 0).all()
    # Padded emissions get no gradient.
    assert (params["emissions"].grad[~mask] == 0).all()


def test_log_partition_gradient_is_marginals():
    # d log Z / d emissions = per-token posteriors: ties autograd through the
    # forward algorithm to the explicit forward-backward.
    g = torch.Generator().manual_seed(5)
    emissions, mask = padded_batch([torch.randn(n, 5, generator=g) for n in (6, 3, 1)], fill=0.0)
    emissions.requires_grad_()
    transitions, start, end = torch.randn(5, 5, generator=g), torch.randn(5, generator=g), torch.randn(5, generator=g)
    log_partition(emissions, mask, transitions, start, end).sum().backward()
    expected = marginals(emissions.detach(), mask, transitions, start, end)
    assert torch.allclose(emissions.grad, expected, atol=1e-5)


# -------------------------------------------------------------- padding


def test_padding_does_not_change_results(backtrace):
    g = torch.Generator().manual_seed(2)
    num_tags = 5
    transitions, start, end = (
        torch.randn(num_tags, num_tags, generator=g),
        torch.randn(num_tags, generator=g),
        torch.randn(num_tags, generator=g),
    )
    rows = [torch.randn(n, num_tags, generator=g) for n in (9, 4, 12, 1, 0)]
    gold = [torch.randint(num_tags, (len(r),), generator=g) for r in rows]
    # NaN padding, which must be ignored, and columns that are padding in every row.
    emissions, mask = padded_batch(rows, extra_columns=3)
    tags = torch.full(mask.shape, -1, dtype=torch.long)
    for i, gt in enumerate(gold):
        tags[i, : len(gt)] = gt
    emissions.requires_grad_()
    # Fully labelled (path score) and partially labelled (restricted partition)
    # losses: the NaN padding must not reach the gradients of either.
    nll(emissions, tags, mask, transitions, start, end).sum().backward()
    assert torch.isfinite(emissions.grad).all()
    tags[1, 2] = -1
    batch_nll = nll(emissions, tags, mask, transitions, start, end)
    emissions.grad = None
    batch_nll.sum().backward()
    assert torch.isfinite(emissions.grad).all()
    batch_log_z = log_partition(emissions, mask, transitions, start, end)
    batch_tags, batch_best = viterbi(emissions, mask, transitions, start, end)
    batch_probs = marginals(emissions, mask, transitions, start, end)
    assert batch_tags.shape == mask.shape and batch_probs.shape == emissions.shape
    for i, row in enumerate(rows):
        n = len(row)
        alone = row.unsqueeze(0)
        alone_mask = torch.ones(1, n, dtype=torch.bool)
        alone_tags = tags[i : i + 1, :n]
        assert torch.allclose(batch_nll[i], nll(alone, alone_tags, alone_mask, transitions, start, end)[0], atol=1e-5)
        assert torch.allclose(batch_log_z[i], log_partition(alone, alone_mask, transitions, start, end)[0], atol=1e-5)
        t, s = viterbi(alone, alone_mask, transitions, start, end)
        assert batch_tags[i, :n].tolist() == t[0].tolist()
        assert (batch_tags[i, n:] == -1).all() and (batch_probs[i, n:] == 0).all()
        assert torch.allclose(batch_best[i], s[0], atol=1e-5)
        assert torch.allclose(batch_probs[i, :n], marginals(alone, alone_mask, transitions, start, end)[0], atol=1e-5)
    # The empty row: one empty path with score 0.
    assert batch_log_z[4] == 0 and batch_best[4] == 0 and batch_nll[4] == 0
    assert (batch_tags[4] == -1).all() and (batch_probs[4] == 0).all()


def test_empty_inputs_do_not_crash():
    transitions = torch.randn(3, 3, requires_grad=True)
    for shape in [(2, 0, 3), (0, 4, 3), (2, 4, 3)]:
        emissions = torch.randn(shape, requires_grad=True)
        mask = torch.zeros(shape[:2], dtype=torch.bool)  # every row empty
        tags = torch.full(shape[:2], -1, dtype=torch.long)
        loss = nll(emissions, tags, mask, transitions)
        assert loss.shape == (shape[0],) and (loss == 0).all()
        loss.sum().backward()  # a batch of empty documents still trains (to nothing)
        assert (emissions.grad == 0).all() and (transitions.grad == 0).all()
        assert (log_partition(emissions, mask, transitions) == 0).all()
        assert (path_score(emissions, tags, mask, transitions) == 0).all()
        best_tags, best = viterbi(emissions, mask, transitions)
        assert best_tags.shape == shape[:2] and (best_tags == -1).all() and (best == 0).all()
        assert marginals(emissions, mask, transitions).shape == shape
        assert (marginals(emissions, mask, transitions) == 0).all()


def test_mask_must_be_left_aligned():
    with pytest.raises(ValueError):
        log_partition(torch.randn(1, 3, 2), torch.tensor([[True, False, True]]), torch.zeros(2, 2))


# ---------------------------------------------------------- constraints


def assert_decodes_valid(constraints: Constraints, emissions, mask, backtrace_name):
    num_tags = constraints.transitions.shape[0]
    transitions = torch.randn(num_tags, num_tags)
    start, end = torch.randn(num_tags), torch.randn(num_tags)
    # Push the unconstrained optimum onto forbidden moves.
    transitions = transitions + 20 * (~constraints.transitions).float()
    start = start + 20 * (~constraints.start).float()
    end = end + 20 * (~constraints.end).float()
    unconstrained, _ = viterbi(emissions, mask, transitions, start, end)
    tags, best = viterbi(emissions, mask, transitions, start, end, constraints)
    lengths = mask.sum(1).tolist()
    assert not all(is_valid(unconstrained[i, :n].tolist(), constraints) for i, n in enumerate(lengths))
    for i, n in enumerate(lengths):
        assert is_valid(tags[i, :n].tolist(), constraints), (backtrace_name, tags[i, :n].tolist())
    assert (best > IMPOSSIBLE / 2).all()  # a real, allowed path score
    probs = marginals(emissions, mask, transitions, start, end, constraints)
    # Forbidden first tags have zero posterior.
    assert (probs[:, 0][:, ~constraints.start] < 1e-6).all()


def test_bmes_constraints_give_valid_paths(backtrace):
    g = torch.Generator().manual_seed(0)
    for length in (1, 2, 7, 600):
        emissions = torch.randn(4, length, 4, generator=g)
        emissions[..., BMES_TAGS.index("M")] += 50  # "all M" is never valid
        mask = torch.arange(length) < torch.tensor([[length], [max(1, length // 2)], [1], [length]])
        assert_decodes_valid(bmes(), emissions, mask, backtrace)


@pytest.mark.parametrize("scheme", [bio, bioes])
def test_bio_and_bioes_constraints_give_valid_paths(scheme, backtrace):
    tags, constraints = scheme()
    g = torch.Generator().manual_seed(1)
    emissions = torch.randn(6, 20, len(tags), generator=g) * 5
    # Favour inside tags, which may never start an entity.
    for i, tag in enumerate(tags):
        if tag.startswith("I-"):
            emissions[..., i] += 10
    mask = torch.arange(20) < torch.tensor([[20], [13], [5], [2], [1], [20]])
    assert_decodes_valid(constraints, emissions, mask, backtrace)


def test_constrain_sets_forbidden_entries_and_keeps_gradients():
    c = bmes()
    transitions = torch.randn(4, 4, requires_grad=True)
    t, s, e = constrain(transitions, None, None, c)
    assert (s[~c.start] == IMPOSSIBLE).all() and (s[c.start] == 0).all()
    assert (e[~c.end] == IMPOSSIBLE).all() and (e[c.end] == 0).all()
    assert (t[~c.transitions] == IMPOSSIBLE).all()
    assert torch.equal(t[c.transitions], transitions[c.transitions])
    t.sum().backward()
    assert torch.equal(transitions.grad, c.transitions.float())
    unconstrained = Constraints.unconstrained(4)
    assert torch.equal(constrain(transitions, None, None, unconstrained)[0], transitions)


def test_impossible_always_loses_but_stays_finite():
    # One forbidden move vs. an allowed path 50 worse at each of 600 steps.
    length = 600
    emissions = torch.zeros(1, length, 2)
    emissions[0, :, 1] = 50.0  # tag 1 everywhere would score +30000...
    allowed = torch.tensor([[True, True], [True, False]])  # ...but 1 -> 1 is forbidden
    c = Constraints(allowed, torch.ones(2, dtype=torch.bool), torch.ones(2, dtype=torch.bool))
    tags, best = viterbi(emissions, None, torch.zeros(2, 2), constraints=c)
    assert is_valid(tags[0].tolist(), c)
    assert best.item() == pytest.approx(300 * 50.0)  # alternating 1, 0, 1, 0, ...
    # A gold path that only forbidden moves can explain: huge but finite loss and gradients.
    emissions.requires_grad_()
    gold = torch.ones(1, length, dtype=torch.long)
    loss = nll(emissions, gold, None, torch.zeros(2, 2), constraints=c, constrain_training=True)
    loss.sum().backward()
    assert torch.isfinite(loss).all() and loss.item() > 1e29
    assert torch.isfinite(emissions.grad).all()


# ------------------------------------------------------------- numerics


@pytest.mark.parametrize("length", [1, 600])
def test_large_emissions_long_sequences_stay_finite(length, backtrace):
    g = torch.Generator().manual_seed(length)
    num_tags = 4
    emissions = (torch.randn(3, length, num_tags, generator=g) * 50).requires_grad_()
    mask = torch.arange(length) < torch.tensor([[length], [max(1, length - 100)], [1]])
    tags = torch.randint(num_tags, mask.shape, generator=g)
    tags[1, : length // 2] = -1  # partial labels
    model = LinearChainCRF(num_tags, constraints=bmes(), constrain_training=False)
    with torch.no_grad():
        model.transitions.normal_(0, 5)
    loss = model(emissions, tags, mask, reduction="none")
    loss.sum().backward()
    assert torch.isfinite(loss).all() and (loss >= -1e-2).all()
    for grad in (emissions.grad, model.transitions.grad, model.start_transitions.grad, model.end_transitions.grad):
        assert torch.isfinite(grad).all()
    with torch.no_grad():
        probs = model.marginals(emissions, mask)
        assert torch.isfinite(probs).all()
        assert torch.allclose(probs.sum(-1), mask.float(), atol=1e-4)
        best_tags, best = model.decode(emissions, mask)
        rescored = path_score(
            emissions,
            best_tags,
            mask,
            *constrain(model.transitions, model.start_transitions, model.end_transitions, model.constraints),
        )
        assert torch.allclose(best, rescored, rtol=1e-5, atol=1e-3)
        for i, n in enumerate(mask.sum(1).tolist()):
            assert is_valid(best_tags[i, :n].tolist(), model.constraints)
        # log Z (over allowed paths) >= best path score.
        log_z = log_partition(
            emissions,
            mask,
            *constrain(model.transitions, model.start_transitions, model.end_transitions, model.constraints),
        )
        assert (log_z >= best - 1e-5 * best.abs() - 1e-3).all()
    # With gradients on, the score is the (differentiable) rescored path.
    _, best_with_grad = model.decode(emissions, mask)
    assert best_with_grad.requires_grad
    assert torch.allclose(best_with_grad, rescored)


def test_half_and_double_inputs_compute_in_float32():
    g = torch.Generator().manual_seed(4)
    emissions = torch.randn(2, 5, 3, generator=g)
    transitions = torch.randn(3, 3, generator=g)
    tags = torch.randint(3, (2, 5), generator=g)
    reference = nll(emissions, tags, None, transitions)
    for dtype in (torch.float16, torch.float64):
        got = nll(emissions.to(dtype), tags, None, transitions.to(dtype))
        assert got.dtype == torch.float32
        tolerance = 1e-2 if dtype == torch.float16 else 1e-6
        assert torch.allclose(got, reference, atol=tolerance, rtol=tolerance)
        assert marginals(emissions.to(dtype), None, transitions).dtype == torch.float32
        assert viterbi(emissions.to(dtype), None, transitions)[1].dtype == torch.float32


# ------------------------------------------------- pytorch-crf agreement


def test_agrees_with_pytorch_crf(backtrace):
    torchcrf = pytest.importorskip("torchcrf")
    g = torch.Generator().manual_seed(9)
    num_tags = 6
    ours = LinearChainCRF(num_tags)
    theirs = torchcrf.CRF(num_tags, batch_first=True)
    theirs.load_state_dict(ours.state_dict())
    emissions = torch.randn(8, 30, num_tags, generator=g) * 3
    tags = torch.randint(num_tags, (8, 30), generator=g)
    lengths = torch.tensor([30, 1, 2, 17, 30, 29, 8, 3])
    mask = torch.arange(30) < lengths[:, None]
    for reduction in ("none", "sum", "mean", "token_mean"):
        a = ours(emissions, tags, mask, reduction=reduction)
        b = -theirs(emissions, tags, mask, reduction=reduction)
        assert torch.allclose(a, b, rtol=1e-4, atol=0), reduction
    decoded, _ = ours.decode(emissions, mask)
    assert [row[:n].tolist() for row, n in zip(decoded, lengths.tolist())] == theirs.decode(emissions, mask)


def test_module_parameters_buffers_and_reductions():
    model = LinearChainCRF(4, use_start_end=False, constraints=bmes())
    names = {name for name, _ in model.named_parameters()}
    assert names == {"transitions"}
    assert model.start_transitions is None and model.end_transitions is None
    assert ((model.transitions >= -0.1) & (model.transitions <= 0.1)).all()
    state = model.state_dict()
    assert torch.equal(state["allowed_transitions"], bmes().transitions)
    assert model.constraints is not None and LinearChainCRF(4).constraints is None
    emissions = torch.randn(2, 3, 4)
    tags = torch.tensor([[3, 0, 2], [3, 3, -1]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    per_sequence = model(emissions, tags, mask, reduction="none")
    assert model(emissions, tags, mask).item() == pytest.approx(per_sequence.sum().item())
    assert model(emissions, tags, mask, reduction="mean").item() == pytest.approx(per_sequence.mean().item())
    assert model(emissions, tags, mask, reduction="token_mean").item() == pytest.approx(per_sequence.sum().item() / 5)
    with pytest.raises(ValueError):
        model(emissions, tags, mask, reduction="max")
    decoded, _ = model.decode(emissions, mask)
    assert is_valid(decoded[0].tolist(), model.constraints)
