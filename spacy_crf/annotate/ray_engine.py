"""The Ray engine of ``annotate`` (Ray Data; see :mod:`.engines` for how it
gives the same records as the local engine).

Each pending shard is one block of a small dataset of paths; a read task per
shard streams its rows in chunks (``read_rows``, so a bad record is reported
with its file and line exactly as locally); an actor pool (``workers``
actors, each loading the pipeline once, with ``cpus_per_worker`` torch
threads and optionally a GPU) annotates them with ``map_batches``. A Ray row
is a packed chunk of ``batch_size`` rows of one shard (``batch_size`` times
``sort_buffer`` rows when sorting by length), and a block is one
chunk: the pool balances chunks, not shards, and results stream back chunk
by chunk, in order (``preserve_order``).
"""

import gc
import logging
import os
from typing import Any, Dict, Iterator, Optional, Sequence

from .. import enable_speed_ups
from .engines import (
    Shard,
    annotate_rows,
    chunk_batching,
    chunk_rows,
    fatal_row,
    load_pipeline,
    set_threads,
    shard_chunks,
)
from .io import AnnotateError
from .pieces import DEFAULT_MAX_CHARS

#: Shards read at once = workers // WORKERS_PER_READER (at least 1). Reading
#: a shard is short against annotating it (a JSONL shard parses at tens of
#: MB/s, an actor annotates some 20 KB/s of text).
WORKERS_PER_READER = 16


def _schemas():
    """A Ray row is one packed chunk (``batch_size`` rows of one shard), so
    that no block or batch boundary of Ray's can ever cut a chunk."""
    import pyarrow as pa

    row = [
        ("shard", pa.int64()),
        ("line", pa.int64()),
        ("kind", pa.string()),
        ("text", pa.large_string()),
        ("meta", pa.large_string()),
        ("error", pa.string()),
    ]
    out = row + [("ann", pa.large_string()), ("doc", pa.large_binary()), ("cuts", pa.string())]
    return (pa.schema([("rows", pa.large_list(pa.struct(row)))]), pa.schema([("rows", pa.large_list(pa.struct(out)))]))


def _read_shard_chunks(batch, text_key: str, id_key: str, chunk: int):
    """Ray read step: one shard -> its chunks, one packed row (and block) each."""
    import pyarrow as pa

    schema, _ = _schemas()
    for shard in batch.to_pylist():
        try:
            for rows in shard_chunks(shard["path"], shard["shard"], shard["name"], text_key, id_key, chunk):
                yield pa.Table.from_pylist([{"rows": rows}], schema=schema)
        except (AnnotateError, OSError) as err:
            # Raised here, the error would reach the driver wrapped in Ray's
            # traceback and retry advice, ahead of the finished shards still in
            # flight. As a "fatal" row it travels in order, after them, and the
            # driver raises it as the local engine does.
            yield pa.Table.from_pylist([{"rows": [fatal_row(shard["shard"], err)]}], schema=schema)
            return


class RayAnnotator:
    """One actor of the pool: loads the pipeline once, annotates chunks."""

    def __init__(
        self,
        pipeline,
        confidence: bool,
        fmt: str,
        threads: int,
        gpu: bool,
        max_chars: int = DEFAULT_MAX_CHARS,
        batch_size: int = 64,
        sort_buffer: int = 0,
    ) -> None:
        set_threads(threads)
        enable_speed_ups()  # a process of its own: the driver's opt-in is not inherited
        self.nlp = load_pipeline(pipeline, confidence, gpu)
        # this process only annotates: the pipeline stays frozen for its life
        # (engines.collector_spares_the_pipeline says why)
        gc.freeze()
        self.confidence = confidence
        self.fmt = fmt
        self.max_chars = max_chars
        self.batch_size, self.sort_buffer = batch_size, sort_buffer
        _, self.schema = _schemas()

    def __call__(self, batch):
        import pyarrow as pa

        out = []
        for packed in batch.column("rows").to_pylist():
            rows = list(
                annotate_rows(
                    self.nlp,
                    packed,
                    confidence=self.confidence,
                    fmt=self.fmt,
                    max_chars=self.max_chars,
                    **chunk_batching(packed, self.batch_size, self.sort_buffer),
                )
            )
            out.append({"rows": rows})
        return pa.Table.from_pylist(out, schema=self.schema)


def ray_stream(
    pipeline,
    shards: Sequence[Shard],
    *,
    text_key: str = "text",
    id_key: str = "id",
    batch_size: int = 64,
    workers: int = 1,
    cpus_per_worker: float = 1.0,
    gpus_per_worker: float = 0.0,
    address: Optional[str] = None,
    confidence: bool = False,
    fmt: str = "jsonl",
    progress: bool = True,
    max_chars: int = DEFAULT_MAX_CHARS,
    sort_buffer: int = 0,
    **_,
) -> Iterator[Dict[str, Any]]:
    try:
        import ray
        import ray.data
    except ImportError:  # pragma: no cover - depends on the install
        raise ImportError('--engine ray needs Ray Data: pip install "spacy-crf[ray]"') from None
    if not isinstance(pipeline, (str, os.PathLike)):
        raise ValueError("--engine ray loads the pipeline in each actor: pass a name or a path, not a Language")
    if shards:
        # Load it here once first: a pipeline that does not load fails in one
        # line before Ray starts, not as an actor's creation error in Ray's traceback.
        load_pipeline(pipeline, confidence)
    started = False
    if not ray.is_initialized():
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=True,
            logging_level=logging.WARNING,
        )
        started = True
    ctx = ray.data.DataContext.get_current()
    saved = (ctx.execution_options.preserve_order, ctx.enable_progress_bars, ctx.target_max_block_size)
    try:
        ctx.execution_options.preserve_order = True
        ctx.enable_progress_bars = progress
        ctx.print_on_execution_start = False
        # Blocks as small as Ray allows: one chunk each, so that chunks, not whole
        # shards, are what the pool balances and what streams back. (A dataset
        # copies the context when it is created: set before from_items.)
        ctx.target_max_block_size = 1
        if not shards:
            return
        if os.path.exists(pipeline):  # actors may start in another folder
            pipeline = os.path.abspath(pipeline)
        items = [{"shard": i, "path": str(os.path.abspath(path)), "name": name} for i, path, name in shards]
        ds: Any = ray.data.from_items(items, override_num_blocks=len(items))  # a ray.data.Dataset
        # Few read tasks at a time, in shard order: with every shard read at once
        # (num_cpus=0 allows it) the pool got the chunks of all shards
        # interleaved, and preserve_order held every record back until the
        # first shard was complete (docs/results.md, "Annotation throughput").
        # One reader per WORKERS_PER_READER actors keeps a large pool fed.
        ds = ds.map_batches(
            _read_shard_chunks,
            batch_size=1,
            batch_format="pyarrow",
            num_cpus=0,
            compute=ray.data.TaskPoolStrategy(size=max(1, workers // WORKERS_PER_READER)),
            fn_kwargs={"text_key": text_key, "id_key": id_key, "chunk": chunk_rows(batch_size, sort_buffer)},
        )
        ds = ds.map_batches(
            RayAnnotator,
            fn_constructor_kwargs={
                "pipeline": str(pipeline),
                "confidence": confidence,
                "fmt": fmt,
                "threads": max(1, int(cpus_per_worker)),
                "gpu": gpus_per_worker > 0,
                "max_chars": max_chars,
                "batch_size": batch_size,
                "sort_buffer": sort_buffer,
            },
            batch_size=1,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_cpus=cpus_per_worker,
            num_gpus=gpus_per_worker or None,
            # An actor that dies (node lost, OOM kill, ray.kill) is restarted and
            # its chunk retried: Ray Data's actor pools default to
            # max_restarts = max_task_retries = -1 (from 2.60, the oldest Ray
            # allowed), and passing them here goes through **ray_remote_args,
            # deprecated in 2.60 and removed in 2.64. A chunk's output is taken
            # once, so every record still comes back exactly once, in order
            # (test_annotate_paths kills an actor to hold Ray to it).
        )
        for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
            for packed in batch.column("rows").to_pylist():
                yield from packed
    finally:
        ctx.execution_options.preserve_order, ctx.enable_progress_bars, ctx.target_max_block_size = saved
        if started:
            ray.shutdown()
