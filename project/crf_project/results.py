"""One page of every result the commands wrote: ``ROOT/metrics/RESULTS.md``.

    python crf_project results --out ROOT

Every table a command writes to ``ROOT/metrics/`` goes through
:func:`write_table`, which ends it with the command line that made it and the
git commit it ran at. This command puts those tables on one page, each with
the plots of its name beside it, and lists the JSON files (every figure, the
tables' included) and the study report where there is one. The commands
write no README: the project's README points here.
"""

import shlex
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

from crf_project.script_cli import script_app
from crf_project.seed_report import out_option
from spacy_crf.files import write_text_atomic

PAGE = "RESULTS.md"
#: The shipped model's tables first, in the order `all` makes them; the studies' after, by name.
FIRST = ("summary", "training_curve", "lexicon")
MADE_BY = "_Made by "


#: The project's tracked outputs, relative to the repository root: not part of
#: what made a table (a command that writes several of them would otherwise
#: label its later tables ``-dirty`` with its own earlier outputs).
OUTPUTS = "project/metrics"


def commit(where: Optional[Path] = None) -> str:
    """The checkout's short commit, ``-dirty`` when files other than the
    outputs in ``OUTPUTS`` differ from it; ``unknown`` outside git."""
    here = where or Path(__file__).resolve().parent

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, check=True).stdout.strip()

    try:
        sha = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", f":(top,exclude){OUTPUTS}")
        return sha + ("-dirty" if changed else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def made_by() -> str:
    """The line that labels a table: this process's command line and commit."""
    command = " ".join(["python", *(shlex.quote(arg) for arg in sys.argv[0].split(" ") + sys.argv[1:])])
    return f"{MADE_BY}`{command}` at commit {commit()}._"


def write_table(path: Path, text: str) -> None:
    """Write a generated table (Markdown) and the line saying what made it."""
    write_text_atomic(Path(path), text.rstrip("\n") + "\n\n" + made_by() + "\n")


def page(metrics: Path) -> str:
    """The results page of the folder ``metrics``."""
    order = lambda p: (FIRST.index(p.stem) if p.stem in FIRST else len(FIRST), p.stem)  # noqa: E731
    tables = sorted((p for p in metrics.glob("*.md") if p.name != PAGE), key=order)
    lines: List[str] = ["# Results", ""]
    lines += [f"All the tables in `{metrics}`. Each one ends with the command that wrote it and its commit.", ""]
    for table in tables:
        text = table.read_text(encoding="utf-8").rstrip("\n")
        lines += [f"## {table.stem}", "", text]
        if MADE_BY not in text:
            lines += ["", "_Command and commit not recorded (written before tables were labelled)._"]
        for plot in sorted(metrics.glob(f"{table.stem}*.png")):
            lines += ["", f"![{plot.stem}]({plot.name})"]
        lines.append("")
    study = metrics.parent / "study" / "README.md"
    if study.is_file():
        lines += ["## study", "", "The learning-rate study's report: [../study/README.md](../study/README.md).", ""]
    figures = sorted(p.name for p in metrics.glob("*.json"))
    if figures:
        lines += ["## Figures", "", "Every figure, as the commands wrote it: " + ", ".join(f"`{n}`" for n in figures)]
        lines.append("")
    return "\n".join(lines)


app = script_app()


@app.command(help=__doc__)
def results(out: str = out_option()) -> None:
    metrics = Path(out) / "metrics"
    if not metrics.is_dir():
        sys.exit(f"error: {metrics}: no such folder (run a workflow first)")
    write_table(metrics / PAGE, page(metrics))
    print(f"wrote {metrics / PAGE}")
