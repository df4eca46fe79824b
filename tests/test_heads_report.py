"""project/crf_project/heads_report.py: what each head counts as a mention, and the tables."""

import spacy
from spacy.tokens import Span

from crf_project.heads_report import mentions, tables


def test_mentions_are_the_span_group_when_there_is_one_else_the_entities():
    nlp = spacy.blank("zh")
    doc = nlp.make_doc("我在北京大学工作")
    doc.ents = [Span(doc, 2, 6, label="ORG")]
    assert [(s.start, s.end, s.label_) for s in mentions(doc)] == [(2, 6, "ORG")]
    doc.spans["mentions"] = [Span(doc, 2, 6, label="ORG"), Span(doc, 2, 4, label="LOC")]
    assert [(s.start, s.end, s.label_) for s in mentions(doc)] == [(2, 6, "ORG"), (2, 4, "LOC")]
    doc.spans["mentions"] = []  # an empty group is the head's answer, not a reason to fall back
    assert mentions(doc) == []


def _run(f, per_type, seconds, speed):
    return {
        "scores": {
            "ents_f": f,
            "ents_p": f,
            "ents_r": f,
            "mentions_f": f - 0.01,
            "ents_per_type": {k: {"p": v, "r": v, "f": v} for k, v in per_type.items()},
        },
        "train": {"train_seconds": seconds},
        "speed": {"chars_per_s": speed},
    }


def test_tables_give_mean_and_half_range_and_the_best_heads_labels():
    results = {
        "softmax": {"seed0": _run(0.70, {"name": 0.8}, 100, 9000), "seed1": _run(0.74, {"name": 0.9}, 110, 9100)},
        "crf": {
            "seed0": _run(0.76, {"name": 0.85, "book": 0.5}, 120, 8000),
            "seed1": _run(0.78, {"name": 0.95, "book": 0.7}, 130, 8200),
        },
        "span": {"seed0": _run(0.75, {"name": 0.9}, 125, 7000)},
    }
    text = tables("cluener", "dev", "default", results)
    assert "| softmax (`crf_ner`, `use_crf = false`) | 72.00 ± 2.00 |" in text
    assert "| CRF (`crf_ner`, bioes) | 77.00 ± 1.00 |" in text
    assert "| seed0, seed1 | 125 ± 5 | 8,100 ± 100 | 80.76 |" in text
    assert "| span (`span_ner`, GlobalPointer) | 75.00 |" in text  # one seed: no spread
    assert "best head (CRF (`crf_ner`, bioes))" in text
    assert "| book | 60.00 |" in text and "| name | 90.00 |" in text
    assert "CLUENER2020 dev with BERT-base" in text
    other = tables("resume", "dev", "default", results)
    assert "Published figures" not in other and "| 80.76 |" not in other


def test_dev_curves_are_read_from_the_train_logs_and_plotted(tmp_path):
    import srsly

    from crf_project.compare_report import dev_curve
    from crf_project.heads_report import plot_curves

    run = tmp_path / "seed0" / "crf"
    run.mkdir(parents=True)
    srsly.write_jsonl(
        run / "train_log.jsonl",
        [
            {"step": 0, "scores": {"ents_f": 0.0}},
            {"step": 50, "scores": {"ents_f": 40.0}},
            {"step": 100, "scores": {"ents_f": 55.0}},
        ],
    )
    curve = dev_curve(run, "ner", joint=False)
    assert curve == [(0, 0.0), (50, 40.0), (100, 55.0)]
    assert dev_curve(tmp_path / "seed0" / "span", "ner", joint=False) == []  # not trained: no line
    plot_curves({"crf": {"seed0": curve}, "span": {"seed0": []}}, "test", tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
