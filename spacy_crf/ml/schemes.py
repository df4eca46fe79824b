"""Tag schemes: tag inventories, transition constraints, and tags <-> spans.

A scheme turns a set of labels into the CRF's tag inventory and says which
tag sequences are well formed. Four schemes are supported:

* ``"bmes"``: word segmentation. Tags ``B M E S`` (begin, middle, end of a
  multi-character word, single-character word). No labels.
* ``"bio"``: entities. ``O`` plus ``B-X``/``I-X`` for every label ``X``.
* ``"bioes"``: entities. ``O`` plus ``B-X``/``I-X``/``E-X``/``S-X``.
* ``"tag"``: one tag per label, every sequence allowed (``token.tag_``).

Spans are half-open token ranges ``(start, end, label)``.

This module is the single owner of every tag encoding and decoding in the
package: spans -> tags (:func:`spans_to_tags`, :func:`position_tag`), tags ->
spans with the repair rules for ill-formed sequences (:func:`tags_to_spans`,
which reports each repair through an optional callback so that corpus
readers can warn about them; :func:`bmes_word_bounds`, the same for BMES
tag ids in array operations), and spaCy's BILUO tags -> a scheme's tags
(:func:`from_biluo`).
"""

from typing import Callable, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import numpy

SCHEMES = ("bmes", "bio", "bioes", "tag")
OUTSIDE = "O"
BMES_TAGS = ("B", "M", "E", "S")

Span = Tuple[int, int, str]
#: ``on_repair(kind, start, position, label)`` of :func:`tags_to_spans`.
RepairCallback = Callable[[str, int, int, str], None]
#: Repair kinds: a continuation tag that does not continue the open span and
#: starts a new one at ``position``; a span opened at ``start`` that is not
#: closed by its end tag (``bmes``/``bioes``) and ends before ``position``.
ORPHAN, UNTERMINATED = "orphan", "unterminated"


class SchemeError(ValueError):
    """Labels or tags that do not fit the tag scheme."""


class TransitionMask(NamedTuple):
    """Allowed moves of a scheme, as boolean arrays over tag ids."""

    transitions: numpy.ndarray  # [K, K]: allowed[i, j] = tag j may follow tag i
    start: numpy.ndarray  # [K]: tag may open a sequence
    end: numpy.ndarray  # [K]: tag may close a sequence


def check_scheme(scheme: str) -> str:
    if scheme not in SCHEMES:
        raise SchemeError(f"Unknown tag scheme {scheme!r}. Choose one of: {', '.join(SCHEMES)}.")
    return scheme


def check_labels(scheme: str, labels: Iterable[str]) -> List[str]:
    """Validate labels for a scheme; return them sorted and de-duplicated.

    Entity schemes take entity types (``PER``), not tags (``B-PER``): a
    prefixed label is almost always a config mistake, so it is rejected with
    a message that says so rather than silently producing ``B-B-PER``.
    """
    check_scheme(scheme)
    labels = list(labels)
    for label in labels:
        if not isinstance(label, str) or not label or label != label.strip():
            raise SchemeError(
                f"Invalid label {label!r} for scheme {scheme!r}: labels must be "
                "non-empty strings without surrounding whitespace."
            )
    if scheme == "bmes":
        extra = [label for label in labels if label not in BMES_TAGS]
        if extra:
            raise SchemeError(
                f"Scheme 'bmes' segments words and takes no labels, but got "
                f"{extra}. Leave `labels` empty (or use only {list(BMES_TAGS)})."
            )
        return []
    if scheme in ("bio", "bioes"):
        for label in labels:
            if label == OUTSIDE:
                raise SchemeError(
                    f"'O' is not an entity type (scheme {scheme!r}): pass entity types such as 'PER', 'LOC'."
                )
            if len(label) > 2 and label[1] == "-" and label[0] in "BIESLU":
                raise SchemeError(
                    f"Label {label!r} looks like a tag, not an entity type. Scheme "
                    f"{scheme!r} builds its tags itself: pass {label[2:]!r} instead."
                )
    return sorted(set(labels))


def make_tags(scheme: str, labels: Sequence[str]) -> List[str]:
    """The tag inventory, in a fixed order: tag id = position in this list."""
    labels = check_labels(scheme, labels)
    if scheme == "bmes":
        return list(BMES_TAGS)
    if scheme == "bio":
        return [OUTSIDE] + [f"{p}-{label}" for label in labels for p in "BI"]
    if scheme == "bioes":
        return [OUTSIDE] + [f"{p}-{label}" for label in labels for p in "BIES"]
    if not labels:
        raise SchemeError("Scheme 'tag' needs at least one label.")
    return list(labels)


def split_tag(tag: str) -> Tuple[str, str]:
    """``(prefix, label)`` of a tag: ``("B", "PER")`` for ``B-PER``; ``("O", "")``; a BMES tag has no label."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    if tag in BMES_TAGS:
        return tag, ""
    return tag[0], tag[2:]


def _can_follow(scheme: str, prev: str, nxt: str) -> bool:
    (p, plab), (n, nlab) = split_tag(prev), split_tag(nxt)
    if scheme == "bmes":
        inside = p in "BM"  # a word is open after B or M
        return (n in "ME") if inside else (n in "BS")
    if scheme == "bio":
        return n != "I" or (p in "BI" and plab == nlab)
    # bioes
    if p in "BI":
        return n in "IE" and plab == nlab
    return n in "OBS"


def _can_start(scheme: str, tag: str) -> bool:
    p, _ = split_tag(tag)
    return p in {"bmes": "BS", "bio": "OB", "bioes": "OBS"}[scheme]


def _can_end(scheme: str, tag: str) -> bool:
    p, _ = split_tag(tag)
    return p in {"bmes": "ES", "bio": "OBI", "bioes": "OES"}[scheme]


def transition_mask(scheme: str, tags: Sequence[str]) -> TransitionMask:
    """Allowed transitions, first tags and last tags of a scheme."""
    check_scheme(scheme)
    n = len(tags)
    if scheme == "tag":
        return TransitionMask(numpy.ones((n, n), dtype=bool), numpy.ones(n, bool), numpy.ones(n, bool))
    allowed = numpy.array([[_can_follow(scheme, a, b) for b in tags] for a in tags], dtype=bool).reshape(n, n)
    start = numpy.array([_can_start(scheme, t) for t in tags], dtype=bool)
    end = numpy.array([_can_end(scheme, t) for t in tags], dtype=bool)
    return TransitionMask(allowed, start, end)


def is_valid(scheme: str, tags: Sequence[str]) -> bool:
    """Whether a whole tag sequence is well formed under the scheme."""
    if scheme == "tag" or not tags:
        return True
    if not _can_start(scheme, tags[0]) or not _can_end(scheme, tags[-1]):
        return False
    return all(_can_follow(scheme, a, b) for a, b in zip(tags, tags[1:]))


def position_tag(scheme: str, begins: bool, ends: bool, label: str = "") -> str:
    """The tag of a token that begins and/or ends its span (word or entity).

    ``bmes``: ``S``/``B``/``E``/``M``; ``bioes``: ``S-X``/``B-X``/``E-X``/``I-X``;
    ``bio``: ``B-X`` for a first token, else ``I-X``.
    """
    if scheme == "bmes":
        return "S" if begins and ends else "B" if begins else "E" if ends else "M"
    if scheme == "bioes":
        prefix = "S" if begins and ends else "B" if begins else "E" if ends else "I"
    elif scheme == "bio":
        prefix = "B" if begins else "I"
    else:
        raise SchemeError(f"Scheme {scheme!r} has no spans.")
    return f"{prefix}-{label}"


def spans_to_tags(scheme: str, spans: Iterable[Span], length: int) -> List[str]:
    """Encode non-overlapping spans over ``length`` tokens as tags.

    For ``bmes`` the spans are words and their labels are ignored; tokens that
    no word covers get ``S`` (a one-character word), the only safe choice that
    keeps every character in some word.
    """
    check_scheme(scheme)
    if scheme == "tag":
        raise SchemeError("Scheme 'tag' has no spans.")
    fill = "S" if scheme == "bmes" else OUTSIDE
    tags = [fill] * length
    covered = [False] * length
    for start, end, label in sorted(spans):
        if not 0 <= start < end <= length:
            raise SchemeError(f"Span ({start}, {end}) is outside 0..{length}.")
        if any(covered[start:end]):
            raise SchemeError(f"Span ({start}, {end}, {label!r}) overlaps another.")
        for i in range(start, end):
            tags[i] = position_tag(scheme, i == start, i == end - 1, label)
            covered[i] = True
    return tags


def from_biluo(tag: str, scheme: str) -> str:
    """spaCy's BILUO tag (``U-PER``, ``L-LOC``) as a ``bio``/``bioes`` tag."""
    if tag == OUTSIDE:
        return tag
    prefix, label = tag[0], tag[2:]
    if scheme == "bioes":
        prefix = {"L": "E", "U": "S"}.get(prefix, prefix)
    else:
        prefix = {"L": "I", "U": "B"}.get(prefix, prefix)
    return f"{prefix}-{label}"


def tags_to_spans(scheme: str, tags: Sequence[Optional[str]], on_repair: Optional[RepairCallback] = None) -> List[Span]:
    """Decode tags into spans, tolerating ill-formed sequences.

    Constrained Viterbi never produces ill-formed sequences, but a softmax
    head (or an unconstrained CRF, or a corpus file) can. The repair follows
    conlleval: a continuation tag that cannot continue the open span starts a
    new span (:data:`ORPHAN`), and a span still open when another span starts,
    an ``O`` follows or the sequence ends is closed there (for ``bmes`` and
    ``bioes``, whose spans have an end tag, that is :data:`UNTERMINATED`).
    For ``bmes`` every token ends up in exactly one word. A ``None`` tag
    (e.g. a whitespace token) closes any open span and belongs to no span.
    ``bioes`` also reads ``M-X`` as ``I-X`` (the BMES entity tags of Resume NER).

    on_repair: called as ``on_repair(kind, start, position, label)`` for each
        repair, in sequence order; ``start`` is where the affected span starts.
    """
    check_scheme(scheme)
    if scheme == "tag":
        raise SchemeError("Scheme 'tag' has no spans.")
    spans: List[Span] = []
    open_start: Optional[int] = None
    open_label = ""
    has_end_tag = scheme in ("bmes", "bioes")

    def close(end: int, terminated: bool = False) -> None:
        nonlocal open_start
        if open_start is not None:
            if on_repair is not None and has_end_tag and not terminated:
                on_repair(UNTERMINATED, open_start, end, open_label)
            spans.append((open_start, end, open_label))
        open_start = None

    for i, tag in enumerate(tags):
        if tag is None:
            close(i)
            continue
        prefix, label = split_tag(tag)
        if scheme == "bmes":
            if prefix in "BS" or open_start is None:
                close(i)
                if prefix in "ME" and on_repair is not None:
                    on_repair(ORPHAN, i, i, "")
                open_start, open_label = i, ""
            if prefix in "ES":
                close(i + 1, terminated=True)
            continue
        if prefix == OUTSIDE:
            close(i)
            continue
        if prefix == "M" and scheme == "bioes":
            prefix = "I"
        continues = open_start is not None and open_label == label and prefix in "IE"
        if not continues:
            close(i)
            if prefix in "IE" and on_repair is not None:
                on_repair(ORPHAN, i, i, label)
            open_start, open_label = i, label
        if prefix in "ES":
            close(i + 1, terminated=True)
    close(len(tags))
    return spans


def bmes_word_bounds(
    tag_ids: numpy.ndarray, outside: numpy.ndarray, doc_starts: Optional[numpy.ndarray] = None
) -> Tuple[numpy.ndarray, numpy.ndarray]:
    """The words of BMES tag ids (ids into :data:`BMES_TAGS`) as arrays of
    starts and ends: exactly ``tags_to_spans("bmes", tags)`` with ``None``
    where ``outside`` is true (whitespace), repairs included, in array
    operations. A word opens at a ``B``/``S`` tag or wherever no word is open
    (the first token, after whitespace or after an ``E``/``S``), and runs to
    the next opening or whitespace. ``doc_starts``: where the docs of a batch
    laid end to end start (each opens a word), if the ids are several docs'."""
    ids = numpy.asarray(tag_ids, dtype=numpy.int64).reshape(-1)
    outside = numpy.asarray(outside, dtype=bool).reshape(-1)
    opens = (ids == BMES_TAGS.index("B")) | (ids == BMES_TAGS.index("S"))
    ends_word = (ids == BMES_TAGS.index("E")) | (ids == BMES_TAGS.index("S"))
    opens[1:] |= ends_word[:-1] | outside[:-1]
    if len(opens):
        opens[0] = True
    if doc_starts is not None:
        opens[doc_starts[doc_starts < len(ids)]] = True
    opens &= ~outside
    starts = numpy.flatnonzero(opens)
    stops = numpy.append(numpy.flatnonzero(opens | outside), len(ids))
    return starts, stops[numpy.searchsorted(stops, starts, side="right")]


# prefix codes of :func:`entity_bounds` (``M`` is read as ``I``, as tags_to_spans does for bioes)
_PREFIX_CODES = {OUTSIDE: 0, "B": 1, "I": 2, "M": 2, "E": 3, "S": 4}


def entity_bounds(
    scheme: str, tags: Sequence[str], tag_ids: numpy.ndarray, outside: numpy.ndarray, doc_starts: numpy.ndarray
) -> Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]:
    """The entities of ``bio``/``bioes`` tag ids (ids into ``tags``) of several
    docs laid end to end (doc ``k``'s first token at ``doc_starts[k]``), as
    arrays of starts, ends and the tag id of each entity's first token
    (its label is that tag's): exactly ``tags_to_spans(scheme, ...)`` of each doc
    with ``None`` where ``outside`` is true, conlleval's repairs included, in
    array operations. A tag continues the open entity when it is ``I``/``E``
    of the same label and the token before it is in that entity and not its
    end (``E``/``S``); any other tag in an entity opens one."""
    if scheme not in ("bio", "bioes"):
        raise SchemeError(f"entity_bounds: scheme {scheme!r} has no entity labels")
    prefix_of = numpy.array([_PREFIX_CODES[split_tag(tag)[0]] for tag in tags], dtype=numpy.int8)
    numbers: dict = {}
    label_of = numpy.array([numbers.setdefault(split_tag(tag)[1], len(numbers)) for tag in tags], dtype=numpy.int64)
    ids = numpy.asarray(tag_ids, dtype=numpy.int64).reshape(-1)
    prefix, label = prefix_of[ids], label_of[ids]
    in_span = (prefix > 0) & ~numpy.asarray(outside, dtype=bool).reshape(-1)
    continues = numpy.zeros(len(ids), dtype=bool)
    continues[1:] = (
        in_span[:-1] & (prefix[:-1] < 3) & (label[:-1] == label[1:]) & ((prefix[1:] == 2) | (prefix[1:] == 3))
    )
    continues[doc_starts[doc_starts < len(ids)]] = False
    opens = in_span & ~continues
    starts = numpy.flatnonzero(opens)
    stops = numpy.append(numpy.flatnonzero(opens | ~in_span), len(ids))
    return starts, stops[numpy.searchsorted(stops, starts, side="right")], ids[starts]
