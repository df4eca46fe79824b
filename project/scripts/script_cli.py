"""What the project's scripts share on the command line: each builds a typer
app with :func:`script_app` and runs it from ``main()`` with :func:`run_app`."""

from typing import Any, Sequence

import typer


def script_app() -> typer.Typer:
    """A typer app of one command. Plain output, not rich's boxes: a box wraps
    a usage error at 80 columns, cutting the paths most of these errors name;
    plain, an error stays one line that can be searched for (and a traceback
    of a bug is Python's own)."""
    return typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False)


def run_app(app: typer.Typer) -> None:
    """Run ``app`` on ``sys.argv``. A usage error exits 2 (as typer does) and a
    failure with its own code; a run that succeeds returns instead of exiting
    0, so that a script's ``main()`` can also be called in-process (the tests do)."""
    try:
        app()
    except SystemExit as stop:
        if stop.code not in (0, None):
            raise


def choice_option(default: str, flag: str, choices: Sequence[str], help: str = "") -> Any:
    """A string option that takes one of ``choices`` (listed in ``--help``);
    another value is a usage error, worded as argparse's was."""

    def check(value: str) -> str:
        if value not in choices:
            raise typer.BadParameter(f"invalid choice: {value!r} (choose from {', '.join(map(repr, choices))})")
        return value

    return typer.Option(default, flag, callback=check, metavar=f"[{'|'.join(choices)}]", help=help)
