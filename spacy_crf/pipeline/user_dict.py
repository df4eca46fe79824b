"""User dictionaries: words and entities a user adds to a trained tagger at
load time, without retraining.

A ``bmes`` segmenter takes user *words* (:meth:`CRFTagger.add_user_words`),
a ``bio``/``bioes`` entity tagger user *entities* with a label, a gazetteer
(:meth:`CRFTagger.add_user_entities`). Each entry has a mode (decoding with
them is :mod:`spacy_crf.pipeline.user_dict_decoding`):

* ``"force"`` (the default): a hard constraint on decoding, through the tag
  mask the tagger already decodes around (:mod:`spacy_crf.pipeline.forced_tags`). Every
  occurrence of a forced word in a doc is decoded as exactly one word (``B``
  ``M``... ``E``): it is never split, and never joined to its neighbours.
  Every occurrence of a forced entity is decoded as that entity.
* ``"prior"``: a soft bias, as the segmenter's lexicon (:mod:`spacy_crf.pipeline.lexicon`):
  each occurrence adds ``weight`` to the emission scores of its tags (``B``
  ``M``... ``E`` for a word; ``B-X`` ``I-X``... ``E-X`` / ``S-X`` for an
  entity of label ``X``), on top of the lexicon's prior; the CRF still
  decides.

Occurrences are found by :class:`~spacy_crf.pipeline.lexicon.Lexicon` (whole tokens,
never across whitespace); an entity of one token is found by its token's
text. Forced occurrences are resolved per doc, deterministically:

* an occurrence inside a longer forced occurrence gives way to it (with
  ``上海`` and ``上海交通大学`` forced, ``上海交通大学`` is one word: ``上海``
  is not split either);
* two forced occurrences that cross (``ABC`` and ``CD`` in ``ABCD``) cannot
  both be whole: a :class:`UserDictConflict` names both entries and the doc;
* what the doc already says comes first when the tagger honours it: an
  entity tagger drops a forced occurrence that overlaps an entity already on
  the doc (set by hand or by an ``entity_ruler``); a segmenter with
  ``respect_ents`` drops a forced occurrence that an entity boundary cuts,
  as that setting promises that no word crosses an entity;
* whitespace is never inside an entry (refused when it is added, as are a
  lone surrogate, an entry over 100 characters, and an entity label the
  tagger does not have or has not yet: each in one line naming the entry,
  and a file's line; ``initialize`` refuses an entry whose label its labels
  leave out).

Entries added through the API are saved with the pipe (the file
``user_dict`` beside ``cfg``). The factory setting ``user_dict`` names a file
read each time the pipe is created (:func:`read_user_dict`), so
``spacy.load(path, config={"components": {NAME: {"user_dict": FILE}}})``
adds a dictionary to a packaged pipeline; those entries are not copied into
the saved pipe, the file stays their source.
"""

from pathlib import Path
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy
import srsly

MODES = ("force", "prior")
DEFAULT_PRIOR_WEIGHT = 1.0
#: the file of the saved entries in a pipe's directory, and its key in the pipe's bytes
FILE = "user_dict"


class UserDictConflict(ValueError):
    """Two forced entries overlap in a doc in a way no decoding can honour."""


class UserEntry(NamedTuple):
    """One entry of a user dictionary."""

    text: str
    label: Optional[str]  # the entity label; None for a word
    mode: str  # "force" or "prior"
    weight: float  # the prior's weight; 0.0 for "force"
    source: str  # where it came from, for error messages
    saved: bool  # added through the API (saved with the pipe), not read from the `user_dict` setting

    def describe(self) -> str:
        return repr(self.text) if self.label is None else f"{self.text!r} ({self.label})"


class UserDict:
    """The user entries of one tagger, by text (one entry per text; adding a
    text again replaces its entry). ``pipe.user_dict``; add entries with
    ``pipe.add_user_words`` / ``pipe.add_user_entities``."""

    def __init__(self) -> None:
        self._entries: Dict[str, UserEntry] = {}
        # (labels, user_dict_decoding._Matchers), rebuilt when either changes
        self._compiled: Optional[Tuple[Tuple[str, ...], Any]] = None

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, text: str) -> bool:
        return text in self._entries

    def __iter__(self):
        return iter(self._entries.values())

    @property
    def entries(self) -> List[UserEntry]:
        return list(self._entries.values())

    def get(self, text: str) -> Optional[UserEntry]:
        return self._entries.get(text)

    def remove(self, texts: Iterable[str]) -> int:
        """Remove the entries of ``texts``; how many there were."""
        removed = 0
        for text in [texts] if isinstance(texts, str) else texts:
            removed += self._entries.pop(text, None) is not None
        self._compiled = None
        return removed

    def clear(self) -> None:
        self._entries.clear()
        self._compiled = None

    def _update(self, entries: Sequence[UserEntry]) -> None:
        for entry in entries:
            self._entries[entry.text] = entry
        self._compiled = None

    def _replace_saved(self, entries: Sequence[UserEntry]) -> None:
        """Drop the saved entries and add ``entries`` (loading a pipe)."""
        self._entries = {t: e for t, e in self._entries.items() if not e.saved}
        self._update(entries)

    def _to_list(self) -> List[list]:
        return [[e.text, e.label, e.mode, e.weight] for e in self._entries.values() if e.saved]


# --- adding entries ------------------------------------------------------------------


def _check_pipe(pipe, entities: bool) -> None:
    if entities and pipe.scheme not in ("bio", "bioes"):
        raise ValueError(
            f"[{pipe.name}] user entities apply to an entity tagger (scheme 'bio' or 'bioes'), "
            f"not {pipe.scheme!r}" + (": add words with add_user_words." if pipe.scheme == "bmes" else ".")
        )
    if not entities and pipe.scheme != "bmes":
        raise ValueError(
            f"[{pipe.name}] user words apply to a segmenter (scheme 'bmes'), not {pipe.scheme!r}"
            + (": add entities with add_user_entities." if pipe.scheme in ("bio", "bioes") else ".")
        )


def _mode_weight(pipe, mode: str, weight: Optional[float], where: str) -> float:
    if mode not in MODES:
        raise ValueError(f"[{pipe.name}] {where}: mode must be 'force' or 'prior', not {mode!r}.")
    if mode == "force":
        if weight is not None:
            raise ValueError(
                f"[{pipe.name}] {where}: a weight applies to mode 'prior' only; a forced entry "
                "is a constraint, not a score."
            )
        return 0.0
    weight = DEFAULT_PRIOR_WEIGHT if weight is None else weight
    try:
        weight = float(weight)
    except (TypeError, ValueError):
        raise ValueError(f"[{pipe.name}] {where}: the weight must be a number, got {weight!r}.") from None
    if not numpy.isfinite(weight) or weight <= 0:
        raise ValueError(f"[{pipe.name}] {where}: the weight must be a finite number > 0, got {weight}.")
    return weight


def _check_text(pipe, text, what: str, where: str, min_length: int) -> str:
    from ..ml.lexicon_match import MAX_WORD_LENGTH  # (the tools import this module: no matcher until needed)

    if not isinstance(text, str):
        raise ValueError(f"[{pipe.name}] {where}: a user {what} must be a string, got {text!r}.")
    if len(text) > MAX_WORD_LENGTH:
        raise ValueError(
            f"[{pipe.name}] {where}: the user {what} {text[:20]!r}... has {len(text):,} characters, more than "
            f"the {MAX_WORD_LENGTH} an entry may have."
        )
    _check_unicode(pipe, text, f"the user {what} {text!r}", where)
    if any(ch.isspace() for ch in text):
        raise ValueError(
            f"[{pipe.name}] {where}: the user {what} {text!r} contains whitespace, which is never inside a {what}."
        )
    if len(text) < min_length:
        if not text:
            raise ValueError(f"[{pipe.name}] {where}: an empty user {what}.")
        raise ValueError(
            f"[{pipe.name}] {where}: the user word {text!r} has one character: a word of one "
            "character is never split, there is nothing to add."
        )
    return text


def _check_unicode(pipe, text: str, what: str, where: str) -> None:
    """A lone surrogate (``"\\ud800"``) cannot be saved as UTF-8, nor match any text."""
    try:
        text.encode("utf8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"[{pipe.name}] {where}: {what} is not valid Unicode: a lone surrogate {text[e.start]!r} at "
            f"character {e.start}."
        ) from None


def _check_label(pipe, entry: UserEntry) -> None:
    if not pipe.labels:
        raise ValueError(
            f"[{pipe.name}] the user entity {entry.describe()} ({entry.source}): the tagger has no labels yet, "
            "so the label cannot be checked. Add user entities once the labels are known: after "
            "nlp.initialize() or add_label, or in a trained pipeline."
        )
    if entry.label not in pipe.labels:
        raise ValueError(
            f"[{pipe.name}] the user entity {entry.describe()} ({entry.source}) has a label this tagger does not "
            f"predict; its labels are {list(pipe.labels)}. Use one of them, or set the entity with an "
            "entity_ruler before the tagger (it keeps preset entities of any label)."
        )


def _merge(pipe, entries: List[UserEntry]) -> List[UserEntry]:
    """``entries`` without repeats; one text with two different entries is an error naming both."""
    seen: Dict[str, UserEntry] = {}
    for entry in entries:
        other = seen.get(entry.text)
        if other is not None and other[:4] != entry[:4]:
            raise ValueError(
                f"[{pipe.name}] the user dictionary has {entry.text!r} twice, differently: "
                f"{other.describe()} {other.mode} ({other.source}) and {entry.describe()} "
                f"{entry.mode} ({entry.source}). Keep one."
            )
        seen[entry.text] = entry
    return list(seen.values())


def add_words(
    pipe,
    words: Iterable[str],
    mode: str = "force",
    weight: Optional[float] = None,
    *,
    source: str = "add_user_words",
    saved: bool = True,
) -> int:
    """``CRFTagger.add_user_words``: add ``words`` in ``mode``; how many entries were given."""
    _check_pipe(pipe, entities=False)
    if isinstance(words, str):
        raise ValueError(f"[{pipe.name}] {source}: give a list of words, not one string ({words!r}).")
    weight = _mode_weight(pipe, mode, weight, source)
    entries = [UserEntry(_check_text(pipe, w, "word", source, 2), None, mode, weight, source, saved) for w in words]
    entries = _merge(pipe, entries)
    pipe.user_dict._update(entries)
    return len(entries)


def add_entities(
    pipe,
    entities: Iterable[Tuple[str, str]],
    mode: str = "force",
    weight: Optional[float] = None,
    *,
    source: str = "add_user_entities",
    saved: bool = True,
) -> int:
    """``CRFTagger.add_user_entities``: add ``(text, label)`` pairs in ``mode``."""
    _check_pipe(pipe, entities=True)
    weight = _mode_weight(pipe, mode, weight, source)
    entries = []
    for item in entities:
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[1], str) and item[1]):
            raise ValueError(f"[{pipe.name}] {source}: a user entity is a (text, label) pair, got {item!r}.")
        text = _check_text(pipe, item[0], "entity", source, 1)
        entries.append(UserEntry(text, item[1], mode, weight, source, saved))
    entries = _merge(pipe, entries)
    for entry in entries:
        _check_label(pipe, entry)
    pipe.user_dict._update(entries)
    return len(entries)


def read_user_dict(path: Union[str, Path], scheme: str) -> List[Tuple[str, Optional[str], str, Optional[float], str]]:
    """The entries of a user dictionary file: ``(text, label, mode, weight, source)``.

    UTF-8, one entry a line, fields separated by whitespace; blank lines and
    lines starting with ``#`` are skipped:

    * segmenter (``bmes``): ``WORD [MODE [WEIGHT]]``
    * entity tagger: ``TEXT LABEL [MODE [WEIGHT]]``

    MODE is ``force`` (default) or ``prior``; WEIGHT (``prior`` only) defaults
    to 1. Errors name the file and the line."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"user dictionary {str(path)!r}: no such file")
    entities = scheme in ("bio", "bioes")
    form = "TEXT LABEL [force|prior [WEIGHT]]" if entities else "WORD [force|prior [WEIGHT]]"
    found = []
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, 1):
            where = f"user dictionary {str(path)!r}, line {line_no}"
            try:
                line = raw.decode("utf-8").lstrip("\ufeff")
            except UnicodeDecodeError as e:
                raise ValueError(f"{where}: not UTF-8 ({e.reason})") from None
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            text, rest = fields[0], fields[1:]
            label = None
            if entities:
                if not rest:
                    raise ValueError(f"{where}: {text!r} has no label; a line is {form}")
                label, rest = rest[0], rest[1:]
            if len(rest) > 2 or (rest and rest[0] not in MODES):
                raise ValueError(f"{where}: expected {form}, got {line.strip()!r}")
            mode = rest[0] if rest else "force"
            weight: Optional[float] = None
            if len(rest) == 2:
                try:
                    weight = float(rest[1])
                except ValueError:
                    raise ValueError(f"{where}: the weight {rest[1]!r} is not a number") from None
            found.append((text, label, mode, weight, where))
    return found


def add_from_file(pipe, path: Union[str, Path]) -> int:
    """Add the entries of the file ``path`` (the factory setting ``user_dict``),
    as not saved with the pipe: the setting reads the file at each load."""
    if pipe.scheme not in ("bmes", "bio", "bioes"):
        raise ValueError(f"[{pipe.name}] user_dict applies to schemes 'bmes', 'bio' and 'bioes', not {pipe.scheme!r}.")
    try:
        rows = read_user_dict(path, pipe.scheme)
    except ValueError as e:
        raise ValueError(
            f"[{pipe.name}] {e}. The setting user_dict names it; set it to null to load without it."
        ) from None
    entries = []
    for text, label, mode, weight, where in rows:
        weight = _mode_weight(pipe, mode, weight, where)
        entries.append(
            UserEntry(
                _check_text(pipe, text, "entity" if label else "word", where, 1 if label else 2),
                label,
                mode,
                weight,
                where,
                False,
            )
        )
    entries = _merge(pipe, entries)
    pipe.user_dict._update(entries)
    return len(entries)


def check_entity_labels(pipe) -> None:
    """Each user entity's label is one of the tagger's (``initialize``, once
    the labels are set: entries added before, or read from the setting)."""
    if pipe.scheme in ("bio", "bioes"):
        for entry in pipe.user_dict:
            _check_label(pipe, entry)


# --- serialization -----------------------------------------------------------------------


def to_json(pipe) -> str:
    entries = pipe.user_dict._to_list()
    for text, label, _, _ in entries:  # (added checked: this is for entries put in by other means)
        for value in (text, label or ""):
            _check_unicode(pipe, value, f"the user entry {text!r}", "cannot save the user dictionary")
    return srsly.json_dumps(entries)


def _load(pipe, data, where: str) -> None:
    if not isinstance(data, list) or not all(isinstance(r, list) and len(r) == 4 for r in data):
        raise ValueError(
            f"[{pipe.name}] cannot load {where}: its user dictionary is not a list of "
            "[text, label, mode, weight] entries."
        )
    entries = []
    source = f"saved in {where}"
    for text, label, mode, weight in data:
        weight = _mode_weight(pipe, mode, weight if mode == "prior" else None, source)
        text = _check_text(pipe, text, "entity" if label else "word", source, 1 if label else 2)
        entries.append(UserEntry(text, label, mode, weight, source, True))
    pipe.user_dict._replace_saved(entries)
    from .user_dict_decoding import build_matchers  # that module imports this one

    build_matchers(pipe)  # an entity whose label the loaded tagger lacks: an error now, naming where


def load_from_disk(pipe, path: Path, exclude: Iterable[str]) -> None:
    """Restore the saved entries of ``path`` (none if it has no ``user_dict`` file)."""
    if FILE in exclude:
        return
    where = f"directory {str(path)!r}"
    data: list = []
    if (path / FILE).exists():
        try:
            data = srsly.read_json(path / FILE)
        except Exception as e:
            raise ValueError(f"[{pipe.name}] cannot read the user dictionary {str(path / FILE)!r}: {e}") from None
    _load(pipe, data, where)


def load_from_bytes(pipe, bytes_data: bytes, exclude: Iterable[str]) -> None:
    """:func:`load_from_disk` from the pipe's bytes."""
    if FILE in exclude:
        return
    msg = srsly.msgpack_loads(bytes_data)
    try:
        data = srsly.json_loads(msg[FILE]) if FILE in msg else []
    except Exception as e:
        raise ValueError(f"[{pipe.name}] cannot load from bytes: unreadable user dictionary ({e})") from None
    _load(pipe, data, "bytes")
