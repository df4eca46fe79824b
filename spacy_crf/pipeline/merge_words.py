"""The ``crf_merge_words`` component: turn predicted words into tokens.

A Chinese pipeline tokenizes into characters; the segmentation component
(``crf_tagger`` with the BMES scheme) writes its predicted words as the span
group ``doc.spans[spans_key]`` and leaves the tokens alone, so that other
components can keep working on characters. This component runs last and
returns a doc whose tokens are the words.

Guarantees:

* ``doc.text`` is unchanged.
* No entity is lost. Where a word crosses an entity boundary, the
  ``entity_policy`` decides:

  - ``"split"`` (default): the entity wins, i.e. the token boundaries are the
    word boundaries plus the entity boundaries, and ``doc.ents`` is unchanged
    (same character offsets, labels, KB ids, entity ids).
  - ``"keep_words"``: the word wins. ``doc.ents`` holds the entities that
    line up with the tokens; every other entity goes to the span group
    ``doc.spans[unaligned_ents_key]`` (default ``"ents_chars"``; always
    written under this policy, empty when all entities line up). A span
    there covers the tokens the entity touches and carries its label, KB id
    and entity id; the entity's exact character offsets are
    ``group.attrs["char_offsets"][i]`` for the group's ``i``-th span.
    :func:`char_entities` returns all entities by character offsets under
    either policy. Segmentation standards (SXU) and entity standards (MSRA)
    disagree on where words end, so ``split`` cuts words the segmenter got
    right by its own standard, and ``keep_words`` keeps them.
* The spans of every *other* span group keep their boundaries under both
  policies (a word crossing one is split), so that none of them is left
  pointing inside a token; the groups keep their names and ``attrs``.
* Whitespace never ends up inside a word: whitespace tokens stay as they are,
  and a token with trailing whitespace always ends a merged token.
* Tokens not covered by any word span stay as they are.
* A merged token takes what spaCy's ``Retokenizer.merge`` gives it, so that
  both ways agree token by token: tag, POS, morphology and sentence start of
  its first character (the span root spaCy takes when there is no parse), the
  lemma concatenated from the characters' lemmas, no norm of its own (the
  lexeme's), entity annotation as above, and the ``doc.tensor`` row of its
  last character; where the vocab has vectors and the word none, the vocab
  gets the mean of its characters' vectors for it. ``doc.user_data`` (so ``doc._`` extension values,
  ``doc._.trf_data`` included), ``doc.cats``, the user hooks and the
  ``nlp.pipe(..., as_tuples=True)`` context are carried over as they are.
  ``doc._.trf_data`` keeps its alignment to the *character* tokens, as an
  in-place retokenization leaves it too.
* Words are merged in one linear pass: the merged doc is a new ``Doc`` built
  from the words, with the annotations and span groups above carried over
  (spaCy's ``Retokenizer.merge`` is quadratic in the number of merged
  words), and ``nlp.pipe`` merges a batch of docs at a time
  (:func:`merge_docs`: the small array operations run once per batch, not
  once per doc). Use the returned doc: the input doc is left unchanged. A doc with
  a dependency parse over its characters is the exception: it is
  retokenized in place by spaCy's retokenizer, which also remaps the heads.

The component has no state besides its config, so it survives
``nlp.to_disk``/``spacy.load`` and ``nlp.pipe(..., n_process=2)``.
"""

from typing import Iterable, Iterator, List, Tuple

from spacy.language import Language
from spacy.tokens import Doc
from spacy.util import minibatch

from ..doc_keys import DEFAULT_SPANS_KEY  # the segmenter's default span group
from .merge_batch import (
    CHAR_OFFSETS,
    DEFAULT_UNALIGNED_ENTS_KEY,
    _check_config,
    merge_docs,
)


@Language.factory(
    "crf_merge_words",
    default_config={
        "spans_key": DEFAULT_SPANS_KEY,
        "entity_policy": "split",
        "unaligned_ents_key": DEFAULT_UNALIGNED_ENTS_KEY,
    },
    requires=["doc.spans"],
    retokenizes=True,
)
def make_merge_words(
    nlp: Language,
    name: str,
    spans_key: str,
    entity_policy: str,
    unaligned_ents_key: str,
) -> "MergeWords":
    """Merge the character tokens of each predicted word into one token.

    spans_key: the span group with the predicted words (``crf_tagger``'s
        ``spans_key``).
    entity_policy: what happens where a word crosses an entity boundary.
        ``"split"`` (default): the word is split there, so that ``doc.ents``
        stays exactly as the NER component wrote it. ``"keep_words"``: the
        word stays one token; ``doc.ents`` keeps the entities that line up
        with the tokens and the others go to ``doc.spans[unaligned_ents_key]``
        (their exact character offsets in the group's
        ``attrs["char_offsets"]``). Use ``keep_words`` when the segmenter's
        standard should decide the tokens, ``split`` when every entity must
        be a run of whole tokens.
    unaligned_ents_key: the span group for entities that do not line up with
        the words under ``keep_words`` (unused under ``split``).
    """
    return MergeWords(name, spans_key=spans_key, entity_policy=entity_policy, unaligned_ents_key=unaligned_ents_key)


class MergeWords:
    def __init__(
        self,
        name: str = "crf_merge_words",
        *,
        spans_key: str = DEFAULT_SPANS_KEY,
        entity_policy: str = "split",
        unaligned_ents_key: str = DEFAULT_UNALIGNED_ENTS_KEY,
    ) -> None:
        _check_config(spans_key, entity_policy, unaligned_ents_key, name)
        self.name = name
        self.spans_key = spans_key
        self.entity_policy = entity_policy
        self.unaligned_ents_key = unaligned_ents_key

    def __call__(self, doc: Doc) -> Doc:
        return merge_words(
            doc,
            self.spans_key,
            entity_policy=self.entity_policy,
            unaligned_ents_key=self.unaligned_ents_key,
            component=self.name,
        )

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """The merged docs of ``stream``, in order, merged ``batch_size`` at a
        time (:func:`merge_docs`): what ``nlp.pipe`` calls."""
        for docs in minibatch(stream, size=batch_size):
            yield from merge_docs(
                docs,
                self.spans_key,
                entity_policy=self.entity_policy,
                unaligned_ents_key=self.unaligned_ents_key,
                component=self.name,
            )


def char_entities(
    doc: Doc, unaligned_ents_key: str = DEFAULT_UNALIGNED_ENTS_KEY
) -> List[Tuple[int, int, str, str, str]]:
    """All entities of a merged doc as ``(start_char, end_char, label, kb_id,
    ent_id)``, sorted: ``doc.ents`` plus, under ``keep_words``, those recorded
    in ``doc.spans[unaligned_ents_key]`` at their exact character offsets."""
    found = [(e.start_char, e.end_char, e.label_, e.kb_id_, e.id_) for e in doc.ents]
    if unaligned_ents_key in doc.spans:
        group = doc.spans[unaligned_ents_key]
        offsets = group.attrs.get(CHAR_OFFSETS, [])
        found.extend((s, e, span.label_, span.kb_id_, span.id_) for span, (s, e) in zip(group, offsets))
    return sorted(found)


def merge_words(
    doc: Doc,
    spans_key: str = DEFAULT_SPANS_KEY,
    *,
    entity_policy: str = "split",
    unaligned_ents_key: str = DEFAULT_UNALIGNED_ENTS_KEY,
    component: str = "crf_merge_words",
    via_retokenizer: bool = False,
) -> Doc:
    """Return ``doc`` with the words of ``doc.spans[spans_key]`` as tokens
    (see the module docstring for the rules).

    The result is a new ``Doc`` whenever a token changes (``doc`` itself is
    then left as it was), else ``doc``. ``via_retokenizer`` retokenizes in
    place with spaCy's ``Retokenizer.merge`` instead, as is done anyway for a
    doc with a dependency parse; it gives the same tokens and annotations but
    takes time quadratic in the number of words (kept for comparison).

    A missing span group is an error (the pipeline is misconfigured: this
    component must run after the segmenter that writes the group), and so are
    overlapping word spans. :func:`merge_docs` does the same for many docs.
    """
    return merge_docs(
        [doc],
        spans_key,
        entity_policy=entity_policy,
        unaligned_ents_key=unaligned_ents_key,
        component=component,
        via_retokenizer=via_retokenizer,
    )[0]
