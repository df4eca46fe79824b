"""Where a segmenter loses the words it never saw in training (OOV words).

OOV recall is the one SXU target the shipped model misses, and more training
steps do not move it (README: Results). This breaks the OOV words of a dev set
down by length and by kind of characters, says how each missed one was
missed, and lists the most frequent misses with what the model made of them:

* ``split``: the model put a word boundary inside the word (e.g. a name cut
  into its characters); ``split_into_iv`` counts the splits whose pieces are
  all training-vocabulary words, the case where the model prefers words it
  knows;
* ``joined``: no boundary inside, but the word was run together with a
  neighbour.

``evaluate.py cws ... --words`` writes it as ``oov`` beside the scores.
"""

import unicodedata
from collections import Counter
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from spacy.training import Example

from spacy_crf.doc_keys import has_gold_words
from spacy_crf.pipeline.scorers import predicted_words, reference_words

LENGTHS = ("1", "2", "3", "4+")
KINDS = ("han", "digits_latin", "other")


def word_kind(word: str) -> str:
    """``han``: Chinese characters only; ``digits_latin``: any digit or
    non-Chinese letter (numbers, dates, Latin names; full-width forms too);
    ``other``: the rest (punctuation, symbols, mixed with them)."""
    if all(unicodedata.name(c, "").startswith("CJK UNIFIED IDEOGRAPH") for c in word):
        return "han"
    if any(unicodedata.category(c)[0] in "LN" and not unicodedata.name(c, "").startswith("CJK") for c in word):
        return "digits_latin"
    return "other"


def _length(word: str) -> str:
    return str(len(word)) if len(word) < 4 else "4+"


def _recall_table(keys: Tuple[str, ...], total: Counter, found: Counter) -> Dict[str, Dict[str, Any]]:
    return {k: {"words": total[k], "recall": found[k] / total[k] if total[k] else None} for k in keys}


def oov_breakdown(
    examples: Iterable[Example], iv_words: Set[str], spans_key: Optional[str] = "words", top: int = 20
) -> Dict[str, Any]:
    """OOV words of the references of ``examples`` (not in ``iv_words``): recall
    by length and kind, the misses by type, and the ``top`` most frequent
    missed words as ``[word, misses, predicted]`` (``predicted``: the
    predicted words over it, ``|`` between them)."""
    by_length, found_length, by_kind, found_kind = Counter(), Counter(), Counter(), Counter()
    misses: Counter = Counter()
    missed: Counter = Counter()
    shown: Dict[str, str] = {}
    for eg in examples:
        if not has_gold_words(eg.reference):
            continue
        text = eg.reference.text
        pred = predicted_words(eg.predicted, spans_key)
        boundaries = {b for span in pred for b in span}
        for start, end in sorted(reference_words(eg.reference)):
            word = text[start:end]
            if word in iv_words:
                continue
            hit = (start, end) in pred
            length, kind = _length(word), word_kind(word)
            by_length[length] += 1
            by_kind[kind] += 1
            if hit:
                found_length[length] += 1
                found_kind[kind] += 1
                continue
            over = sorted((s, e) for s, e in pred if s < end and e > start)
            if any(start < b < end for b in boundaries):
                misses["split"] += 1
                if all(start <= s and e <= end and text[s:e] in iv_words for s, e in over):
                    misses["split_into_iv"] += 1
            else:
                misses["joined"] += 1
            missed[word] += 1
            shown.setdefault(word, "|".join(text[s:e] for s, e in over))
    n = sum(by_length.values())
    return {
        "oov_words": n,
        "oov_recall": sum(found_length.values()) / n if n else None,
        "by_length": _recall_table(LENGTHS, by_length, found_length),
        "by_kind": _recall_table(KINDS, by_kind, found_kind),
        "misses": {k: misses[k] for k in ("split", "split_into_iv", "joined")},
        "top_missed": [[w, c, shown[w]] for w, c in missed.most_common(top)],
    }


def summary_lines(breakdown: Dict[str, Any]) -> List[str]:
    """The breakdown in a few printable lines."""

    def cells(table):
        return ", ".join(f"{k} {v['recall'] * 100:.1f} ({v['words']})" for k, v in table.items() if v["words"])

    m = breakdown["misses"]
    missed = m["split"] + m["joined"]
    lines = [
        f"OOV words {breakdown['oov_words']}, recall by length: {cells(breakdown['by_length'])}",
        f"recall by kind: {cells(breakdown['by_kind'])}",
        f"misses {missed}: split {m['split']} (into training words only: {m['split_into_iv']}), joined {m['joined']}",
    ]
    if breakdown["top_missed"]:
        lines.append("most missed: " + ", ".join(f"{w} x{c} -> {p}" for w, c, p in breakdown["top_missed"][:10]))
    return lines
