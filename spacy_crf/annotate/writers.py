"""Output shards: one file per input shard, written through a hidden
``.partial`` name and renamed when complete (JSON lines, Parquet, ``.spacy``),
and read back for checks and resumes."""

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from .io import OUTPUT_FORMATS, OUTPUT_KEYS, AnnotateError, dumps


def partial_path(final: Path) -> Path:
    return final.parent / f".{final.name}.partial"


class ShardWriter:
    """Writes one output shard under a temporary name; ``commit`` renames it."""

    def __init__(self, final: Path) -> None:
        self.final = final
        self.tmp = partial_path(final)
        self.tmp.parent.mkdir(parents=True, exist_ok=True)
        self.count = 0
        self._closed = False

    def add(self, record: Dict[str, Any], doc_bytes: Optional[bytes] = None) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def finish(self) -> Path:
        """Close the temporary file (once: closing a Parquet writer twice would
        start the file anew) and return its path."""
        if not self._closed:
            self._closed = True
            self.close()
        return self.tmp

    def commit(self) -> None:
        os.replace(self.finish(), self.final)

    def abort(self) -> None:
        """Close without writing what is buffered and remove the temporary
        file: a shard that failed or was stopped leaves nothing behind (a
        rerun starts it anew). Harmless after ``commit`` or a second time."""
        self._closed = True
        try:
            self.discard()
        finally:
            self.tmp.unlink(missing_ok=True)

    def discard(self) -> None:
        """Let go of the temporary file without finishing it."""


class JsonlWriter(ShardWriter):
    def __init__(self, final: Path) -> None:
        super().__init__(final)
        self.file = open(self.tmp, "w", encoding="utf8")

    def add(self, record, doc_bytes=None):
        self.file.write(dumps(record) + "\n")
        self.count += 1

    def close(self):
        if not self.file.closed:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()

    def discard(self):
        self.file.close()


class ParquetWriter(ShardWriter):
    """Row groups of ``rows_per_group`` records; the carried fields' types come
    from the first group (later groups are cast to them)."""

    def __init__(self, final: Path, confidence: bool = False, rows_per_group: int = 10000) -> None:
        super().__init__(final)
        self.confidence = confidence
        self.rows_per_group = rows_per_group
        self.buffer: List[Dict[str, Any]] = []
        self.writer = None
        self.schema = None

    def add(self, record, doc_bytes=None):
        self.buffer.append(record)
        self.count += 1
        if len(self.buffer) >= self.rows_per_group:
            self._flush()

    def _table(self, records):
        import pyarrow as pa

        ent_fields = [pa.field("start", pa.int64()), pa.field("end", pa.int64()), pa.field("label", pa.string())]
        if self.confidence:
            ent_fields.append(pa.field("confidence", pa.float64()))
        known = {"words": pa.list_(pa.list_(pa.int64())), "ents": pa.list_(pa.struct(ent_fields)), "text": pa.string()}
        keys = list(dict.fromkeys(k for r in records for k in r)) if records else list(OUTPUT_KEYS)
        if self.schema is not None:
            new = [k for k in keys if k not in self.schema.names]
            if new:
                raise AnnotateError(
                    f"{self.final}: field {new[0]!r} first appears after record {self.count - len(records)}; a "
                    "Parquet file has one schema, set by its first row group: write JSONL instead"
                )
            keys = self.schema.names
        columns = {}
        for key in keys:
            values = [r.get(key) for r in records]
            kind = self.schema.field(key).type if self.schema is not None else known.get(key)
            try:
                columns[key] = pa.array(values, type=kind)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as e:
                raise AnnotateError(
                    f"{self.final}: field {key!r} has values of more than one type ({e}); write JSONL instead"
                ) from None
        return pa.table(columns)

    def _flush(self):
        import pyarrow.parquet as pq

        if not self.buffer and self.writer is not None:
            return
        table = self._table(self.buffer)
        if self.writer is None:
            self.schema = table.schema
            self.writer = pq.ParquetWriter(str(self.tmp), self.schema)
        self.writer.write_table(table)
        self.buffer = []

    def close(self):
        if self.writer is None or self.buffer:
            self._flush()
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def discard(self):
        self.buffer = []
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class DocBinWriter(ShardWriter):
    """``.spacy`` output as ``spacy apply`` writes it (user data kept)."""

    def __init__(self, final: Path) -> None:
        from spacy.tokens import DocBin
        from spacy.vocab import Vocab

        super().__init__(final)
        self.vocab = Vocab()
        self.docbin = DocBin(store_user_data=True)
        self.done = False

    def add(self, record, doc_bytes=None):
        from spacy.tokens import Doc

        self.docbin.add(Doc(self.vocab).from_bytes(doc_bytes))
        self.count += 1

    def close(self):
        if not self.done:
            self.docbin.to_disk(self.tmp)
            self.done = True

    def discard(self):
        self.done = True  # (nothing is on disk before close)


def make_writer(fmt: str, final: Path, confidence: bool) -> ShardWriter:
    if fmt == "jsonl":
        return JsonlWriter(final)
    if fmt == "parquet":
        return ParquetWriter(final, confidence=confidence)
    if fmt == "spacy":
        return DocBinWriter(final)
    raise AnnotateError(f"unknown output format {fmt!r}; use one of {sorted(OUTPUT_FORMATS)}")


def read_output(path: Path) -> List[Dict[str, Any]]:
    """The records of a JSONL or Parquet output shard (for tests and checks)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(str(path)).to_pylist()
    with open(path, encoding="utf8") as f:
        return [json.loads(line) for line in f if line.strip()]
