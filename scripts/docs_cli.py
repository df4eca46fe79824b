"""Write the command reference of ``spacy crf`` into docs/cli.md.

    python scripts/docs_cli.py          # rewrite the block in docs/cli.md
    python scripts/docs_cli.py --check  # exit 1 if the block is stale

The reference is rendered from the typer app itself (commands, arguments,
options, defaults, help), between ``<!-- CLI -->`` and ``<!-- /CLI -->``,
so that it cannot drift from the code; tests/test_docs.py runs the check.
"""

import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
START, END = "<!-- CLI -->", "<!-- /CLI -->"


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(param) -> str:
    if getattr(param, "is_flag", False) and param.secondary_opts:
        return f"`{param.opts[0] if param.default else param.secondary_opts[0]}`"
    if getattr(param, "is_flag", False):
        return "on" if param.default else "off"
    if param.required:
        return "required"
    if param.default is None or param.default == "":
        return "–"
    return f"`{param.default}`"


def _name(param) -> str:
    if param.param_type_name == "argument":
        return f"`{param.name.upper()}`"
    return "`" + " / ".join(param.opts + param.secondary_opts) + "`"


def render() -> str:
    import typer.main

    from spacy_crf.cli import app

    group = typer.main.get_command(app)
    lines = []
    for name in sorted(group.commands):
        command = group.commands[name]
        args = " ".join(
            p.name.upper() + ("..." if p.nargs == -1 else "") for p in command.params if p.param_type_name == "argument"
        )
        summary = _cell((command.help or "").strip().split("\n\n")[0])
        lines += [
            f"## `spacy crf {name}`",
            "",
            summary,
            "",
            "```bash",
            f"spacy crf {name} {args} [OPTIONS]".replace("  ", " "),
            "```",
            "",
            "| argument / option | default | meaning |",
            "|---|---|---|",
        ]
        lines += [f"| {_name(p)} | {_default(p)} | {_cell(getattr(p, 'help', '') or '')} |" for p in command.params]
        lines.append("")
    return "\n".join(lines)


def block(text: str) -> str:
    start, end = text.index(START) + len(START), text.index(END)
    return text[start:end].strip("\n")


def main(argv) -> int:
    text = PAGE.read_text(encoding="utf8")
    fresh = render().strip("\n")
    if "--check" in argv:
        if block(text) != fresh:
            print(f"{PAGE.name}: the command reference is stale; run python scripts/docs_cli.py", file=sys.stderr)
            return 1
        return 0
    start, end = text.index(START) + len(START), text.index(END)
    PAGE.write_text(text[:start] + "\n" + fresh + "\n" + text[end:], encoding="utf8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
