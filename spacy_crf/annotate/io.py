"""Shards in, shards out: reading and validating input records, and writing
one output file per input shard through a temporary name.

Every engine sees the same stream of *rows* (plain dicts), produced by
``read_rows`` from one shard:

* ``kind="doc"``: a valid record: ``text`` and ``meta`` (JSON: the id and the
  carried fields); ``line`` is its 1-based line (row, for Parquet).
* ``kind="error"``: a bad record: ``error`` says why, ``line`` where.
* ``kind="end"``: the last row of every shard; ``meta`` holds the counts read
  (``{"docs": ..., "errors": ...}``), which the writer checks its own count
  against before the shard's output gets its final name, and ``input``: the
  shard file's identity (``file_identity``), taken before it was read.

The rows travel through the engine in order, so the driver writes each shard
from one ordered stream and knows exactly when a shard is complete.
"""

import glob
import gzip
import hashlib
import json
import os
import zlib
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from ..files import PathLike

INPUT_SUFFIXES = {
    ".txt": "txt",
    ".txt.gz": "txt",
    ".jsonl": "jsonl",
    ".jsonl.gz": "jsonl",
    ".ndjson": "jsonl",
    ".ndjson.gz": "jsonl",
    ".parquet": "parquet",
}
OUTPUT_FORMATS = {"jsonl": ".jsonl", "parquet": ".parquet", "spacy": ".spacy"}
OUTPUT_KEYS = ("id", "text", "words", "ents")
STATE_DIR = ".annotate"


class AnnotateError(ValueError):
    """The run cannot go on (bad input, bad options, a shard that does not add up)."""


# --- input shards ---------------------------------------------------------------


def input_kind(path: Path) -> Optional[str]:
    name = path.name.lower()
    for suffix, kind in sorted(INPUT_SUFFIXES.items(), key=lambda kv: -len(kv[0])):
        if name.endswith(suffix):
            return kind
    return None


def strip_input_suffix(name: str) -> str:
    lower = name.lower()
    for suffix in sorted(INPUT_SUFFIXES, key=len, reverse=True):
        if lower.endswith(suffix):
            return name[: -len(suffix)]
    return name


def find_shards(input_path: str) -> Tuple[Path, List[Path]]:
    """The input's root folder and its shards, sorted: one file, every input
    file under a folder (recursively, hidden ones left out), or a glob."""
    path = Path(input_path)
    if path.is_file():
        if input_kind(path) is None:
            raise AnnotateError(f"{path}: unknown input type; expected one of {sorted(INPUT_SUFFIXES)}")
        return path.parent, [path]
    if path.is_dir():
        root = path
        files = [
            p
            for p in sorted(path.rglob("*"))
            if p.is_file() and input_kind(p) and not any(part.startswith(".") for part in p.relative_to(path).parts)
        ]
    else:
        files = [
            Path(p) for p in sorted(glob.glob(input_path, recursive=True)) if Path(p).is_file() and input_kind(Path(p))
        ]
        root = Path(os.path.commonpath([str(p.parent) for p in files])) if files else Path(".")
    if not files:
        raise AnnotateError(f"{input_path}: no input files (.txt, .jsonl, .parquet, optionally .gz) found")
    return root, files


def file_identity(path: PathLike) -> Dict[str, Any]:
    """Size and SHA-256 of a file's bytes (compressed bytes for a ``.gz``):
    what tells a resume that a shard is the one that was annotated. The
    modification time is left out on purpose: a copy that keeps it (``cp -p``,
    ``rsync -t``) or a clock that goes back would hide a change."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return {"size": size, "sha256": digest.hexdigest()}


def bytes_identity(data: bytes) -> Dict[str, Any]:
    """``file_identity`` of a file that will hold ``data``."""
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def output_path(shard: Path, root: Path, out_dir: Path, fmt: str) -> Path:
    rel = shard.relative_to(root)
    return out_dir / rel.parent / (strip_input_suffix(rel.name) + OUTPUT_FORMATS[fmt])


def _open_binary(path: Path):
    # Read as bytes and decoded line by line: a line that is not UTF-8 is one
    # bad record, not a bad shard. Lines end at b"\n" only: a lone "\r" or
    # U+2028 inside a text is kept.
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


BOM = b"\xef\xbb\xbf"


def _decode(raw: bytes, line: int) -> str:
    """One line's text; a UTF-8 BOM opening the file is dropped, as
    ``utf-8-sig`` (spaCy's and pandas' readers) drops it."""
    if line == 1 and raw.startswith(BOM):
        raw = raw[len(BOM) :]
    text = raw.decode("utf8")
    return text[:-1] if text.endswith("\n") else text


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf8", errors="replace")
    return str(value)


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=_json_default)


def _record_row(record: Any, line: int, shard: int, name: str, text_key: str, id_key: str) -> Dict[str, Any]:
    """Validate one decoded record and turn it into a row."""
    if not isinstance(record, dict):
        return error_row(shard, line, f"not a JSON object but {type(record).__name__}")
    if text_key not in record:
        return error_row(shard, line, f"no {text_key!r} key")
    text = record[text_key]
    if not isinstance(text, str):
        return error_row(shard, line, f"{text_key!r} is {type(text).__name__}, not a string")
    bad = _surrogate(text)
    if bad is not None:
        return error_row(shard, line, f"{text_key!r} is not valid Unicode: {bad}")
    fields = {k: v for k, v in record.items() if k != text_key and k != id_key}
    clash = [k for k in fields if k in OUTPUT_KEYS]
    if clash:
        return error_row(
            shard, line, f"field {clash[0]!r} clashes with an output field; rename it or pass it as --id-key/--text-key"
        )
    rid = record.get(id_key)
    meta = dumps({"id": rid if rid is not None else f"{name}:{line}", "fields": fields})
    bad = _surrogate(meta)
    if bad is not None:
        return error_row(shard, line, f"the id or another field is not valid Unicode: {bad}")
    return {"shard": shard, "line": line, "kind": "doc", "text": text, "meta": meta, "error": None}


def _surrogate(text: str) -> Optional[str]:
    """What keeps ``text`` from being written as UTF-8, or None. JSON's
    ``\\ud800`` escape decodes to a lone surrogate (web text decoded badly),
    which spaCy's tokenizer and every UTF-8 output refuse."""
    try:
        text.encode("utf8")
    except UnicodeEncodeError as e:
        return f"a lone surrogate {text[e.start]!r} at char {e.start}"
    return None


def error_row(shard: int, line: int, reason: str) -> Dict[str, Any]:
    return {"shard": shard, "line": line, "kind": "error", "text": "", "meta": None, "error": reason}


def read_rows(path: str, shard: int, name: str, text_key: str = "text", id_key: str = "id") -> Iterator[Dict[str, Any]]:
    """The rows of one shard (see the module docstring), ending with its "end" row."""
    p = Path(path)
    kind = input_kind(p)
    n_docs = n_errors = 0
    # before reading: a shard that changes while it is read gets a stale
    # identity, which the next resume sees as a change and redoes
    identity = file_identity(p)

    def count(row):
        nonlocal n_docs, n_errors
        if row["kind"] == "doc":
            n_docs += 1
        else:
            n_errors += 1
        return row

    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        line = 0
        try:
            for batch in pq.ParquetFile(str(p)).iter_batches(batch_size=1024):
                for record in batch.to_pylist():
                    line += 1
                    yield count(_record_row(record, line, shard, name, text_key, id_key))
        except (OSError, pa.ArrowException) as e:
            raise AnnotateError(f"{path}: truncated or corrupt Parquet file after row {line} ({e})") from None
    else:
        line = 0
        try:
            with _open_binary(p) as f:
                for line, raw in enumerate(f, 1):
                    try:
                        text = _decode(raw, line)
                    except UnicodeDecodeError as e:
                        yield count(error_row(shard, line, f"not UTF-8 text: {e}"))
                        continue
                    if kind == "txt":
                        text = text[:-1] if text.endswith("\r") else text
                        meta = dumps({"id": f"{name}:{line}", "fields": {}})
                        yield count(
                            {"shard": shard, "line": line, "kind": "doc", "text": text, "meta": meta, "error": None}
                        )
                        continue
                    if not text.strip():
                        continue  # blank lines in JSONL hold no record
                    try:
                        record = json.loads(text)
                    except ValueError as e:
                        yield count(error_row(shard, line, f"invalid JSON: {e}"))
                        continue
                    yield count(_record_row(record, line, shard, name, text_key, id_key))
        except (EOFError, OSError, zlib.error) as e:
            # a shard that ends early cannot be completed: fail on it, naming it
            what = "truncated or corrupt gzip file" if p.name.lower().endswith(".gz") else "cannot be read"
            raise AnnotateError(f"{path}: {what} after line {line} ({e})") from None
    yield {
        "shard": shard,
        "line": 0,
        "kind": "end",
        "text": "",
        "error": None,
        "meta": dumps({"docs": n_docs, "errors": n_errors, "input": identity}),
    }
