"""``spacy crf speed``: throughput of a whole pipeline with ``nlp.pipe``, and
where the time goes.

``spacy benchmark speed`` times one process and one batch size in words per
second; this command adds what it lacks for a character pipeline: chars/s
over several batch sizes and ``n_process`` values, on the raw texts of
``.spacy`` files, and a per-component breakdown (seconds per 1,000
characters): each component is timed on the docs the previous ones produced,
with the same batch size, in one process. With ``peers``, the other Chinese
segmenters that are installed (jieba, pkuseg, thulac: :mod:`.peers`) are
timed on the same texts.
"""

import os
import statistics
import time
from pathlib import Path
from typing import Any, Dict, List, Sequence

import typer
from wasabi import msg

from ..batching import DEFAULT_SORT_BUFFER
from ._app import app, check_option


class SpeedError(ValueError):
    """Invalid input of :func:`measure_speed`: the message names the file or setting."""


def load_texts(paths: Sequence[str], limit: int) -> List[str]:
    """The texts of the docs in ``.spacy`` files, the first ``limit`` of each (0: all).

    A file that is missing, is not a ``.spacy`` file or holds no doc is a
    :class:`SpeedError` naming it; so is a total of no characters."""
    from spacy.vocab import Vocab

    from ..corpora.base import CorpusFormatError, read_docbin

    vocab = Vocab()
    texts: List[str] = []
    for path in paths:
        try:
            docs = read_docbin(path, vocab)
        except CorpusFormatError as err:
            raise SpeedError(str(err)) from None
        if not docs:
            raise SpeedError(f"{path}: no docs (empty .spacy file)")
        texts.extend(doc.text for doc in (docs[:limit] if limit else docs))
    if not sum(map(len, texts)):
        raise SpeedError(f"{', '.join(map(str, paths))}: the docs have no text to time")
    return texts


def check_speed_options(
    *, limit: int, batch_sizes: Sequence[int], n_process: Sequence[int], repeats: int, sort_buffer: int = 0
) -> None:
    """Raise :class:`SpeedError` naming the setting for an invalid value."""
    for name, values in (("batch_sizes", batch_sizes), ("n_process", n_process)):
        if not values or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values):
            raise SpeedError(f"{name} must be one or more integers >= 1, got {list(values)!r}")
    if not isinstance(repeats, int) or repeats < 1:
        raise SpeedError(f"repeats must be an integer >= 1, got {repeats!r}")
    if not isinstance(limit, int) or limit < 0:
        raise SpeedError(f"limit must be an integer >= 0 (0: all docs), got {limit!r}")
    if not isinstance(sort_buffer, int) or isinstance(sort_buffer, bool) or sort_buffer < 0:
        raise SpeedError(f"sort_buffer must be an integer >= 0 (0: no sorting), got {sort_buffer!r}")


def chars_per_second(
    nlp, texts: List[str], batch_size: int, n_process: int, repeats: int, sort_buffer: int = 0
) -> float:
    """Median chars/s of ``nlp.pipe`` over ``repeats`` passes, after one
    untimed warm-up batch; with ``sort_buffer``, of
    :func:`spacy_crf.batching.pipe_sorted` with that buffer. With
    ``n_process`` > 1 each process gets its share of the cores as torch (and
    ONNX Runtime) threads, as ``spacy crf annotate`` gives them: forked with
    all of them each, the processes oversubscribe the cores."""
    import torch

    from ..batching import pipe_sorted

    list(nlp.pipe(texts[:batch_size], batch_size=batch_size))  # warm-up: lazy init, allocations
    n_chars = sum(map(len, texts))
    rates = []
    threads = torch.get_num_threads()
    if n_process > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // n_process))
    try:
        for _ in range(repeats):
            start = time.perf_counter()
            for _doc in pipe_sorted(nlp, texts, batch_size=batch_size, buffer=sort_buffer, n_process=n_process):
                pass
            rates.append(n_chars / (time.perf_counter() - start))
    finally:
        torch.set_num_threads(threads)
    return statistics.median(rates)


def component_seconds(nlp, texts: List[str], batch_size: int, sort_buffer: int = 0) -> Dict[str, float]:
    """Seconds spent in the tokenizer and in each pipe, over all ``texts``
    (with ``sort_buffer``, in the batches :func:`~spacy_crf.batching.pipe_sorted` makes)."""
    from spacy.util import minibatch

    from ..batching import sorted_buffers

    if sort_buffer:
        texts = [text for _, entries in sorted_buffers(texts, sort_buffer * batch_size, len) for _, text in entries]
    seconds = {"tokenizer": 0.0, **{name: 0.0 for name in nlp.pipe_names}}
    for batch in minibatch(texts, size=batch_size):
        start = time.perf_counter()
        docs = [nlp.make_doc(text) for text in batch]
        seconds["tokenizer"] += time.perf_counter() - start
        for name, proc in nlp.pipeline:
            start = time.perf_counter()
            docs = list(proc.pipe(docs, batch_size=batch_size)) if hasattr(proc, "pipe") else [proc(d) for d in docs]
            seconds[name] += time.perf_counter() - start
    return seconds


def measure_speed(
    pipeline: str,
    data: Sequence[str],
    *,
    limit: int = 1000,
    batch_sizes: Sequence[int] = (32, 128),
    n_process: Sequence[int] = (1, 2),
    repeats: int = 3,
    peers: bool = False,
    sort_buffer: int = 0,
) -> Dict[str, Any]:
    """Load ``pipeline`` (a directory or package name), time it on the texts of
    ``data`` and print tables; returns what :func:`speed_cli` writes as JSON.
    Settings and data are checked before the pipeline is loaded
    (:class:`SpeedError`); a pipeline that cannot be loaded raises ``OSError``."""
    import spacy

    from ..hardware import hardware

    check_speed_options(
        limit=limit, batch_sizes=batch_sizes, n_process=n_process, repeats=repeats, sort_buffer=sort_buffer
    )
    texts = load_texts(data, limit)
    # n_process > 1 forks after the fast tokenizer was used; without this it warns per child
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    nlp = spacy.load(pipeline)
    n_chars = sum(map(len, texts))
    msg.info(
        f"{pipeline}: {nlp.pipe_names}; {len(texts)} texts, {n_chars:,} chars "
        f"(mean {n_chars / max(len(texts), 1):.1f} per text)"
    )
    _report_kernels()
    runs = []
    for processes in n_process:
        for batch_size in batch_sizes:
            rate = chars_per_second(nlp, texts, batch_size, processes, repeats, sort_buffer)
            runs.append({"n_process": processes, "batch_size": batch_size, "chars_per_s": round(rate, 1)})
            msg.text(f"n_process={processes} batch_size={batch_size}: {rate:,.0f} chars/s")
    msg.table(
        [(r["n_process"], r["batch_size"], f"{r['chars_per_s']:,.0f}") for r in runs],
        header=("n_process", "batch_size", "chars/s"),
        divider=True,
    )
    _explain_slow_processes(runs)
    # the split moves by a tenth between passes on a shared machine: the median of as many passes as the rates
    passes = [component_seconds(nlp, texts, batch_sizes[-1], sort_buffer) for _ in range(repeats)]
    seconds = {name: statistics.median(p[name] for p in passes) for name in passes[0]}
    total = sum(seconds.values())
    msg.table(
        [(name, f"{s / n_chars * 1000:.4f}", f"{100 * s / total:.1f}%") for name, s in seconds.items()],
        header=("component", "s per 1k chars", "share"),
        divider=True,
    )
    extra: Dict[str, Any] = {}
    if peers:
        extra["peers"] = _report_peers(texts, repeats, runs)
    return {
        "pipeline": pipeline,
        "components": nlp.pipe_names,
        "data": list(data),
        "texts": len(texts),
        "chars": n_chars,
        "repeats": repeats,
        "sort_buffer": sort_buffer,
        "runs": runs,
        "seconds_per_1k_chars": {name: round(s / n_chars * 1000, 4) for name, s in seconds.items()},
        **extra,
        "hardware": hardware(),
    }


def _report_kernels() -> None:
    """Say when the timings run without the compiled kernels, and why."""
    from ..ml import kernels

    missing = kernels.missing()
    if missing:
        msg.warn(
            f"compiled kernels not built ({', '.join(missing)}): their pure-Python paths run instead. "
            "Reinstall spacy-crf where a C compiler is available to build them."
        )
    elif not kernels.enabled():
        msg.warn(f"compiled kernels turned off by {kernels.PURE_PYTHON}: the pure-Python paths run")


def _explain_slow_processes(runs: List[Dict[str, Any]]) -> None:
    """Say why, when more processes ran slower than one at the same batch
    size: a reader would otherwise conclude that ``n_process`` never pays."""
    single = {r["batch_size"]: r["chars_per_s"] for r in runs if r["n_process"] == 1}
    slow = [r for r in runs if r["n_process"] > 1 and r["chars_per_s"] < single.get(r["batch_size"], 0)]
    if slow:
        msg.info(
            f"n_process={slow[0]['n_process']} ran slower than one process: every pass forks its workers, "
            "which compile their models again, and each doc travels back to the parent with the encoder's "
            "output (doc._.trf_data). On a long job, with doc_cleaner last in the pipeline (as "
            "`spacy crf annotate` does), two processes beat one; see the speed docs, 'Batching and processes'."
        )


def _report_peers(texts: List[str], repeats: int, runs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    from .peers import PEERS, measure_peers

    found = measure_peers(texts, repeats)
    if not found:
        msg.info(f"no peer segmenter installed ({', '.join(PEERS)})")
        return found
    best = (
        max(r["chars_per_s"] for r in runs if r["n_process"] == 1) if any(r["n_process"] == 1 for r in runs) else None
    )
    rows = []
    for peer in found:
        if "error" in peer:
            rows.append((peer["name"], peer.get("version") or "", peer["error"], ""))
        else:
            ratio = f"{best / peer['chars_per_s']:.2f}" if best else ""
            rows.append((peer["name"], peer["version"] or "", f"{peer['chars_per_s']:,.0f}", ratio))
    msg.table(rows, header=("peer (one text per call)", "version", "chars/s", "pipeline / peer"), divider=True)
    return found


def _ints(text: str, option: str) -> List[int]:
    """Comma-separated integers >= 1 of a command-line option (typer's BadParameter otherwise)."""
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise typer.BadParameter(f"expected comma-separated integers, got {text!r}", param_hint=option) from None
    for value in values:
        check_option(option, value, minimum=1)
    return values


@app.command("speed")
def speed_cli(
    # fmt: off
    pipeline: str = typer.Argument(..., help="A pipeline directory or an installed package name"),
    data: List[str] = typer.Argument(..., help=".spacy files whose texts are processed"),
    limit: int = typer.Option(1000, "--limit", help="Docs per file (0: all)"),
    batch_sizes: str = typer.Option("32,128", "--batch-sizes", help="Comma-separated batch sizes"),
    n_process: str = typer.Option("1,2", "--n-process", help="Comma-separated process counts"),
    repeats: int = typer.Option(3, "--repeats", help="Timed passes per setting (the median is kept)"),
    output: str = typer.Option("", "--output", help="Write the figures to this JSON file"),
    peers: bool = typer.Option(
        False, "--peers", help="Also time the installed peer segmenters (jieba, pkuseg, thulac)"
    ),
    sort_buffer: int = typer.Option(
        DEFAULT_SORT_BUFFER,
        "--sort-buffer",
        help="Feed texts sorted by length within this many batches (0: in file order)",
    ),
    # fmt: on
) -> None:
    """Chars/s of a whole pipeline with nlp.pipe, and seconds per component.

    Texts are the raw texts of the docs in the given .spacy files (the first
    --limit of each), in file order, as a user would feed them. Every setting
    gets one untimed warm-up batch, then the median chars/s over --repeats
    passes. The per-component breakdown uses the last batch size (each
    component's median over --repeats passes). With
    --peers, jieba, pkuseg and thulac (those installed) segment the same
    texts, one per call, and their chars/s is printed beside the pipeline's.
    With --sort-buffer N, the texts go through the pipeline sorted by length
    within each N batches, docs still in input order (spacy_crf.batching).

    Batch sizes, process counts and --repeats must be >= 1 and --limit >= 0;
    a missing or empty .spacy file, a pipeline that cannot be loaded and an
    --output that is the pipeline or a data file are errors, reported before
    any timing. The JSON is written to a temporary file and renamed.

    \b
    Examples:
      spacy crf speed pipeline corpus/sxu/dev.spacy corpus/msra/dev.spacy
      spacy crf speed zh_crf_pipeline dev.spacy --limit 1000 --batch-sizes 32,128 --n-process 1,2 --output speed.json
    """
    from ..files import OutputPathError, check_output_paths, write_json_atomic

    sizes, processes = _ints(batch_sizes, "--batch-sizes"), _ints(n_process, "--n-process")
    check_option("--repeats", repeats, minimum=1)
    check_option("--limit", limit, minimum=0, hint="0: all docs")
    check_option("--sort-buffer", sort_buffer, minimum=0, hint="0: no sorting")
    try:
        if output:
            inputs = [*data, pipeline] if Path(pipeline).exists() else list(data)
            check_output_paths(inputs, [output])
        result = measure_speed(
            pipeline,
            data,
            limit=limit,
            batch_sizes=sizes,
            n_process=processes,
            repeats=repeats,
            peers=peers,
            sort_buffer=sort_buffer,
        )
    except (SpeedError, OutputPathError) as err:
        msg.fail(str(err), exits=1)
    except OSError as err:  # spacy.load: no such package or directory, or not a pipeline
        msg.fail(f"cannot load the pipeline {pipeline!r}", str(err), exits=1)
    if output:
        try:
            write_json_atomic(output, result)
        except OSError as err:
            msg.fail(f"cannot write {output}", str(err), exits=1)
        msg.good(f"Wrote {output}")
