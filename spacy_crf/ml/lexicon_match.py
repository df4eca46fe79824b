"""Dictionary words found in docs on token boundaries: the one Aho-Corasick
matcher behind the segmenter's decoding prior (:mod:`spacy_crf.pipeline.lexicon`)
and the lexicon features (:mod:`.lexicon_features`).

:class:`WordLexicon` holds words (two or more characters, matches of two or
more tokens); :class:`TaggedLexicon` holds every word of a ``word freq tag``
dictionary (jieba's ``dict.txt``) with its frequency and tag class, single
characters included.

Matching runs one ``pyahocorasick`` automaton over the texts of a whole
batch, joined by a newline (no word holds whitespace, so no occurrence spans
two docs, a space token or the space after a token), and maps the character
offsets of the occurrences to token offsets with numpy: no Python loop over
substrings or tokens.

The characters are re-encoded before matching. pyahocorasick finds the child
of a trie node by scanning the node's children one by one, and the root of a
Chinese dictionary has one child per character that starts a word (about
twelve thousand for jieba's): every character of the text would scan
thousands of them. So each character is written as two code points, a high
and a low digit of its rank (the most frequent characters first), taken from
two disjoint ranges: no node has more than about the square root of the
alphabet's size as children, and the common ones come first. A character in
no word becomes two separators. Every character is two code points, so
offsets halve back exactly, and a high digit only sits at an even offset, so
an occurrence never starts inside a character.

Where the package's compiled matcher is built (:mod:`.kernels`), a trie over
code points finds the same occurrences in the same order, several times
faster and without re-encoding the text; the automaton is then the
reference its tests compare with.
"""

import itertools
import math
import re
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Tuple

import numpy
import srsly
from spacy.attrs import IDX, LENGTH
from spacy.tokens import Doc

from . import kernels
from .batch_cache import BatchCache, read_only

#: A word found in a doc: [start, end) in tokens.
TokenSpan = Tuple[int, int]

#: The longest word a lexicon takes. Real dictionary words and names are far
#: shorter (jieba's longest entry has 16 characters); a longer entry is almost
#: always a whole text pasted into a word list by mistake.
MAX_WORD_LENGTH = 100

# The digits: private-use code points, from two disjoint ranges (high, then low).
_FIRST_DIGIT = 0xE000
_SEPARATOR = "\x00\x00"
# what str.isspace() calls whitespace (re's \s for str patterns uses the same test)
_WHITESPACE = re.compile(r"\s")

#: The tag classes of :class:`TaggedLexicon`, in feature order (see
#: :func:`tag_class`).
TAG_CLASSES = ("person", "place", "organisation", "other_name", "other")
_CLASS_PREFIXES = (("nr", 0), ("ns", 1), ("nt", 2), ("nz", 3))


def tag_class(tag: str) -> int:
    """The class (index into :data:`TAG_CLASSES`) of a jieba (ICTCLAS) tag:
    ``nr*`` person (``nr``, ``nrt`` transliterated, ``nrfg``), ``ns*`` place,
    ``nt*`` organisation, ``nz*`` other proper name, anything else (common
    nouns, verbs, no tag) other."""
    for prefix, index in _CLASS_PREFIXES:
        if tag.startswith(prefix):
            return index
    return len(TAG_CLASSES) - 1


class _Codec(dict):
    """A ``str.translate`` table: a character of the alphabet -> its two digits,
    any other character -> two separators."""

    def __missing__(self, key: int) -> str:
        return _SEPARATOR


def _checked_words(words: Iterable[str], min_chars: int) -> Tuple[List[str], FrozenSet[str]]:
    """The distinct words of at least ``min_chars`` characters and without
    whitespace, sorted and as a set; an entry that is not a string or is longer
    than :data:`MAX_WORD_LENGTH` is an error. Each check runs over the whole
    list at C speed (the shipped pipeline loads two lists of about 340k words:
    the features' dictionary and the segmenter's prior), falling back to a
    loop over the words only to name the one that fails."""
    words = list(words)
    if not all(issubclass(kind, str) for kind in set(map(type, words))):
        bad = next(word for word in words if not isinstance(word, str))
        raise ValueError(f"lexicon: a word must be a string, got {bad!r}")
    lengths = list(map(len, words))
    if max(lengths, default=0) > MAX_WORD_LENGTH:
        word = next(word for word in words if len(word) > MAX_WORD_LENGTH)
        raise ValueError(
            f"lexicon: the entry {word[:20]!r}... has {len(word):,} characters, "
            f"more than the {MAX_WORD_LENGTH} a word may have (a text in a word list?)"
        )
    kept = itertools.compress(words, map(min_chars.__le__, lengths))
    # (NUL is not whitespace, so the joined text has whitespace only inside words)
    if _WHITESPACE.search("\x00".join(words)):
        kept = (word for word in kept if not _WHITESPACE.search(word))
    # a sorted list (a saved lexicon) sorts in one pass; a set would scramble it
    ordered = sorted(kept)
    distinct = frozenset(ordered)
    return (ordered if len(distinct) == len(ordered) else sorted(distinct)), distinct


_texts = BatchCache()


def batch_texts(docs: Sequence[Doc]) -> List[str]:
    """``doc.text`` of each doc. spaCy builds a doc's text token by token, and
    a segmenter with both a lexicon prior and lexicon features matches the same
    batch twice, so the texts of the last batches are kept for the same doc
    objects (a doc's text never changes: retokenizing keeps it)."""
    return _texts.get(docs, None, sum(len(doc) for doc in docs), lambda: [doc.text for doc in docs])


def token_bounds(docs: Sequence[Doc]) -> List[numpy.ndarray]:
    """Per doc, int64 ``[len(doc), 2]``: each token's character offset and length."""
    return [doc.to_array([IDX, LENGTH]).reshape(-1, 2).astype("int64") for doc in docs]


class WordLexicon:
    """A set of words without whitespace, of at least ``min_chars`` characters,
    found in docs as spans of at least ``min_tokens`` tokens."""

    min_chars = 2
    min_tokens = 2

    def __init__(self, words: Iterable[str]) -> None:
        #: the words in id order (sorted): the automaton's values index it
        ordered, self.words = _checked_words(words, self.min_chars)
        self.word_list: Tuple[str, ...] = tuple(ordered)
        self.max_length = max(map(len, self.word_list), default=0)
        self._automaton: Optional[Tuple[object, _Codec]] = None
        self._trie: Optional[Any] = None

    def __len__(self) -> int:
        return len(self.word_list)

    def __contains__(self, word: str) -> bool:
        return word in self.words

    def __getstate__(self) -> Dict:
        # caches (the automaton) are rebuilt on demand (multiprocessing pickles pipes)
        return {**{k: v for k, v in self.__dict__.items() if not k.startswith("_")}, "_automaton": None, "_trie": None}

    def _matcher(self) -> Tuple[object, _Codec]:
        if self._automaton is None:
            import ahocorasick

            # the most frequent characters first, counted in numpy (a Counter
            # over the characters of 350k words took a quarter of the build)
            codes = numpy.frombuffer("".join(self.word_list).encode("utf-32-le"), dtype="<u4")
            alphabet_codes, counts = numpy.unique(codes, return_counts=True)
            alphabet = [chr(code) for code in alphabet_codes[numpy.argsort(-counts, kind="stable")].tolist()]
            base = math.isqrt(max(len(alphabet) - 1, 0)) + 1
            codec = _Codec(
                {
                    ord(ch): chr(_FIRST_DIGIT + rank // base) + chr(_FIRST_DIGIT + base + rank % base)
                    for rank, ch in enumerate(alphabet)
                }
            )
            encoded = [word.translate(codec) for word in self.word_list]
            automaton = ahocorasick.Automaton(ahocorasick.STORE_INTS)
            # in digit order, so that every node lists its common children first
            for i in sorted(range(len(encoded)), key=encoded.__getitem__):
                automaton.add_word(encoded[i], i)
            automaton.make_automaton()
            self._automaton = (automaton, codec)
        return self._automaton

    def match_arrays(
        self, docs: Sequence[Doc], bounds: Optional[Sequence[numpy.ndarray]] = None
    ) -> Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
        """Every occurrence of a word in ``docs``: ``(starts, ends, word_ids)``,
        int64 arrays of one entry per occurrence, in no particular order. Tokens
        are numbered across the batch (doc ``k``'s first token is the number of
        tokens before it); ``word_ids`` index :attr:`word_list`. ``bounds``:
        :func:`token_bounds` of the docs, if the caller has them."""
        empty = numpy.zeros((0,), dtype="int64")
        if not self.word_list or not docs:
            return empty, empty, empty
        arrays = token_bounds(docs) if bounds is None else bounds
        texts = batch_texts(docs)
        text = "\n".join(texts)
        offsets = numpy.zeros((len(docs),), dtype="int64")
        offsets[1:] = numpy.cumsum([len(t) + 1 for t in texts[:-1]])
        token_starts = numpy.concatenate([a[:, 0] + off for a, off in zip(arrays, offsets)])
        token_ends = token_starts + numpy.concatenate([a[:, 1] for a in arrays])
        token_ids = numpy.arange(len(token_starts), dtype="int64")
        start_at = numpy.full((len(text) + 1,), -1, dtype="int64")
        end_at = numpy.full((len(text) + 1,), -1, dtype="int64")
        start_at[token_starts] = token_ids
        end_at[token_ends] = token_ids + 1
        last_chars, word_ids = self.find(text)
        end_chars = last_chars + 1
        starts, ends = start_at[end_chars - self._lengths()[word_ids]], end_at[end_chars]
        keep = (starts >= 0) & (ends >= 0) & (ends - starts >= self.min_tokens)
        return starts[keep], ends[keep], word_ids[keep]

    def find(self, text: str, *, compiled: Optional[bool] = None) -> Tuple[numpy.ndarray, numpy.ndarray]:
        """Every occurrence of a word in ``text``: ``(last_chars, word_ids)``,
        int64 arrays of the index of its last character and of the word, by
        end and at the same end the longest first. ``compiled``: the
        compiled trie (True) or the automaton (False); by default the trie
        where it is built and :func:`~spacy_crf.ml.kernels.enabled`."""
        if compiled is None:
            compiled = kernels.active(kernels.WordTrie)
        if compiled:
            trie = self.__dict__.get("_trie")  # (absent from a lexicon pickled before there was one)
            if trie is None:
                trie = self._trie = kernels.WordTrie(self.word_list)
            return trie.find(text)
        automaton, codec = self._matcher()
        pairs = automaton.iter(text.translate(codec))  # type: ignore[attr-defined]
        found = numpy.fromiter(itertools.chain.from_iterable(pairs), dtype="int64").reshape(-1, 2)
        return found[:, 0] // 2, found[:, 1]

    def _lengths(self) -> numpy.ndarray:
        lengths = self.__dict__.get("_word_lengths")
        if lengths is None:  # (from_dict makes the object without __init__)
            lengths = self.__dict__["_word_lengths"] = numpy.array(list(map(len, self.word_list)), dtype="int64")
        return lengths

    def matches(self, doc: Doc) -> List[TokenSpan]:
        """Every occurrence of a word in ``doc`` as token spans of at least
        ``min_tokens`` tokens, overlapping ones included, ordered by start then
        end. A span never crosses whitespace (a space token, or a token followed
        by a space) and starts and ends on token boundaries."""
        starts, ends, _ = self.match_arrays([doc])
        order = numpy.lexsort((ends, starts))
        return list(zip(starts[order].tolist(), ends[order].tolist()))


class TaggedLexicon(WordLexicon):
    """Dictionary words with a frequency and a tag class: single characters
    included, and an occurrence may be one token (a character, or a
    multi-character token that is a word).

    entries: ``(word, frequency, tag)``; a later entry of a word replaces an
    earlier one. A frequency is a finite number >= 0, a tag a jieba tag
    (mapped by :func:`tag_class`; ``""`` is other).
    """

    min_chars = 1
    min_tokens = 1

    def __init__(self, entries: Iterable[Tuple[str, float, str]] = ()) -> None:
        table: Dict[str, Tuple[float, int]] = {}
        for word, freq, tag in entries:
            if not (isinstance(freq, (int, float)) and math.isfinite(freq) and freq >= 0):
                raise ValueError(f"lexicon: the frequency of {word!r} must be a finite number >= 0, got {freq!r}")
            table[word] = (float(freq), tag_class(tag))
        super().__init__(table)
        self.freqs = numpy.array([table[w][0] for w in self.word_list], dtype="float32")
        self.classes = numpy.array([table[w][1] for w in self.word_list], dtype="int64")

    def for_batch(self, docs: Sequence[Doc], layout: bytes, compute: Callable[[], numpy.ndarray]) -> numpy.ndarray:
        """``compute()``, or what it gave for the same doc objects with the
        same ``layout`` (their token boundaries) in one of the last batches
        (:class:`~spacy_crf.ml.batch_cache.BatchCache`): the heads of a joint
        pipeline share the dictionary and see each batch in turn."""
        return self._batch_cache("_features").get(docs, layout, sum(len(doc) for doc in docs), compute)

    def batch_matches(
        self, docs: Sequence[Doc], bounds: Optional[Sequence[numpy.ndarray]] = None
    ) -> Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
        """:meth:`match_arrays`, kept as :meth:`for_batch` keeps features: the
        lexicon features and a segmenter's lexicon prior over a subset of
        these words read the same occurrences. Read-only arrays."""
        bounds = token_bounds(docs) if bounds is None else bounds
        layout = b"".join(b.tobytes() for b in bounds)
        return self._batch_cache("_matches").get(
            docs, layout, sum(len(doc) for doc in docs), lambda: read_only(self.match_arrays(docs, bounds))
        )

    def _batch_cache(self, name: str) -> BatchCache:
        cache = self.__dict__.get(name)
        if cache is None:  # (not pickled, and from_dict makes the object without __init__)
            cache = self.__dict__[name] = BatchCache()
        return cache

    def to_bytes(self) -> bytes:
        """:meth:`to_dict` as msgpack, made once (saved at every checkpoint)."""
        if getattr(self, "_bytes", None) is None:
            self._bytes = srsly.msgpack_dumps(self.to_dict())
        return self._bytes

    def __copy__(self) -> "TaggedLexicon":
        return self  # never changed after construction: copies of a model share it

    def __deepcopy__(self, memo) -> "TaggedLexicon":
        return self

    def to_dict(self) -> Dict:
        """The words, frequencies and classes, as msgpack takes them."""
        return {
            "words": "\n".join(self.word_list),
            "freqs": self.freqs,
            "classes": self.classes.astype("uint8"),
            "class_names": list(TAG_CLASSES),
        }

    @classmethod
    def from_dict(cls, data: Dict) -> "TaggedLexicon":
        """What :meth:`to_dict` gave (errors name what does not fit)."""
        if not isinstance(data, dict) or not {"words", "freqs", "classes", "class_names"} <= set(data):
            raise ValueError("lexicon features: the saved dictionary lacks words, freqs, classes or class_names")
        if list(data["class_names"]) != list(TAG_CLASSES):
            raise ValueError(
                f"lexicon features: the dictionary was saved with the tag classes {list(data['class_names'])}, "
                f"this version has {list(TAG_CLASSES)}: retrain or use the version it was saved with"
            )
        words = data["words"].split("\n") if data["words"] else []
        freqs = numpy.asarray(data["freqs"], dtype="float32")
        classes = numpy.asarray(data["classes"], dtype="int64")
        lexicon = cls.__new__(cls)
        WordLexicon.__init__(lexicon, words)
        if lexicon.word_list != tuple(words) or not len(words) == len(freqs) == len(classes):
            raise ValueError("lexicon features: the saved dictionary's words, freqs and classes do not line up")
        if not (
            numpy.isfinite(freqs).all() and (freqs >= 0).all() and ((classes >= 0) & (classes < len(TAG_CLASSES))).all()
        ):
            raise ValueError("lexicon features: the saved dictionary has a bad frequency or tag class")
        lexicon.freqs, lexicon.classes = freqs, classes
        return lexicon
