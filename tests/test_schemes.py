import numpy
import pytest

from spacy_crf.ml.schemes import (
    ORPHAN,
    UNTERMINATED,
    SchemeError,
    check_labels,
    from_biluo,
    is_valid,
    make_tags,
    position_tag,
    spans_to_tags,
    tags_to_spans,
    transition_mask,
)


def test_tag_inventories():
    assert make_tags("bmes", []) == ["B", "M", "E", "S"]
    assert make_tags("bio", ["PER", "LOC"]) == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert make_tags("bioes", ["X"]) == ["O", "B-X", "I-X", "E-X", "S-X"]
    assert make_tags("tag", ["NN", "VV", "NN"]) == ["NN", "VV"]


@pytest.mark.parametrize(
    "scheme,labels,message",
    [
        ("bio", ["B-PER"], "looks like a tag"),
        ("bioes", ["O"], "not an entity type"),
        ("bmes", ["PER"], "takes no labels"),
        ("bio", [""], "non-empty"),
        ("tag", [], "at least one label"),
        ("iob2", ["PER"], "Unknown tag scheme"),
    ],
)
def test_bad_labels_have_clear_errors(scheme, labels, message):
    with pytest.raises(SchemeError, match=message):
        make_tags(scheme, labels)


def test_bmes_mask():
    tags = make_tags("bmes", [])
    mask = transition_mask("bmes", tags)
    allowed = {(a, b) for a in tags for b in tags if mask.transitions[tags.index(a), tags.index(b)]}
    assert allowed == {("B", "M"), ("B", "E"), ("M", "M"), ("M", "E"), ("E", "B"), ("E", "S"), ("S", "B"), ("S", "S")}
    assert [t for t, ok in zip(tags, mask.start) if ok] == ["B", "S"]
    assert [t for t, ok in zip(tags, mask.end) if ok] == ["E", "S"]


def test_bio_and_bioes_masks():
    tags = make_tags("bio", ["A", "B"])
    m = transition_mask("bio", tags)
    idx = tags.index
    assert m.transitions[idx("B-A"), idx("I-A")] and not m.transitions[idx("B-A"), idx("I-B")]
    assert not m.transitions[idx("O"), idx("I-A")] and not m.start[idx("I-A")]
    assert m.end.all()
    tags = make_tags("bioes", ["A", "B"])
    m = transition_mask("bioes", tags)
    idx = tags.index
    assert m.transitions[idx("B-A"), idx("E-A")] and not m.transitions[idx("B-A"), idx("O")]
    assert m.transitions[idx("E-A"), idx("S-B")] and not m.transitions[idx("S-A"), idx("I-A")]
    assert not m.end[idx("B-A")] and not m.end[idx("I-A")] and m.end[idx("E-A")]


@pytest.mark.parametrize("scheme", ["bio", "bioes", "bmes"])
def test_spans_round_trip(scheme):
    rng = numpy.random.default_rng(0)
    labels = ["A", "B"]
    for _ in range(200):
        n = int(rng.integers(1, 12))
        spans, i = [], 0
        while i < n:
            length = int(rng.integers(1, 4))
            if scheme == "bmes" or rng.random() < 0.5:
                end = min(n, i + length)
                spans.append((i, end, "" if scheme == "bmes" else labels[int(rng.integers(2))]))
                i = end
            else:
                i += 1
        tags = spans_to_tags(scheme, spans, n)
        assert is_valid(scheme, tags)
        assert tags_to_spans(scheme, tags) == spans


def test_tags_to_spans_repairs_invalid_sequences_like_conlleval():
    assert tags_to_spans("bio", ["I-A", "I-A", "O", "B-B", "I-A"]) == [(0, 2, "A"), (3, 4, "B"), (4, 5, "A")]
    assert tags_to_spans("bioes", ["B-A", "O", "E-A", "S-B"]) == [(0, 1, "A"), (2, 3, "A"), (3, 4, "B")]
    # every character lands in exactly one word, whatever the tags
    spans = tags_to_spans("bmes", ["M", "E", "E", "B", "B", None, "M"])
    assert spans == [(0, 2, ""), (2, 3, ""), (3, 4, ""), (4, 5, ""), (6, 7, "")]


def test_check_labels_sorts_and_dedupes():
    assert check_labels("bio", ["PER", "LOC", "PER"]) == ["LOC", "PER"]


def test_position_tag_is_the_one_encoder():
    assert [position_tag("bmes", b, e) for b, e in [(1, 1), (1, 0), (0, 0), (0, 1)]] == ["S", "B", "M", "E"]
    assert [position_tag("bioes", b, e, "X") for b, e in [(1, 1), (1, 0), (0, 0), (0, 1)]] == [
        "S-X",
        "B-X",
        "I-X",
        "E-X",
    ]
    assert [position_tag("bio", b, e, "X") for b, e in [(1, 1), (1, 0), (0, 0), (0, 1)]] == ["B-X", "B-X", "I-X", "I-X"]
    with pytest.raises(SchemeError):
        position_tag("tag", True, True)


def test_from_biluo():
    assert [from_biluo(t, "bioes") for t in ["O", "B-X", "I-X", "L-X", "U-Y"]] == ["O", "B-X", "I-X", "E-X", "S-Y"]
    assert [from_biluo(t, "bio") for t in ["O", "B-X", "I-X", "L-X", "U-Y"]] == ["O", "B-X", "I-X", "I-X", "B-Y"]


def test_tags_to_spans_reports_each_repair_in_order():
    repairs = []
    tags = ["B-A", "B-A", "E-A", "M-B", "O", "S-C", "B-C"]  # BMES entity tags: M reads as I
    spans = tags_to_spans("bioes", tags, lambda *r: repairs.append(r))
    assert spans == [(0, 1, "A"), (1, 3, "A"), (3, 4, "B"), (5, 6, "C"), (6, 7, "C")]
    assert repairs == [
        (UNTERMINATED, 0, 1, "A"),
        (ORPHAN, 3, 3, "B"),
        (UNTERMINATED, 3, 4, "B"),
        (UNTERMINATED, 6, 7, "C"),
    ]
    repairs.clear()
    assert tags_to_spans("bio", ["I-A", "B-A", "O"], lambda *r: repairs.append(r)) == [(0, 1, "A"), (1, 2, "A")]
    assert repairs == [(ORPHAN, 0, 0, "A")]  # bio spans have no end tag: nothing is unterminated
