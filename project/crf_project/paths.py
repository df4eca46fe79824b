"""The ship project's folder, and the paths it writes as seen from elsewhere.

The ship project (``project/``) writes a training recipe's inputs relative to
its folder. The study project runs in ``project/studies/`` and names the same
files as ``../``...: ``to_ship`` and ``from_ship`` turn one form into the
other, so that both projects write the same recipes. The corpus manifest names
its files relative to its own folder instead, so that it reads the same files
from any folder and any clone (a report run from one clone with ``--out`` in
another scores the other's corpus, not its own).
"""

import os
from pathlib import Path
from typing import Any, Dict

import srsly

PROJECT_DIR = Path(__file__).resolve().parent.parent
#: The manifest entries' keys that name files.
MANIFEST_PATHS = ("train", "dev", "dev_lines", "eval", "dictionary", "test")
#: An entry's ``paths`` value when its files are named relative to the manifest.
MANIFEST_RELATIVE = "manifest"


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


def to_manifest(item: str, folder: Path) -> str:
    """``item`` relative to ``folder`` (the manifest's) where it names an existing
    file or folder, else unchanged."""
    if not Path(item).exists():
        return item
    return os.path.relpath(os.path.abspath(item), os.path.abspath(folder))


def load_manifest(path: Path) -> Dict[str, Any]:
    """The corpus step's ``manifest.json``, its file paths usable from here.

    An entry with ``paths: "manifest"`` names its files relative to the
    manifest's folder; older manifests named them relative to the ship
    project's folder of the clone that reads them."""
    entries = srsly.read_json(path)
    for entry in entries.values():
        relative_to_manifest = entry.get("paths") == MANIFEST_RELATIVE
        for key in MANIFEST_PATHS:
            item = entry.get(key)
            if not isinstance(item, str) or Path(item).is_absolute():
                continue
            entry[key] = os.path.relpath(Path(path).parent / item) if relative_to_manifest else from_ship(item)
    return entries
