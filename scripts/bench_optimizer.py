"""Time one optimizer update of an embedding table: thinc's dense Adam vs ``lazy_rows``.

Run from the repository root:

    python scripts/bench_optimizer.py                       # the offline encoder's table
    python scripts/bench_optimizer.py --rows 250002 --touched 3000 --repeats 10

The table is the size of the offline encoder's word embeddings (92,851
wordpieces x 384 by default); its gradient is zero except on ``--touched``
random rows, as after the backward pass of a batch of about 1,000 Chinese
characters. Both optimizers are ``spacy_crf.GroupedAdam.v1`` with the joint
config's settings (L2 0.01 as weight decay, grad_clip 1.0, no averages);
each update is timed on a fresh copy of the gradient, after two warm-up
updates, and the best and median of ``--repeats`` are printed side by side,
wall and CPU seconds of this process. The updated rows are checked to agree
between the two, so a fast wrong update cannot pass.
"""

import argparse
import statistics
import time

import numpy

from spacy_crf.training.optimizers import grouped_adam

KEY = (0, "embeddings.word_embeddings.weight")


def time_updates(optimizer, weights, gradient, repeats):
    wall, cpu = [], []
    for i in range(repeats + 2):
        grad = gradient.copy()
        w0, c0 = time.perf_counter(), time.process_time()
        weights, _ = optimizer(KEY, weights, grad)
        if i >= 2:
            wall.append(time.perf_counter() - w0)
            cpu.append(time.process_time() - c0)
    return weights, wall, cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=92851)
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--touched", type=int, default=1500, help="rows with a gradient per update")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = numpy.random.default_rng(args.seed)
    table = (rng.standard_normal((args.rows, args.width)) * 0.02).astype("f")
    gradient = numpy.zeros_like(table)
    touched = rng.choice(args.rows, args.touched, replace=False)
    gradient[touched] = rng.standard_normal((args.touched, args.width)).astype("f")
    settings = dict(L2=0.01, grad_clip=1.0, use_averages=False)
    results = {}
    for name, extra in (("dense (thinc)", {}), ("lazy_rows", {"lazy_rows": [KEY[1]]})):
        weights, wall, cpu = time_updates(grouped_adam(1e-4, **settings, **extra), table.copy(), gradient, args.repeats)
        results[name] = (weights, wall, cpu)
    dense, lazy = results["dense (thinc)"][0], results["lazy_rows"][0]
    numpy.testing.assert_allclose(lazy[touched], dense[touched], rtol=1e-4, atol=1e-6)
    print(f"table {args.rows:,} x {args.width}, {args.touched:,} rows with a gradient, {args.repeats} updates each")
    print(f"{'optimizer':<16}{'best wall ms':>14}{'median wall ms':>16}{'median CPU ms':>15}")
    for name, (_, wall, cpu) in results.items():
        print(
            f"{name:<16}{min(wall) * 1e3:>14.1f}{statistics.median(wall) * 1e3:>16.1f}{statistics.median(cpu) * 1e3:>15.1f}"
        )
    speedup = statistics.median(results["dense (thinc)"][1]) / statistics.median(results["lazy_rows"][1])
    print(f"lazy_rows: {speedup:.1f}x faster per update (median wall); the batch's rows agree with dense Adam")


if __name__ == "__main__":
    main()
