"""Corpus readers for word segmentation (CWS) and NER, the converter that
writes them to spaCy's binary ``.spacy`` format, and the registered training
readers.

Modules: :mod:`.base` (errors, warnings, line reading), one module per
family of formats (:mod:`.sighan`, :mod:`.char_tags`, :mod:`.cluener`),
:mod:`.split` (long docs, dev carving), :mod:`.rates` (how much of a
dev or test split training has seen), :mod:`.convert` (``.spacy`` output
with counts) and :mod:`.readers` (``spacy_crf.CharCorpus.v1``,
``spacy_crf.JointCorpus.v1``). A new format is one module with a
``read_<format>(path, vocab, *, stats)`` function, added to
:data:`~.convert.FORMATS` and :func:`~.convert.read_corpus`.

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

from .base import CorpusFormatError, CorpusWarning, PathLike, char_tokenizer
from .char_tags import read_char_bio, read_char_bmes, read_weibo
from .cluener import MENTIONS_KEY, read_cluener
from .convert import FORMATS, convert_corpus, corpus_counts, read_corpus
from .readers import CharCorpus, JointCorpus, create_char_corpus_reader, create_joint_corpus_reader
from .sighan import read_sighan, read_word_list, read_word_set
from .split import CARVES, CUT_KINDS, DEFAULT_BLOCK_SIZE, SplitError, carve_dev, carve_lines, dev_blocks, split_long

__all__ = [
    "CARVES",
    "CUT_KINDS",
    "DEFAULT_BLOCK_SIZE",
    "FORMATS",
    "MENTIONS_KEY",
    "CharCorpus",
    "CorpusFormatError",
    "CorpusWarning",
    "JointCorpus",
    "PathLike",
    "SplitError",
    "carve_dev",
    "carve_lines",
    "char_tokenizer",
    "dev_blocks",
    "convert_corpus",
    "corpus_counts",
    "create_char_corpus_reader",
    "create_joint_corpus_reader",
    "read_char_bio",
    "read_char_bmes",
    "read_cluener",
    "read_corpus",
    "read_sighan",
    "read_weibo",
    "read_word_list",
    "read_word_set",
    "split_long",
]
