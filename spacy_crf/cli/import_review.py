"""``spacy crf import-review``: Label Studio's JSON export back into ``.spacy``
training data (:func:`spacy_crf.annotate.review_import.import_review`)."""

from pathlib import Path
from typing import Optional

import typer
from wasabi import msg

from ._app import app

DEFAULT_LANG = "zh"


@app.command("import-review")
def import_review_cli(
    export_path: Path = typer.Argument(..., help="Label Studio's export of the project, in its JSON format"),
    output_path: Path = typer.Argument(..., help="The .spacy file to write"),
    lang: Optional[str] = typer.Option(
        None,
        "--lang",
        help=f"Language whose tokenizer splits the docs without word regions (default {DEFAULT_LANG}; not with --pipeline)",
    ),
    pipeline: Optional[str] = typer.Option(
        None, "--pipeline", help="Take the tokenizer from this pipeline (package or directory) instead of --lang"
    ),
) -> None:
    """Read reviewed Label Studio tasks back into .spacy training data.

    Each task's latest annotation that was not cancelled (or, without one,
    its prediction) gives one doc with the task's text unchanged: the
    'label' regions are its entities and the 'word' regions, if any, its
    tokens. A task whose annotations were all cancelled is left out and
    counted. Overlapping regions, offsets outside the text, a region text
    that differs from the text at its offsets, and an entity that is not on
    token boundaries stop the import in one line naming the task.

    \b
    Examples:
      spacy crf import-review project-export.json reviewed.spacy
      spacy crf import-review project-export.json reviewed.spacy --pipeline zh_crf_pipeline
    """
    from ..annotate.review import ReviewError
    from ..annotate.review_import import import_review
    from ..files import OutputPathError

    if lang is not None and pipeline is not None:
        raise typer.BadParameter("give --lang or --pipeline, not both", param_hint="--lang")
    nlp = None
    if pipeline is not None:
        import spacy

        try:
            nlp = spacy.load(pipeline)
        except Exception as err:  # noqa: BLE001 - any pipeline that does not load: one line naming it
            msg.fail(f"pipeline {pipeline!r} cannot be loaded: {err}", exits=1)
    try:
        counts = import_review(
            export_path, output_path, lang=None if nlp is not None else (lang or DEFAULT_LANG), nlp=nlp
        )
    except (ReviewError, OutputPathError, OSError) as err:
        msg.fail(str(err), exits=1)
    msg.good(
        f"{counts['docs']:,} docs ({counts['annotation']:,} annotated, {counts['prediction']:,} predictions "
        f"kept), {counts['entities']:,} entities, {counts['with_words']:,} with words; "
        f"{counts['cancelled']:,} cancelled tasks left out -> {output_path}"
    )
