"""SIGHAN word segmentation files: one sentence a line, words separated by
spaces (``sighan``), and the ``*_training_words.utf8`` dictionaries."""

import re
from collections import Counter
from pathlib import Path
from typing import Iterator, Optional, Set

from spacy.tokens import Doc, DocBin
from spacy.vocab import Vocab

from ..doc_keys import has_gold_words
from .base import CorpusFormatError, PathLike, _describe_char, _iter_lines, _tag_source

_SPACE_RUN = re.compile(r" +")


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


def read_word_set(path: PathLike) -> Set[str]:
    """The training words of a segmenter, against which OOV recall is scored:
    the tokens of a ``.spacy`` file of word-tokenized docs (its docs without
    gold words skipped), or a one-word-a-line list (:func:`read_word_list`)."""
    path = Path(path)
    if path.suffix != ".spacy":
        return read_word_list(path)
    words: Set[str] = set()
    for doc in DocBin().from_disk(path).get_docs(Vocab()):
        if has_gold_words(doc):
            words.update(t.text for t in doc if not t.is_space)
    return words
