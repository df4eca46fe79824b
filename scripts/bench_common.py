"""What the benchmark scripts share: reading texts, checking their arguments, writing the result.

Each script prints a table and writes its JSON record; an argument out of
range, a missing input or an output that would overwrite an input is a
usage error (exit 2) before any work.
"""

import argparse
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional

from spacy.tokens import DocBin

from spacy_crf.files import check_output_paths, write_json_atomic
from spacy_crf.util import check_number


def read_texts(paths: List[Path], limit: int, vocab) -> List[str]:
    """The texts of the first ``limit`` docs of each ``.spacy`` file (exit if one has none)."""
    texts = []
    for path in paths:
        docs = list(DocBin().from_disk(path).get_docs(vocab))
        if not docs:
            sys.exit(f"{path}: no docs")
        texts.extend(doc.text for doc in docs[:limit])
    return texts


def check_args(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    counts: Iterable[str],
    inputs: Iterable[Optional[Path]],
    output: Path,
) -> None:
    """Usage errors for options in ``counts`` below 1, inputs that do not
    exist, and an ``output`` that is one of the inputs."""
    for name in counts:
        try:
            check_number(f"--{name.replace('_', '-')}", getattr(args, name), minimum=1)
        except ValueError as e:
            parser.error(str(e))
    inputs = [path for path in inputs if path is not None]
    for path in inputs:
        if not path.exists():
            parser.error(f"{path}: no such file or directory")
    try:
        check_output_paths(inputs, [output])
    except ValueError as e:
        parser.error(str(e))


def finish(result: Dict[str, Any], table: Callable[[Dict[str, Any]], str], output: Path) -> None:
    """Print the result's table and write its JSON record."""
    print(table(result))
    write_json_atomic(output, result)
    print(f"wrote {output}")
