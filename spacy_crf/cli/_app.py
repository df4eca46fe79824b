"""The one typer app that every ``spacy_crf.cli`` command module adds itself to."""
import typer

NAME = "crf"
HELP = """spacy-crf command line tools.

Run them as `spacy crf COMMAND` (spaCy finds this app through the
`spacy_cli` entry point) or as `python -m spacy_crf COMMAND`.
"""

app = typer.Typer(name=NAME, help=HELP, add_completion=False, no_args_is_help=True)
