"""``spacy crf review-queue``: the documents a pipeline is least sure of, as
Label Studio tasks with its predictions (:func:`spacy_crf.annotate.review.review_queue`)."""

from pathlib import Path
from typing import Optional

import typer
from wasabi import msg

from ._app import app, check_option


@app.command("review-queue")
def review_queue_cli(
    pipeline: str = typer.Argument(..., help="An installed pipeline package or a pipeline directory"),
    input_path: Path = typer.Argument(
        ..., help="A .txt file (one document a line), .jsonl or .parquet (a 'text' field), gzipped or not, or .spacy"
    ),
    output_path: Path = typer.Argument(
        ..., help="Label Studio tasks to write (.json); the labelling config goes beside it as NAME.config.xml"
    ),
    n: int = typer.Option(100, "--n", help="How many of the least confident documents to write (>= 1)"),
    batch_size: int = typer.Option(64, "--batch-size", help="Documents per batch (>= 1)"),
    model_version: Optional[str] = typer.Option(
        None, "--model-version", help="The predictions' model_version (default: LANG_NAME-VERSION of the pipeline)"
    ),
) -> None:
    """Write the N documents the pipeline is least sure of for review in Label Studio.

    Every document is scored by its least confident character: the smallest
    CRF marginal, over the entity tagger's and the segmenter's tags, of the
    tag the decoder chose. The N lowest, lowest first, are written as Label
    Studio tasks with the pipeline's entities (control 'label') and words
    (control 'word', label W) as predictions, each region with its own
    score; NAME.config.xml beside the output is the labelling config to
    create the project with. Import the tasks, correct them, export the
    project as JSON and read it back with spacy crf import-review.

    \b
    Examples:
      spacy crf review-queue zh_crf_pipeline corpus.txt review.json --n 200
      spacy crf review-queue training/pipeline dev.spacy review.json --n 50
    """
    from ..annotate.review import ReviewError, review_queue
    from ..files import OutputPathError

    check_option("--n", n, minimum=1)
    check_option("--batch-size", batch_size, minimum=1)
    try:
        summary = review_queue(
            pipeline, input_path, output_path, n=n, batch_size=batch_size, model_version=model_version
        )
    except (ReviewError, OutputPathError, OSError) as err:
        msg.fail(str(err), exits=1)
    scores = summary["scores"]
    span = f", scores {scores[0]:.4f} to {scores[-1]:.4f}" if scores else ""
    msg.good(
        f"{summary['tasks']:,} of {summary['docs']:,} docs{span} -> {summary['output']} "
        f"(labelling config: {summary['config']})"
    )
