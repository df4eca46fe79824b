"""What both trainable heads share (:class:`~.crf_tagger.CRFTagger` and
:class:`~.span_ner.SpanNER`): the guarded update, labels kept in ``cfg``,
the "not initialized" error, and serialization through the load checks of
:mod:`.load_checks` (every save stores the outputs the weights score, every
load checks cfg, weights, finiteness and that order, naming the file).

A head adds its own files through :meth:`TrainableHead._extra_files` /
:meth:`TrainableHead._load_extra` and says what "initialized" means in
:meth:`TrainableHead._is_initialized`.
"""

import shutil
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Tuple, Union

from spacy.pipeline import TrainablePipe
from spacy.util import ensure_path

from ..files import atomic_dir
from . import load_checks
from .guarded_update import GuardedUpdate


class TrainableHead(GuardedUpdate, TrainablePipe):
    """A ``TrainablePipe`` with the package's update guard and load checks."""

    #: the ``cfg`` keys that are factory settings: loading keeps the values the
    #: pipe was made with (its config, with any override given to ``spacy.load``)
    #: over the saved ones, which bring the labels and what training set
    config_settings: Tuple[str, ...] = ()

    # --- labels ---------------------------------------------------------------

    @property
    def labels(self) -> Tuple[str, ...]:
        return tuple(self.cfg["labels"])

    @property
    def label_data(self) -> List[str]:
        return list(self.labels)

    def _is_initialized(self) -> bool:
        raise NotImplementedError

    def _require_initialized(self, what: str) -> None:
        if not self._is_initialized():
            raise ValueError(
                f"[{self.name}] {what}: the component is not initialized (its model has no "
                "weights). Call nlp.initialize() or load a trained pipeline first."
            )

    # --- serialization --------------------------------------------------------

    def _extra_files(self) -> Dict[str, Callable[[], str]]:
        """Further files saved beside cfg and weights: name -> their text."""
        return {}

    def _load_extra(self, path_or_bytes: Union[Path, bytes], exclude: Iterable[str]) -> None:
        """Read what :meth:`_extra_files` saved (after the checked load)."""

    def to_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()) -> None:
        """Save cfg, vocab and weights as spaCy's pipes do, with the outputs the
        weights score (labels or tags, in order), checked at load
        (:func:`~.load_checks.save_to_disk`), and the head's further files.

        The directory is written whole or not at all: it is built beside
        ``path`` and put in its place once every file is written (an error
        on the way leaves ``path`` as it was). What ``exclude`` leaves out
        is kept from the directory there was."""
        self._validate_serialization_attrs()
        path = Path(path)
        if path.exists() and not path.is_dir():  # the swap below would move the user's file aside, silently
            raise ValueError(f"[{self.name}] cannot save to {str(path)!r}: it is a file, and a pipe saves a directory.")
        extra = {
            name: (lambda p, text=text: p.write_text(text(), encoding="utf8"))
            for name, text in self._extra_files().items()
        }
        with atomic_dir(path) as tmp:
            load_checks.save_to_disk(self, tmp, exclude, extra)
            for name in exclude:
                for kept in (name, load_checks.DIGEST_KEY) if name == "model" else (name,):
                    if (path / kept).exists() and not (tmp / kept).exists():
                        copy = shutil.copytree if (path / kept).is_dir() else shutil.copy2
                        copy(path / kept, tmp / kept)

    def to_bytes(self, *, exclude: Iterable[str] = tuple()) -> bytes:
        """:meth:`to_disk` as bytes."""
        self._validate_serialization_attrs()
        return load_checks.save_to_bytes(self, exclude, self._extra_files())

    def from_disk(self, path: Union[str, Path], *, exclude: Iterable[str] = tuple()):
        """Load the pipe from a directory, checking that it is whole: the cfg
        has the labels, the weights load, score those outputs in that order
        and are finite (:func:`~.load_checks.load_from_disk`). Errors name
        the directory or the file."""
        self._validate_serialization_attrs()
        load_checks.load_from_disk(self, ensure_path(path), exclude)
        self._load_extra(ensure_path(path), exclude)
        return self

    def from_bytes(self, bytes_data: bytes, *, exclude: Iterable[str] = tuple()):
        """Load the pipe from bytes, with the checks of :meth:`from_disk`."""
        self._validate_serialization_attrs()
        load_checks.load_from_bytes(self, bytes_data, exclude)
        self._load_extra(bytes_data, exclude)
        return self
