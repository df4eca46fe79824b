"""Character-per-line NER files: ``bio`` (MSRA), ``bmes`` (Resume) and
``weibo`` (Weibo NER, a position digit after each character).

The tags are decoded by :func:`spacy_crf.ml.schemes.tags_to_spans` (``bio``, or
``bioes`` for the BMES entity tags), whose repairs of ill-formed sequences
are reported here as :class:`~spacy_crf.corpora.base.CorpusWarning`.
"""

import re
from collections import Counter
from typing import Callable, Iterator, List, Optional, Set, Tuple

from spacy.lang.zh import ChineseTokenizer
from spacy.tokens import Doc
from spacy.vocab import Vocab

from ..ml.schemes import ORPHAN, tags_to_spans
from .base import CorpusFormatError, PathLike, _entity_spans, _iter_lines, _tag_source, _warn, char_tokenizer

_BIO_TAG = re.compile(r"(O|[BI]-\S+)\Z")
_BMES_TAG = re.compile(r"(O|[BMES]-\S+)\Z")

# --- character-per-line NER -----------------------------------------------------

# A field is one line of a char-per-line file: (line number, text, tag).
Field = Tuple[int, str, str]


def _read_char_sentences(
    path: PathLike,
    sep: Optional[str],
    stats: Counter,
    tag_re: "re.Pattern[str]",
    scheme: str,
    parse_char: Optional[Callable[[int, str, Optional[int]], Tuple[str, int]]] = None,
) -> Iterator[List[Field]]:
    r"""Group the lines of a char-per-line file into sentences of fields.

    The tag is what follows the last separator; everything before it is the
    character, so a whitespace "character" (``"\u3000\tO"``) is kept.
    """
    fields: List[Field] = []
    position: Optional[int] = None
    valid_tags: Set[str] = set()
    for lineno, line in _iter_lines(path, stats):
        if not line.strip():
            if line:
                _warn(stats, "whitespace_only_lines", path, lineno, "line of whitespace only, read as a sentence break")
            if fields:
                yield fields
            fields, position = [], None
            continue
        if sep is None:
            sep = "\t" if "\t" in line else " "
            stats[f"separator_detected_{'tab' if sep == chr(9) else 'space'}"] += 1
        if sep not in line:
            raise CorpusFormatError(path, lineno, f"expected a character, {sep!r} and a tag, got {line!r}")
        char, tag_field = line.rsplit(sep, 1)
        tag = tag_field.strip()
        if tag not in valid_tags:
            if not tag_re.match(tag):
                raise CorpusFormatError(path, lineno, f"invalid {scheme.upper()} tag {tag_field!r} in line {line!r}")
            valid_tags.add(tag)
        if parse_char is not None:
            char, position = parse_char(lineno, char, position)
        if not char:
            raise CorpusFormatError(path, lineno, f"empty character field in line {line!r}")
        if len(char) > 1:
            _warn(
                stats,
                "multi_char_fields",
                path,
                lineno,
                f"character field {char!r} has {len(char)} characters; all are kept and share the tag {tag}",
            )
        if char.isspace():
            stats["whitespace_char_fields"] += 1
        fields.append((lineno, char, tag))
    if fields:
        yield fields


def _entities(fields: List[Field], scheme: str, path: PathLike, stats: Counter) -> List[Tuple[int, int, str]]:
    """Entities as (first field, end field, label), decoded conlleval-style by
    :func:`~spacy_crf.ml.schemes.tags_to_spans`: a continuation tag (``I-X``,
    ``M-X``, ``E-X``) that does not continue an ``X`` entity starts a new
    one, and a BMES entity not closed by ``E-X`` ends at its last ``B``/``M``
    token. Both repairs are kept and warned about."""
    orphan_key = "orphan_I_tags" if scheme == "bio" else "orphan_M_E_tags"

    def on_repair(kind: str, start: int, i: int, label: str) -> None:
        if kind == ORPHAN:
            prev = fields[i - 1][2] if i else "sentence start"
            _warn(
                stats,
                orphan_key,
                path,
                fields[i][0],
                f"{fields[i][2]} follows {prev}; read as the start of a new {label} entity",
            )
            return
        lineno, why = (
            (fields[i][0], f"followed by {fields[i][2]}") if i < len(fields) else (fields[-1][0], "sentence ends")
        )
        _warn(
            stats,
            "unterminated_entities",
            path,
            lineno,
            f"{label} entity opened at line {fields[start][0]} is not closed by E-{label} ({why}); "
            "kept as ending at the previous character",
        )

    return tags_to_spans(scheme, [tag for _, _, tag in fields], on_repair)


def _char_doc(
    tokenizer: ChineseTokenizer,
    fields: List[Field],
    ents: List[Tuple[int, int, str]],
    path: PathLike,
    stats: Counter,
) -> Doc:
    offsets = [0]
    for _, char, _ in fields:
        offsets.append(offsets[-1] + len(char))
    doc = tokenizer("".join(char for _, char, _ in fields))
    char_ents = [(offsets[s], offsets[e], label) for s, e, label in ents]
    doc.ents = _entity_spans(doc, char_ents, path, fields[0][0], stats)
    return _tag_source(doc, path, fields[0][0])


def read_char_bio(
    path: PathLike, vocab: Vocab, sep: Optional[str] = None, *, stats: Optional[Counter] = None
) -> Iterator[Doc]:
    """Read a char-per-line BIO file (MSRA: ``char<TAB>TAG``, blank line between sentences).

    ``sep`` separates the character from the tag; ``None`` takes a TAB if the
    first line has one, else a space. Docs are tokenized like
    ``spacy.blank("zh")`` and carry the entities in ``doc.ents``.
    """
    stats = Counter() if stats is None else stats
    tokenizer = char_tokenizer(vocab)
    for fields in _read_char_sentences(path, sep, stats, _BIO_TAG, "bio"):
        yield _char_doc(tokenizer, fields, _entities(fields, "bio", path, stats), path, stats)


def read_char_bmes(
    path: PathLike, vocab: Vocab, sep: Optional[str] = None, *, stats: Optional[Counter] = None
) -> Iterator[Doc]:
    """Read a char-per-line BMES file (Resume: ``char TAG`` with ``B-NAME``,
    ``M-ORG``, ``E-TITLE``, ``S-X``, ``O``; blank line between sentences)."""
    stats = Counter() if stats is None else stats
    tokenizer = char_tokenizer(vocab)
    for fields in _read_char_sentences(path, sep, stats, _BMES_TAG, "bmes"):
        yield _char_doc(tokenizer, fields, _entities(fields, "bioes", path, stats), path, stats)


def _weibo_char_parser(path: PathLike, stats: Counter) -> Callable[[int, str, Optional[int]], Tuple[str, int]]:
    """Split ``科0`` / ``p10`` / ``310`` into the character and its position in its word.

    Positions run 0, 1, 2, ... inside a word, so a position is either 0 or one
    more than the previous one; the digits are split off so that this holds,
    preferring a one-character remainder (``310`` after position 9 is ``3`` at
    10). Where no split fits the sequence (counted, warned) the last digit is
    the position. A field of digits only that cannot be split is an error.
    """

    def parse(lineno: int, field: str, prev: Optional[int]) -> Tuple[str, int]:
        candidates = []
        for k in range(1, len(field)):
            digits = field[len(field) - k :]
            if not (digits.isascii() and digits.isdigit()):
                break
            candidates.append((field[: len(field) - k], int(digits)))
        if not candidates:
            raise CorpusFormatError(
                path, lineno, f"Weibo character field {field!r} does not end with a position number after a character"
            )
        fitting = [c for c in candidates if c[1] == 0 or (prev is not None and c[1] == prev + 1)]
        single = [c for c in fitting if len(c[0]) == 1]
        if single:
            return single[0]
        if fitting:
            return fitting[0]
        _warn(
            stats,
            "weibo_position_breaks",
            path,
            lineno,
            f"position in {field!r} does not follow position {prev}; the last digit is taken as the position",
        )
        return candidates[0]

    return parse


def read_weibo(path: PathLike, vocab: Vocab, *, stats: Optional[Counter] = None) -> Iterator[Doc]:
    """Read Weibo NER (``科0<TAB>B-PER.NOM``): BIO tags, the position digits
    after the character are stripped, labels such as ``PER.NOM`` are kept
    as they are. Fields of several characters (``��0``: an emoji that the
    corpus lost to two U+FFFD) are kept whole and warned about."""
    stats = Counter() if stats is None else stats
    tokenizer = char_tokenizer(vocab)
    parser = _weibo_char_parser(path, stats)
    for fields in _read_char_sentences(path, "\t", stats, _BIO_TAG, "bio", parse_char=parser):
        yield _char_doc(tokenizer, fields, _entities(fields, "bio", path, stats), path, stats)
