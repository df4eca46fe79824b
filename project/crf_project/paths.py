"""The ship project's folder, and the paths it writes as seen from elsewhere.

The ship project (``project/``) writes paths relative to its folder: the
corpus manifest's files, a training recipe's inputs. The study project runs
in ``project/studies/`` and names the same files as ``../``...: these two
functions turn one form into the other, so that both projects read the same
manifest and write the same recipes.
"""

import os
from pathlib import Path
from typing import Any, Dict

import srsly

PROJECT_DIR = Path(__file__).resolve().parent.parent
#: The manifest entries' keys that name files.
MANIFEST_PATHS = ("train", "dev", "dev_lines", "eval", "dictionary", "test")


def to_ship(item: str) -> str:
    """``item`` relative to the ship project's folder where it names an existing
    file or folder in the repository, else unchanged."""
    if "/" not in item or not Path(item).exists():
        return item
    absolute = os.path.abspath(item)
    if not absolute.startswith(str(PROJECT_DIR.parent) + os.sep):
        return item
    return os.path.normpath(os.path.relpath(absolute, PROJECT_DIR))


def from_ship(path: str) -> str:
    """A relative path the ship project wrote, as seen from the current folder
    (unchanged in the ship project's own folder)."""
    if Path(path).is_absolute() or Path.cwd().resolve() == PROJECT_DIR:
        return path
    return os.path.relpath(PROJECT_DIR / path)


def load_manifest(path: Path) -> Dict[str, Any]:
    """The corpus step's ``manifest.json``, its file paths usable from here."""
    entries = srsly.read_json(path)
    for entry in entries.values():
        for key in MANIFEST_PATHS:
            if isinstance(entry.get(key), str):
                entry[key] = from_ship(entry[key])
    return entries
