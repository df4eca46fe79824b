"""``spacy crf calibrate``: fit the temperature of a pipeline's CRF heads on
half of the dev docs and report the calibration on the other half
(:func:`spacy_crf.calibration.run.calibrate`)."""

from pathlib import Path
from typing import Optional

import typer
from wasabi import msg

from ._app import app, check_option

NONE = "-"


def _optional(path: Path) -> Optional[Path]:
    return None if str(path) == NONE else path


@app.command("calibrate")
def calibrate_cli(
    pipeline: str = typer.Argument(..., help="An installed pipeline package or a pipeline directory"),
    dev_words: Path = typer.Argument(
        ..., help="Dev docs (.spacy) whose tokens are the gold words, for the segmenter; - for none"
    ),
    dev_ents: Path = typer.Argument(
        ..., help="Dev docs (.spacy) with gold entities, for the entity tagger; - for none"
    ),
    output: Path = typer.Argument(..., help="The calibrated pipeline to write (a directory), with its report"),
    bins: int = typer.Option(15, "--bins", help="Equal-width confidence bins of the ECE and the diagram (>= 1)"),
    objective: str = typer.Option("nll", "--objective", help="What the temperature minimises: nll (log loss) or ece"),
    batch_size: int = typer.Option(64, "--batch-size", help="Documents per batch (>= 1)"),
    limit: int = typer.Option(0, "--limit", help="Use the first N docs of each dev file (0: all)"),
    cache: Optional[Path] = typer.Option(
        None, "--cache", help="A folder for the encoder's results: a stopped run resumes, a refit skips the encoder"
    ),
    force: bool = typer.Option(False, "--force", help="Replace an existing, non-empty output directory"),
) -> None:
    """Calibrate the confidences of a pipeline's CRF segmenter and entity tagger.

    Each dev file's docs are split by index parity: the temperature T of
    each head is fitted on the even docs (T divides the CRF's emission,
    transition and start/end scores before the forward-backward; the decoded
    words and entities do not change), and the expected calibration error
    (ECE) of the span confidences (the smallest marginal of a predicted word
    or entity, correct when it is exactly a gold one) is reported on the
    odd docs, before and after. OUTPUT is the pipeline with each T in its
    head's cfg (so spacy.load, spacy package and spacy crf annotate
    --confidence use it), the report in OUTPUT/calibration/ (report.json,
    report.md, reliability.png).

    \b
    Examples:
      spacy crf calibrate training/pipeline corpus/sxu/dev.spacy corpus/msra/dev.spacy training/calibrated
      spacy crf calibrate zh_crf_pipeline - dev_ents.spacy calibrated --objective ece --cache calib_cache
    """
    from ..calibration.run import CalibrationError, calibrate, headline
    from ..files import OutputPathError

    check_option("--bins", bins, minimum=1)
    check_option("--batch-size", batch_size, minimum=1)
    check_option("--limit", limit, minimum=0)
    if objective not in ("nll", "ece"):
        raise typer.BadParameter(f"must be nll or ece, got {objective!r}", param_hint="--objective")
    try:
        summary = calibrate(
            pipeline,
            _optional(dev_words),
            _optional(dev_ents),
            output,
            n_bins=bins,
            objective=objective,
            batch_size=batch_size,
            limit=limit,
            cache=cache,
            force=force,
            progress=msg.text,
        )
    except (CalibrationError, OutputPathError, OSError) as err:
        msg.fail(str(err), exits=1)
    for line in headline(summary):
        msg.good(line)
    msg.info(f"calibrated pipeline and report (calibration/) -> {output}")
