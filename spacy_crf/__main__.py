"""``python -m spacy_crf COMMAND``: the same commands as ``spacy crf COMMAND``."""

from .cli import app


def main() -> None:
    app(prog_name="python -m spacy_crf")


if __name__ == "__main__":
    main()
