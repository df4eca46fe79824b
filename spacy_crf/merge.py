"""The ``crf_merge_words`` component: turn predicted words into tokens.

A Chinese pipeline tokenizes into characters; the segmentation component
(``crf_tagger`` with the BMES scheme) writes its predicted words as the span
group ``doc.spans[spans_key]`` and leaves the tokens alone, so that other
components can keep working on characters. This component runs last and
retokenizes the doc so that its tokens are the words.

Guarantees:

* ``doc.text`` is unchanged.
* ``doc.ents`` is unchanged (same character offsets, labels, KB ids): where a
  word crosses an entity boundary the entity wins, i.e. the token boundaries
  are the word boundaries plus the entity boundaries. The same holds for the
  spans of every *other* span group, so that none of them is left pointing
  inside a merged token.
* Whitespace never ends up inside a word: whitespace tokens stay as they are,
  and a token with trailing whitespace always ends a merged token.
* Tokens not covered by any word span stay as they are.
* Span groups (the words included) stay valid. spaCy 3.8 does *not* update
  span groups on retokenization (their spans keep the old token indices), so
  every group is rebuilt from its character offsets after the merge; this
  is exact because every span boundary is kept as a token boundary.

The component has no state besides its config, so it survives
``nlp.to_disk``/``spacy.load`` and ``nlp.pipe(..., n_process=2)``.
"""
from typing import List, Set, Tuple

from spacy.language import Language
from spacy.tokens import Doc, Span, SpanGroup

DEFAULT_SPANS_KEY = "words"


class MergeWordsError(ValueError):
    """The doc does not carry usable predicted words."""


@Language.factory(
    "crf_merge_words",
    default_config={"spans_key": DEFAULT_SPANS_KEY},
    requires=["doc.spans"],
    retokenizes=True,
)
def make_merge_words(nlp: Language, name: str, spans_key: str) -> "MergeWords":
    """Merge the character tokens of each predicted word into one token.

    spans_key: the span group with the predicted words (``crf_tagger``'s
        ``spans_key``).
    """
    return MergeWords(name, spans_key=spans_key)


class MergeWords:
    def __init__(self, name: str = "crf_merge_words", *, spans_key: str = DEFAULT_SPANS_KEY) -> None:
        self.name = name
        self.spans_key = spans_key

    def __call__(self, doc: Doc) -> Doc:
        return merge_words(doc, self.spans_key, component=self.name)


def _ents_key(doc: Doc) -> List[Tuple[int, int, str, str, str]]:
    return [(e.start_char, e.end_char, e.label_, e.kb_id_, e.id_) for e in doc.ents]


def _char_span(doc: Doc, start: int, end: int, label: int, kb_id: int, span_id: int, component: str) -> Span:
    span = doc.char_span(start, end, label=label, kb_id=kb_id, span_id=span_id, alignment_mode="strict")
    if span is None:  # pragma: no cover - every span boundary is kept as a token boundary
        raise RuntimeError(f"[{component}] span at chars {start}-{end} no longer aligns with the tokens")
    return span


def merge_words(doc: Doc, spans_key: str = DEFAULT_SPANS_KEY, *, component: str = "crf_merge_words") -> Doc:
    """Retokenize ``doc`` in place so that the words of ``doc.spans[spans_key]``
    become tokens (see the module docstring for the rules). Returns ``doc``.

    A missing span group is an error (the pipeline is misconfigured: this
    component must run after the segmenter that writes the group), and so are
    overlapping word spans.
    """
    if spans_key not in doc.spans:
        raise MergeWordsError(
            f"[{component}] doc.spans[{spans_key!r}] is missing; the component needs the predicted "
            f"words there. Put it after the word segmenter (crf_tagger with scheme 'bmes') and give "
            f"both the same spans_key (have: {sorted(doc.spans.keys())})"
        )
    n = len(doc)
    if n == 0:
        return doc
    owner = [-1] * n
    for w, span in enumerate(doc.spans[spans_key]):
        for i in range(span.start, span.end):
            if owner[i] != -1:
                raise MergeWordsError(
                    f"[{component}] word spans in doc.spans[{spans_key!r}] overlap at token {i} "
                    f"({doc[i].text!r}, char {doc[i].idx}); words must not overlap"
                )
            owner[i] = w
    # Boundaries that must survive: those of entities and of other span groups.
    keep: Set[int] = set()
    for ent in doc.ents:
        keep.update((ent.start, ent.end))
    for key, group in doc.spans.items():
        if key != spans_key:
            for span in group:
                keep.update((span.start, span.end))
    ents_before = _ents_key(doc)
    groups_before = {
        key: (group.name, dict(group.attrs), [(s.start_char, s.end_char, s.label, s.kb_id, s.id) for s in group])
        for key, group in doc.spans.items()
    }
    merges: List[Tuple[int, int]] = []
    start = 0
    for i in range(1, n + 1):
        joins = (
            i < n
            and owner[i] != -1
            and owner[i] == owner[i - 1]
            and i not in keep
            and not doc[i - 1].whitespace_
            and not doc[i - 1].is_space
            and not doc[i].is_space
        )
        if not joins:
            if i - start > 1:
                merges.append((start, i))
            start = i
    if not merges:
        return doc
    with doc.retokenize() as retokenizer:
        for s, e in merges:
            retokenizer.merge(doc[s:e])
    for key, (name, attrs, spans) in groups_before.items():
        doc.spans[key] = SpanGroup(doc, name=name, attrs=attrs, spans=[_char_span(doc, *s, component) for s in spans])
    if _ents_key(doc) != ents_before:
        # The retokenizer takes a merged token's entity tag from the span root;
        # restore the entities from their character offsets.
        doc.set_ents(
            [_char_span(doc, s, e, label, kb_id, span_id, component) for s, e, label, kb_id, span_id in ents_before],
            default="unmodified",
        )
        if _ents_key(doc) != ents_before:  # pragma: no cover - would be a bug above
            raise RuntimeError(f"[{component}] merging words changed the entities of {doc.text[:30]!r}")
    return doc
