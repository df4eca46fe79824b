"""Put a generated table between ``<!-- NAME -->`` and ``<!-- /NAME -->`` in a README."""

import re
import sys
from pathlib import Path

from spacy_crf.files import write_text_atomic


def replace_block(readme: Path, name: str, table: str) -> None:
    """Replace the text between the markers; exit with an error unless there is exactly one block."""
    readme = Path(readme)
    text = readme.read_text(encoding="utf8")
    pattern = rf"(<!-- {name} -->\n).*?(\n<!-- /{name} -->)"
    new, n = re.subn(pattern, lambda m: m.group(1) + table + m.group(2), text, flags=re.S)
    if n != 1:
        sys.exit(f"error: {readme} has {n} <!-- {name} --> ... <!-- /{name} --> blocks, not one; left unchanged")
    write_text_atomic(readme, new)
