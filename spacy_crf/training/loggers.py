"""``spacy_crf.TimedConsoleLogger.v1``: spaCy's console logger plus what each evaluation cost.

It is ``spacy.ConsoleLogger.v3`` with the same settings, and beside its
``output_file`` (``train_log.jsonl``) it writes ``train_log.times.jsonl``,
one row per evaluation::

    {"step": 400, "seconds": 1210, "cpu_seconds": 2391.4, "threads": 2,
     "score": 0.82, "scores": {"words_f": 93.1, "ents_f": 70.2}}

``score`` is spaCy's weighted score (what picks ``model-best``), ``scores``
the dev scores of the evaluation in percent, as in
``train_log.jsonl``; this file is flushed after every row (spaCy's own file
is written through a buffer), so a run stopped early keeps its points.

``seconds`` is spaCy's wall time since training started; ``cpu_seconds`` the
CPU time of the training process since then (``time.process_time``: every
torch thread, the dev evaluations included), the x axis of the project's
quality-versus-CPU-time curve.

The shipped training config (``configs/joint.cfg``) names it, so it is found
through the package's ``spacy_loggers`` entry point.
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


@registry.loggers("spacy_crf.TimedConsoleLogger.v1")
def timed_console_logger(
    progress_bar: Optional[str] = None, console_output: bool = True, output_file: Optional[Union[str, Path]] = None
):
    console = registry.loggers.get("spacy.ConsoleLogger.v3")(
        progress_bar=progress_bar, console_output=console_output, output_file=output_file
    )

    def setup(nlp, stdout: IO = sys.stdout, stderr: IO = sys.stderr):
        import torch

        log_step, finalize = console(nlp, stdout, stderr)
        cpu_start = time.process_time()
        out = times_path(output_file).open("w", encoding="utf8") if output_file else None

        def log(info) -> None:
            log_step(info)
            if info is not None and out is not None:
                scores = {
                    name: round(100 * float(value), 3)
                    for name, value in info["other_scores"].items()
                    if isinstance(value, (int, float)) and not name.endswith("_per_type") and name != "speed"
                }
                out.write(
                    json.dumps(
                        {
                            "step": info["step"],
                            "seconds": info["seconds"],
                            "cpu_seconds": round(time.process_time() - cpu_start, 1),
                            "threads": torch.get_num_threads(),
                            "score": float(info["score"]),
                            "scores": scores,
                        }
                    )
                    + "\n"
                )
                out.flush()

        def close() -> None:
            finalize()
            if out is not None:
                out.close()

        return log, close

    return setup
