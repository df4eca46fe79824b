"""``annotate()``: run a pipeline over a corpus of shards, resumably.

OUTPUT is a folder (one output file per input shard, same relative path,
the format's extension) unless it ends in ``.jsonl``/``.parquet``/``.spacy``
and the input is one file: then it is that file. Each output is written as
``.NAME.partial`` and renamed once its record count equals the count read
(a run that fails or is stopped removes the ``.partial`` files of the
shards it did not finish); a rerun skips outputs that exist, whose input is
unchanged and which are still what was written (``resume``; an output
changed since then stops the run), and redoes the rest. Per-shard counts, skipped records and the identities
of the input read and the output written are kept in ``OUTPUT/.annotate/``
(renamed into place before the output is; see ``state``), and
``errors.jsonl`` is rebuilt from them at the end, so a shard redone after a
crash never lists its errors twice. Nothing but this command's own outputs
is overwritten, unless ``force``.
"""

import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional

from .. import enable_speed_ups
from ..batching import DEFAULT_SORT_BUFFER
from ..files import write_bytes_atomic, write_text_atomic
from .engines import ENGINES
from .io import (
    OUTPUT_FORMATS,
    AnnotateError,
    bytes_identity,
    dumps,
    file_identity,
    find_shards,
    output_path,
)
from .pieces import DEFAULT_MAX_CHARS
from .records import check_confidence, make_record
from .state import (
    check_errors_file,
    check_options,
    check_paths,
    is_own_output,
    plan_shards,
    remove_own,
    state_path,
)
from .writers import make_writer


class _Progress:
    """docs/s and chars/s on a tqdm bar (or nothing)."""

    def __init__(self, enabled, total_shards: int) -> None:
        self.bar = None
        self.callback = enabled if callable(enabled) else None
        self.docs = self.chars = 0
        self.start = time.perf_counter()
        self.last = 0.0
        if enabled and self.callback is None:
            from tqdm import tqdm

            self.bar = tqdm(unit=" docs", desc=f"annotate ({total_shards} shards)", file=sys.stderr, mininterval=0.5)

    def update(self, chars: int) -> None:
        self.docs += 1
        self.chars += chars
        if self.callback is not None:
            self.callback(self.docs, self.chars)
        if self.bar is None:
            return
        self.bar.update(1)
        now = time.perf_counter()
        if now - self.last > 0.5:
            self.last = now
            self.bar.set_postfix_str(f"{self.chars / max(now - self.start, 1e-9):,.0f} chars/s", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def annotate(
    pipeline,
    input: str,
    output: str,
    *,
    fmt: Optional[str] = None,
    text_key: str = "text",
    id_key: str = "id",
    engine: str = "local",
    n_process: int = 1,
    batch_size: int = 64,
    threads: Optional[int] = None,
    address: Optional[str] = None,
    workers: int = 1,
    cpus_per_worker: float = 1.0,
    gpus_per_worker: float = 0.0,
    confidence: bool = False,
    resume: bool = True,
    force: bool = False,
    on_error: str = "raise",
    progress: Any = True,
    max_chars: int = DEFAULT_MAX_CHARS,
    sort_buffer: int = DEFAULT_SORT_BUFFER,
) -> Dict[str, Any]:
    """Annotate INPUT (a file, folder or glob of .txt/.jsonl/.parquet shards,
    optionally gzipped) with ``pipeline`` into OUTPUT; return the summary.

    Raises ``AnnotateError`` on a bad record (``on_error="raise"``, naming
    the file and line) and on a shard whose written count differs from its
    read count (naming the shard); the finished shards stay and a rerun
    continues from there. ``progress``: a tqdm bar (True), nothing (False), or
    a function called with (docs, chars) so far after each record. A record
    longer than ``max_chars`` characters is annotated in pieces and written
    whole (see ``pieces``); the summary counts them (``records_split``) and
    their cuts by kind (``cuts``). ``sort_buffer``: texts go through the
    pipeline sorted by length within this many batches, records still in
    input order (:func:`spacy_crf.batching.pipe_sorted`; 0: unsorted).
    Sorting is the default, as it was faster on texts of mixed lengths
    (docs/results.md).

    Before any work, raises ``AnnotateError`` on an option out of range, an
    output that is an input (or an output folder holding one), and an
    existing output file that this command did not write (unless ``force``).
    A finished shard whose input changed is redone; the summary's ``redone``
    lists them with the reason.
    """
    start = time.perf_counter()
    check_options(
        batch_size=batch_size,
        n_process=n_process,
        threads=threads,
        workers=workers,
        cpus_per_worker=cpus_per_worker,
        gpus_per_worker=gpus_per_worker,
        max_chars=max_chars,
        sort_buffer=sort_buffer,
    )
    _check_run(pipeline, engine, on_error, confidence)
    # this command runs many processes: it opts in to what makes that faster (docs/annotate.md)
    enable_speed_ups()
    plan = _plan_outputs(str(input), Path(output), fmt)
    check_paths(pipeline, plan.shards, plan.finals, plan.errors_path, plan.out_dir if plan.folder else None)
    names = [str(s.relative_to(plan.root)) for s in plan.shards]
    states = [state_path(plan.out_dir, f) for f in plan.finals]
    errors_state = state_path(plan.out_dir, plan.errors_path)
    pending, redone = plan_shards(plan.shards, plan.finals, states, resume=resume, force=force)
    check_errors_file(plan.errors_path, errors_state, force)
    todo = [(i, str(plan.shards[i]), names[i]) for i in pending]

    stream = ENGINES[engine](
        pipeline,
        todo,
        text_key=text_key,
        id_key=id_key,
        batch_size=batch_size,
        n_process=n_process,
        threads=threads,
        workers=workers,
        cpus_per_worker=cpus_per_worker,
        gpus_per_worker=gpus_per_worker,
        address=address,
        confidence=confidence,
        fmt=plan.fmt,
        progress=progress is True,
        gpu=gpus_per_worker > 0,
        stop_on_error=on_error == "raise",
        max_chars=max_chars,
        sort_buffer=sort_buffer,
    )
    run = _Collector(plan, states, confidence, on_error, local=engine == "local", start=start)
    bar = _Progress(progress, len(todo))
    try:
        run.consume(stream, bar)
    finally:
        bar.close()
        run.abort_open_writers()
        close = getattr(stream, "close", None)
        if close:
            close()
    lost = [str(plan.shards[i]) for i in pending if i not in run.finished]
    if lost:
        raise AnnotateError(
            f"the engine returned no end for shard(s) {', '.join(lost)}: records were lost; rerun to redo them"
        )
    has_errors = _write_errors_file(states, plan.errors_path, errors_state)
    seconds = time.perf_counter() - start
    return {
        "docs": run.docs,
        "chars": run.chars,
        "seconds": round(seconds, 3),
        "docs_per_s": round(run.docs / seconds, 1) if seconds else 0.0,
        "chars_per_s": round(run.chars / seconds, 1) if seconds else 0.0,
        "first_record_s": round(run.first_record, 3) if run.first_record is not None else None,
        "skipped": run.skipped,
        "shards": len(plan.shards),
        "shards_written": len(run.finished),
        "shards_resumed": len(plan.shards) - len(pending),
        "errors_file": str(plan.errors_path) if has_errors else None,
        "engine": engine,
        "format": plan.fmt,
        "redone": redone,
        "max_chars": max_chars,
        "records_split": run.records_split,
        "cuts": dict(run.cuts),
    }


def _check_run(pipeline, engine: str, on_error: str, confidence: bool) -> None:
    """The settings that need no file: engine, error mode, pipeline, confidence."""
    if engine not in ENGINES:
        raise AnnotateError(f"unknown engine {engine!r}; use one of {sorted(ENGINES)}")
    if on_error not in ("raise", "skip"):
        raise AnnotateError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
    if isinstance(pipeline, (str, os.PathLike)) and not Path(pipeline).exists():
        from spacy.util import is_package

        if not is_package(str(pipeline)):  # fail here, not in every Ray actor
            raise AnnotateError(f"pipeline {str(pipeline)!r}: no such folder or installed package")
    if confidence:
        try:
            check_confidence(pipeline)
        except ValueError as err:
            raise AnnotateError(str(err)) from None


class _Plan(NamedTuple):
    """Where each input shard's annotations go."""

    root: Path
    shards: List[Path]
    finals: List[Path]  # the output file of each shard
    out_dir: Path
    errors_path: Path
    fmt: str
    folder: bool  # OUTPUT is a folder (else one file)


def _plan_outputs(input: str, out: Path, fmt: Optional[str]) -> _Plan:
    """The shards of ``input`` and their outputs; refuses a format that
    contradicts the extension, one file for several shards, and two shards
    that would write the same output."""
    root, shards = find_shards(input)
    by_ext = next((f for f, ext in OUTPUT_FORMATS.items() if out.name.endswith(ext)), None)
    if fmt is None:
        fmt = by_ext or "jsonl"
    if fmt not in OUTPUT_FORMATS:
        raise AnnotateError(f"unknown format {fmt!r}; use one of {sorted(OUTPUT_FORMATS)}")
    if by_ext is not None:
        if by_ext != fmt:
            raise AnnotateError(f"{out}: extension says {by_ext!r} but the format is {fmt!r}")
        if len(shards) > 1:
            raise AnnotateError(f"{out}: one output file for {len(shards)} input shards; give a folder instead")
        errors_path = out.parent / (out.name[: -len(OUTPUT_FORMATS[fmt])] + ".errors.jsonl")
        return _Plan(root, shards, [out], out.parent, errors_path, fmt, folder=False)
    # OUTPUT inside INPUT: its outputs are not inputs; any other file there is,
    # and check_paths refuses it
    shards = [s for s in shards if not (out.resolve() in s.resolve().parents and is_own_output(out, s))]
    if not shards:
        raise AnnotateError(f"{input}: no input files outside the output folder {out}")
    finals = [output_path(s, root, out, fmt) for s in shards]
    seen: Dict[Path, Path] = {}
    for shard, final in zip(shards, finals):
        if final in seen:
            raise AnnotateError(f"{seen[final]} and {shard} would both be written to {final}")
        seen[final] = shard
    return _Plan(root, shards, finals, out, out / "errors.jsonl", fmt, folder=True)


class _Collector:
    """Writes the engine's rows: records into their shard's writer, bad
    records aside, and at each shard's end checks its counts and commits it."""

    def __init__(
        self, plan: _Plan, states: List[Path], confidence: bool, on_error: str, *, local: bool, start: float
    ) -> None:
        self.plan, self.states, self.confidence, self.on_error = plan, states, confidence, on_error
        self.local, self.start = local, start
        self.writers: Dict[int, Any] = {}
        self.errors: Dict[int, List[Dict[str, Any]]] = {}
        self.failed: Dict[int, int] = {}  # per shard, the valid records the pipeline refused
        self.finished: List[int] = []
        self.shard_chars: Dict[int, int] = {}
        self.first_record: Optional[float] = None
        self.docs = self.chars = self.skipped = self.records_split = 0
        self.cuts: Counter = Counter()

    def consume(self, stream, bar: _Progress) -> None:
        fatal: Optional[AnnotateError] = None
        for row in stream:
            if fatal is not None:
                continue  # the local engine stopped reading at the error: drain what is in flight
            kind = row["kind"]
            if kind == "doc":
                self._record(row, bar)
            elif kind in ("error", "failed") and self.on_error != "raise":
                i = row["shard"]
                self.errors.setdefault(i, []).append(
                    {"file": str(self.plan.shards[i]), "line": row["line"], "reason": row["error"]}
                )
                self.skipped += 1
                if kind == "failed":  # read as a valid record, refused by the pipeline
                    self.failed[i] = self.failed.get(i, 0) + 1
            elif kind in ("error", "failed", "fatal"):  # a bad record under "raise", or a shard that cannot be read
                fatal = AnnotateError(
                    row["error"]
                    if kind == "fatal"
                    else f"{self.plan.shards[row['shard']]}, line {row['line']}: {row['error']} "
                    "(pass --on-error skip to log it to errors.jsonl and go on)"
                )
                if not self.local:
                    break
            else:  # "end": the shard is complete
                self._commit(row["shard"], json.loads(row["meta"]))
        if fatal is not None:
            raise fatal

    def _writer(self, i: int):
        if i not in self.writers:
            self.writers[i] = make_writer(self.plan.fmt, self.plan.finals[i], self.confidence)
        return self.writers[i]

    def _record(self, row: Dict[str, Any], bar: _Progress) -> None:
        i = row["shard"]
        writer = self._writer(i)
        if self.first_record is None:
            self.first_record = time.perf_counter() - self.start
        ann = json.loads(row["ann"]) if row["ann"] is not None else {"words": [], "ents": []}
        writer.add(make_record(row["text"], row["meta"], ann), row["doc"])
        self.docs += 1
        self.chars += len(row["text"])
        if row.get("cuts"):
            self.records_split += 1
            self.cuts.update(json.loads(row["cuts"]))
        self.shard_chars[i] = self.shard_chars.get(i, 0) + len(row["text"])
        bar.update(len(row["text"]))

    def _commit(self, i: int, counts: Dict[str, Any]) -> None:
        """Check shard ``i``'s counts, then write its state and rename its
        output into place. The writer stays open until then: a failure on the
        way leaves it to ``abort_open_writers``, which removes its file."""
        shard, final, state = self.plan.shards[i], self.plan.finals[i], self.states[i]
        writer = self._writer(i)
        n_errors = len(self.errors.get(i, []))
        n_failed = self.failed.pop(i, 0)
        if writer.count + n_failed != counts["docs"] or n_errors - n_failed != counts["errors"]:
            raise AnnotateError(
                f"shard {shard}: read {counts['docs']} records ({counts['errors']} bad) but wrote "
                f"{writer.count} ({n_errors - n_failed} bad"
                + (f", {n_failed} refused by the pipeline" if n_failed else "")
                + "); its output was not finished"
            )
        err_text = "".join(dumps(e) + "\n" for e in self.errors.pop(i, []))
        written = file_identity(writer.finish())
        remove_own(final, state)
        write_text_atomic(state.with_suffix(".errors.jsonl"), err_text)
        write_text_atomic(
            state,
            dumps(
                {
                    "shard": str(shard),
                    "output": str(final),
                    "records": writer.count,
                    "skipped": n_errors,
                    "chars": self.shard_chars.pop(i, 0),
                    "input": counts.get("input") or file_identity(shard),
                    "written": written,
                }
            )
            + "\n",
        )
        writer.commit()
        del self.writers[i]
        self.finished.append(i)

    def abort_open_writers(self) -> None:
        """Remove the temporary files of the shards not committed (the run
        failed or was stopped): no ``.partial`` file outlives a run."""
        for writer in self.writers.values():
            writer.abort()
        self.writers.clear()


def _write_errors_file(states: List[Path], errors_path: Path, errors_state: Path) -> bool:
    """errors.jsonl: the skipped records of every finished shard, in shard
    order; whether there were any."""
    err_lines = []
    for st in states:
        err_file = st.with_suffix(".errors.jsonl")
        if err_file.exists():
            err_lines.append(err_file.read_text(encoding="utf8"))
    remove_own(errors_path, errors_state)
    if not any(err_lines):
        return False
    data = "".join(err_lines).encode("utf8")
    write_text_atomic(errors_state, dumps({"output": str(errors_path), "written": bytes_identity(data)}) + "\n")
    write_bytes_atomic(errors_path, data)
    return True
