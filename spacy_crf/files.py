"""The one way outputs are written: :func:`check_output_paths` (an output
never overwrites an input or another output), :func:`atomic_path` /
``write_*_atomic`` (files) and :func:`check_output_dir` / :func:`atomic_dir`
(directories).

Nothing here imports torch or registers anything: every module may import it.
"""

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]  # str or Path


# --- writing outputs ------------------------------------------------------------------------------------------------
#
# Every command and project script that writes files follows one rule:
# validate at the boundary (before reading or computing anything expensive),
# refuse an output that is an input, lies in an input folder or is another
# output, and never leave a
# partial result: a file is written under a temporary name in its own
# directory and renamed into place (``os.replace``, atomic on one file
# system) only once it is complete; a directory is built next to its final
# place and swapped in the same way.


class OutputPathError(ValueError):
    """An output path that would overwrite an input or another output, or
    that cannot be written (an existing directory where a file is expected)."""


def _same_path(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():  # relative paths, "..", symlinks (resolved where they exist)
        return True
    try:
        return os.path.samefile(a, b)  # hard links, case-insensitive file systems
    except OSError:
        return False


def _inside(child: Path, parent: Path) -> bool:
    """Whether ``child`` is ``parent`` or lies under it (after resolving)."""
    child, parent = child.resolve(), parent.resolve()
    return child == parent or parent in child.parents


def check_output_paths(
    inputs: Iterable[Optional[PathLike]],
    outputs: Iterable[Optional[PathLike]],
    *,
    output_dirs: Iterable[Optional[PathLike]] = (),
) -> None:
    """Raise :class:`OutputPathError` naming both paths when an output file
    (``outputs``) or output directory (``output_dirs``) is an input, lies
    inside an input directory, is another output, or (for a directory, which
    is replaced as a whole) contains an input or another output. ``None``
    entries are ignored.
    Paths are compared after resolving relative parts, ``..`` and symlinks,
    and with ``os.path.samefile`` (hard links) where both exist. An output
    file that is an existing directory, and an output under a path that is
    a file, are refused too."""
    ins = [Path(p) for p in inputs if p is not None]
    outs = [(Path(p), False) for p in outputs if p is not None]
    outs += [(Path(p), True) for p in output_dirs if p is not None]
    for out, is_dir in outs:
        if not is_dir and out.is_dir():
            raise OutputPathError(f"output {out} is an existing directory, not a file")
        parent = Path(os.path.abspath(out)).parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise OutputPathError(f"output {out}: {parent} is not a directory")
    for i, (out, is_dir) in enumerate(outs):
        for inp in ins:
            if _same_path(out, inp) or (is_dir and _inside(inp, out)):
                raise OutputPathError(f"output {out} would overwrite the input {inp}; choose another output path")
            if inp.is_dir() and _inside(out, inp):
                raise OutputPathError(
                    f"output {out} is inside the input directory {inp}, which is read, "
                    "never written to; choose another output path"
                )
        for j, (other, _other_is_dir) in enumerate(outs):
            if j == i:
                continue
            if (j < i and _same_path(out, other)) or (is_dir and _inside(other, out)):
                raise OutputPathError(f"output {out} is also the output {other}; give each output its own path")


def _partial_path(path: Path) -> Path:
    # same directory (so that the rename is atomic), hidden, and unique per process
    return path.parent / f".{path.name}.{os.getpid()}.partial"


@contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a temporary path next to ``path`` to write a file to; on success
    it is renamed to ``path`` (``os.replace``), on an exception it is removed
    and ``path`` is left as it was. Parent directories are created.

    Example: ``with atomic_path(out) as tmp: DocBin(docs=docs).to_disk(tmp)``.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _partial_path(final)
    try:
        yield tmp
        if not tmp.exists():
            raise OutputPathError(f"nothing was written to {final}")
        os.replace(tmp, final)
    finally:
        if tmp.exists() or tmp.is_symlink():
            tmp.unlink()


def write_bytes_atomic(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    return Path(path)


def write_text_atomic(path: PathLike, text: str) -> Path:
    """Write UTF-8 ``text`` to ``path`` through a temporary file and a rename."""
    return write_bytes_atomic(path, text.encode("utf8"))


def write_json_atomic(path: PathLike, data: Any, *, indent: int = 2) -> Path:
    """Write ``data`` as JSON (UTF-8, not ASCII-escaped, final newline) through
    a temporary file and a rename."""
    return write_text_atomic(path, json.dumps(data, indent=indent, ensure_ascii=False) + "\n")


def check_output_dir(path: PathLike, *, marker: Optional[str] = None, force: bool = False) -> None:
    """Refuse an output directory that exists, is not empty and is not a
    previous output of the same command (it holds the file ``marker``),
    unless ``force``; refuse an existing file at ``path`` always."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise OutputPathError(f"output {out} exists and is not a directory")
    if force or not out.is_dir() or not any(out.iterdir()):
        return
    if marker is not None and (out / marker).is_file():
        return
    raise OutputPathError(
        f"output directory {out} exists and is not empty"
        + (f" (and has no {marker}, so it is not an earlier output of this command)" if marker else "")
        + "; choose another directory, remove it, or pass --force to replace it"
    )


@contextmanager
def atomic_dir(path: PathLike) -> Iterator[Path]:
    """Yield a new, empty temporary directory next to ``path`` to build an
    output directory in; on success it replaces ``path`` (an existing
    ``path`` is moved aside, the new directory renamed into place, then the
    old one removed), on an exception it is removed and ``path`` is left as
    it was. Call :func:`check_output_dir` first to decide whether an
    existing directory may be replaced."""
    final = Path(os.path.abspath(path))  # "." or "out/.." have no usable name
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = _partial_path(final)
    old = final.parent / f".{final.name}.{os.getpid()}.old"
    for stale in (tmp, old):
        if stale.exists():
            shutil.rmtree(stale)
    tmp.mkdir()
    try:
        yield tmp
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if old.exists():
            shutil.rmtree(old, ignore_errors=True)
