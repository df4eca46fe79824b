"""A word list as a decoding prior for a ``bmes`` segmenter.

A segmenter trained on one corpus knows that corpus's words. Words it never
saw (OOV) it tends to cut into pieces it knows. A lexicon from outside the
training data (e.g. a general dictionary) says where such words may be: each
occurrence in a doc of a lexicon word of two or more tokens adds ``weight``
to the emission score of ``B`` at its first token, ``M`` inside and ``E`` at
its last, before Viterbi decoding. Overlapping occurrences add up, and the
CRF still decides: the prior tips close calls, it forces nothing.

The bias is applied at prediction only (``CRFTagger.predict``,
``predict_marginals``), never to the scores the model is trained on: the
emission layer would learn to cancel a constant it sees in training. Tune
``weight`` on a dev set (the project's ``lexicon-tune`` command).
"""

import math
from pathlib import Path
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy
from spacy.tokens import Doc
from spacy.util import registry

from ..ml.lexicon_match import MAX_WORD_LENGTH, TaggedLexicon, TokenSpan, WordLexicon

__all__ = ["MAX_WORD_LENGTH", "Lexicon", "TokenSpan", "read_lexicon", "read_tagged_lexicon"]


class Lexicon(WordLexicon):
    """A set of words of at least two characters, without whitespace.

    Matching runs an Aho-Corasick automaton (``pyahocorasick``) over the doc's
    text (:class:`spacy_crf.ml.lexicon_match.WordLexicon`), so its cost grows
    with the text's length and the number of occurrences, not with the
    longest word."""

    def emission_bias(
        self, doc: Doc, tags: Sequence[str], weight: float, matches: Optional[List[TokenSpan]] = None
    ) -> numpy.ndarray:
        """The prior added to ``doc``'s emission scores: float32
        ``[len(doc), len(tags)]`` over the BMES ``tags`` (in the model's order).
        ``matches``: ``self.matches(doc)``, if the caller has it already
        (spans of one or more tokens)."""
        found = numpy.asarray(self.matches(doc) if matches is None else matches, dtype=numpy.int64).reshape((-1, 2))
        return _bias(len(doc), found[:, 0], found[:, 1], tags, weight)

    def emission_biases(
        self, docs: Sequence[Doc], tags: Sequence[str], weight: float, source: Optional[TaggedLexicon] = None
    ) -> List[numpy.ndarray]:
        """:meth:`emission_bias` of each doc, matched in one pass over the
        batch: a doc's bias depends only on the occurrences inside it, and
        the matcher numbers tokens across the batch. ``source``: a dictionary
        that also matches these docs (the segmenter's lexicon features); when
        it holds every word of this lexicon, the occurrences are read from its
        matches (:meth:`TaggedLexicon.batch_matches`) instead of a second pass
        of another automaton over the same text."""
        if not docs:
            return []
        within = self._words_within(source) if source is not None else None
        if within is None:
            starts, ends, _ = self.match_arrays(docs)
        else:
            starts, ends, ids = source.batch_matches(docs)  # type: ignore[union-attr]
            keep = within[ids] & (ends - starts >= self.min_tokens)
            starts, ends = starts[keep], ends[keep]
        lengths = [len(doc) for doc in docs]
        bias = _bias(sum(lengths), starts, ends, tags, weight)
        return numpy.split(bias, numpy.cumsum(lengths)[:-1])

    def _words_within(self, source: TaggedLexicon) -> Optional[numpy.ndarray]:
        """bool per word id of ``source``: one of this lexicon's words; None
        unless ``source`` holds them all. Worked out once per source."""
        cached = self.__dict__.get("_within")
        if cached is None or cached[0] is not source:
            covered = self.words <= source.words
            mask = numpy.fromiter((w in self.words for w in source.word_list), bool, len(source)) if covered else None
            cached = self.__dict__["_within"] = (source, mask)
        return cached[1]


def _bias(n: int, starts: numpy.ndarray, ends: numpy.ndarray, tags: Sequence[str], weight: float) -> numpy.ndarray:
    """The prior over ``n`` tokens for the occurrences [starts, ends)."""
    columns = {tag: i for i, tag in enumerate(tags)}
    missing = [t for t in "BME" if t not in columns]
    if missing:
        raise ValueError(f"lexicon: the tags {list(tags)} lack {missing}: a lexicon needs the bmes scheme")
    bias = numpy.zeros((n, len(tags)), dtype="float32")
    if not len(starts):
        return bias
    # How many occurrences begin, continue and end at each token (M: the
    # tokens strictly inside), then the float32 sum of that many weights,
    # as adding the weight once per occurrence gives it.
    longer = ends - starts >= 2  # a one-token span has no inside
    steps = numpy.bincount(starts[longer] + 1, minlength=n + 1) - numpy.bincount(ends[longer] - 1, minlength=n + 1)
    inside = numpy.cumsum(steps)
    counts = [numpy.bincount(starts, minlength=n), inside[:n], numpy.bincount(ends - 1, minlength=n)]
    sums = _repeated_sums(weight, max(int(c.max()) for c in counts))
    for tag, count in zip("BME", counts):
        bias[:, columns[tag]] = sums[count]
    return bias


def _repeated_sums(weight: float, most: int) -> numpy.ndarray:
    """float32 ``[most + 1]``: ``k`` times ``weight`` added to 0, one at a
    time, as ``bias[i] += weight`` adds it (the same rounding)."""
    sums = numpy.zeros(most + 1, dtype="float32")
    total = numpy.zeros(1, dtype="float32")
    for k in range(1, most + 1):
        total += weight
        sums[k] = total[0]
    return sums


def check_weight(name: str, weight) -> float:
    """``weight`` as a float, if it is a finite number >= 0 (``lexicon_weight``)."""
    try:
        value = float(weight)
    except (TypeError, ValueError):
        value = float("nan")
    if isinstance(weight, bool) or not numpy.isfinite(value) or value < 0:
        raise ValueError(f"[{name}] lexicon_weight must be a finite number >= 0, got {weight!r}.")
    return value


def set_lexicon(pipe, words: Optional[Iterable[str]], weight: float = 1.0) -> None:
    """:meth:`spacy_crf.pipeline.crf_tagger.CRFTagger.set_lexicon`."""
    if pipe.scheme != "bmes":
        raise ValueError(f"[{pipe.name}] a lexicon applies to scheme 'bmes' (word segmentation), not {pipe.scheme!r}.")
    weight = check_weight(pipe.name, weight)
    if words is None:
        pipe.lexicon = None
        pipe.cfg.update(lexicon_weight=0.0, lexicon_size=0)
        return
    lexicon = words if isinstance(words, Lexicon) else Lexicon(words)
    if not len(lexicon):
        raise ValueError(f"[{pipe.name}] the lexicon has no word of two or more characters without whitespace.")
    pipe.lexicon = lexicon
    pipe.cfg.update(lexicon_weight=weight, lexicon_size=len(lexicon))


def _fields(path: Path) -> Iterator[Tuple[int, List[str]]]:
    """``(line number, whitespace-separated fields)`` of each non-blank line of
    a UTF-8 file (a BOM before a line's word is dropped)."""
    if not path.is_file():
        raise ValueError(f"lexicon {str(path)!r}: no such file")
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"lexicon {str(path)!r}, line {line_no}: not UTF-8 ({e.reason})") from None
            fields = line.split()
            if fields:
                fields[0] = fields[0].lstrip("\ufeff")
                yield line_no, fields


@registry.readers("spacy_crf.read_lexicon.v1")
def read_lexicon(path: Union[str, Path]) -> List[str]:
    """The words of a lexicon file, for ``[initialize.components.NAME.lexicon]``.

    UTF-8, one word per line; what follows the first whitespace on a line is
    ignored, so a dictionary of ``word frequency tag`` lines (jieba's
    ``dict.txt``) reads as it is. Blank lines are skipped. Words shorter than
    two characters are read but not used (see :class:`Lexicon`)."""
    path = Path(path)
    words = [fields[0] for _, fields in _fields(path)]
    if not words:
        raise ValueError(f"lexicon {str(path)!r}: no words (one word per line)")
    return words


def _tagged_entry(path: Path, line_no: int, fields: List[str]) -> Tuple[str, float, str]:
    where = f"lexicon {str(path)!r}, line {line_no}"
    word, rest = fields[0], fields[1:]
    if len(fields) > 3:
        raise ValueError(f"{where}: {len(fields)} fields; expected `word [frequency] [tag]`")
    if len(word) > MAX_WORD_LENGTH:
        raise ValueError(
            f"{where}: the word has {len(word):,} characters, more than the {MAX_WORD_LENGTH} a word may have"
        )
    freq = 0.0
    if rest and (len(rest) == 2 or rest[0][:1].isdigit() or rest[0][:1] in "+-."):
        try:
            freq = float(rest[0])
        except ValueError:
            raise ValueError(f"{where}: the frequency {rest[0]!r} is not a number") from None
        if not (math.isfinite(freq) and freq >= 0):
            raise ValueError(f"{where}: the frequency {rest[0]!r} must be a finite number >= 0")
        rest = rest[1:]
    return word, freq, rest[0] if rest else ""


@registry.readers("spacy_crf.read_tagged_lexicon.v1")
def read_tagged_lexicon(path: Optional[Union[str, Path]]) -> Optional[TaggedLexicon]:
    """The dictionary of the lexicon features (:mod:`spacy_crf.ml.lexicon_features`),
    for ``[initialize.components.NAME.lexicon_features]``; ``path`` null: none.

    UTF-8, one ``word [frequency] [tag]`` entry per line, as jieba's
    ``dict.txt`` and its user dictionaries: the frequency a number >= 0
    (missing: 0, the word still counts), the tag a jieba tag (missing: other).
    Blank lines are skipped; a later line of a word replaces an earlier one.
    Errors name the file and the line."""
    if path is None:
        return None
    path = Path(path)
    entries = [_tagged_entry(path, line_no, fields) for line_no, fields in _fields(path)]
    if not entries:
        raise ValueError(f"lexicon {str(path)!r}: no words (one `word [frequency] [tag]` per line)")
    return TaggedLexicon(entries)
