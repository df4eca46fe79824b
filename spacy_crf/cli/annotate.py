"""``spacy crf annotate``: run a pipeline over a corpus of shards, locally or
on a Ray cluster (:func:`spacy_crf.annotate.annotate`)."""

import signal
from pathlib import Path
from typing import Optional

import typer
from wasabi import msg

from ..annotate.pieces import DEFAULT_MAX_CHARS
from ..batching import DEFAULT_SORT_BUFFER
from ._app import app, check_option


@app.command("annotate")
def annotate_cli(
    # fmt: off
    pipeline: str = typer.Argument(..., help="An installed pipeline package or a pipeline directory"),
    input_path: str = typer.Argument(
        ..., help="A .txt/.jsonl/.parquet file (optionally .gz), a folder of them or a glob"
    ),
    output_path: Path = typer.Argument(
        ..., help="Output folder (one file per input shard), or one .jsonl/.parquet/.spacy file for one input file"
    ),
    fmt: Optional[str] = typer.Option(
        None, "--format", help="jsonl, parquet or spacy (default: OUTPUT's extension, else jsonl)"
    ),
    text_key: str = typer.Option("text", "--text-key", help="JSONL/Parquet field with the text"),
    id_key: str = typer.Option("id", "--id-key", help="Field with the record id (default when missing: SHARD:LINE)"),
    engine: str = typer.Option("local", "--engine", help="local (nlp.pipe) or ray (Ray Data actor pool)"),
    n_process: int = typer.Option(1, "--n-process", help="local: processes for nlp.pipe"),
    batch_size: int = typer.Option(64, "--batch-size", help="Docs per nlp.pipe batch (local) or per actor batch (ray)"),
    max_chars: int = typer.Option(
        DEFAULT_MAX_CHARS,
        "--max-chars",
        help="Annotate a longer record in pieces of at most this many characters, cut at sentence ends where possible, and write it whole (>= 1)",
    ),
    sort_buffer: int = typer.Option(
        DEFAULT_SORT_BUFFER,
        "--sort-buffer",
        help="Feed the pipeline texts sorted by length within this many batches, records still in input order (0: input order)",
    ),
    threads: Optional[int] = typer.Option(
        None, "--threads", help="local: torch threads per process (default: all cores / --n-process when > 1)"
    ),
    address: Optional[str] = typer.Option(
        None,
        "--address",
        help="ray: address of a running cluster ('auto' on one of its nodes); default: start one here",
    ),
    workers: int = typer.Option(1, "--workers", help="ray: actors, each loading the pipeline once"),
    cpus_per_worker: float = typer.Option(1.0, "--cpus-per-worker", help="ray: CPUs (and torch threads) per actor"),
    gpus_per_worker: float = typer.Option(
        0.0, "--gpus-per-worker", help="ray: GPUs per actor (e.g. 1, or 0.5 for two actors a GPU)"
    ),
    confidence: bool = typer.Option(False, "--confidence", help="Add each entity's confidence from the CRF marginals"),
    resume: bool = typer.Option(
        True, "--resume/--no-resume", help="Skip shards whose output is complete and whose input is unchanged"
    ),
    force: bool = typer.Option(
        False, "--force", help="Overwrite existing files at the output paths that annotate did not write"
    ),
    on_error: str = typer.Option(
        "raise", "--on-error", help="raise: stop at a bad record; skip: log it to errors.jsonl"
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar"),
    # fmt: on
) -> None:
    """Annotate a corpus: one record per document with its words and entities.

    Each input file is a shard and gets one output file, written under a
    temporary name and renamed once its record count equals the count read;
    a rerun skips finished shards whose input is unchanged and redoes the
    others. No output may be an input, and a file at an output path that
    annotate did not write is refused unless --force. A record holds the
    id, the text, the words as (start, end) character offsets, the entities
    as {start, end, label} and the input record's other fields; records keep
    the input order. A record longer than --max-chars is annotated in pieces
    cut at sentence ends where possible and written as one record. Ctrl-C or
    SIGTERM stops the run (and its --n-process workers); rerun to resume.

    \b
    Examples:
      spacy crf annotate zh_crf_pipeline corpus/ annotated/
      spacy crf annotate zh_crf_pipeline news.txt news.jsonl --n-process 2
      spacy crf annotate zh_crf_pipeline "dump/*.jsonl.gz" out/ --format parquet --confidence --on-error skip
      spacy crf annotate zh_crf_pipeline corpus/ annotated/ --engine ray --workers 2
      spacy crf annotate zh_crf_pipeline /shared/corpus/ /shared/out/ --engine ray --address auto --workers 64
    """
    from ..annotate import AnnotateError, annotate
    from ..annotate.engines import Terminated

    for option, value, minimum in [
        ("--batch-size", batch_size, 1),
        ("--max-chars", max_chars, 1),
        ("--sort-buffer", sort_buffer, 0),
        ("--n-process", n_process, 1),
        ("--workers", workers, 1),
        ("--cpus-per-worker", cpus_per_worker, 0),
        ("--gpus-per-worker", gpus_per_worker, 0),
    ]:
        check_option(option, value, minimum=minimum)
    if threads is not None:
        check_option("--threads", threads, minimum=1, hint="leave it out for the default")
    try:
        summary = annotate(
            pipeline,
            input_path,
            str(output_path),
            fmt=fmt,
            text_key=text_key,
            id_key=id_key,
            engine=engine,
            n_process=n_process,
            batch_size=batch_size,
            threads=threads,
            address=address,
            workers=workers,
            cpus_per_worker=cpus_per_worker,
            gpus_per_worker=gpus_per_worker,
            confidence=confidence,
            resume=resume,
            force=force,
            on_error=on_error,
            progress=progress,
            max_chars=max_chars,
            sort_buffer=sort_buffer,
        )
    except (AnnotateError, OSError) as err:
        msg.fail(str(err), exits=1)
    except (KeyboardInterrupt, Terminated) as stop:
        # finished shards are committed, the one in progress is not: a rerun resumes exactly
        name = "SIGINT" if isinstance(stop, KeyboardInterrupt) else signal.Signals(stop.signum).name
        msg.warn(f"stopped by {name}; finished shards are kept, rerun the same command to resume")
        raise typer.Exit(128 + (signal.SIGINT if isinstance(stop, KeyboardInterrupt) else stop.signum)) from None
    for shard in summary["redone"]:
        msg.warn(f"redid {shard['shard']}: {shard['reason']}")
    msg.good(
        f"{summary['docs']:,} docs, {summary['chars']:,} chars in {summary['seconds']:.1f}s "
        f"({summary['docs_per_s']:,.1f} docs/s, {summary['chars_per_s']:,.0f} chars/s; "
        f"first record after {summary['first_record_s'] or 0:.1f}s)"
    )
    if summary["records_split"]:
        kinds = ", ".join(f"{n:,} {kind.replace('_', ' ')}" for kind, n in sorted(summary["cuts"].items()))
        msg.info(
            f"{summary['records_split']:,} records longer than {max_chars:,} characters were annotated in "
            f"pieces and written whole; cuts: {kinds}"
        )
    msg.text(
        f"shards: {summary['shards_written']} written, {summary['shards_resumed']} already complete "
        f"(of {summary['shards']}); skipped records: {summary['skipped']}"
        + (f" (see {summary['errors_file']})" if summary["errors_file"] else "")
    )
