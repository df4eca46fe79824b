"""Linear-chain conditional random field: the maths, in plain PyTorch.

Shapes used throughout:

* ``B`` batch size, ``T`` sequence length (padded), ``K`` number of tags.
* ``emissions``: float tensor ``[B, T, K]``, unnormalised tag scores per token.
* ``mask``: bool tensor ``[B, T]``, True for real tokens. Every row must be a
  left-aligned prefix (``True ... True False ... False``); rows may be all
  False (empty documents).
* ``tags``: long tensor ``[B, T]``; values at padded positions are ignored.
* ``transitions``: ``[K, K]``, ``transitions[i, j]`` is the score of tag ``i``
  followed by tag ``j``.
* ``start`` / ``end``: ``[K]`` scores of the first / last tag, or None when
  the model has no start/end scores (treated as zeros).

The score of a tag path ``y`` of length ``n`` is::

    start[y_0] + sum_t emissions[t, y_t] + sum_{t>0} transitions[y_{t-1}, y_t] + end[y_{n-1}]

and a sequence of length 0 has exactly one (empty) path with score 0.

Everything is computed in float32, whatever the input dtype: float16 and
bfloat16 lose too much precision in long log-space sums, and float32 results
keep the callers' arrays uniform. Results are float32.

Forbidden moves (constraints, partially known gold labels) are scored
``IMPOSSIBLE``, a large *finite* negative number rather than ``-inf``: a state
that no allowed path reaches then still has a finite score, so logsumexp and
its gradient stay finite (``-inf - -inf`` is NaN).
"""

from typing import Callable, List, NamedTuple, Optional, Tuple

import numpy
import torch
from torch import Tensor

from . import kernels, viterbi_numpy

# Why -1e30:
# * every allowed path scores far above it. A path's score is bounded by
#   T * (max|emission| + max|transition|) + |start| + |end|; with emissions of
#   magnitude 50 (randn * 50 reaches ~250) and T = 10^4 that is ~3e6, 24 orders
#   of magnitude away. In float32, -1e30 + x == -1e30 for any |x| < ~3e22, so
#   one forbidden move swamps any allowed score instead of being outweighed.
# * it stays finite when many forbidden scores are added up. When no allowed
#   path exists at all (e.g. a partial label that contradicts the constraints)
#   the recursion adds up to two IMPOSSIBLEs per step; float32 reaches -inf only
#   after ~1.7e8 such steps (float32 max is 3.4e38).
IMPOSSIBLE: float = -1e30


class Constraints(NamedTuple):
    """Which tag moves are allowed; forbidden ones are scored IMPOSSIBLE.

    transitions: bool ``[K, K]``, ``transitions[i, j]``: tag ``i`` may be followed by ``j``.
    start: bool ``[K]``, tags allowed at the first position.
    end: bool ``[K]``, tags allowed at the last position.
    """

    transitions: Tensor
    start: Tensor
    end: Tensor

    @classmethod
    def unconstrained(cls, num_tags: int, device=None) -> "Constraints":
        """Constraints that allow every move (useful as a neutral default)."""
        return cls(
            torch.ones(num_tags, num_tags, dtype=torch.bool, device=device),
            torch.ones(num_tags, dtype=torch.bool, device=device),
            torch.ones(num_tags, dtype=torch.bool, device=device),
        )


def constrain(
    transitions: Tensor,
    start: Optional[Tensor],
    end: Optional[Tensor],
    constraints: Optional[Constraints],
) -> Tuple[Tensor, Tensor, Tensor]:
    """Return float32 ``transitions [K, K]``, ``start [K]``, ``end [K]`` with
    forbidden entries set to IMPOSSIBLE.

    A None ``start`` / ``end`` becomes zeros. ``masked_fill`` keeps the result
    differentiable w.r.t. the allowed entries, and forbidden entries get a zero
    gradient, so training never pushes them around.
    """
    transitions = transitions.float()
    num_tags = transitions.shape[0]
    start = transitions.new_zeros(num_tags) if start is None else start.float()
    end = transitions.new_zeros(num_tags) if end is None else end.float()
    if constraints is None:
        return transitions, start, end
    device = transitions.device
    return (
        transitions.masked_fill(~constraints.transitions.to(device), IMPOSSIBLE),
        start.masked_fill(~constraints.start.to(device), IMPOSSIBLE),
        end.masked_fill(~constraints.end.to(device), IMPOSSIBLE),
    )


class _Batch(NamedTuple):
    emissions: Tensor  # float32 [B, T', K], trimmed to the longest row
    mask: Tensor  # bool [B, T']
    lengths: Tensor  # long [B]
    min_length: int  # positions < min_length are real in every row
    padded_length: int  # the caller's T, to pad results back to


def _restrict(emissions: Tensor, tag_mask: Optional[Tensor]) -> Tensor:
    """Score IMPOSSIBLE every tag that ``tag_mask [B, T, K]`` forbids at its position."""
    if tag_mask is None:
        return emissions
    if tag_mask.shape != emissions.shape:
        raise ValueError(f"tag_mask shape {tuple(tag_mask.shape)} does not match emissions {tuple(emissions.shape)}")
    return emissions.float().masked_fill(~tag_mask.to(device=emissions.device, dtype=torch.bool), IMPOSSIBLE)


def _prepare(emissions: Tensor, mask: Optional[Tensor]) -> _Batch:
    if emissions.dim() != 3:
        raise ValueError(f"emissions must be [B, T, K], got shape {tuple(emissions.shape)}")
    emissions = emissions.float()
    batch_size, padded_length, _ = emissions.shape
    if mask is None:
        mask = torch.ones(batch_size, padded_length, dtype=torch.bool, device=emissions.device)
    else:
        mask = mask.to(device=emissions.device, dtype=torch.bool)
    if mask.shape != emissions.shape[:2]:
        raise ValueError(f"mask shape {tuple(mask.shape)} does not match emissions {tuple(emissions.shape)}")
    lengths = mask.sum(dim=1)
    if batch_size == 0 or padded_length == 0:
        min_length = max_length = 0
    else:
        not_prefix = (mask[:, 1:] > mask[:, :-1]).any()
        # One host sync per call (not per step): the loop bounds must be Python ints.
        min_length, max_length, bad = torch.stack([*torch.aminmax(lengths), not_prefix]).tolist()
        if bad:
            raise ValueError("mask rows must be left-aligned: True for real tokens, then False")
    # Trailing all-padding columns cannot change any result: don't loop over them.
    return _Batch(emissions[:, :max_length], mask[:, :max_length], lengths, min_length, padded_length)


# The recursions below work "step-major, batch-last": emissions [T, K, B], a
# state (alpha, beta, Viterbi score) [K, B], and the per-step broadcast
# [K_from, K_to, B], reduced over its *leading* dimension. On a contiguous
# tensor that reduction is an elementwise max/sum across K contiguous slabs,
# which vectorises well. On CPU it measured faster than logsumexp over the
# middle dimension of [B, K, K] as pytorch-crf does, and Viterbi's values-only
# amax faster than pytorch-crf's max-with-indices (docs/results.md, "CRF kernels").
#
# Forward recursions simply run on past the end of shorter rows and each row's
# state is read at its own last position afterwards: one gather per call
# instead of a select per step.


def _step_major(batch: _Batch, zero_padding: bool = True) -> Tuple[Tensor, Tensor]:
    """emissions ``[T, K, B]`` (contiguous) and mask ``[T, 1, B]``.

    ``zero_padding``: padded emissions may hold garbage (even NaN/inf), and the
    recursions run on past each row's end. Results never read those steps,
    but backward passes still multiply their zero gradients by them (0 * NaN
    is NaN), so zero the padding wherever gradients may flow. Viterbi, which
    never differentiates through its search, skips the extra op.
    """
    emissions = batch.emissions.permute(1, 2, 0).contiguous()
    mask = batch.mask.t().unsqueeze(1)
    if zero_padding and batch.min_length < emissions.shape[0]:
        emissions = emissions.masked_fill(~mask, 0.0)
    return emissions, mask


def _at_last_position(states: Tensor, batch: _Batch) -> Tensor:
    """Each row's state at its last real position: ``[T, K, B]`` -> ``[K, B]``.

    Empty rows get the first state (callers overwrite their results).
    """
    if batch.min_length == states.shape[0]:
        return states[-1]
    last = (batch.lengths - 1).clamp(min=0)
    rows = torch.arange(last.shape[0], device=last.device)
    return states[last, :, rows].t()


def _forward_alphas(emissions: Tensor, transitions: Tensor, start: Tensor) -> List[Tensor]:
    """Forward algorithm in log space over step-major emissions ``[T, K, B]``:
    the ``T`` alphas ``[K, B]``.

    ``alpha_t[j, b]`` = log of the summed exp-scores of all length-(t+1)
    prefixes of row b that end in tag j (start score included). Values past a
    row's end are meaningless.
    """
    transitions_from_to = transitions.unsqueeze(2)  # [K_from, K_to, 1]
    steps = emissions.unbind(0)
    alpha = start.unsqueeze(1) + steps[0]
    alphas = [alpha]
    for emission in steps[1:]:
        # The emission does not depend on the previous tag: add it after the
        # logsumexp, on [K, B], instead of broadcasting it into [K, K, B].
        alpha = torch.logsumexp(alpha.unsqueeze(1) + transitions_from_to, dim=0) + emission
        alphas.append(alpha)
    return alphas


def _zero_scores(batch: _Batch, *parameters: Tensor) -> Tensor:
    """Zeros ``[B]`` for a batch of empty rows, still connected to the inputs
    so that ``backward()`` on such a batch gives zero gradients, not an error."""
    zeros = batch.emissions.sum(dim=(1, 2))
    for parameter in parameters:
        zeros = zeros + parameter.reshape(-1)[:0].sum()
    return zeros


def _log_partition(batch: _Batch, transitions: Tensor, start: Tensor, end: Tensor) -> Tensor:
    if batch.emissions.shape[1] == 0:
        return _zero_scores(batch, transitions, start, end)
    alphas = _forward_alphas(_step_major(batch)[0], transitions, start)
    alpha = alphas[-1] if batch.min_length == len(alphas) else _at_last_position(torch.stack(alphas), batch)
    log_z = torch.logsumexp(alpha + end.unsqueeze(1), dim=0)
    if batch.min_length == 0:
        # An empty row has one empty path with score 0.
        log_z = torch.where(batch.lengths > 0, log_z, torch.zeros_like(log_z))
    return log_z


def _path_score(batch: _Batch, tags: Tensor, transitions: Tensor, start: Tensor, end: Tensor) -> Tensor:
    emissions, mask, lengths = batch.emissions, batch.mask, batch.lengths
    batch_size, length, num_tags = emissions.shape
    if length == 0:
        return _zero_scores(batch, transitions, start, end)
    # Padded tags may be anything (-1, out of range): replace them by a valid
    # index and mask their contribution out.
    tags = tags[:, :length].to(emissions.device).long().masked_fill(~mask, 0)
    emission_scores = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)  # [B, T]
    transition_scores = transitions.reshape(-1)[tags[:, :-1] * num_tags + tags[:, 1:]]
    # With prefix masks, the move into position t exists iff t is real.
    score = torch.where(mask, emission_scores, torch.zeros_like(emission_scores)).sum(1)
    score = score + torch.where(mask[:, 1:], transition_scores, torch.zeros_like(transition_scores)).sum(1)
    first_tags = tags[:, 0]
    last_tags = tags.gather(1, (lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)
    boundary = start[first_tags] + end[last_tags]
    return score + torch.where(lengths > 0, boundary, torch.zeros_like(boundary))


def path_score(
    emissions: Tensor,
    tags: Tensor,
    mask: Optional[Tensor],
    transitions: Tensor,
    start: Optional[Tensor] = None,
    end: Optional[Tensor] = None,
) -> Tensor:
    """Score of the given tag paths, ``[B]``.

    ``tags [B, T]`` must hold valid tag ids at real positions; padded positions
    are ignored (they may be -1). Pass transitions through ``constrain`` first
    to score forbidden moves as IMPOSSIBLE. Fully vectorised, no loop.
    """
    batch = _prepare(emissions, mask)
    transitions, start, end = constrain(transitions, start, end, None)
    return _path_score(batch, tags, transitions, start, end)


def log_partition(
    emissions: Tensor,
    mask: Optional[Tensor],
    transitions: Tensor,
    start: Optional[Tensor] = None,
    end: Optional[Tensor] = None,
    tag_mask: Optional[Tensor] = None,
) -> Tensor:
    """Log of the summed exp-scores of all tag paths, ``[B]``, by the forward algorithm.

    ``tag_mask``: optional bool ``[B, T, K]`` restricting each position to a
    set of tags; the sum then runs only over paths that use allowed tags
    everywhere (e.g. the paths consistent with partially known gold labels).
    Apply constraints with ``constrain`` beforehand. A row whose tag_mask (and
    constraints) leave no path gets a score around IMPOSSIBLE, finite.
    """
    batch = _prepare(_restrict(emissions, tag_mask), mask)
    transitions, start, end = constrain(transitions, start, end, None)
    return _log_partition(batch, transitions, start, end)


def nll(
    emissions: Tensor,
    tags: Tensor,
    mask: Optional[Tensor],
    transitions: Tensor,
    start: Optional[Tensor] = None,
    end: Optional[Tensor] = None,
    constraints: Optional[Constraints] = None,
    constrain_training: bool = False,
) -> Tensor:
    """Negative log-likelihood of the gold tags per sequence, ``[B]`` (>= 0).

    ``tags`` may hold -1 at real positions for unknown gold labels: the gold
    score is then the log-partition over all paths consistent with the known
    labels (unknown positions are marginalised). With ``constrain_training``,
    ``constraints`` restrict both the gold paths and the normaliser; a gold
    path that breaks the constraints then costs about -IMPOSSIBLE (finite, but
    huge: fix the data). Without it, constraints are ignored here.
    """
    active_constraints = constraints if constrain_training else None
    transitions, start, end = constrain(transitions, start, end, active_constraints)
    batch = _prepare(emissions, mask)
    batch_size, length, num_tags = batch.emissions.shape
    tags = tags[:, :length].to(batch.emissions.device).long()
    unknown = (tags < 0) & batch.mask
    if length == 0 or not bool(unknown.any()):
        gold = _path_score(batch, tags, transitions, start, end)
        return _log_partition(batch, transitions, start, end) - gold
    # Unknown labels: the gold score is a restricted log-partition. Stack the
    # restricted and the free copy along the batch so that one forward pass
    # (one Python loop over time) computes both.
    known_one_hot = torch.nn.functional.one_hot(tags.clamp(min=0), num_tags).bool()
    tag_mask = known_one_hot | unknown.unsqueeze(-1) | ~batch.mask.unsqueeze(-1)
    restricted = batch.emissions.masked_fill(~tag_mask, IMPOSSIBLE)
    both = _Batch(
        torch.cat([restricted, batch.emissions]),
        torch.cat([batch.mask, batch.mask]),
        torch.cat([batch.lengths, batch.lengths]),
        batch.min_length,
        batch.padded_length,
    )
    gold, log_z = _log_partition(both, transitions, start, end).split(batch_size)
    return log_z - gold


def viterbi(
    emissions: Tensor,
    mask: Optional[Tensor],
    transitions: Tensor,
    start: Optional[Tensor] = None,
    end: Optional[Tensor] = None,
    constraints: Optional[Constraints] = None,
    tag_mask: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    """Best tag path per sequence: tags ``[B, T]`` (long, -1 at padding) and scores ``[B]``.

    Constraints, when given, are always applied. ``tag_mask``: optional bool
    ``[B, T, K]`` of the tags allowed at each position; a position with a
    single allowed tag is a *forced* tag (e.g. an entity set before the
    tagger ran), and the rest of the path is decoded around it. The search
    then returns the best path among those that respect the mask; when none
    does (the forced tags contradict the constraints), the score is around
    IMPOSSIBLE and the path is the least bad one. The search runs without
    autograd. When gradients are enabled and an input requires them, the
    returned score is the ``path_score`` of the decoded path (differentiable,
    e.g. for a max-margin or perceptron loss); otherwise it is the search's
    maximum. Both are the same number up to float32 rounding.
    """
    transitions, start, end = constrain(transitions, start, end, constraints)
    batch = _prepare(_restrict(emissions, tag_mask), mask)
    batch_size, length, num_tags = batch.emissions.shape
    device = batch.emissions.device
    if length == 0:
        no_tags = torch.full((batch_size, batch.padded_length), -1, dtype=torch.long, device=device)
        return no_tags, _zero_scores(batch, transitions, start, end)
    with torch.no_grad():
        decode = _viterbi_decoder(device, num_tags * num_tags * batch_size)
        best_tags, best_score = decode(batch, transitions.detach(), start.detach(), end.detach())
        if length < batch.padded_length:
            best_tags = torch.nn.functional.pad(best_tags, (0, batch.padded_length - length), value=-1)
    needs_grad = torch.is_grad_enabled() and any(
        x is not None and x.requires_grad for x in (emissions, transitions, start, end)
    )
    if needs_grad:
        # Same value as the search's maximum (up to float rounding), but differentiable.
        best_score = _path_score(batch, best_tags, transitions, start, end)
    elif batch.min_length == 0:
        best_score = torch.where(batch.lengths > 0, best_score, torch.zeros_like(best_score))
    return best_tags, best_score


def _search_torch(step_emissions: Tensor, transitions: Tensor, start: Tensor) -> Tensor:
    """The Viterbi states ``[T, K, B]``: each tag's best score at each step."""
    transitions_from_to = transitions.unsqueeze(2)  # [K_from, K_to, 1]
    steps = step_emissions.unbind(0)
    score = start.unsqueeze(1) + steps[0]  # [K, B]
    scores = [score]
    for emission in steps[1:]:
        # Only the best score per tag: amax is several times cheaper than
        # max-with-indices; backpointers are recovered afterwards.
        score = (score.unsqueeze(1) + transitions_from_to).amax(dim=0) + emission
        scores.append(score)
    return torch.stack(scores)


def _backtrace_numpy(scores: Tensor, batch: _Batch, transitions: Tensor, last_tag: Tensor) -> Tensor:
    """Same arguments and result as :func:`_backtrace_bulk`, walking back one
    step at a time (all rows together) and recovering only the backpointers
    used (:func:`spacy_crf.ml.viterbi_numpy.backtrace`)."""
    real = batch.mask.t().numpy()  # [T, B]
    path = viterbi_numpy.backtrace(scores.numpy(), real, batch.min_length, transitions.numpy(), last_tag.numpy())
    return torch.from_numpy(path)


def _decode_with(search: Callable, backtrace: Callable) -> Callable:
    """A decoder ``(batch, transitions, start, end) -> (tags [B, T'], scores [B])``
    from a search and a backtrace kernel, in torch."""

    def decode(batch: _Batch, transitions: Tensor, start: Tensor, end: Tensor) -> Tuple[Tensor, Tensor]:
        step_emissions, _ = _step_major(batch, zero_padding=False)
        scores = search(step_emissions, transitions, start)
        final_scores = _at_last_position(scores, batch) + end.unsqueeze(1)
        best_score, last_tag = final_scores.max(dim=0)  # [B]
        path = backtrace(scores, batch, transitions, last_tag)
        return path.masked_fill(~batch.mask, -1), best_score

    return decode


def _decode_numpy(batch: _Batch, transitions: Tensor, start: Tensor, end: Tensor) -> Tuple[Tensor, Tensor]:
    """The same decoder as ``_decode_with(_search_torch, _backtrace_numpy)``,
    in numpy from the step-major transpose on (CPU tensors share their
    memory): for a small step each torch op's overhead dominates, and numpy's
    is several times smaller. The same float32 sums in the same order, so the
    paths and scores are identical."""
    step_emissions = numpy.ascontiguousarray(batch.emissions.numpy().transpose(1, 2, 0))
    path, best_score = viterbi_numpy.best_paths(
        step_emissions, batch.lengths.numpy(), transitions.numpy(), start.numpy(), end.numpy()
    )
    return torch.from_numpy(path), torch.from_numpy(best_score)


def _decode_compiled(batch: _Batch, transitions: Tensor, start: Tensor, end: Tensor) -> Tuple[Tensor, Tensor]:
    """The same decoder again, in the compiled kernel (:mod:`.kernels`):
    each row over its own real positions (masks are left-aligned, so the
    masked rows are the rows one after another), with the same sums and
    ties, so the paths and scores are identical."""
    mask = batch.mask.numpy()
    paths, best_score, _ = viterbi_numpy.decode_rows(
        batch.emissions.numpy()[mask], batch.lengths.numpy(), transitions.numpy(), start.numpy(), end.numpy()
    )
    path = numpy.full(mask.shape, -1, dtype=numpy.int64)
    path[mask] = paths
    return torch.from_numpy(path), torch.from_numpy(best_score)


# How Viterbi runs, by device and the size of a step ([K, K, B] elements),
# as measured by scripts/bench_crf.py (docs/results.md, "CRF kernels"):
#
# * the search (the best score of each tag at each step) is a loop over the
#   steps of ~4 small ops. On CPU, while a step is small (up to 21 tags at
#   batch 32), each op's overhead dominates and numpy's is a fraction of
#   torch's, so the whole decode runs in numpy, or in the compiled kernel
#   with no op per step where it is built; for larger steps torch's kernels
#   win.
# * the backtrace: on CPU, walking back one step at a time and computing only
#   the backpointer of the tag each row takes (O(T K B) work, numpy again);
#   on accelerators, where small ops are launch-bound, every backpointer at
#   once in a few large ops, followed by pointer doubling ("bulk").
_NUMPY_DECODE_MAX_STEP_SIZE = 16384
# Largest [steps, K, K, B] block the bulk path materialises at once (memory bound).
_BULK_BACKPOINTERS_CHUNK = 1 << 22


def _viterbi_decoder(device: torch.device, step_size: int) -> Callable:
    """The decoder for a device and a step of ``step_size`` elements."""
    if device.type != "cpu":
        return _decode_with(_search_torch, _backtrace_bulk)
    if step_size <= _NUMPY_DECODE_MAX_STEP_SIZE:
        return _decode_compiled if kernels.active(kernels.decode_flat) else _decode_numpy
    return _decode_with(_search_torch, _backtrace_numpy)


def _backtrace_bulk(scores: Tensor, batch: _Batch, transitions: Tensor, last_tag: Tensor) -> Tensor:
    """Best path ``[B, T]`` from the Viterbi states ``[T, K, B]`` and each
    row's best last tag ``[B]``; values at padded positions are arbitrary."""
    num_steps, num_tags, batch_size = scores.shape
    num_moves = num_steps - 1
    if num_moves == 0:
        return last_tag.unsqueeze(1)
    transitions_from_to = transitions.unsqueeze(2)  # [K_from, K_to, 1]
    steps_per_chunk = max(1, _BULK_BACKPOINTERS_CHUNK // (num_tags * num_tags * batch_size))
    # pointers[t, j, b]: best tag at step t given tag j at step t+1.
    pointers = torch.cat(
        [(chunk.unsqueeze(2) + transitions_from_to).max(dim=1).indices for chunk in scores[:-1].split(steps_per_chunk)]
    )
    # Past a row's end every tag points at itself, so the row's last tag is
    # carried back unchanged to its real last position.
    step_mask = batch.mask.t().unsqueeze(1)  # [T, 1, B]
    identity = torch.arange(num_tags, device=last_tag.device).unsqueeze(1)
    pointers = torch.where(step_mask[1:], pointers, identity)
    # Suffix scan by pointer doubling: afterwards pointers[t] maps a tag at the
    # last step straight to the tag at step t. Composing two maps is one
    # gather along the tag axis, so log2(T) rounds replace a T-step loop.
    shift = 1
    while shift < num_moves:
        composed = pointers[: num_moves - shift].gather(1, pointers[shift:])
        pointers = torch.cat([composed, pointers[num_moves - shift :]])
        shift *= 2
    index = last_tag.view(1, 1, batch_size).expand(num_moves, 1, batch_size)
    earlier_tags = pointers.gather(1, index).squeeze(1)  # [T-1, B]
    return torch.cat([earlier_tags, last_tag.unsqueeze(0)]).t()


def marginals(
    emissions: Tensor,
    mask: Optional[Tensor],
    transitions: Tensor,
    start: Optional[Tensor] = None,
    end: Optional[Tensor] = None,
    constraints: Optional[Constraints] = None,
    tag_mask: Optional[Tensor] = None,
) -> Tensor:
    """Posterior probability of each tag at each position, ``[B, T, K]``.

    Explicit forward-backward in log space. Rows at padded positions are 0,
    rows at real positions sum to 1. Constraints, when given, are applied;
    so is ``tag_mask`` (bool ``[B, T, K]``, as in ``viterbi``): forbidden
    tags get probability 0.
    """
    transitions, start, end = constrain(transitions, start, end, constraints)
    batch = _prepare(_restrict(emissions, tag_mask), mask)
    batch_size, length, num_tags = batch.emissions.shape
    result = batch.emissions.new_zeros(batch_size, batch.padded_length, num_tags)
    if length == 0:
        return result
    step_emissions, step_mask = _step_major(batch)
    alphas = _forward_alphas(step_emissions, transitions, start)
    # beta_t[i, b] = log summed exp-scores of everything after tag i at step t,
    # end score included. The backward pass must start at each row's own end,
    # so here rows are reset to `end` at padded steps instead of gathered.
    transitions_to_from = transitions.t().contiguous().unsqueeze(2)  # [K_to, K_from, 1]
    end_beta = end.unsqueeze(1).expand(num_tags, batch_size)
    beta = end_beta
    betas = [beta]
    for t in range(length - 2, -1, -1):
        next_beta = torch.logsumexp((step_emissions[t + 1] + beta).unsqueeze(1) + transitions_to_from, dim=0)
        beta = next_beta if t + 1 < batch.min_length else torch.where(step_mask[t + 1], next_beta, end_beta)
        betas.append(beta)
    betas.reverse()
    log_joint = (torch.stack(alphas) + torch.stack(betas)).permute(2, 0, 1)  # [B, T, K]
    # Every position's logsumexp equals log Z in exact arithmetic; normalising
    # per position keeps float32 rounding, which accumulates over long
    # sequences, from making rows sum to slightly more or less than 1.
    probs = torch.softmax(log_joint, dim=-1).masked_fill(~batch.mask.unsqueeze(-1), 0.0)
    result[:, :length] = probs
    return result


class LinearChainCRF(torch.nn.Module):
    """nn.Module convenience wrapper around the functions above.

    Parameters: ``transitions [K, K]`` and, with ``use_start_end``,
    ``start_transitions [K]`` and ``end_transitions [K]`` (None otherwise),
    initialised uniform(-0.1, 0.1) like pytorch-crf. Constraints are stored as
    bool buffers (``allowed_transitions``, ``allowed_start``, ``allowed_end``)
    so they follow ``.to(device)`` and the state dict. Decoding and marginals
    always apply them; training applies them only with ``constrain_training``.

    Unlike pytorch-crf, whose forward returns the log-likelihood, ``forward``
    returns the negative log-likelihood (a loss to minimise).
    """

    def __init__(
        self,
        num_tags: int,
        use_start_end: bool = True,
        constraints: Optional[Constraints] = None,
        constrain_training: bool = False,
    ) -> None:
        if num_tags <= 0:
            raise ValueError(f"num_tags must be positive, got {num_tags}")
        super().__init__()
        self.num_tags = num_tags
        self.use_start_end = use_start_end
        self.constrain_training = constrain_training
        self.transitions = torch.nn.Parameter(torch.empty(num_tags, num_tags))
        if use_start_end:
            self.start_transitions = torch.nn.Parameter(torch.empty(num_tags))
            self.end_transitions = torch.nn.Parameter(torch.empty(num_tags))
        else:
            self.register_parameter("start_transitions", None)
            self.register_parameter("end_transitions", None)
        if constraints is None:
            for name in ("allowed_transitions", "allowed_start", "allowed_end"):
                self.register_buffer(name, None)
        else:
            if tuple(constraints.transitions.shape) != (num_tags, num_tags):
                raise ValueError("constraints do not match num_tags")
            self.register_buffer("allowed_transitions", constraints.transitions.bool().clone())
            self.register_buffer("allowed_start", constraints.start.bool().clone())
            self.register_buffer("allowed_end", constraints.end.bool().clone())
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for parameter in (self.transitions, self.start_transitions, self.end_transitions):
            if parameter is not None:
                torch.nn.init.uniform_(parameter, -0.1, 0.1)

    @property
    def constraints(self) -> Optional[Constraints]:
        if self.allowed_transitions is None:
            return None
        return Constraints(self.allowed_transitions, self.allowed_start, self.allowed_end)

    def extra_repr(self) -> str:
        return (
            f"num_tags={self.num_tags}, use_start_end={self.use_start_end}, "
            f"constrained={self.allowed_transitions is not None}, "
            f"constrain_training={self.constrain_training}"
        )

    def forward(
        self,
        emissions: Tensor,
        tags: Tensor,
        mask: Optional[Tensor] = None,
        reduction: str = "sum",
    ) -> Tensor:
        """NLL of ``tags [B, T]`` (-1 = unknown label) given ``emissions [B, T, K]``.

        reduction: ``none`` -> ``[B]``; ``sum``; ``mean`` over sequences;
        ``token_mean`` -> sum divided by the number of real tokens.
        """
        if reduction not in ("none", "sum", "mean", "token_mean"):
            raise ValueError(f"invalid reduction: {reduction!r}")
        losses = nll(
            emissions,
            tags,
            mask,
            self.transitions,
            self.start_transitions,
            self.end_transitions,
            constraints=self.constraints,
            constrain_training=self.constrain_training,
        )
        if reduction == "none":
            return losses
        if reduction == "sum":
            return losses.sum()
        if reduction == "mean":
            return losses.mean()
        num_tokens = losses.new_tensor(tags.numel()) if mask is None else mask.sum().float()
        return losses.sum() / num_tokens.clamp(min=1.0)

    def decode(self, emissions: Tensor, mask: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """Viterbi: best tags ``[B, T]`` (-1 at padding) and their scores ``[B]``."""
        return viterbi(
            emissions,
            mask,
            self.transitions,
            self.start_transitions,
            self.end_transitions,
            constraints=self.constraints,
        )

    def marginals(self, emissions: Tensor, mask: Optional[Tensor] = None) -> Tensor:
        """Per-token tag posteriors ``[B, T, K]`` (0 at padding)."""
        return marginals(
            emissions,
            mask,
            self.transitions,
            self.start_transitions,
            self.end_transitions,
            constraints=self.constraints,
        )
