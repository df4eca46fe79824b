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

from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy
from spacy.tokens import Doc
from spacy.util import registry

#: A word of the lexicon found in a doc: [start, end) in tokens.
TokenSpan = Tuple[int, int]


#: The longest word a lexicon takes. Real dictionary words and names are far
#: shorter (jieba's longest entry has 16 characters); a longer entry is almost
#: always a whole text pasted into a word list by mistake.
MAX_WORD_LENGTH = 100


class Lexicon:
    """A set of words of at least two characters, without whitespace.

    Matching runs an Aho-Corasick automaton (``pyahocorasick``) over each run
    of the doc's text that a word may span, so its cost grows with the text's
    length and the number of occurrences, not with the longest word."""

    def __init__(self, words: Iterable[str]) -> None:
        kept = set()
        for word in words:
            if not isinstance(word, str):
                raise ValueError(f"lexicon: a word must be a string, got {word!r}")
            if len(word) > MAX_WORD_LENGTH:
                raise ValueError(
                    f"lexicon: the entry {word[:20]!r}... has {len(word):,} characters, "
                    f"more than the {MAX_WORD_LENGTH} a word may have (a text in a word list?)"
                )
            if len(word) >= 2 and not any(ch.isspace() for ch in word):
                kept.add(word)
        self.words = frozenset(kept)
        self.max_length = max((len(w) for w in self.words), default=0)
        self._automaton = None

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.words

    def __getstate__(self):
        # the automaton is rebuilt on demand (multiprocessing pickles pipes)
        return {"words": self.words, "max_length": self.max_length, "_automaton": None}

    def _matcher(self):
        if self._automaton is None:
            import ahocorasick

            automaton = ahocorasick.Automaton()
            for word in self.words:
                automaton.add_word(word, len(word))
            automaton.make_automaton()
            self._automaton = automaton
        return self._automaton

    def matches(self, doc: Doc) -> List[TokenSpan]:
        """Every occurrence of a lexicon word in ``doc`` as token spans of two
        or more tokens, overlapping ones included, ordered by start then end.
        A span never crosses whitespace (a space token, or a token followed by
        a space) and starts and ends on token boundaries."""
        if not self.words:
            return []
        automaton = self._matcher()
        found: List[TokenSpan] = []
        for first, text, token_at in _runs(doc):
            for last_char, length in automaton.iter(text):
                start_char, end_char = last_char + 1 - length, last_char + 1
                start, end = token_at.get(start_char), token_at.get(end_char)
                if start is not None and end is not None and end - start >= 2:
                    found.append((first + start, first + end))
        found.sort()
        return found

    def emission_bias(
        self, doc: Doc, tags: Sequence[str], weight: float, matches: Optional[List[TokenSpan]] = None
    ) -> numpy.ndarray:
        """The prior added to ``doc``'s emission scores: float32
        ``[len(doc), len(tags)]`` over the BMES ``tags`` (in the model's order).
        ``matches``: ``self.matches(doc)``, if the caller has it already
        (spans of one or more tokens)."""
        columns = {tag: i for i, tag in enumerate(tags)}
        missing = [t for t in "BME" if t not in columns]
        if missing:
            raise ValueError(f"lexicon: the tags {list(tags)} lack {missing}: a lexicon needs the bmes scheme")
        bias = numpy.zeros((len(doc), len(tags)), dtype="float32")
        found = numpy.asarray(self.matches(doc) if matches is None else matches, dtype=numpy.int64).reshape((-1, 2))
        if not len(found):
            return bias
        # How many occurrences begin, continue and end at each token (M: the
        # tokens strictly inside), then the float32 sum of that many weights,
        # as adding the weight once per occurrence gives it.
        n, starts, ends = len(doc), found[:, 0], found[:, 1]
        longer = found[ends - starts >= 2]  # a one-token span has no inside
        steps = numpy.bincount(longer[:, 0] + 1, minlength=n + 1) - numpy.bincount(longer[:, 1] - 1, minlength=n + 1)
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


def _runs(doc: Doc):
    """The stretches of ``doc`` a word may span: ``(first token, text, token
    boundaries)``, where the boundaries map a character offset in ``text`` to
    the token (relative to ``first``) that starts there, or the run's length
    at its end. A run stops at a space token and after a token followed by a
    space."""
    first, offset = 0, 0
    text: List[str] = []
    token_at: Dict[int, int] = {0: 0}
    for token in doc:
        if token.is_space:
            if len(token_at) > 2:
                yield first, "".join(text), token_at
            first, text, token_at, offset = token.i + 1, [], {0: 0}, 0
            continue
        text.append(token.text)
        offset += len(token.text)
        token_at[offset] = token.i + 1 - first
        if token.whitespace_:
            if len(token_at) > 2:
                yield first, "".join(text), token_at
            first, text, token_at, offset = token.i + 1, [], {0: 0}, 0
    if len(token_at) > 2:
        yield first, "".join(text), token_at


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


@registry.readers("spacy_crf.read_lexicon.v1")
def read_lexicon(path: Union[str, Path]) -> List[str]:
    """The words of a lexicon file, for ``[initialize.components.NAME.lexicon]``.

    UTF-8, one word per line; what follows the first whitespace on a line is
    ignored, so a dictionary of ``word frequency tag`` lines (jieba's
    ``dict.txt``) reads as it is. Blank lines are skipped. Words shorter than
    two characters are read but not used (see :class:`Lexicon`)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"lexicon {str(path)!r}: no such file")
    words: List[str] = []
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"lexicon {str(path)!r}, line {line_no}: not UTF-8 ({e.reason})") from None
            fields = line.split()
            if fields:
                words.append(fields[0].lstrip("\ufeff"))
    if not words:
        raise ValueError(f"lexicon {str(path)!r}: no words (one word per line)")
    return words
