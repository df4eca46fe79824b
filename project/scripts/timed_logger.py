"""``crf_project.TimedConsoleLogger.v1``: spaCy's console logger plus what each evaluation cost.

It is ``spacy.ConsoleLogger.v3`` with the same settings, and beside its
``output_file`` (``train_log.jsonl``) it writes ``train_log.times.jsonl``,
one row per evaluation::

    {"step": 400, "seconds": 1210, "cpu_seconds": 2391.4, "threads": 2}

``seconds`` is spaCy's wall time since training started; ``cpu_seconds`` the
CPU time of the training process since then (``time.process_time``: every
torch thread, the dev evaluations included), the x axis of the project's
quality-versus-CPU-time curve. Registered for ``spacy train --code
scripts/timed_logger.py``.
"""
import json
import sys
import time
from pathlib import Path
from typing import IO, Optional, Union

from spacy.util import registry


def times_path(output_file: Union[str, Path]) -> Path:
    """Where the timing rows of ``output_file`` go: ``NAME.times.jsonl`` beside it."""
    output_file = Path(output_file)
    return output_file.with_name(output_file.stem + ".times.jsonl")


@registry.loggers("crf_project.TimedConsoleLogger.v1")
def timed_console_logger(progress_bar: Optional[str] = None, console_output: bool = True,
                         output_file: Optional[Union[str, Path]] = None):
    console = registry.loggers.get("spacy.ConsoleLogger.v3")(
        progress_bar=progress_bar, console_output=console_output, output_file=output_file)

    def setup(nlp, stdout: IO = sys.stdout, stderr: IO = sys.stderr):
        import torch

        log_step, finalize = console(nlp, stdout, stderr)
        cpu_start = time.process_time()
        out = times_path(output_file).open("w", encoding="utf8") if output_file else None

        def log(info) -> None:
            log_step(info)
            if info is not None and out is not None:
                out.write(json.dumps({"step": info["step"], "seconds": info["seconds"],
                                      "cpu_seconds": round(time.process_time() - cpu_start, 1),
                                      "threads": torch.get_num_threads()}) + "\n")
                out.flush()

        def close() -> None:
            finalize()
            if out is not None:
                out.close()

        return log, close

    return setup
