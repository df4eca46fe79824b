"""A character tagger's folder, as ``spacy crf extract-tagger`` writes it and
``spacy_crf.read_char_tagger.v1`` reads it: ``model.onnx`` (the graph) and
``tagger.json`` (its tables, metadata and the graph's sha256)."""

import weakref
from pathlib import Path
from typing import Optional

import srsly
from spacy.util import registry

from .char_tagger import FORMAT, CharTagger

MODEL_FILE, META_FILE = "model.onnx", "tagger.json"


def write_char_tagger(tagger: CharTagger, path) -> None:
    """``path/model.onnx`` and ``path/tagger.json`` (everything else, the sha256 of the model included)."""
    from ..files import write_bytes_atomic, write_json_atomic

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path / MODEL_FILE, tagger.model)
    write_json_atomic(path / META_FILE, tagger.to_dict(), indent=0)


@registry.readers("spacy_crf.read_char_tagger.v1")
def read_char_tagger(path) -> Optional[CharTagger]:
    """The tagger in folder ``path`` (``spacy crf extract-tagger``), for
    ``[initialize.components.NAME.tagger_features]``; ``path`` null: none.
    Errors name the file; the model's bytes must have the recorded sha256."""
    if path is None:
        return None
    path = Path(path)
    model_path, meta_path = path / MODEL_FILE, path / META_FILE
    # the heads of a joint config each read the same folder: one tagger, one cache
    try:
        key = (str(path.resolve()), *((p.stat().st_size, p.stat().st_mtime_ns) for p in (model_path, meta_path)))
    except OSError:
        key = None
    if key is not None and key in _READ:
        return _READ[key]
    tagger = _read_char_tagger(path, model_path, meta_path)
    if key is not None:
        _READ[key] = tagger
    return tagger


_READ: "weakref.WeakValueDictionary[tuple, CharTagger]" = weakref.WeakValueDictionary()


def _read_char_tagger(path, model_path, meta_path) -> CharTagger:
    for needed in (model_path, meta_path):
        if not needed.is_file():
            raise ValueError(
                f"char tagger {str(path)!r}: no {needed.name}; make the folder with `spacy crf extract-tagger`"
            )
    try:
        meta = srsly.read_json(meta_path)
    except ValueError as e:
        raise ValueError(f"char tagger {str(meta_path)!r}: not JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"char tagger {str(meta_path)!r}: not a {FORMAT} file")
    try:
        return CharTagger.from_dict(model_path.read_bytes(), meta)
    except ValueError as e:
        raise ValueError(f"char tagger {str(path)!r}: {str(e).removeprefix('char tagger: ')}") from None
