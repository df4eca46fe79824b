"""What every corpus format reader shares: errors and warnings that name
``file:line``, line reading, and building char-tokenized docs with entities.
"""

import unicodedata
import warnings
from collections import Counter
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple, Union

from spacy.lang.zh import ChineseTokenizer
from spacy.tokens import Doc, Span
from spacy.vocab import Vocab

from ..doc_keys import SOURCE_KEY

PathLike = Union[str, Path]


class CorpusFormatError(ValueError):
    """Malformed corpus input. The message starts with ``file:line:``."""

    def __init__(self, path: PathLike, line: Optional[int], message: str) -> None:
        self.path = str(path)
        self.line = line
        self.detail = message
        where = f"{path}:{line}" if line is not None else f"{path}"
        super().__init__(f"{where}: {message}")


def read_docbin(path: PathLike, vocab: Optional[Vocab] = None) -> List[Doc]:
    """The docs of a ``.spacy`` (``DocBin``) file. A missing file, or one that
    is not a ``DocBin`` (spaCy's own error does not name the file), is a
    :class:`CorpusFormatError` naming it."""
    from spacy.tokens import DocBin

    if not Path(path).is_file():
        raise CorpusFormatError(path, None, "no such file")
    try:
        docbin = DocBin().from_disk(path)
    except Exception as err:  # msgpack, zlib, spaCy's E1014: not a DocBin
        raise CorpusFormatError(path, None, f"not a .spacy (DocBin) file ({type(err).__name__}: {err})") from None
    return list(docbin.get_docs(vocab or Vocab()))


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


def char_tokenizer(vocab: Vocab) -> ChineseTokenizer:
    """The tokenizer of ``spacy.blank("zh")``: one token per character, with
    whitespace handled by spaCy's usual rules (a single space after a token is
    its trailing whitespace; other whitespace runs become one token)."""
    return ChineseTokenizer(vocab, segmenter="char")  # type: ignore[arg-type]  # spaCy takes the name too


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
            _warn(
                stats,
                "entity_edges_trimmed",
                path,
                lineno,
                f"{label} entity {text[start:end]!r} starts or ends with whitespace; "
                "the whitespace is left outside the entity",
            )
        span = doc.char_span(t_start, t_end, label=label, alignment_mode="strict")
        if span is None:  # pragma: no cover - the char tokenizer splits every non-space char
            raise CorpusFormatError(
                path, lineno, f"{label} entity at chars {t_start}-{t_end} does not align with the character tokens"
            )
        spans.append(span)
    return spans
