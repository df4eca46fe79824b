"""Keys and small helpers shared by the pipes, scorers and corpus readers,
and the one way outputs are written: :func:`check_output_paths` (an output
never overwrites an input or another output), :func:`atomic_path` /
``write_*_atomic`` (files) and :func:`check_output_dir` /
:func:`atomic_dir` (directories), and :func:`check_number` (numeric options).

Nothing here imports torch or registers anything: every module of the
package may import it.
"""
import json
import os
import platform
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Union

from spacy.tokens import Doc

#: Span group that receives the predicted words of a segmenter.
DEFAULT_SPANS_KEY = "words"
#: ``doc.user_data`` flag set by ``spacy_crf.JointCorpus.v1`` on a reference
#: doc whose tokens are not gold words (an NER doc, tokenized into characters):
#: the segmenter learns nothing from it and word scores skip it.
NO_GOLD_WORDS = "spacy_crf.no_gold_words"
#: ``doc.user_data`` key with the ``file:line`` a corpus doc was read from. It
#: is used in error messages and is not written to ``.spacy`` files.
SOURCE_KEY = "spacy_crf.source"

PathLike = Union[str, "os.PathLike[str]"]  # str or Path


def has_gold_words(doc: Doc) -> bool:
    """Whether the tokens of this reference doc are its gold words."""
    return not doc.user_data.get(NO_GOLD_WORDS, False)


def quote_text(doc: Doc, width: int = 30) -> str:
    """``repr`` of the doc's text, cut after ``width`` characters."""
    text = doc.text if len(doc.text) <= width else doc.text[:width] + "..."
    return repr(text)


def doc_source(doc: Doc) -> str:
    """``file:line`` a doc was read from, or a short quote of its text."""
    source = doc.user_data.get(SOURCE_KEY)
    if source:
        return str(source)
    return f"doc {quote_text(doc)}"


def hardware() -> Dict[str, Any]:
    """CPU model, core count, torch threads and GPU (if any) of this machine."""
    info: Dict[str, Any] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
    }
    try:
        with open("/proc/cpuinfo", encoding="utf8") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # pragma: no cover - torch is a requirement
        info["gpu"] = None
    return info


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


def check_output_paths(inputs: Iterable[Optional[PathLike]], outputs: Iterable[Optional[PathLike]], *,
                       output_dirs: Iterable[Optional[PathLike]] = ()) -> None:
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
                raise OutputPathError(f"output {out} is inside the input directory {inp}, which is read, "
                                      "never written to; choose another output path")
        for j, (other, other_is_dir) in enumerate(outs):
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


# --- numeric options ------------------------------------------------------------------------------------------------


def check_number(name: str, value: Any, *, minimum: Optional[float] = None, maximum: Optional[float] = None,
                 max_open: bool = False, hint: str = "") -> None:
    """Raise ``ValueError`` naming the option ``name`` unless ``value`` is a
    number in ``[minimum, maximum]`` (``maximum`` excluded with ``max_open``;
    NaN is never in range). ``hint`` says what a special value means."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value
    if ok and minimum is not None:
        ok = value >= minimum
    if ok and maximum is not None:
        ok = value < maximum if max_open else value <= maximum
    if not ok:
        bounds = []
        if minimum is not None:
            bounds.append(f">= {minimum:g}")
        if maximum is not None:
            bounds.append(f"{'<' if max_open else '<='} {maximum:g}")
        raise ValueError(f"{name} must be {' and '.join(bounds) or 'a number'}, got {value!r}"
                         + (f" ({hint})" if hint else ""))


def batch_by_length(lengths: Sequence[int], max_items: int) -> List[List[int]]:
    """Indices of docs grouped by length (shortest first) so that a group padded to
    its longest doc has at most ``max_items`` tokens; one group when ``max_items`` is 0.
    A doc longer than ``max_items`` is a group of its own.

    The grouping of ``spacy_transformers.util.batch_by_length``, which is not
    imported here: that module loads ``transformers`` on import, a cost every
    pipeline with a ``crf_tagger`` would pay at start-up, transformer or not."""
    if not max_items:
        return [list(range(len(lengths)))] if len(lengths) else []
    batches: List[List[int]] = []
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if batches and lengths[i] * (len(batches[-1]) + 1) <= max_items:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches
