"""The one typer app that every ``spacy_crf.cli`` command module adds itself to."""

import typer

NAME = "crf"
HELP = """spacy-crf command line tools.

Run them as `spacy crf COMMAND` (spaCy finds this app through the
`spacy_cli` entry point) or as `python -m spacy_crf COMMAND`.
"""

app = typer.Typer(name=NAME, help=HELP, add_completion=False, no_args_is_help=True)


def check_option(option: str, value, **bounds) -> None:
    """:func:`spacy_crf.util.check_number` for a command-line option: a value
    out of range is typer's ``BadParameter`` (exit code 2, naming the option)."""
    from ..util import check_number

    try:
        check_number(option, value, **bounds)
    except ValueError as err:
        raise typer.BadParameter(str(err)[len(option) + 1 :], param_hint=option) from None
