"""The review queue for annotators: ``spacy crf review-queue`` (the least
confident docs as Label Studio tasks) and ``spacy crf import-review`` (Label
Studio's JSON export back into ``.spacy``)."""

import json
import xml.etree.ElementTree as ET

import pytest
import spacy
from spacy.tokens import DocBin
from typer.testing import CliRunner

from spacy_crf.annotate.review import (
    ReviewError,
    config_path,
    least_confident,
    read_texts,
    review_queue,
    score_docs,
)
from spacy_crf.annotate.review_import import import_review
from spacy_crf.cli import app

TEXTS = [
    "张三去上海",
    "我在北京工作",
    "李四住 广州",
    "",
    "王五去北京大学",
    "今天天气好",
    "他们是中国大学生",
    "北京  上海人",
    "上海人在北京",
]


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory):
    """A segmenter + entity tagger + merge on small tok2vecs, a few updates
    trained: some decisions sure, some not."""
    from _configs import PROBE_ENTS, PROBE_WORDS, crf_model_config
    from spacy.tokens import Doc
    from spacy.training import Example
    from spacy.util import fix_random_seed

    fix_random_seed(0)
    nlp = spacy.blank("zh")
    nlp.add_pipe("crf_segmenter", name="segmenter", config={"model": crf_model_config()})
    nlp.add_pipe("crf_ner", name="ner", config={"model": crf_model_config()})
    nlp.add_pipe("crf_merge_words", name="merge_words")
    word_refs = [Doc(nlp.vocab, words=w, spaces=[False] * len(w)) for w in PROBE_WORDS]
    ent_refs = [Example.from_dict(nlp.make_doc(t), {"entities": e}).reference for t, e in PROBE_ENTS]
    examples = [Example(nlp.make_doc(r.text), r) for r in word_refs + ent_refs]
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(4):
        nlp.update(examples, sgd=optimizer)
    path = tmp_path_factory.mktemp("review") / "pipeline"
    nlp.to_disk(path)
    return path


@pytest.fixture(scope="module")
def nlp(pipeline_dir):
    return spacy.load(pipeline_dir)


def _regions(doc):
    words = [(t.idx, t.idx + len(t)) for t in doc if not t.is_space]
    return words, [(e.start_char, e.end_char, e.label_) for e in doc.ents]


def test_an_unchanged_export_imports_as_the_predictions(pipeline_dir, nlp, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS) + "\n", encoding="utf8")
    out = tmp_path / "review.json"
    summary = review_queue(pipeline_dir, corpus, out, n=len(TEXTS), batch_size=4)
    assert summary["docs"] == summary["tasks"] == len(TEXTS)
    tasks = json.loads(out.read_text(encoding="utf8"))
    scores = [task["predictions"][0]["score"] for task in tasks]
    assert scores == sorted(scores)
    config = ET.fromstring(config_path(out).read_text(encoding="utf8"))
    controls = {c.get("name"): [lab.get("value") for lab in c] for c in config.iter("Labels")}
    assert controls == {"label": sorted(nlp.get_pipe("ner").labels), "word": ["W"]}
    assert config.find("Text").get("value") == "$text"

    counts = import_review(out, tmp_path / "reviewed.spacy", lang="zh")
    assert counts["docs"] == counts["prediction"] == len(TEXTS) and counts["cancelled"] == 0
    imported = list(DocBin().from_disk(tmp_path / "reviewed.spacy").get_docs(nlp.vocab))
    predicted = {doc.text: doc for doc in nlp.pipe(TEXTS)}
    assert sorted(doc.text for doc in imported) == sorted(TEXTS)
    for doc, task in zip(imported, tasks):
        assert doc.text == task["data"]["text"]
        assert _regions(doc) == _regions(predicted[doc.text]), doc.text
        for region in task["predictions"][0]["result"]:
            value = region["value"]
            assert value["text"] == doc.text[value["start"] : value["end"]]
            assert 0 <= region["score"] <= 1
            assert task["predictions"][0]["score"] <= region["score"]


def test_the_queue_is_the_lowest_scores_of_all_docs(pipeline_dir, nlp, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS * 2) + "\n", encoding="utf8")
    everything = list(score_docs(nlp, read_texts(corpus), batch_size=3))
    assert [item.index for item in everything] == list(range(len(TEXTS) * 2))
    assert len({round(item.score, 6) for item in everything}) > 3  # the scores differ: the ranking means something
    lowest = sorted(everything, key=lambda item: (item.score, item.index))[:5]
    out = tmp_path / "review.json"
    review_queue(pipeline_dir, corpus, out, n=5, batch_size=4)
    tasks = json.loads(out.read_text(encoding="utf8"))
    assert [task["data"]["doc_id"] for task in tasks] == [item.doc_id for item in lowest]
    assert [task["predictions"][0]["score"] for task in tasks] == [round(item.score, 4) for item in lowest]
    assert least_confident(iter(everything), 5) == lowest
    for item in everything:  # a doc's score is its least confident character: at most any region's
        assert 0 < item.score <= 1
        assert all(item.score <= c for *_, c in item.ents + item.words)


def test_a_spacy_file_and_the_command_line(pipeline_dir, nlp, tmp_path):
    DocBin(docs=[nlp.make_doc(t) for t in TEXTS]).to_disk(tmp_path / "dev.spacy")
    out, reviewed = tmp_path / "queue" / "review.json", tmp_path / "reviewed.spacy"
    runner = CliRunner()
    result = runner.invoke(app, ["review-queue", str(pipeline_dir), str(tmp_path / "dev.spacy"), str(out), "--n", "3"])
    assert result.exit_code == 0, result.output
    tasks = json.loads(out.read_text(encoding="utf8"))
    assert len(tasks) == 3 and all(t["data"]["doc_id"].startswith("dev.spacy:") for t in tasks)
    assert (out.parent / "review.config.xml").is_file()
    result = runner.invoke(app, ["import-review", str(out), str(reviewed), "--pipeline", str(pipeline_dir)])
    assert result.exit_code == 0, result.output
    assert len(DocBin().from_disk(reviewed)) == 3
    result = runner.invoke(app, ["import-review", str(out), str(reviewed), "--lang", "zh", "--pipeline", "x"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["review-queue", str(pipeline_dir), str(tmp_path / "dev.spacy"), str(out), "--n", "0"])
    assert result.exit_code == 2 and "--n" in result.output
    result = runner.invoke(app, ["review-queue", str(pipeline_dir), str(tmp_path / "missing.txt"), str(out)])
    assert result.exit_code == 1 and "missing.txt is not a file" in " ".join(result.output.split())
    result = runner.invoke(app, ["import-review", str(pipeline_dir / "meta.json"), str(reviewed)])
    assert result.exit_code == 1 and "meta.json: expected a list of tasks" in " ".join(result.output.split())


def test_the_review_queue_refuses_bad_input_before_any_work(pipeline_dir, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("张三去上海\n", encoding="utf8")
    with pytest.raises(ReviewError, match="expected a .json file"):
        review_queue(pipeline_dir, corpus, tmp_path / "review.jsonl")
    (tmp_path / "corpus.csv").write_text("x\n", encoding="utf8")
    with pytest.raises(ReviewError, match="expected a .txt file"):
        review_queue(pipeline_dir, tmp_path / "corpus.csv", tmp_path / "review.json")
    with pytest.raises(ValueError, match="inside the input directory"):
        review_queue(pipeline_dir, corpus, pipeline_dir / "config.json")
    blank = spacy.blank("zh")
    with pytest.raises(ReviewError, match="needs a crf_tagger"):
        review_queue(blank, corpus, tmp_path / "review.json")
    (tmp_path / "empty.txt").write_text("", encoding="utf8")
    with pytest.raises(ReviewError, match="empty.txt holds no document"):
        review_queue(pipeline_dir, tmp_path / "empty.txt", tmp_path / "review.json")
    (tmp_path / "bad.jsonl").write_text('{"text": "好"}\nnot json\n', encoding="utf8")
    with pytest.raises(ReviewError, match=r"bad.jsonl:2: invalid JSON"):
        review_queue(pipeline_dir, tmp_path / "bad.jsonl", tmp_path / "review.json")
    assert not (tmp_path / "review.json").exists() and not (tmp_path / "review.config.xml").exists()


# --- the import, on exports written by hand ------------------------------------------------------------------------


def _region(start, end, text, label, control="label"):
    return {
        "from_name": control,
        "to_name": "text",
        "type": "labels",
        "value": {"start": start, "end": end, "text": text[start:end], "labels": [label]},
    }


def _task(text, result, **extra):
    return {"id": 7, "data": {"text": text}, "annotations": [{"result": result, "was_cancelled": False}], **extra}


def _import(tmp_path, tasks, **kwargs):
    export = tmp_path / "export.json"
    export.write_text(json.dumps(tasks, ensure_ascii=False), encoding="utf8")
    counts = import_review(export, tmp_path / "out.spacy", lang="zh", **kwargs)
    return counts, list(DocBin().from_disk(tmp_path / "out.spacy").get_docs(spacy.blank("zh").vocab))


def test_the_latest_annotation_not_cancelled_wins(tmp_path):
    text = "张三去上海"
    prediction = {"result": [_region(3, 5, text, "PER")]}
    annotations = [
        {"result": [_region(0, 2, text, "LOC")], "updated_at": "2026-01-02T10:00:00Z"},
        {"result": [_region(0, 2, text, "PER")], "updated_at": "2026-01-03T09:00:00.123456Z"},
        {"result": [_region(3, 5, text, "LOC")], "updated_at": "2026-01-01T10:00:00Z"},
        {"result": [], "updated_at": "2026-02-01T10:00:00Z", "was_cancelled": True},
    ]
    tasks = [
        {"data": {"text": text}, "annotations": annotations, "predictions": [prediction]},
        {"data": {"text": text}, "predictions": [prediction]},
        {"data": {"text": "好"}, "annotations": [{"result": [], "was_cancelled": True}]},
        {"data": {"text": text}, "annotations": [{"result": []}]},  # reviewed: no entity
    ]
    counts, docs = _import(tmp_path, tasks)
    assert (counts["annotation"], counts["prediction"], counts["cancelled"], counts["docs"]) == (2, 1, 1, 3)
    assert [[(e.text, e.label_) for e in doc.ents] for doc in docs] == [[("张三", "PER")], [("上海", "PER")], []]
    assert [len(doc) for doc in docs] == [5, 5, 5]  # no word regions: the language's character tokens


def test_word_regions_are_the_tokens_and_whitespace_is_kept(tmp_path):
    text = " 北京  大学 上海"
    words = [(1, 3), (5, 7), (8, 10)]
    result = [_region(s, e, text, "W", "word") for s, e in words] + [_region(5, 10, text, "ORG")]
    _, [doc] = _import(tmp_path, [_task(text, result)])
    assert doc.text == text
    assert [t.text for t in doc] == [" ", "北京", " ", "大学", "上海"]
    assert [(e.start_char, e.end_char, e.label_) for e in doc.ents] == [(5, 10, "ORG")]


TEXT = "张三去上海"


@pytest.mark.parametrize(
    "result, message",
    [
        ([_region(0, 2, TEXT, "PER"), _region(1, 3, TEXT, "LOC")], r"entity regions \[0, 2\) '张三' PER and \[1, 3\)"),
        ([_region(0, 2, TEXT, "W", "word"), _region(1, 5, TEXT, "W", "word")], "word regions .* overlap"),
        (
            [{**_region(0, 2, TEXT, "PER"), "value": {"start": 3, "end": 9, "labels": ["PER"]}}],
            r"\[3, 9\) are outside the text of 5",
        ),
        ([{**_region(0, 2, TEXT, "PER"), "value": {"start": 2, "end": 2, "labels": ["PER"]}}], "outside the text"),
        (
            [{**_region(0, 2, TEXT, "PER"), "value": {"start": 0, "end": 2, "text": "张四", "labels": ["PER"]}}],
            "its text '张四' does not match '张三'",
        ),
        ([{**_region(0, 2, TEXT, "PER"), "value": {"start": "0", "end": 2, "labels": ["PER"]}}], "must be integers"),
        ([{**_region(0, 2, TEXT, "PER"), "from_name": "ner"}], "from_name 'ner' is neither"),
        ([{**_region(0, 2, TEXT, "PER"), "type": "choices"}], "expected type 'labels'"),
        (
            [{**_region(0, 2, TEXT, "PER"), "value": {"start": 0, "end": 2, "labels": ["PER", "LOC"]}}],
            "exactly one label",
        ),
        ([_region(0, 2, TEXT, "X", "word")], "a word region's label must be 'W'"),
        (
            [_region(0, 2, TEXT, "W", "word"), _region(3, 5, TEXT, "W", "word")],
            r"character 2 '去' is in no word region",
        ),
        (
            [_region(0, 3, TEXT, "W", "word"), _region(3, 5, TEXT, "W", "word"), _region(1, 3, TEXT, "PER")],
            r"not start and end on token boundaries \(a word region crosses it\)",
        ),
        ({"start": 0}, "not a list of regions"),
    ],
)
def test_a_bad_region_stops_the_import_naming_the_file_and_task(tmp_path, result, message):
    good = _task(TEXT, [_region(0, 2, TEXT, "PER")])
    with pytest.raises(ReviewError, match=message) as err:
        _import(tmp_path, [good, _task(TEXT, result)])
    assert str(err.value).startswith(f"{tmp_path / 'export.json'}: task 1 (id 7): ")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out.spacy").exists()


@pytest.mark.parametrize(
    "tasks, message",
    [
        ({"data": {}}, "expected a list of tasks"),
        ([], "holds no task"),
        ([{"text": TEXT, "label": []}], r"task 0: no data.text string .*not JSON-MIN"),
        ([{"data": {"text": TEXT}}], "neither an annotation nor a prediction"),
        ([{"data": {"text": TEXT}, "predictions": [3]}], "its prediction is a reference"),
        (
            [{"data": {"text": "李四 住"}, "annotations": [{"result": [_region(1, 3, "李四 住", "PER")]}]}],
            "starts or ends with whitespace",
        ),
        (
            [_task(TEXT, [_region(0, 5, TEXT, "W", "word")]), _task("好", [])],
            r"task 1 \(id 7\): the task has no word regions",
        ),
        (
            [{"data": {"text": "好"}, "annotations": [{"result": [], "was_cancelled": True}]}],
            "every task was cancelled",
        ),
    ],
)
def test_a_bad_export_stops_the_import(tmp_path, tasks, message):
    with pytest.raises(ReviewError, match=message) as err:
        _import(tmp_path, tasks)
    assert str(err.value).startswith(str(tmp_path / "export.json")) and "\n" not in str(err.value)
    assert not (tmp_path / "out.spacy").exists()


def test_the_import_checks_its_paths_and_language(tmp_path):
    export = tmp_path / "export.json"
    export.write_text(json.dumps([_task(TEXT, [])]), encoding="utf8")
    with pytest.raises(ReviewError, match="expected a .spacy file"):
        import_review(export, tmp_path / "out.json", lang="zh")
    with pytest.raises(ReviewError, match="not both"):
        import_review(export, tmp_path / "out.spacy", lang="zh", nlp=spacy.blank("zh"))
    with pytest.raises(ReviewError, match="language 'xx-nope' cannot be loaded"):
        import_review(export, tmp_path / "out.spacy", lang="xx-nope")
    (tmp_path / "bad.json").write_text("[{", encoding="utf8")
    with pytest.raises(ReviewError, match="bad.json: not a JSON file"):
        import_review(tmp_path / "bad.json", tmp_path / "out.spacy", lang="zh")


# --- other pipelines -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "drop, controls",
    [
        (["merge_words"], {"label", "word"}),
        (["merge_words", "segmenter"], {"label"}),
        (["merge_words", "ner"], {"word"}),
    ],
)
def test_pipelines_without_the_merge_or_one_tagger_round_trip(pipeline_dir, tmp_path, drop, controls):
    from spacy_crf.pipeline.span_arrays import word_char_bounds

    nlp = spacy.load(pipeline_dir)
    for name in drop:
        nlp.remove_pipe(name)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(TEXTS) + "\n", encoding="utf8")
    out = tmp_path / "review.json"
    review_queue(nlp, corpus, out, n=len(TEXTS))
    config = ET.fromstring(config_path(out).read_text(encoding="utf8"))
    assert {c.get("name") for c in config.iter("Labels")} == controls
    import_review(out, tmp_path / "reviewed.spacy", nlp=nlp)
    imported = {d.text: d for d in DocBin().from_disk(tmp_path / "reviewed.spacy").get_docs(nlp.vocab)}
    cut_words = 0
    for doc in nlp.pipe(TEXTS):
        got = imported[doc.text]
        assert [(e.start_char, e.end_char, e.label_) for e in got.ents] == [
            (e.start_char, e.end_char, e.label_) for e in doc.ents
        ]
        tokens = [(t.idx, t.idx + len(t)) for t in got if not t.is_space]
        if "segmenter" in drop:
            assert tokens == [(t.idx, t.idx + len(t)) for t in doc if not t.is_space]  # characters
            continue
        words = word_char_bounds(doc, doc.spans["words"])
        # the segmenter's words, cut only where an entity starts or ends inside one
        inner = {x for e in doc.ents for x in (e.start_char, e.end_char) if any(s < x < t for s, t in words)}
        cut_words += bool(inner)
        assert {s for s, _ in tokens} == {s for s, _ in words} | inner
        assert {e for _, e in tokens} == {e for _, e in words} | inner
    assert cut_words or drop != ["merge_words"]  # some word was cut at an entity edge


def test_entity_scores_are_annotate_confidence_over_a_shared_transformer(tiny_bert_dir):
    from conftest import tiny_ner_pipeline

    from spacy_crf.annotate.records import CONFIDENCE_KEY, add_confidence

    nlp, examples = tiny_ner_pipeline(tiny_bert_dir)
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(3):
        nlp.update(examples, sgd=optimizer)
    texts = [eg.reference.text for eg in examples] + ["张三在北京", "李四去上海工作"]
    scored = list(score_docs(nlp, enumerate(texts), batch_size=2))
    add_confidence(nlp)
    assert sum(len(item.ents) for item in scored) > 0
    for item, doc in zip(scored, nlp.pipe(texts, batch_size=2)):
        assert item.words is None
        expected = [(s, e, label, c) for s, e, label, c in doc.user_data[CONFIDENCE_KEY]]
        assert [(s, e, label, round(c, 4)) for s, e, label, c in item.ents] == expected
