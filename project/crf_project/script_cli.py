"""What the project's commands share on the command line: each module builds a
typer ``app`` with :func:`script_app`, and ``python crf_project COMMAND`` runs
it with :func:`run_app`."""

import re
import sys
from pathlib import Path
from typing import Any, List, Sequence

import typer

PACKAGE = Path(__file__).resolve().parent


def commands() -> List[str]:
    """The command names (module names with hyphens) of the modules that
    define a top-level typer ``app``; read from the source, so that listing
    them imports nothing."""
    found = [p.stem for p in PACKAGE.glob("*.py") if re.search(r"^app = ", p.read_text(encoding="utf-8"), re.M)]
    return sorted(name.replace("_", "-") for name in found)


def command_line(name: str) -> List[str]:
    """argv that runs the project command ``name`` in a new process with this Python."""
    return [sys.executable, str(PACKAGE), name]


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
