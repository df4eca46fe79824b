"""spaCy CLI plug-in: the ``spacy_cli`` entry point ``crf = spacy_crf.cli.plugin:app``.

``spacy`` loads every ``spacy_cli`` entry point before it builds its command
line (``registry.cli.get_all()`` in ``spacy/cli/_util.py``); loading this
module adds the spacy-crf app to spaCy's as the command group ``spacy crf``.
Nothing else imports this module.
"""

from .._compat import spacy_cli_app
from . import app
from ._app import HELP, NAME

spacy_app = spacy_cli_app()
if not any(group.name == NAME for group in spacy_app.registered_groups):
    spacy_app.add_typer(app, name=NAME, help=HELP, no_args_is_help=True)
