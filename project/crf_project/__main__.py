"""``python crf_project COMMAND [ARGS]``: run one of the project's commands.

Run as a folder, Python puts this folder itself first on ``sys.path``, where
its modules (``evaluate``, ``train``, ...) would shadow installed packages of
the same names; the folder above it goes there instead, so that every module
is imported as ``crf_project.NAME`` however the package was reached.
"""

import importlib
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
sys.path[0] = str(PACKAGE.parent)

from crf_project.script_cli import commands, run_app  # noqa: E402 (after the sys.path fix above)


def main() -> None:
    names = commands()
    if sys.argv[1:2] in (["--help"], ["-h"]):
        print("usage: python crf_project COMMAND [ARGS] (COMMAND --help for its own)\ncommands: " + ", ".join(names))
        return
    if len(sys.argv) < 2 or sys.argv[1] not in names:
        given = repr(sys.argv[1]) if len(sys.argv) > 1 else "no command"
        sys.exit(f"usage: python crf_project COMMAND [ARGS]: {given} is not one of: {', '.join(names)}")
    name = sys.argv.pop(1)
    sys.argv[0] = f"crf_project {name}"
    run_app(importlib.import_module(f"crf_project.{name.replace('-', '_')}").app)


main()
