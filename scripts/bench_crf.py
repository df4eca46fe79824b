"""Time spacy_crf's CRF against pytorch-crf on identical inputs, side by side.

Run from the repository root:

    python scripts/bench_crf.py                 # torch's default thread count
    python scripts/bench_crf.py --threads 1 --repeats 30

For each setting (batch 32; lengths 32 and 128, with per-row lengths drawn
from [T/2, T]; K=4 BMES tags and K=21 BIO tags over 10 entity types) it times

* NLL forward + backward (gradients w.r.t. emissions and CRF parameters),
* Viterbi decoding under ``torch.no_grad()``,

with both implementations on the same parameters and inputs, reports the
median time per call over N repeats after warm-up runs, the speed-up
(pytorch-crf time / ours), the largest relative NLL difference and whether
the decoded paths agree.
Our constrained decode (BMES / BIO constraints) is timed as an extra column;
pytorch-crf has no constraints, so only the unconstrained runs are compared.
Targets: Viterbi >= 3x faster, NLL no slower, NLL equal to 1e-4 relative.

``--one-call`` times something else: both of the shipped pipeline's taggers'
Viterbi searches in one call (rows of both, tags padded to the larger set,
a transition matrix per row) against one call each, at its sub-batch shapes.

On a machine shared with other work, timings are noisy: the implementations
take turns within every repeat so that load hits both alike, and ``--threads
1`` avoids intra-op thread pools, which stall when the other cores are busy.
"""

import argparse
import math
import statistics
import time
from typing import Callable, List, Sequence, Tuple

import numpy
import torch
from torchcrf import CRF
from wasabi import msg

from spacy_crf.ml import viterbi_numpy
from spacy_crf.ml.crf import IMPOSSIBLE, Constraints, LinearChainCRF


def bmes_constraints() -> Constraints:
    b, m, e, s = range(4)
    allowed = torch.zeros(4, 4, dtype=torch.bool)
    for i, j in [(b, m), (b, e), (m, m), (m, e), (e, b), (e, s), (s, b), (s, s)]:
        allowed[i, j] = True
    start = torch.tensor([True, False, False, True])
    end = torch.tensor([False, False, True, True])
    return Constraints(allowed, start, end)


def bio_constraints(num_types: int) -> Constraints:
    # Tag 0 is O, then B-x = 1 + 2x, I-x = 2 + 2x: I-x only after B-x or I-x.
    num_tags = 1 + 2 * num_types
    allowed = torch.ones(num_tags, num_tags, dtype=torch.bool)
    start = torch.ones(num_tags, dtype=torch.bool)
    for x in range(num_types):
        inside = 2 + 2 * x
        allowed[:, inside] = False
        allowed[1 + 2 * x, inside] = True
        allowed[inside, inside] = True
        start[inside] = False
    return Constraints(allowed, start, torch.ones(num_tags, dtype=torch.bool))


def median_ms(fns: Sequence[Callable[[], object]], warmup: int, repeats: int, block_ms: float) -> List[float]:
    """Median wall time per call, in ms, of each function.

    Every repeat times a block of back-to-back calls of each function in
    turn, with as many calls per block as fill ``block_ms`` (at least one).
    Taking turns spreads load from other processes evenly over the
    functions; blocks amortise the cache and allocator upset that the
    previous function leaves behind, which otherwise adds 5-25% to whichever
    function runs right after pytorch-crf.
    """
    calls_per_block = []
    for fn in fns:
        for _ in range(warmup):
            fn()
        t0 = time.perf_counter()
        fn()
        one_call_ms = 1000 * (time.perf_counter() - t0)
        calls_per_block.append(max(1, math.ceil(block_ms / max(one_call_ms, 1e-3))))
    times: List[List[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, calls, fn_times in zip(fns, calls_per_block, times):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            fn_times.append((time.perf_counter() - t0) / calls)
    return [1000 * statistics.median(fn_times) for fn_times in times]


def make_inputs(batch: int, length: int, num_tags: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    emissions = torch.randn(batch, length, num_tags, generator=generator) * 3
    tags = torch.randint(num_tags, (batch, length), generator=generator)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=generator)
    lengths[0] = length  # the longest row fills the padded length, as in real batches
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return emissions, tags, mask


def bench_setting(
    label: str, num_tags: int, constraints: Constraints, length: int, args
) -> Tuple[List[str], float, bool]:
    emissions, tags, mask = make_inputs(args.batch, length, num_tags, seed=args.seed + length)
    torch.manual_seed(args.seed)
    ours = LinearChainCRF(num_tags)
    theirs = CRF(num_tags, batch_first=True)
    theirs.load_state_dict(ours.state_dict())  # same parameter names and shapes
    ours_constrained = LinearChainCRF(num_tags, constraints=constraints)
    ours_constrained.load_state_dict(ours.state_dict(), strict=False)

    def nll_ours():
        x = emissions.detach().requires_grad_()
        ours.zero_grad(set_to_none=True)
        ours(x, tags, mask, reduction="sum").backward()

    def nll_theirs():
        x = emissions.detach().requires_grad_()
        theirs.zero_grad(set_to_none=True)
        (-theirs(x, tags, mask, reduction="sum")).backward()

    def decode_ours():
        with torch.no_grad():
            return ours.decode(emissions, mask)

    def decode_ours_constrained():
        with torch.no_grad():
            return ours_constrained.decode(emissions, mask)

    def decode_theirs():
        with torch.no_grad():
            return theirs.decode(emissions, mask)

    with torch.no_grad():
        nll_a = ours(emissions, tags, mask, reduction="none").double()
        nll_b = -theirs(emissions, tags, mask, reduction="none").double()
    rel_diff = ((nll_a - nll_b).abs() / nll_b.abs().clamp(min=1.0)).max().item()
    decoded, _ = decode_ours()
    ours_paths = [row[row >= 0].tolist() for row in decoded]
    same_paths = ours_paths == decode_theirs()

    w, r, n = args.warmup, args.repeats, args.block_ms
    t_nll_theirs, t_nll_ours = median_ms([nll_theirs, nll_ours], w, r, n)
    t_vit_theirs, t_vit_ours, t_vit_constrained = median_ms(
        [decode_theirs, decode_ours, decode_ours_constrained], w, r, n
    )
    row = [
        label,
        str(num_tags),
        str(length),
        f"{t_nll_theirs:.2f}",
        f"{t_nll_ours:.2f}",
        f"{t_nll_theirs / t_nll_ours:.2f}x",
        f"{t_vit_theirs:.2f}",
        f"{t_vit_ours:.2f}",
        f"{t_vit_theirs / t_vit_ours:.2f}x",
        f"{t_vit_constrained:.2f}",
        f"{rel_diff:.1e}",
        "yes" if same_paths else "NO",
    ]
    return row, rel_diff, same_paths


def bench_one_call(args) -> None:
    """Both taggers' Viterbi search in one call against one call each, at the
    sub-batch shapes of the shipped pipeline (a BMES segmenter, K = 4, and a
    BIOES tagger of 3 types, K = 13; sub-batches of up to 4,096 padded
    tokens). One call pads the segmenter's rows to 13 tags (the extra ones
    IMPOSSIBLE) and carries a transition matrix per row."""
    rng = numpy.random.default_rng(args.seed)
    small, large = 4, 13
    rows = []
    for batch, length in [(128, 32), (64, 64), (32, 128), (16, 256)]:
        seg = rng.standard_normal((length, small, batch)).astype(numpy.float32)
        ner = rng.standard_normal((length, large, batch)).astype(numpy.float32)
        seg_t = rng.standard_normal((small, small)).astype(numpy.float32)
        ner_t = rng.standard_normal((large, large)).astype(numpy.float32)
        both = numpy.full((length, large, 2 * batch), IMPOSSIBLE, dtype=numpy.float32)
        both[:, :small, :batch], both[:, :, batch:] = seg, ner
        both_t = numpy.full((large, large, 2 * batch), IMPOSSIBLE, dtype=numpy.float32)
        both_t[:small, :small, :batch], both_t[:, :, batch:] = seg_t[:, :, None], ner_t[:, :, None]
        both_start = numpy.zeros((large, 2 * batch), dtype=numpy.float32)
        both_start[small:, :batch] = IMPOSSIBLE
        one = viterbi_numpy.search(both, both_t, both_start)
        assert numpy.array_equal(one[:, :, batch:], viterbi_numpy.search(ner, ner_t, numpy.zeros(large, "f")))

        def two_calls():
            viterbi_numpy.search(seg, seg_t, numpy.zeros(small, dtype=numpy.float32))
            viterbi_numpy.search(ner, ner_t, numpy.zeros(large, dtype=numpy.float32))

        t_two, t_one = median_ms(
            [two_calls, lambda: viterbi_numpy.search(both, both_t, both_start)],
            args.warmup,
            args.repeats,
            args.block_ms,
        )
        rows.append([str(batch), str(length), f"{t_two:.2f}", f"{t_one:.2f}", f"{t_two / t_one:.2f}x"])
    header = ["B", "T", "one call each ms", "one call for both ms", "speed-up of one call"]
    msg.info("Both taggers' Viterbi search: K = 4 and K = 13, one call each or one call for both")
    msg.table(rows, header=header, divider=True, aligns=["r"] * 5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's own)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--repeats", type=int, default=20, help="timed blocks per measurement (median)")
    parser.add_argument("--block-ms", type=float, default=25.0, help="length of a timed block of back-to-back calls")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--one-call", action="store_true", help="instead: both taggers' Viterbi search in one call or one each"
    )
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.one_call:
        bench_one_call(args)
        return

    settings = [("BMES", 4, bmes_constraints()), ("BIO x10", 21, bio_constraints(10))]
    rows = []
    worst_diff, all_same = 0.0, True
    for label, num_tags, constraints in settings:
        for length in args.lengths:
            row, rel_diff, same = bench_setting(label, num_tags, constraints, length, args)
            rows.append(row)
            worst_diff, all_same = max(worst_diff, rel_diff), all_same and same

    header = [
        "tags",
        "K",
        "T",
        "NLL torchcrf ms",
        "NLL ours ms",
        "NLL speed-up",
        "Viterbi torchcrf ms",
        "Viterbi ours ms",
        "Viterbi speed-up",
        "constrained ours ms",
        "max rel NLL diff",
        "same paths",
    ]
    aligns = ["l", "r", "r"] + ["r"] * 9
    msg.info(
        f"batch {args.batch}, torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
        f"median over {args.repeats} blocks of >= {args.block_ms:g} ms, after {args.warmup} warm-up calls"
    )
    msg.table(rows, header=header, divider=True, aligns=aligns)
    if worst_diff < 1e-4 and all_same:
        msg.good(f"NLL agrees with pytorch-crf (max rel diff {worst_diff:.1e}); decoded paths identical")
    else:
        msg.fail(f"mismatch: max rel NLL diff {worst_diff:.1e}, paths identical: {all_same}")


if __name__ == "__main__":
    main()
