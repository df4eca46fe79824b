"""``spacy crf convert-corpus``: a CWS or NER corpus file -> ``.spacy``
(:func:`spacy_crf.corpora.convert_corpus`)."""
from pathlib import Path
from typing import Optional

import typer
from wasabi import msg

from ..corpora.convert import FORMATS
from ._app import app


@app.command("convert-corpus")
def convert_corpus_cli(
    fmt: str = typer.Argument(..., help=f"Corpus format: {', '.join(FORMATS)}"),
    input_path: Path = typer.Argument(..., help="Corpus file to read", exists=True, dir_okay=False),
    output_path: Path = typer.Argument(..., help="Output .spacy file"),
    max_chars: int = typer.Option(
        ..., "--max-chars", help="Split docs longer than this many characters (0: no splitting)"
    ),
    dev_output: Optional[Path] = typer.Option(None, "--dev-output", help="Also carve a dev set into this .spacy file"),
    dev_ratio: float = typer.Option(0.1, "--dev-ratio", help="Share of docs carved into --dev-output"),
    seed: int = typer.Option(0, "--seed", help="Random seed of the dev carving"),
    limit: Optional[int] = typer.Option(None, "--limit", help="Keep only the first N docs (smoke runs)"),
) -> None:
    """Convert a CWS or NER corpus to spaCy's .spacy format.

    Docs longer than --max-chars characters are split at sentence or clause
    ends, never inside a word or entity; counts are printed at every step and
    malformed input is reported as FILE:LINE.

    \b
    Examples:
      spacy crf convert-corpus sighan train.txt corpus/sxu/train.spacy --max-chars 256 \\
          --dev-output corpus/sxu/dev.spacy --dev-ratio 0.1 --seed 0
      spacy crf convert-corpus bio msra_test_bio corpus/msra/test.spacy --max-chars 256
    """
    from ..corpora import CorpusFormatError, SplitError, convert_corpus

    try:
        convert_corpus(
            fmt,
            input_path,
            output_path,
            max_chars=max_chars,
            dev_output=dev_output,
            dev_ratio=dev_ratio,
            seed=seed,
            limit=limit,
        )
    except (CorpusFormatError, SplitError, ValueError, OSError) as err:
        msg.fail(str(err), exits=1)
