"""Decoding with a user dictionary (:mod:`spacy_crf.pipeline.user_dict`): where its
entries occur in a doc, the prior they add to the emission scores
(:func:`add_prior`) and the tags their forced occurrences allow
(:func:`constrain`), resolved as that module's docstring says; and a batch
that failed (a conflict), decoded again doc by doc (:func:`annotate_each`);
and the tagger's methods that add entries (:class:`UserDictMethods`)."""

from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import numpy
from spacy.tokens import Doc

from ..doc_keys import doc_source
from ..ml.schemes import position_tag
from .forced_tags import preset_entity_tokens
from .lexicon import Lexicon
from .user_dict import MODES, UserDict, UserDictConflict, UserEntry, _check_label, add_entities, add_words


class UserDictMethods:
    """The user-dictionary methods of :class:`~spacy_crf.pipeline.crf_tagger.CRFTagger`."""

    def add_user_words(self, words: Iterable[str], *, mode: str = "force", weight: Optional[float] = None) -> int:
        """Add user words to a ``bmes`` segmenter, without retraining
        (:mod:`spacy_crf.pipeline.user_dict`). ``mode="force"``: every occurrence is
        decoded as exactly one word; ``"prior"``: each occurrence adds
        ``weight`` (default 1) to its B/M/E emission scores, on top of the
        lexicon's. A word added again is replaced; ``self.user_dict`` holds
        them (``.remove(words)``, ``.clear()``). Saved with the pipe.
        Returns the number of words given."""
        return add_words(self, words, mode, weight)

    def add_user_entities(
        self, entities: Iterable[Tuple[str, str]], *, mode: str = "force", weight: Optional[float] = None
    ) -> int:
        """Add ``(text, label)`` gazetteer entries to a ``bio``/``bioes``
        tagger, without retraining: ``mode="force"`` decodes every occurrence
        as that entity (as a preset entity), ``"prior"`` adds ``weight``
        (default 1) to the emission scores of its tags. The label must be one
        of the tagger's. Otherwise as :meth:`add_user_words`."""
        return add_entities(self, entities, mode, weight)


class _Matchers(NamedTuple):
    force: Optional[Lexicon]  # None: no entry of two or more characters in the mode
    prior: Optional[Lexicon]
    entries: Dict[str, UserEntry]
    singles: bool  # also match entries of one token (entities)
    modes: frozenset  # the modes the entries use


def build_matchers(pipe) -> Optional[_Matchers]:
    """The entries' matchers, rebuilt when the entries or the labels change;
    an entry whose label the tagger does not know is an error here (entries
    added before the labels were known, e.g. by the setting at load time)."""
    udict: UserDict = pipe.user_dict
    if not len(udict):
        return None
    key = tuple(pipe.labels)
    if udict._compiled is None or udict._compiled[0] != key:
        entries = dict(udict._entries)
        if pipe.scheme in ("bio", "bioes"):
            for entry in entries.values():
                _check_label(pipe, entry)
        force, prior = (_lexicon([t for t, e in entries.items() if e.mode == mode]) for mode in MODES)
        modes = frozenset(e.mode for e in entries.values())
        udict._compiled = (key, _Matchers(force, prior, entries, pipe.scheme != "bmes", modes))
    return udict._compiled[1]


def _lexicon(texts: List[str]) -> Optional[Lexicon]:
    # one-character texts are entities of one token, matched by _occurrences itself
    longer = [t for t in texts if len(t) >= 2]
    return Lexicon(longer) if longer else None


def _occurrences(
    doc: Doc, lexicon: Optional[Lexicon], matchers: _Matchers, mode: str
) -> List[Tuple[int, int, UserEntry]]:
    found = []
    for start, end in lexicon.matches(doc) if lexicon is not None else ():
        entry = matchers.entries.get("".join(t.text for t in doc[start:end]))
        if entry is not None and entry.mode == mode:
            found.append((start, end, entry))
    if matchers.singles:
        for token in doc:
            entry = matchers.entries.get(token.text)
            if entry is not None and entry.mode == mode:
                found.append((token.i, token.i + 1, entry))
    return found


def add_prior(pipe, docs: Sequence[Doc], scores: List):
    """``scores`` (emission scores per doc) plus the prior entries' bias."""
    matchers = build_matchers(pipe)
    if matchers is None or "prior" not in matchers.modes:
        return scores
    tags = pipe.tags
    index = {tag: i for i, tag in enumerate(tags)}
    out = []
    for doc, doc_scores in zip(docs, scores):
        occurrences = _occurrences(doc, matchers.prior, matchers, "prior")
        if not occurrences:
            out.append(doc_scores)
            continue
        bias = numpy.zeros((len(doc), len(tags)), dtype="float32")
        for start, end, entry in occurrences:
            for k in range(start, end):
                bias[k, index[position_tag(pipe.scheme, k == start, k == end - 1, entry.label or "")]] += entry.weight
        out.append(doc_scores + pipe.model.ops.asarray2f(bias))
    return out


def constrain(pipe, doc: Doc, mask: Optional[numpy.ndarray], *, preset: bool = True) -> Optional[numpy.ndarray]:
    """``mask`` (the tags allowed per token, or None: all) with every forced
    occurrence in ``doc`` decoded as one word or entity (see the module doc)."""
    matchers = build_matchers(pipe)
    if matchers is None or not len(doc):
        return mask
    if "force" not in matchers.modes:
        return mask
    occurrences = _occurrences(doc, matchers.force, matchers, "force")
    if not occurrences:
        return mask
    if preset and pipe.scheme != "bmes":
        fixed = preset_entity_tokens(doc)
        occurrences = [o for o in occurrences if not fixed[o[0] : o[1]].any()]
    elif preset and pipe.cfg.get("respect_ents", False) and len(doc.ents):
        cuts = {b for ent in doc.ents for b in (ent.start, ent.end)}
        occurrences = [o for o in occurrences if not any(o[0] < b < o[1] for b in cuts)]
    kept = _resolve(pipe, doc, occurrences)
    if not kept:
        return mask
    tags = pipe.tags
    index = {tag: i for i, tag in enumerate(tags)}
    mask = numpy.ones((len(doc), len(tags)), dtype=bool) if mask is None else mask.copy()
    for start, end, entry in kept:
        label = entry.label or ""
        for k in range(start, end):
            allowed = numpy.zeros(len(tags), dtype=bool)
            allowed[index[position_tag(pipe.scheme, k == start, k == end - 1, label)]] = True
            mask[k] &= allowed
        if pipe.scheme == "bio" and end < len(doc):
            # B-X I-X followed by I-X would read as one longer entity
            mask[end, index[f"I-{label}"]] = False
    return mask


def _resolve(pipe, doc: Doc, occurrences: List[Tuple[int, int, UserEntry]]) -> List[Tuple[int, int, UserEntry]]:
    """The forced occurrences to decode: each one not inside a longer one;
    two that cross are a :class:`UserDictConflict`."""
    kept: List[Tuple[int, int, UserEntry]] = []
    for start, end, entry in sorted(occurrences, key=lambda o: (o[0], -o[1])):
        if kept and end <= kept[-1][1]:
            continue  # inside the last kept one (or the same span)
        if kept and start < kept[-1][1]:
            other_start, other_end, other = kept[-1]
            what = "words" if pipe.scheme == "bmes" else "entities"
            a = doc[other_start:other_end]
            b = doc[start:end]
            context = doc.text[max(0, a.start_char - 10) : b.end_char + 10]
            raise UserDictConflict(
                f"[{pipe.name}] the forced user {what} {other.describe()} ({other.source}) and "
                f"{entry.describe()} ({entry.source}) overlap in {doc_source(doc)}, at characters "
                f"{a.start_char}-{a.end_char} and {b.start_char}-{b.end_char} ({context!r}): each must be "
                f"decoded whole, and both cannot be. Remove one of them, or add it with mode 'prior'."
            )
        kept.append((start, end, entry))
    return kept


def annotate_each(pipe, docs: List[Doc]) -> List[Tuple[int, Exception]]:
    """Annotate ``docs`` one at a time, each decoded from the batch's emission
    scores (the same floats as in the batch), so that a doc whose forced
    entries cross fails alone; the position and error of each doc that fails."""
    try:
        scores = pipe.emission_scores(docs) if any(len(doc) for doc in docs) else None
    except Exception:
        scores = None  # not one doc's error: each doc runs alone and fails alone
    errors = []
    for k, doc in enumerate(docs):
        try:
            alone = pipe.predict([doc]) if scores is None or not len(doc) else pipe.decode([doc], [scores[k]])
            pipe.set_annotations([doc], alone)
        except Exception as e:
            errors.append((k, e))
    return errors
