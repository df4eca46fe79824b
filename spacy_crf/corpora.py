"""Corpus readers for Chinese word segmentation (CWS) and NER, and the
converter that writes them to spaCy's binary ``.spacy`` format.

Every reader yields reference ``Doc`` objects and follows three rules:

* **Nothing is dropped or changed.** ``doc.text`` is the raw text of the
  sentence, character for character; every annotated entity ends up in the
  doc. Anything that is not representable raises :class:`CorpusFormatError`.
* **Malformed input is an error that names ``file:line``** (and what is wrong).
  Annotation that is well formed but inconsistent (an ``I-`` tag without a
  ``B-``, an entity left open) is repaired the way conlleval reads it and
  reported as a :class:`CorpusWarning` that names ``file:line``.
* **Reference tokens line up with the predicted tokens.** The pipelines are
  ``spacy.blank("zh")`` with the ``char`` segmenter. NER docs are built with
  that very tokenizer, so reference and predicted tokens are identical. CWS
  docs are tokenized into the gold *words* with no whitespace, so
  ``Example(nlp.make_doc(doc.text), doc)`` aligns every character token with
  exactly one word.

Readers take an optional ``stats`` counter (a ``collections.Counter``) that
they fill with what they saw: blank lines, repairs, odd fields. The
:func:`convert_corpus` function prints those counts.

Formats (``fmt`` of :func:`convert_corpus`):

``sighan``
    One sentence a line, words separated by ASCII spaces (two in the SIGHAN
    files; any run of spaces is accepted and runs other than two are counted).
    Blank lines are skipped and counted. Spaces at the start or end of a line
    are separators, not text. Any other whitespace character (tab, U+3000,
    ...) in a line is an error: a reference word cannot contain whitespace,
    and guessing whether it separates words would change the data.
``bio``
    One character, a separator (TAB or space; detected from the first line
    unless given) and a BIO tag a line; a blank line ends a sentence (MSRA).
``bmes``
    The same layout with BMES tags: ``B-X``, ``M-X``, ``E-X``, ``S-X``, ``O``
    (Resume NER).
``weibo``
    Like ``bio`` but the character is followed by its position in its word
    (``科0``, ``p10``). The position is stripped (see :func:`read_weibo`).
``cluener``
    A stream of JSON objects (pretty-printed, not one a line, not a list):
    ``{"text": ..., "label": {TYPE: {MENTION: [[start, end_inclusive], ...]}}}``.
"""
import json
import random
import re
import unicodedata
import warnings
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Set, Tuple, Union

import spacy
import typer
from spacy.lang.zh import ChineseTokenizer
from spacy.language import Language
from spacy.tokens import Doc, DocBin, Span, SpanGroup
from spacy.training import Corpus, Example
from spacy.vocab import Vocab
from wasabi import msg

from .scorers import NO_GOLD_WORDS

PathLike = Union[str, Path]

#: Sentence-final punctuation: preferred places to split a long doc.
SENTENCE_PUNCT = "。！？；…!?;"
#: Clause punctuation: the fallback places to split a long doc.
CLAUSE_PUNCT = "，,、：:"
#: Closing quotes and brackets that may follow the punctuation of a split point.
_CLOSERS = "”’」』）)》〉】〕]}\"'"
#: Span group where :func:`read_cluener` keeps every mention, including
#: those that overlap another mention and so cannot all be in ``doc.ents``.
MENTIONS_KEY = "mentions"
#: ``doc.user_data`` key with the ``file:line`` a doc was read from. It is used
#: in error messages and is not written to ``.spacy`` files.
SOURCE_KEY = "spacy_crf.source"
FORMATS = ("sighan", "bio", "bmes", "weibo", "cluener")

_BIO_TAG = re.compile(r"(O|[BI]-\S+)\Z")
_BMES_TAG = re.compile(r"(O|[BMES]-\S+)\Z")
_SPACE_RUN = re.compile(r" +")


class CorpusFormatError(ValueError):
    """Malformed corpus input. The message starts with ``file:line:``."""

    def __init__(self, path: PathLike, line: Optional[int], message: str) -> None:
        self.path = str(path)
        self.line = line
        self.detail = message
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {message}")


class CorpusWarning(UserWarning):
    """Inconsistent but readable annotation that was repaired; names ``file:line``."""


def _warn(stats: Counter, key: str, path: PathLike, line: int, message: str) -> None:
    stats[key] += 1
    warnings.warn(f"{path}:{line}: {message}", CorpusWarning, stacklevel=3)


def _describe_char(ch: str) -> str:
    return f"U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed')}"


def _iter_lines(path: PathLike, stats: Counter) -> Iterator[Tuple[int, str]]:
    r"""Yield ``(line_number, line)`` without the line terminator.

    Only ``\n`` ends a line (``\r\n`` is accepted and counted); other
    Unicode line separators stay in the text. A UTF-8 byte-order mark at the
    very start is an encoding marker and is removed (counted). Invalid UTF-8
    is an error naming the line.
    """
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        lineno = raw.count(b"\n", 0, err.start) + 1
        line_start = raw.rfind(b"\n", 0, err.start) + 1
        raise CorpusFormatError(
            path, lineno, f"invalid UTF-8 at byte {err.start - line_start} of the line: {err.reason}"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
        stats["byte_order_mark_removed"] += 1
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the file ends with a line terminator
    for lineno, line in enumerate(lines, 1):
        if line.endswith("\r"):
            line = line[:-1]
            stats["crlf_line_endings"] += 1
        yield lineno, line


def _tag_source(doc: Doc, path: PathLike, line: int) -> Doc:
    doc.user_data[SOURCE_KEY] = f"{path}:{line}"
    return doc


def doc_source(doc: Doc) -> str:
    """``file:line`` a doc was read from, or a short quote of its text."""
    source = doc.user_data.get(SOURCE_KEY)
    if source:
        return str(source)
    text = doc.text if len(doc.text) <= 30 else doc.text[:30] + "..."
    return f"doc {text!r}"


def char_tokenizer(vocab: Vocab) -> ChineseTokenizer:
    """The tokenizer of ``spacy.blank("zh")``: one token per character, with
    whitespace handled by spaCy's usual rules (a single space after a token is
    its trailing whitespace; other whitespace runs become one token)."""
    return ChineseTokenizer(vocab, segmenter="char")


# --- word segmentation ---------------------------------------------------------


def read_sighan(path: PathLike, vocab: Vocab, *, stats: Optional[Counter] = None) -> Iterator[Doc]:
    """Read a SIGHAN word-per-space file (SXU train, PKU/MSR gold).

    Yields one reference doc a non-blank line, tokenized into the words,
    with ``spaces`` all False: ``doc.text`` is the words concatenated.
    Blank lines (empty or whitespace only) are skipped and counted as
    ``blank_lines``. Words are separated by runs of ASCII spaces; runs other
    than two spaces are counted (``separators_not_two_spaces``), spaces at the
    ends of a line are counted (``lines_with_edge_spaces``). Any other
    whitespace character inside a line raises :class:`CorpusFormatError`.
    """
    stats = Counter() if stats is None else stats
    for lineno, line in _iter_lines(path, stats):
        if not line.strip():
            stats["blank_lines"] += 1
            continue
        for col, ch in enumerate(line, 1):
            if ch != " " and ch.isspace():
                raise CorpusFormatError(
                    path,
                    lineno,
                    f"column {col}: whitespace character {_describe_char(ch)} in a line of words; "
                    "only ASCII spaces separate SIGHAN words, and a reference word cannot "
                    "contain whitespace",
                )
        body = line.strip(" ")
        if body != line:
            stats["lines_with_edge_spaces"] += 1
        stats["separators_not_two_spaces"] += sum(1 for sep in _SPACE_RUN.findall(body) if sep != "  ")
        words = _SPACE_RUN.split(body)
        doc = Doc(vocab, words=words, spaces=[False] * len(words))
        yield _tag_source(doc, path, lineno)


def read_word_list(path: PathLike, *, stats: Optional[Counter] = None) -> Set[str]:
    """Read a SIGHAN ``*_training_words.utf8`` dictionary: one word a line.

    Words are kept exactly (including inner whitespace such as U+3000 and
    control characters, which occur in the CityU and AS lists). Blank lines are
    skipped and counted (``blank_lines``). A word with whitespace at its start
    or end is an error: it could never match a word of a segmented text.
    """
    stats = Counter() if stats is None else stats
    words: Set[str] = set()
    for lineno, line in _iter_lines(path, stats):
        if not line.strip():
            stats["blank_lines"] += 1
            continue
        if line != line.strip():
            raise CorpusFormatError(path, lineno, f"word {line!r} starts or ends with whitespace")
        if line in words:
            stats["duplicate_words"] += 1
        words.add(line)
    return words


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
            _warn(stats, "multi_char_fields", path, lineno,
                  f"character field {char!r} has {len(char)} characters; all are kept and share the tag {tag}")
        if char.isspace():
            stats["whitespace_char_fields"] += 1
        fields.append((lineno, char, tag))
    if fields:
        yield fields


def _bio_entities(fields: List[Field], path: PathLike, stats: Counter) -> List[Tuple[int, int, str]]:
    """Entities as (first field, end field, label) from BIO tags, conlleval-style:
    an ``I-X`` that does not continue an ``X`` entity starts a new one (warned)."""
    ents: List[Tuple[int, int, str]] = []
    start, label = -1, ""
    for i, (lineno, _, tag) in enumerate(fields):
        prefix, tag_label = tag[0], tag[2:]
        if prefix == "I" and start >= 0 and tag_label == label:
            continue
        if start >= 0:
            ents.append((start, i, label))
            start = -1
        if prefix == "O":
            continue
        if prefix == "I":
            prev = fields[i - 1][2] if i else "sentence start"
            _warn(stats, "orphan_I_tags", path, lineno,
                  f"{tag} follows {prev}; read as the start of a new {tag_label} entity")
        start, label = i, tag_label
    if start >= 0:
        ents.append((start, len(fields), label))
    return ents


def _bmes_entities(fields: List[Field], path: PathLike, stats: Counter) -> List[Tuple[int, int, str]]:
    """Entities from BMES tags. An ``M-X``/``E-X`` that does not continue an
    ``X`` entity starts a new one; an entity that is not closed by ``E-X``
    ends at its last ``B``/``M`` token. Both are kept and warned about."""
    ents: List[Tuple[int, int, str]] = []
    start, label = -1, ""

    def close_unterminated(i: int, lineno: int, why: str) -> None:
        nonlocal start
        _warn(stats, "unterminated_entities", path, lineno,
              f"{label} entity opened at line {fields[start][0]} is not closed by E-{label} ({why}); "
              "kept as ending at the previous character")
        ents.append((start, i, label))
        start = -1

    for i, (lineno, _, tag) in enumerate(fields):
        prefix, tag_label = tag[0], tag[2:]
        continues = start >= 0 and tag_label == label and prefix in "ME"
        if continues:
            if prefix == "E":
                ents.append((start, i + 1, label))
                start = -1
            continue
        if start >= 0:
            close_unterminated(i, lineno, f"followed by {tag}")
        if prefix == "O":
            continue
        if prefix in "ME":
            prev = fields[i - 1][2] if i else "sentence start"
            _warn(stats, "orphan_M_E_tags", path, lineno,
                  f"{tag} follows {prev}; read as the start of a new {tag_label} entity")
        if prefix in "ES":
            ents.append((i, i + 1, tag_label))
        else:
            start, label = i, tag_label
    if start >= 0:
        close_unterminated(len(fields), fields[-1][0], "sentence ends")
    return ents


def _trim_whitespace(text: str, start: int, end: int) -> Tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _entity_spans(
    doc: Doc, char_ents: Sequence[Tuple[int, int, str]], path: PathLike, lineno: int, stats: Counter
) -> List[Span]:
    """Spans for (start_char, end_char, label) on a char-tokenized doc.

    Whitespace at the edges of an entity cannot be a token boundary of the
    char tokenizer (a space is the previous token's trailing whitespace), so it
    is moved out of the entity (warned). An entity of whitespace only is an error.
    """
    spans = []
    text = doc.text if char_ents else ""
    for start, end, label in char_ents:
        t_start, t_end = _trim_whitespace(text, start, end)
        if t_start == t_end:
            raise CorpusFormatError(path, lineno, f"{label} entity {text[start:end]!r} is whitespace only")
        if (t_start, t_end) != (start, end):
            _warn(stats, "entity_edges_trimmed", path, lineno,
                  f"{label} entity {text[start:end]!r} starts or ends with whitespace; "
                  "the whitespace is left outside the entity")
        span = doc.char_span(t_start, t_end, label=label, alignment_mode="strict")
        if span is None:  # pragma: no cover - the char tokenizer splits every non-space char
            raise CorpusFormatError(
                path, lineno, f"{label} entity at chars {t_start}-{t_end} does not align with the character tokens"
            )
        spans.append(span)
    return spans


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
        yield _char_doc(tokenizer, fields, _bio_entities(fields, path, stats), path, stats)


def read_char_bmes(
    path: PathLike, vocab: Vocab, sep: Optional[str] = None, *, stats: Optional[Counter] = None
) -> Iterator[Doc]:
    """Read a char-per-line BMES file (Resume: ``char TAG`` with ``B-NAME``,
    ``M-ORG``, ``E-TITLE``, ``S-X``, ``O``; blank line between sentences)."""
    stats = Counter() if stats is None else stats
    tokenizer = char_tokenizer(vocab)
    for fields in _read_char_sentences(path, sep, stats, _BMES_TAG, "bmes"):
        yield _char_doc(tokenizer, fields, _bmes_entities(fields, path, stats), path, stats)


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
            digits = field[len(field) - k:]
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
        _warn(stats, "weibo_position_breaks", path, lineno,
              f"position in {field!r} does not follow position {prev}; the last digit is taken as the position")
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
        yield _char_doc(tokenizer, fields, _bio_entities(fields, path, stats), path, stats)


# --- CLUENER ------------------------------------------------------------------------


def _iter_json_stream(path: PathLike, stats: Counter) -> Iterator[Tuple[int, object]]:
    """Yield ``(line, object)`` for each JSON value of a concatenated stream."""
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorpusFormatError(path, raw.count(b"\n", 0, err.start) + 1, f"invalid UTF-8: {err.reason}") from None
    pos = 0
    if text.startswith("\ufeff"):
        pos = 1
        stats["byte_order_mark_removed"] += 1
    decoder = json.JSONDecoder()
    line, counted = 1, 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            raise CorpusFormatError(path, err.lineno, f"invalid JSON (column {err.colno}): {err.msg}") from None
        yield line, obj


def read_cluener(path: PathLike, vocab: Vocab, *, stats: Optional[Counter] = None) -> Iterator[Doc]:
    """Read CLUENER2020: a stream of JSON objects with ``text`` and optional
    ``label`` (``{TYPE: {MENTION: [[start, end_inclusive], ...]}}``).

    Each offset pair must select exactly its mention (error naming the line of
    the object otherwise). Objects without ``label`` (test.json) give docs
    without entities. ``doc.ents`` cannot hold overlapping mentions: the
    longest (then earliest) wins and the others are warned about; all
    mentions, overlapping or not, are kept in ``doc.spans["mentions"]`` for
    labelled objects. Exact duplicates of a mention are counted and kept once.
    """
    stats = Counter() if stats is None else stats
    tokenizer = char_tokenizer(vocab)
    for index, (lineno, obj) in enumerate(_iter_json_stream(path, stats)):
        if not isinstance(obj, dict):
            raise CorpusFormatError(path, lineno, f"expected a JSON object, got {type(obj).__name__}")
        text = obj.get("text")
        if not isinstance(text, str):
            raise CorpusFormatError(path, lineno, 'object has no string field "text"')
        unknown = set(obj) - {"text", "label", "id"}
        if unknown:
            raise CorpusFormatError(path, lineno, f"unexpected fields {sorted(unknown)}")
        if "id" in obj and obj["id"] != index:
            _warn(stats, "ids_out_of_order", path, lineno,
                  f"id {obj['id']!r} is not the position {index} of the object; ids are not stored, the order is")
        doc = tokenizer(text)
        _tag_source(doc, path, lineno)
        if not text:
            stats["empty_texts"] += 1
        if "label" not in obj or obj["label"] is None:
            yield doc
            continue
        mentions = _cluener_mentions(obj["label"], text, path, lineno, stats)
        spans = _entity_spans(doc, mentions, path, lineno, stats)
        doc.spans[MENTIONS_KEY] = SpanGroup(doc, name=MENTIONS_KEY, spans=spans)
        kept: List[Span] = []
        taken: Set[int] = set()
        for span in sorted(spans, key=lambda s: (-(s.end_char - s.start_char), s.start_char)):
            if taken.isdisjoint(range(span.start, span.end)):
                kept.append(span)
                taken.update(range(span.start, span.end))
        for span in spans:
            if span not in kept:
                _warn(stats, "overlapping_mentions_not_in_ents", path, lineno,
                      f"{span.label_} mention {span.text!r} (chars {span.start_char}-{span.end_char}) "
                      "overlaps a longer "
                      f"mention; it is kept in doc.spans[{MENTIONS_KEY!r}] but not in doc.ents")
        doc.ents = sorted(kept, key=lambda s: s.start)
        yield doc


def _cluener_mentions(
    label: object, text: str, path: PathLike, lineno: int, stats: Counter
) -> List[Tuple[int, int, str]]:
    if not isinstance(label, dict):
        raise CorpusFormatError(path, lineno, '"label" must be an object {TYPE: {MENTION: [[start, end], ...]}}')
    seen: Set[Tuple[int, int, str]] = set()
    mentions: List[Tuple[int, int, str]] = []
    for ent_type, by_mention in label.items():
        if not ent_type or not isinstance(by_mention, dict):
            raise CorpusFormatError(path, lineno, f"label type {ent_type!r} must map mentions to offset lists")
        for mention, offsets in by_mention.items():
            if not isinstance(offsets, list):
                raise CorpusFormatError(
                    path, lineno, f"{ent_type} mention {mention!r}: offsets must be a list of [start, end]"
                )
            for pair in offsets:
                ok = (
                    isinstance(pair, list)
                    and len(pair) == 2
                    and all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
                )
                if not ok:
                    raise CorpusFormatError(
                        path, lineno, f"{ent_type} mention {mention!r}: offset {pair!r} is not [start, end]"
                    )
                start, end = pair
                if not 0 <= start <= end < len(text):
                    raise CorpusFormatError(
                        path,
                        lineno,
                        f"{ent_type} mention {mention!r}: offsets {pair} outside the text of {len(text)} characters",
                    )
                if text[start:end + 1] != mention:
                    raise CorpusFormatError(
                        path, lineno,
                        f"{ent_type} mention {mention!r} at [{start}, {end}] does not match the text there: "
                        f"{text[start:end + 1]!r}",
                    )
                key = (start, end + 1, ent_type)
                if key in seen:
                    stats["duplicate_mentions"] += 1
                    continue
                seen.add(key)
                mentions.append(key)
    return sorted(mentions)


# --- splitting and dev carving ---------------------------------------------------------


class SplitError(ValueError):
    """A doc cannot be split into pieces of at most ``max_chars`` characters."""


def _protected_spans(doc: Doc) -> List[Span]:
    spans = list(doc.ents)
    for group in doc.spans.values():
        spans.extend(group)
    return spans


def _alnum(ch: str) -> bool:
    return unicodedata.category(ch) == "Nd" or (ch.isalpha() and "LATIN" in unicodedata.name(ch, ""))


#: Kinds of cut of :func:`split_long`, from the least to the most preferred.
CUT_KINDS = ("hard", "token", "clause", "sentence")


def _boundary_level(text: str, start_char: int, cut: int) -> int:
    """Index in :data:`CUT_KINDS` of a cut at char ``cut``: after sentence
    punctuation, after clause punctuation, between tokens that are not both
    digits or Latin letters (``３６`` stays whole), or anywhere else."""
    before = text[start_char:cut].rstrip().rstrip(_CLOSERS)
    if before and before[-1] in SENTENCE_PUNCT:
        return 3
    if before and before[-1] in CLAUSE_PUNCT:
        return 2
    if cut > 0 and cut < len(text) and _alnum(text[cut - 1]) and _alnum(text[cut]):
        return 0
    return 1


def split_long(doc: Doc, max_chars: int, *, stats: Optional[Counter] = None) -> List[Doc]:
    """Split ``doc`` into docs of at most ``max_chars`` characters.

    Cuts go at token boundaries only (never inside a CWS reference word or a
    character token) and never inside an entity or a span of any span group.
    Each piece is as long as possible; its end is the last sentence
    punctuation (``。！？；…``, with any closing quotes after it) that fits,
    else the last clause punctuation (``，、：``), else the last allowed token
    boundary that is not inside a run of digits or Latin letters, else the
    last allowed token boundary. The pieces' texts concatenate to
    ``doc.text``; entities and span groups are carried over. A word or entity
    longer than ``max_chars`` raises :class:`SplitError`. ``max_chars <= 0``
    means no limit. ``stats`` counts the cuts by kind (:data:`CUT_KINDS`).
    """
    text = doc.text
    if max_chars <= 0 or len(text) <= max_chars:
        return [doc]
    n = len(doc)
    blocked = [False] * (n + 1)
    for span in _protected_spans(doc):
        for i in range(span.start + 1, span.end):
            blocked[i] = True
    char_at = [token.idx for token in doc] + [len(text)]
    pieces: List[Doc] = []
    start = 0
    while len(text) - char_at[start] > max_chars:
        limit = char_at[start] + max_chars
        best = [-1] * len(CUT_KINDS)
        b = start + 1
        while b < n and char_at[b] <= limit:
            if not blocked[b]:
                best[_boundary_level(text, char_at[start], char_at[b])] = b
            b += 1
        level = next((lvl for lvl in (3, 2, 1, 0) if best[lvl] >= 0), -1)
        cut = best[level] if level >= 0 else -1
        if cut < 0:
            end = start + 1
            while end < n and blocked[end]:
                end += 1
            unit = "entity or span" if end > start + 1 else "word (token)"
            raise SplitError(
                f"{doc_source(doc)}: cannot split into pieces of at most {max_chars} characters: the {unit} "
                f"{text[char_at[start]:char_at[end]]!r} at chars {char_at[start]}-{char_at[end]} is longer"
            )
        if stats is not None:
            stats[CUT_KINDS[level]] += 1
        pieces.append(_piece(doc, start, cut))
        start = cut
    pieces.append(_piece(doc, start, n))
    return pieces


def _piece(doc: Doc, start: int, end: int) -> Doc:
    piece = doc[start:end].as_doc()
    # as_doc drops span groups: carry over the spans that lie in the piece.
    for key, group in doc.spans.items():
        inside = [
            Span(piece, s.start - start, s.end - start, label=s.label, kb_id=s.kb_id, span_id=s.id)
            for s in group
            if s.start >= start and s.end <= end
        ]
        piece.spans[key] = SpanGroup(piece, name=key, attrs=dict(group.attrs), spans=inside)
    if SOURCE_KEY in doc.user_data:
        piece.user_data[SOURCE_KEY] = doc.user_data[SOURCE_KEY]
    return piece


def carve_dev(docs: Sequence[Doc], ratio: float, seed: int) -> Tuple[List[Doc], List[Doc]]:
    """Split docs into (train, dev): ``round(len(docs) * ratio)`` docs (at least
    one when ``ratio > 0`` and there are two docs or more) drawn at random with
    ``seed``. Both parts keep the original order. Deterministic given the seed."""
    if not 0 <= ratio < 1:
        raise ValueError(f"dev ratio must be in [0, 1), got {ratio}")
    docs = list(docs)
    n_dev = int(round(len(docs) * ratio))
    if ratio > 0 and n_dev == 0 and len(docs) >= 2:
        n_dev = 1
    dev_ids = set(random.Random(seed).sample(range(len(docs)), n_dev))
    train = [doc for i, doc in enumerate(docs) if i not in dev_ids]
    dev = [doc for i, doc in enumerate(docs) if i in dev_ids]
    return train, dev


# --- conversion ------------------------------------------------------------------------------


def read_corpus(fmt: str, path: PathLike, vocab: Vocab, *, stats: Optional[Counter] = None) -> Iterator[Doc]:
    """Dispatch to the reader of ``fmt`` (one of :data:`FORMATS`)."""
    readers: Dict[str, Callable[..., Iterator[Doc]]] = {
        "sighan": read_sighan,
        "bio": read_char_bio,
        "bmes": read_char_bmes,
        "weibo": read_weibo,
        "cluener": read_cluener,
    }
    if fmt not in readers:
        raise ValueError(f"unknown corpus format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return readers[fmt](path, vocab, stats=stats)


def corpus_counts(docs: Iterable[Doc], words: bool) -> Dict[str, object]:
    """Docs, characters, words (CWS docs: tokens) or entities per label."""
    counts: Dict[str, object] = {"docs": 0, "chars": 0}
    n_words = 0
    ents: Counter = Counter()
    for doc in docs:
        counts["docs"] += 1  # type: ignore[operator]
        counts["chars"] += len(doc.text)  # type: ignore[operator]
        n_words += len(doc)
        ents.update(ent.label_ for ent in doc.ents)
    if words:
        counts["words"] = n_words
    else:
        counts["entities"] = dict(sorted(ents.items()))
        counts["entities_total"] = sum(ents.values())
    return counts


def _split_all(docs: Sequence[Doc], max_chars: int, stats: Counter) -> List[Doc]:
    out: List[Doc] = []
    for doc in docs:
        out.extend(split_long(doc, max_chars, stats=stats))
    return out


def _print_counts(title: str, counts: Dict[str, object]) -> None:
    parts = [f"{counts['docs']:,} docs", f"{counts['chars']:,} chars"]
    if "words" in counts:
        parts.append(f"{counts['words']:,} words")
    else:
        parts.append(f"{counts['entities_total']:,} entities")
    msg.info(f"{title}: " + ", ".join(parts))
    if "entities" in counts and counts["entities"]:
        msg.table(counts["entities"], header=("label", "entities"), divider=True)  # type: ignore[arg-type]


def convert_corpus(
    fmt: str,
    input_path: PathLike,
    output_path: PathLike,
    *,
    max_chars: int = 500,
    dev_output: Optional[PathLike] = None,
    dev_ratio: float = 0.1,
    seed: int = 0,
    limit: Optional[int] = None,
    max_warnings: int = 10,
) -> Dict[str, object]:
    """Read a corpus and write it as ``.spacy`` (``DocBin``) file(s).

    Order of steps: read everything; keep the first ``limit`` docs (if given);
    carve ``dev_ratio`` of the docs into ``dev_output`` (if given, by whole
    sentences with ``seed``); split docs longer than ``max_chars`` characters
    (:func:`split_long`, ``0`` = no splitting). Counts are printed and returned
    for each step: ``read`` (the whole file), ``kept`` (after ``limit``), and
    ``outputs[NAME]`` with ``before_split`` and ``written`` counts, where NAME
    is ``train`` and ``dev`` when a dev set is carved, else ``output``. The
    reader's own counts (blank lines, repairs) are under ``reader`` and the
    number of warnings under ``warnings``. Splitting is checked to keep every
    character, word and entity.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown corpus format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    is_cws = fmt == "sighan"
    vocab = Vocab()
    reader_stats: Counter = Counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CorpusWarning)
        docs = list(read_corpus(fmt, input_path, vocab, stats=reader_stats))
    corpus_warnings = [w for w in caught if issubclass(w.category, CorpusWarning)]
    for w in caught:
        if not issubclass(w.category, CorpusWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    stats: Dict[str, object] = {"format": fmt, "input": str(input_path)}
    msg.divider(f"{fmt}: {input_path}")
    stats["read"] = corpus_counts(docs, is_cws)
    _print_counts("read", stats["read"])  # type: ignore[arg-type]
    stats["reader"] = dict(sorted(reader_stats.items()))
    if reader_stats:
        msg.table(stats["reader"], header=("reader count", "n"), divider=True)  # type: ignore[arg-type]
    stats["warnings"] = len(corpus_warnings)
    for w in corpus_warnings[:max_warnings]:
        msg.warn(str(w.message))
    if len(corpus_warnings) > max_warnings:
        msg.warn(f"... and {len(corpus_warnings) - max_warnings} more warnings")

    if limit is not None:
        docs = docs[:limit]
        stats["kept"] = corpus_counts(docs, is_cws)
        _print_counts(f"kept (limit {limit})", stats["kept"])  # type: ignore[arg-type]

    parts: List[Tuple[str, List[Doc], PathLike]]
    if dev_output is not None:
        train, dev = carve_dev(docs, dev_ratio, seed)
        parts = [("train", train, output_path), ("dev", dev, dev_output)]
    else:
        parts = [("output", docs, output_path)]
    outputs: Dict[str, object] = {}
    for name, part, path in parts:
        before = corpus_counts(part, is_cws)
        if dev_output is not None:
            _print_counts(f"{name} (dev ratio {dev_ratio}, seed {seed})", before)
        cuts: Counter = Counter()
        pieces = _split_all(part, max_chars, cuts)
        written = corpus_counts(pieces, is_cws)
        for key in ("chars", "words", "entities"):
            if before.get(key) != written.get(key):  # pragma: no cover - guarded by split_long
                raise RuntimeError(f"splitting changed the {key} count: {before.get(key)} -> {written.get(key)}")
        n_split = sum(1 for doc in part if len(doc.text) > max_chars > 0)
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        DocBin(docs=pieces, store_user_data=False).to_disk(out)
        outputs[name] = {
            "path": str(out),
            "before_split": before,
            "docs_split": n_split,
            "cuts": {kind: cuts[kind] for kind in reversed(CUT_KINDS)},
            "written": written,
        }
        msg.good(
            f"{name}: wrote {written['docs']:,} docs to {out}; {n_split:,} docs longer than "
            f"{max_chars} characters were split at {cuts['sentence']} sentence ends, "
            f"{cuts['clause']} clause marks, {cuts['token']} other token boundaries and "
            f"{cuts['hard']} cuts inside runs of digits/Latin letters"
        )
    stats["outputs"] = outputs
    return stats


def convert_corpus_cli(
    fmt: str = typer.Argument(..., help=f"Corpus format: {', '.join(FORMATS)}"),
    input_path: Path = typer.Argument(..., help="Corpus file to read", exists=True, dir_okay=False),
    output_path: Path = typer.Argument(..., help="Output .spacy file"),
    max_chars: int = typer.Option(
        ..., "--max-chars", help="Split docs longer than this many characters (0: no splitting)"
    ),
    dev_output: Optional[Path] = typer.Option(None, "--dev-output", help="Also carve a dev set into this .spacy file"),
    dev_ratio: float = typer.Option(0.1, "--dev-ratio", help="Share of docs carved into --dev-output"),
    seed: int = typer.Option(0, "--seed", help="Random seed of the dev carving"),
    limit: Optional[int] = typer.Option(None, "--limit", help="Keep only the first N docs (smoke runs)"),
) -> None:
    """Convert a CWS or NER corpus to spaCy's .spacy format."""
    try:
        convert_corpus(
            fmt,
            input_path,
            output_path,
            max_chars=max_chars,
            dev_output=dev_output,
            dev_ratio=dev_ratio,
            seed=seed,
            limit=limit,
        )
    except (CorpusFormatError, SplitError, ValueError, OSError) as err:
        msg.fail(str(err), exits=1)


# --- training corpus reader -------------------------------------------------------------------


class CharCorpus(Corpus):
    """``spacy.Corpus`` for the docs written by :func:`convert_corpus`.

    ``spacy.Corpus.v1`` already builds ``Example(nlp.make_doc(ref.text), ref)``.
    This wrapper only changes what is unsafe for our docs:

    * ``max_length`` counts *characters* and long docs are split with
      :func:`split_long` (never inside a word or entity). ``spacy.Corpus.v1``
      counts reference tokens (words for CWS) and silently drops a longer doc
      unless it has sentence boundaries, which ours do not.
    * ``gold_preproc=True`` is refused: it would give the predicted doc the
      reference words as tokens, handing the segmenter the answer.
    * A reference doc with unknown spaces is refused: its text is not the
      raw text (spaCy would tokenize the predicted doc from the gold words).
    """

    def __init__(self, path: PathLike, *, max_length: int = 0, limit: int = 0) -> None:
        super().__init__(path, limit=limit, gold_preproc=False, max_length=0)
        self.max_chars = max_length

    def make_examples(self, nlp: Language, reference_docs: Iterable[Doc]) -> Iterator[Example]:
        for reference in reference_docs:
            if reference.has_unknown_spaces:
                raise ValueError(
                    f"{self.path}: reference doc {doc_source(reference)} has unknown spaces, so its text is "
                    "not the raw text; write the corpus with convert-corpus"
                )
            for piece in split_long(reference, self.max_chars):
                if len(piece):
                    yield Example(nlp.make_doc(piece.text), piece)


@spacy.registry.readers("spacy_crf.CharCorpus.v1")
def create_char_corpus_reader(
    path: Path, max_length: int = 0, limit: int = 0, gold_preproc: bool = False
) -> Callable[[Language], Iterable[Example]]:
    """Reader of ``.spacy`` files from :func:`convert_corpus` (see :class:`CharCorpus`).

    max_length: split reference docs longer than this many characters (0: no limit).
    limit: read at most this many docs from the file(s) (0: all).
    gold_preproc: must be False (kept for config compatibility with spacy.Corpus.v1).
    """
    if path is None:
        raise ValueError("spacy_crf.CharCorpus.v1 needs a path")
    if gold_preproc:
        raise ValueError(
            "spacy_crf.CharCorpus.v1: gold_preproc=true would tokenize the predicted docs into the "
            "gold words, which gives the word segmenter the answer; set gold_preproc = false"
        )
    return CharCorpus(path, max_length=max_length, limit=limit)


class JointCorpus:
    """Word-segmentation docs and NER docs in one stream, for one transformer
    shared by a segmenter and an NER tagger (multi-task training).

    Each side keeps the other task's annotation *missing* rather than
    wrong: CWS docs have no entity annotation (``ENT_IOB`` unset, so the NER
    tagger's gold is unknown and spaCy's NER scorer skips them), and NER docs
    are marked with :data:`~spacy_crf.scorers.NO_GOLD_WORDS` (their character
    tokens are not words, so the segmenter's gold is unknown and word scores
    skip them).

    With ``balance`` (training), each pass yields as many examples of each
    task as the larger side has, cycling through the smaller one, so that
    both tasks get the same number of docs per step whatever the corpus sizes.
    Without it (dev), every doc is yielded once.
    """

    def __init__(self, words_path: PathLike, ents_path: PathLike, *, max_length: int = 0,
                 limit: int = 0, balance: bool = True) -> None:
        self.words = CharCorpus(words_path, max_length=max_length, limit=limit)
        self.ents = CharCorpus(ents_path, max_length=max_length, limit=limit)
        self.balance = balance

    def __call__(self, nlp: Language) -> Iterator[Example]:
        words = list(self.words(nlp))
        ents = []
        for eg in self.ents(nlp):
            eg.reference.user_data[NO_GOLD_WORDS] = True
            ents.append(eg)
        for side, examples in (("words", words), ("ents", ents)):
            if not examples:
                raise ValueError(f"spacy_crf.JointCorpus.v1: the {side} corpus {getattr(self, side).path} has no docs")
        if not self.balance:
            yield from words
            yield from ents
            return
        for i in range(max(len(words), len(ents))):
            # a repeated example is a copy: training writes into predicted docs
            yield words[i] if i < len(words) else words[i % len(words)].copy()
            yield ents[i] if i < len(ents) else ents[i % len(ents)].copy()


@spacy.registry.readers("spacy_crf.JointCorpus.v1")
def create_joint_corpus_reader(
    words: Optional[Path], ents: Optional[Path], max_length: int = 0, limit: int = 0, balance: bool = True
) -> Callable[[Language], Iterable[Example]]:
    """Reader of a CWS and an NER ``.spacy`` file (from :func:`convert_corpus`)
    for joint training of a segmenter and an NER tagger (see :class:`JointCorpus`).

    words: docs whose tokens are the gold words (e.g. SXU).
    ents: docs with gold entities on character tokens (e.g. MSRA).
    max_length: split reference docs longer than this many characters (0: no limit).
    limit: read at most this many docs from each file (0: all).
    balance: cycle the smaller corpus so that both give as many examples (training).
    """
    if words is None or ents is None:
        raise ValueError("spacy_crf.JointCorpus.v1 needs both a words path and an ents path")
    return JointCorpus(words, ents, max_length=max_length, limit=limit, balance=balance)
