"""``spacy crf convert-corpus``: a CWS or NER corpus file -> ``.spacy``
(:func:`spacy_crf.corpora.convert_corpus`)."""

from pathlib import Path
from typing import Optional

import typer
from wasabi import msg

from ..corpora.convert import FORMATS
from ..corpora.split import CARVES, DEFAULT_BLOCK_SIZE
from ._app import app, check_option


@app.command("convert-corpus")
def convert_corpus_cli(
    fmt: str = typer.Argument(..., help=f"Corpus format: {', '.join(FORMATS)}"),
    input_path: Path = typer.Argument(..., help="Corpus file to read", exists=True, dir_okay=False),
    output_path: Path = typer.Argument(..., help="Output .spacy file"),
    max_chars: int = typer.Option(
        ..., "--max-chars", help="Split docs longer than this many characters (0: no splitting; must be >= 0)"
    ),
    dev_output: Optional[Path] = typer.Option(None, "--dev-output", help="Also carve a dev set into this .spacy file"),
    dev_ratio: Optional[float] = typer.Option(
        None,
        "--dev-ratio",
        help="Share of docs carved into --dev-output, in [0, 1) (default 0.1; only with --dev-output)",
    ),
    seed: Optional[int] = typer.Option(
        None, "--seed", help="Random seed of the dev carving (default 0; only with --dev-output)"
    ),
    carve: Optional[str] = typer.Option(
        None,
        "--carve",
        help=f"How dev is carved: {' | '.join(CARVES)} (default blocks: runs of --block-size consecutive docs; lines: single docs at random, the carve of earlier versions; only with --dev-output)",
    ),
    block_size: Optional[int] = typer.Option(
        None,
        "--block-size",
        help=f"Docs per dev block of --carve blocks, >= 1 (default {DEFAULT_BLOCK_SIZE}; only with --dev-output)",
    ),
    lines_dev_output: Optional[Path] = typer.Option(
        None,
        "--lines-dev-output",
        help="Also carve, from what the dev blocks leave, as many random single docs into this .spacy file (a second dev set in the carve of earlier versions, held out of training too; only with --carve blocks)",
    ),
    limit: Optional[int] = typer.Option(
        None, "--limit", help="Keep only the first N >= 1 docs (smoke runs; default: all)"
    ),
) -> None:
    """Convert a CWS or NER corpus to spaCy's .spacy format.

    Docs longer than --max-chars characters are split at sentence or clause
    ends, never inside a word or entity; counts are printed at every step and
    malformed input is reported as FILE:LINE. A carved dev set is made of
    runs of --block-size consecutive docs (--carve blocks): in a corpus
    ordered by article, random single docs (--carve lines) leave their
    neighbours in training and make dev easier than a test set. The share
    of dev words (CWS) or entities (NER) also in the training part is
    printed. --lines-dev-output adds a second dev set of random single docs
    carved from the rest, so that one model can be scored on both carves.

    Invalid options, an output that is the input or the other output, and
    an empty corpus are errors, checked before anything is written; each
    output is written to a temporary file and renamed into place, so an
    interrupted run leaves the old file (or none), never half of one.

    \b
    Examples:
      spacy crf convert-corpus sighan train.txt corpus/sxu/train.spacy --max-chars 256 \\
          --dev-output corpus/sxu/dev.spacy --dev-ratio 0.1 --seed 0
      spacy crf convert-corpus bio msra_test_bio corpus/msra/test.spacy --max-chars 256
    """
    from ..corpora import CorpusFormatError, SplitError, convert_corpus

    check_option("--max-chars", max_chars, minimum=0, hint="0: no splitting")
    for option, value in (
        ("--dev-ratio", dev_ratio),
        ("--seed", seed),
        ("--carve", carve),
        ("--block-size", block_size),
        ("--lines-dev-output", lines_dev_output),
    ):
        if value is not None and dev_output is None:
            raise typer.BadParameter("only applies with --dev-output (it carves the dev set)", param_hint=option)
    dev_ratio = 0.1 if dev_ratio is None else dev_ratio
    seed = 0 if seed is None else seed
    carve = "blocks" if carve is None else carve
    if carve not in CARVES:
        raise typer.BadParameter(f"must be one of {', '.join(CARVES)}, got {carve!r}", param_hint="--carve")
    if block_size is not None and carve != "blocks":
        raise typer.BadParameter("only applies with --carve blocks", param_hint="--block-size")
    if lines_dev_output is not None and carve != "blocks":
        raise typer.BadParameter("only applies with --carve blocks", param_hint="--lines-dev-output")
    block_size = DEFAULT_BLOCK_SIZE if block_size is None else block_size
    check_option("--block-size", block_size, minimum=1)
    check_option("--dev-ratio", dev_ratio, minimum=0, maximum=1, max_open=True)
    if limit is not None:
        check_option("--limit", limit, minimum=1, hint="leave it out to keep every doc")
    try:
        convert_corpus(
            fmt,
            input_path,
            output_path,
            max_chars=max_chars,
            dev_output=dev_output,
            dev_ratio=dev_ratio,
            seed=seed,
            carve=carve,
            block_size=block_size,
            lines_dev_output=lines_dev_output,
            limit=limit,
        )
    except (CorpusFormatError, SplitError, ValueError, OSError) as err:
        msg.fail(str(err), exits=1)
