"""What ``annotate`` checks before any work, and how it knows its own files.

* **Options**: every number is checked first (``check_options``), so that a
  bad one fails in a line naming it, before a pipeline is loaded or Ray is
  started.
* **Paths** (``check_paths``): the package's rule
  (:func:`spacy_crf.files.check_output_paths`): no output is an input shard
  (also through ``..``, a symlink or a hard link), lies in the pipeline
  folder or is another output, and an output folder holds no input shard.
* **Own files**: ``annotate`` overwrites only files it wrote. For each file it
  writes (a shard's output, the errors file) it keeps a state file in
  ``OUTPUT/.annotate/`` (``state_path``) with the size and SHA-256 of what it
  wrote (``written``); an existing file is its own when that record matches
  the file. Anything else in the way is refused unless ``force``.
* **Resume** (``plan_shards``): a shard's state also holds its input's size
  and SHA-256 (``input``, taken when it was read); a finished shard is
  skipped only while its input still matches, otherwise it is redone and the
  summary says which and why. Its output is checked too: one that no longer
  matches ``written`` (edited, cut short) stops the run naming the file and
  what differs, unless ``force`` (then it is redone), and one that is gone is
  redone.

Each state file is written before the file it describes is renamed into
place, and an older output of the shard is removed before that
(``remove_own``): a crash in between leaves a state without its output,
which is redone, never an output without its record, which would need
``--force``, nor a stale output next to a new state, which would be skipped.
"""

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..files import OutputPathError, PathLike, check_output_paths
from ..util import check_number
from .io import STATE_DIR, AnnotateError, file_identity


def check_options(
    *,
    batch_size: Any,
    n_process: Any,
    threads: Any,
    workers: Any,
    cpus_per_worker: Any,
    gpus_per_worker: Any,
    max_chars: Any = 1,
    sort_buffer: Any = 0,
) -> None:
    """Raise ``AnnotateError`` naming the first option out of range."""
    checks = [
        ("batch_size", batch_size, 1, True),
        ("max_chars", max_chars, 1, True),
        ("sort_buffer", sort_buffer, 0, True),
        ("n_process", n_process, 1, True),
        ("threads", threads, 1, True),
        ("workers", workers, 1, True),
        ("cpus_per_worker", cpus_per_worker, 0, False),
        ("gpus_per_worker", gpus_per_worker, 0, False),
    ]
    for name, value, minimum, integer in checks:
        if name == "threads" and value is None:
            continue  # the default: derived from the cores and n_process
        try:
            if integer and not (isinstance(value, int) and not isinstance(value, bool)):
                raise ValueError(f"{name} must be a whole number, got {value!r}")
            check_number(name, value, minimum=minimum)
        except ValueError as err:
            raise AnnotateError(str(err)) from None


def check_paths(
    pipeline: Any, shards: Sequence[Path], finals: Sequence[Path], errors_path: Path, out_dir: Optional[Path]
) -> None:
    """``check_output_paths`` for the outputs of one run (``out_dir``: the
    output folder, None for one output file); ``AnnotateError`` naming both
    paths."""
    inputs: List[Any] = list(shards)
    if isinstance(pipeline, (str, Path)) and Path(pipeline).is_dir():
        inputs.append(pipeline)
    try:
        check_output_paths(inputs, [*finals, errors_path])
        if out_dir is not None:  # the folder is not replaced as a whole: only the shards may not lie in it
            check_output_paths(shards, [], output_dirs=[out_dir])
    except OutputPathError as err:
        raise AnnotateError(str(err)) from None


def state_path(out_dir: Path, path: Path) -> Path:
    """Where the state of an output file under ``out_dir`` is kept."""
    return out_dir / STATE_DIR / (str(path.relative_to(out_dir)) + ".json")


def read_state(path: Path) -> Optional[Dict[str, Any]]:
    """A state file's content; None when there is none or it cannot be read
    (then nothing it would vouch for is trusted)."""
    try:
        state = json.loads(path.read_text(encoding="utf8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _identity_change(recorded: Dict[str, Any], path: Path, then: str) -> Optional[str]:
    """How the file at ``path`` differs from the size and SHA-256 ``recorded``
    (``then``: when they were taken), or None. A file of another size is not
    hashed: most changed or foreign files are told apart by their size alone."""
    size = path.stat().st_size
    if recorded.get("size") != size:
        return f"{recorded.get('size')} bytes {then}, {size} now"
    if recorded.get("sha256") != file_identity(path)["sha256"]:
        return "same size, different SHA-256"
    return None


def is_own(path: Path, state: Optional[Dict[str, Any]]) -> bool:
    """Whether ``state`` records writing exactly the file at ``path``."""
    return state is not None and output_change(state, path) is None


def input_change(state: Dict[str, Any], shard: Path) -> Optional[str]:
    """Why ``shard`` is not the input its state was made from, or None."""
    recorded = state.get("input")
    if not isinstance(recorded, dict):
        return "its state records no input identity (written by an older version)"
    change = _identity_change(recorded, shard, "then")
    return None if change is None else f"its input changed since it was annotated ({change})"


def output_change(state: Dict[str, Any], final: Path) -> Optional[str]:
    """How the output at ``final`` differs from what its state records
    writing, or None."""
    recorded = state.get("written")
    if not isinstance(recorded, dict):
        return "its state records no size and SHA-256 of the output (written by an older version)"
    return _identity_change(recorded, final, "when annotate wrote it")


def _refuse_changed(found: List[Tuple[Path, str]]) -> None:
    final, change = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    raise AnnotateError(
        f"{final}: this finished output changed since annotate wrote it ({change}){more}; "
        "pass --force to redo its shard (overwriting the file), or remove the file"
    )


def _refuse(found: List[Tuple[Path, Path]]) -> None:
    final, state_file = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    raise AnnotateError(
        f"{final} exists and annotate did not write it (no matching record in {state_file}){more}; "
        "remove it, choose another output, or pass --force to overwrite it"
    )


def plan_shards(
    shards: Sequence[Path], finals: Sequence[Path], states: Sequence[Path], *, resume: bool, force: bool
) -> Tuple[List[int], List[Dict[str, str]]]:
    """The shards to annotate, and for each finished shard that is redone
    (its input changed, its output is gone, or ``force`` and its output
    changed), ``{"shard", "reason"}``. Raises ``AnnotateError`` when a
    finished shard's output no longer matches what annotate wrote, and when
    a shard's output would replace a file that annotate did not write,
    unless ``force``."""
    pending: List[int] = []
    redone: List[Dict[str, str]] = []
    foreign: List[Tuple[Path, Path]] = []
    changed: List[Tuple[Path, str]] = []
    for i, (shard, final, state_file) in enumerate(zip(shards, finals, states)):
        state = read_state(state_file)
        if resume and state is not None:
            if not final.exists():
                reason: Optional[str] = "its output is missing"
            else:
                reason = input_change(state, shard)
                change = output_change(state, final) if reason is None else None
                if change is not None and not force:
                    changed.append((final, change))
                    continue
                if change is not None:
                    reason = f"its output changed since annotate wrote it ({change})"
            if reason is None:
                continue
            redone.append({"shard": str(shard), "reason": reason})
        pending.append(i)
        if not force and final.exists() and not is_own(final, state):
            foreign.append((final, state_file))
    if changed:
        _refuse_changed(changed)
    if foreign:
        _refuse(foreign)
    return pending, redone


def check_errors_file(errors_path: Path, state_file: Path, force: bool) -> None:
    """The errors file is rewritten (or removed) at the end of every run:
    refuse one that annotate did not write, unless ``force``."""
    if not force and errors_path.exists() and not is_own(errors_path, read_state(state_file)):
        _refuse([(errors_path, state_file)])


def remove_own(path: PathLike, state_file: PathLike) -> None:
    """Remove an output and its state before a new one is recorded (see the
    module docstring). ``path`` was checked before the run: it is this
    command's own, or ``--force`` was given."""
    for p in (Path(path), Path(state_file)):
        if p.exists() or p.is_symlink():
            p.unlink()


def is_own_output(out_dir: Path, path: Path) -> bool:
    """Whether ``path``, a file under the output folder ``out_dir``, is one
    that annotate wrote there (an output folder inside the input folder: its
    outputs are not inputs)."""
    rel = path.resolve().relative_to(out_dir.resolve())
    return is_own(path, read_state(out_dir / STATE_DIR / (str(rel) + ".json")))
