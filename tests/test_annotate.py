"""spacy_crf.annotate: a corpus of shards in, one record per doc out, with the
local engine and with Ray Data (one local Ray instance for the session)."""

import gzip
import json
import os
import random

import pytest
import spacy
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from thinc.api import Config

from spacy_crf.annotate import AnnotateError, annotate, read_output
from spacy_crf.annotate import engines as engines_module
from spacy_crf.annotate.writers import partial_path

CONFIG = """
[nlp]
lang = "zh"
pipeline = ["tok2vec", "segmenter", "crf_ner", "merge"]

[components]

[components.tok2vec]
factory = "tok2vec"

[components.tok2vec.model]
@architectures = "spacy.HashEmbedCNN.v2"
pretrained_vectors = null
width = 32
depth = 1
embed_size = 300
window_size = 1
maxout_pieces = 2
subword_features = false

[components.segmenter]
factory = "crf_tagger"
scheme = "bmes"

[components.segmenter.model]
@architectures = "spacy_crf.CRFTagger.v1"

[components.segmenter.model.tok2vec]
@architectures = "spacy.Tok2VecListener.v1"
width = 32
upstream = "tok2vec"

[components.crf_ner]
factory = "crf_tagger"
scheme = "bioes"

[components.crf_ner.model]
@architectures = "spacy_crf.CRFTagger.v1"

[components.crf_ner.model.tok2vec]
@architectures = "spacy.Tok2VecListener.v1"
width = 32
upstream = "tok2vec"

[components.merge]
factory = "crf_merge_words"
"""
TRAIN = [
    (["张三", "去", "上海"], [(0, 2, "PER"), (3, 5, "LOC")]),
    (["我", "在", "北京", "工作"], [(2, 4, "LOC")]),
    (["李四", "住", "广州"], [(0, 2, "PER"), (3, 5, "LOC")]),
]
CHARS = "我在北京工作张三去上海今天天气好李四住广州他们的是了人有中国大学生"
_rng = random.Random(13)
TEXTS = [
    "张三去上海",
    "",
    "  我在北京工作  ",
    "今天\t天气\u3000好 。",
    "👨\u200d👩\u200d👧李四😀住广州",
    "line\u2028separator\x85and nel",
    "他们是中国大学生",
]
LONG = "".join(_rng.choice(CHARS) for _ in range(20000))  # in one shard only: it takes a second or two


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory):
    """A tiny segmenter + NER + merge pipeline (HashEmbedCNN), a few updates."""
    nlp = spacy.util.load_model_from_config(Config().from_str(CONFIG), auto_fill=True)
    examples = []
    for words, ents in TRAIN:
        ref = Doc(nlp.vocab, words=words, spaces=[False] * len(words))
        ref.ents = [ref.char_span(s, e, label=label) for s, e, label in ents]
        examples.append(Example(nlp.make_doc(ref.text), ref))
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(5):
        nlp.update(examples, sgd=optimizer)
    path = tmp_path_factory.mktemp("annotate_pipeline") / "nlp"
    nlp.to_disk(path)
    return path


def words_of(doc, key="words"):
    """[start_char, end_char] of each word of ``doc.spans[key]``, cut at
    whitespace as crf_merge_words cuts its tokens (before a whitespace token,
    after one, and after a token with trailing whitespace), by hand."""
    pieces = []
    for span in doc.spans[key]:
        piece = []
        for token in span:
            before = doc[token.i - 1] if token.i else None
            if piece and (token.is_space or before.whitespace_ or before.is_space):
                pieces.append(piece)
                piece = []
            if not token.is_space:
                piece.append(token)
        if piece:
            pieces.append(piece)
    return [[p[0].idx, p[-1].idx + len(p[-1])] for p in pieces]


def by_pieces(nlp, text, max_chars=2000):
    """words and ents of ``text`` from nlp.pipe, by hand: a text longer than
    ``max_chars`` is cut by the corpus converter's split_long on the
    tokenizer's tokens, each piece annotated, its offsets shifted back; the
    words cut at whitespace (``words_of``)."""
    from spacy_crf.corpora.split import split_long

    pieces = [p.text for p in split_long(nlp.tokenizer(text), max_chars)] if len(text) > max_chars else [text]
    assert "".join(pieces) == text
    words, ents, offset = [], [], 0
    for piece, doc in zip(pieces, nlp.pipe(pieces)):
        assert doc.text == piece
        words += [[s + offset, e + offset] for s, e in words_of(doc)]
        ents += [{"start": e.start_char + offset, "end": e.end_char + offset, "label": e.label_} for e in doc.ents]
        offset += len(piece)
    return words, ents


@pytest.fixture(scope="module")
def expected(pipeline_dir):
    """words and ents per text, straight from nlp.pipe (LONG, over --max-chars, in pieces)."""
    nlp = spacy.load(pipeline_dir)
    out = {text: by_pieces(nlp, text) for text in TEXTS + [LONG]}
    assert any(ents for _, ents in out.values()) and any(words for words, _ in out.values())
    return out


def write_jsonl(path, records, lines=None):
    lines = lines or [json.dumps(r, ensure_ascii=False) for r in records]
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", encoding="utf8") as f:
        f.write("\n".join(lines) + "\n")


def write_corpus(root):
    """The same texts as every input format, with carried fields in JSONL/Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    txt = [t for t in TEXTS if "\n" not in t]
    (root / "a.txt").write_text("\n".join(txt) + "\n", encoding="utf8")
    with gzip.open(root / "b.txt.gz", "wt", encoding="utf8") as f:
        f.write("\n".join(txt))  # no final newline
    records = [
        {"text": t, "id": f"doc-{i}", "source": "web", "meta": {"n": i, "tags": ["x", i]}}
        for i, t in enumerate(TEXTS + [LONG])
    ]
    write_jsonl(root / "c.jsonl", records)
    (root / "sub").mkdir(exist_ok=True)
    write_jsonl(root / "sub" / "d.jsonl.gz", [{"text": t} for t in TEXTS])
    pq.write_table(pa.table({"text": TEXTS, "n": list(range(len(TEXTS)))}), root / "e.parquet")
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus") / "in")


def outputs(folder):
    """{relative path: records} of every JSONL/Parquet output under a folder."""
    found = {}
    for dirpath, dirnames, files in os.walk(folder):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in files:
            if name.endswith((".jsonl", ".parquet")) and not name.startswith(".") and name != "errors.jsonl":
                path = os.path.join(dirpath, name)
                found[os.path.relpath(path, folder)] = read_output(__import__("pathlib").Path(path))
    return found


def test_local_engine_gives_what_nlp_pipe_gives_for_every_format(pipeline_dir, corpus, expected, tmp_path):
    summary = annotate(str(pipeline_dir), str(corpus), str(tmp_path / "out"), progress=False)
    got = outputs(tmp_path / "out")
    assert sorted(got) == ["a.jsonl", "b.jsonl", "c.jsonl", "e.jsonl", os.path.join("sub", "d.jsonl")]
    txt = [t for t in TEXTS if "\n" not in t]
    assert [r["text"] for r in got["a.jsonl"]] == txt == [r["text"] for r in got["b.jsonl"]]
    assert [r["text"] for r in got["c.jsonl"]] == TEXTS + [LONG]  # whitespace, emoji, 20k chars unchanged
    for name in ("e.jsonl", os.path.join("sub", "d.jsonl")):
        assert [r["text"] for r in got[name]] == TEXTS
    for records in got.values():
        for r in records:
            assert (r["words"], r["ents"]) == expected[r["text"]]
    assert [r["id"] for r in got["a.jsonl"]][:2] == ["a.txt:1", "a.txt:2"]
    assert got["c.jsonl"][3] == {
        "id": "doc-3",
        "text": TEXTS[3],
        "words": expected[TEXTS[3]][0],
        "ents": expected[TEXTS[3]][1],
        "source": "web",
        "meta": {"n": 3, "tags": ["x", 3]},
    }
    assert [r["n"] for r in got["e.jsonl"]] == list(range(len(TEXTS)))
    assert got[os.path.join("sub", "d.jsonl")][1]["id"] == os.path.join("sub", "d.jsonl.gz") + ":2"
    n_docs = 2 * len(txt) + 3 * len(TEXTS) + 1
    assert summary["docs"] == n_docs and summary["skipped"] == 0 and summary["shards_written"] == 5
    assert summary["chars"] == 2 * sum(map(len, txt)) + 3 * sum(map(len, TEXTS)) + len(LONG)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray Data's own, on its context
def test_length_sorted_batches_give_the_same_records_in_input_order(pipeline_dir, corpus, tmp_path):
    """--sort-buffer: the texts go through the pipeline sorted by length in
    chunks of several batches; every record is the same, in the same order."""
    plain = annotate(str(pipeline_dir), str(corpus), str(tmp_path / "plain"), batch_size=2, progress=False)
    for sort_buffer, n_process in ((1, 1), (3, 1), (3, 2)):
        out = tmp_path / f"sorted-{sort_buffer}-{n_process}"
        summary = annotate(
            str(pipeline_dir),
            str(corpus),
            str(out),
            batch_size=2,
            sort_buffer=sort_buffer,
            n_process=n_process,
            progress=False,
        )
        assert outputs(out) == outputs(tmp_path / "plain")
        assert summary["docs"] == plain["docs"] and summary["chars"] == plain["chars"]
    with pytest.raises(AnnotateError, match="sort_buffer must be"):
        annotate(str(pipeline_dir), str(corpus), str(tmp_path / "bad"), sort_buffer=-1, progress=False)


def test_ray_engine_gives_identical_records_and_errors(ray_session, pipeline_dir, expected, tmp_path):
    bad = tmp_path / "in"
    write_corpus(bad)
    write_jsonl(bad / "f.jsonl", None, lines=['{"text": "张三"}', "{oops", '{"text": 5}', '{"text": "上海"}'])
    common = dict(confidence=True, on_error="skip", batch_size=4, progress=False)
    local = annotate(str(pipeline_dir), str(bad), str(tmp_path / "local"), **common)
    ray = annotate(str(pipeline_dir), str(bad), str(tmp_path / "ray"), engine="ray", workers=2, **common)
    got_local, got_ray = outputs(tmp_path / "local"), outputs(tmp_path / "ray")
    assert got_local == got_ray
    assert (tmp_path / "local" / "errors.jsonl").read_text() == (tmp_path / "ray" / "errors.jsonl").read_text()
    assert local["skipped"] == ray["skipped"] == 2 and local["docs"] == ray["docs"]
    confidences = [e["confidence"] for rs in got_ray.values() for r in rs for e in r["ents"]]
    assert confidences and all(0.0 <= c <= 1.0 for c in confidences)
    assert [r["text"] for r in got_ray["f.jsonl"]] == ["张三", "上海"]
    for r in (r for rs in got_ray.values() for r in rs if r["text"] in expected):
        assert (r["words"], [{k: e[k] for k in ("start", "end", "label")} for e in r["ents"]]) == expected[r["text"]]


def test_ray_engine_sorts_the_same_chunks_as_the_local_engine(ray_session, pipeline_dir, corpus, tmp_path):
    common = dict(batch_size=2, sort_buffer=3, progress=False)
    annotate(str(pipeline_dir), str(corpus / "c.jsonl"), str(tmp_path / "local.jsonl"), **common)
    annotate(str(pipeline_dir), str(corpus / "c.jsonl"), str(tmp_path / "ray.jsonl"), engine="ray", **common)
    annotate(str(pipeline_dir), str(corpus / "c.jsonl"), str(tmp_path / "plain.jsonl"), progress=False)
    assert read_output(tmp_path / "ray.jsonl") == read_output(tmp_path / "local.jsonl")
    assert read_output(tmp_path / "ray.jsonl") == read_output(tmp_path / "plain.jsonl")


@pytest.mark.parametrize(
    "line,reason",
    [
        ("{oops", "invalid JSON"),
        ('{"txt": "张三"}', "no 'text' key"),
        ('{"text": null}', "'text' is NoneType, not a string"),
        ('["张三"]', "not a JSON object but list"),
    ],
)
def test_a_bad_record_stops_the_run_naming_file_and_line(pipeline_dir, tmp_path, line, reason):
    write_jsonl(tmp_path / "x.jsonl", None, lines=['{"text": "我在北京"}', "", line])
    with pytest.raises(AnnotateError, match=rf"x\.jsonl, line 3: .*{reason}".replace("(", r"\(")):
        annotate(str(pipeline_dir), str(tmp_path / "x.jsonl"), str(tmp_path / "out"), progress=False)
    assert not (tmp_path / "out" / "x.jsonl").exists()


def test_on_error_skip_logs_file_line_and_reason(pipeline_dir, tmp_path):
    lines = [
        '{"text": "我在北京"}',
        "{oops",
        '{"txt": 1}',
        '{"text": 3}',
        '"str"',
        '{"text": "", "id": 9}',
        '{"text": "张三", "words": 1}',
    ]
    write_jsonl(tmp_path / "in" / "x.jsonl", None, lines=lines)
    summary = annotate(
        str(pipeline_dir),
        str(tmp_path / "in"),
        str(tmp_path / "out"),
        on_error="skip",
        n_process=2,
        batch_size=2,
        progress=False,
    )
    assert summary["skipped"] == 5 and summary["docs"] == 2
    records = read_output(tmp_path / "out" / "x.jsonl")
    assert records[1] == {"id": 9, "text": "", "words": [], "ents": []}  # empty text: empty annotations
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [(os.path.basename(e["file"]), e["line"]) for e in errors] == [("x.jsonl", n) for n in (2, 3, 4, 5, 7)]
    assert "clashes with an output field" in errors[-1]["reason"]


def test_a_rerun_finishes_an_interrupted_run_without_duplicates(pipeline_dir, tmp_path):
    src = tmp_path / "in"
    for k in range(3):
        write_jsonl(src / f"s{k}.jsonl", [{"text": t, "id": f"{k}-{i}"} for i, t in enumerate(TEXTS[:6])])
    write_jsonl(src / "s1.jsonl", None, lines=['{"text": "张三去上海", "id": "1-0"}', "{oops"])
    out = tmp_path / "out"
    with pytest.raises(AnnotateError, match=r"s1\.jsonl, line 2"):  # the run dies inside shard 2
        annotate(str(pipeline_dir), str(src), str(out), n_process=2, batch_size=2, progress=False)
    assert (out / "s0.jsonl").exists() and not (out / "s1.jsonl").exists()
    assert not partial_path(out / "s1.jsonl").exists()  # the failed shard's temporary file is gone
    first = (out / "s0.jsonl").stat()
    partial_path(out / "s2.jsonl").write_text("half a line", encoding="utf8")  # as if killed mid-write
    write_jsonl(src / "s1.jsonl", [{"text": t, "id": f"1-{i}"} for i, t in enumerate(TEXTS[:6])])
    summary = annotate(str(pipeline_dir), str(src), str(out), progress=False)
    assert summary["shards_resumed"] == 1 and summary["shards_written"] == 2
    assert (out / "s0.jsonl").stat().st_mtime_ns == first.st_mtime_ns  # finished shard left alone
    got = outputs(out)
    assert sorted(got) == ["s0.jsonl", "s1.jsonl", "s2.jsonl"]
    ids = [r["id"] for rs in got.values() for r in rs]
    assert sorted(ids) == sorted(f"{k}-{i}" for k in range(3) for i in range(6))
    assert not list(out.glob(".*.partial"))
    again = annotate(str(pipeline_dir), str(src), str(out), progress=False)
    assert again["shards_resumed"] == 3 and again["docs"] == 0
    redo = annotate(str(pipeline_dir), str(src), str(out), resume=False, progress=False)
    assert redo["docs"] == 18 and outputs(out) == got


def test_a_shard_whose_counts_differ_fails_naming_it(pipeline_dir, tmp_path, monkeypatch):
    write_jsonl(tmp_path / "in" / "s.jsonl", [{"text": t} for t in TEXTS[:3]])
    real = engines_module.ENGINES["local"]

    def lossy(*args, **kwargs):
        for row in real(*args, **kwargs):
            if not (row["kind"] == "doc" and row["line"] == 2):
                yield row

    monkeypatch.setitem(engines_module.ENGINES, "local", lossy)
    with pytest.raises(AnnotateError, match=r"shard .*s\.jsonl: read 3 records \(0 bad\) but wrote 2"):
        annotate(str(pipeline_dir), str(tmp_path / "in"), str(tmp_path / "out"), progress=False)
    assert not (tmp_path / "out" / "s.jsonl").exists()


@pytest.mark.parametrize(
    "how,fmt,n_process",
    [
        ("bad_record", "jsonl", 1),
        ("bad_record", "jsonl", 2),
        ("counts_differ", "jsonl", 1),
        ("interrupt", "jsonl", 1),
        ("interrupt", "parquet", 1),
        ("interrupt", "spacy", 1),
    ],
)
def test_a_failed_or_stopped_run_leaves_no_partial_file(pipeline_dir, tmp_path, monkeypatch, how, fmt, n_process):
    src, out = tmp_path / "in", tmp_path / "out"
    write_jsonl(src / "s0.jsonl", [{"text": t, "id": f"0-{i}"} for i, t in enumerate(TEXTS[:4])])
    write_jsonl(src / "s1.jsonl", None, lines=['{"text": "张三去上海"}', '{"text": "我在北京"}', "{oops"])
    progress = False
    if how == "bad_record":
        expected_error: type = AnnotateError
    elif how == "counts_differ":
        expected_error = AnnotateError
        write_jsonl(src / "s1.jsonl", [{"text": t} for t in TEXTS[:3]])
        real = engines_module.ENGINES["local"]

        def lossy(*args, **kwargs):
            for row in real(*args, **kwargs):
                if not (row["kind"] == "doc" and row["shard"] == 1 and row["line"] == 2):
                    yield row

        monkeypatch.setitem(engines_module.ENGINES, "local", lossy)
    else:  # Ctrl-C in the middle of shard s1

        def progress(docs, chars):
            if docs == 5:
                raise KeyboardInterrupt

        expected_error = KeyboardInterrupt
    with pytest.raises(expected_error):
        annotate(str(pipeline_dir), str(src), str(out), fmt=fmt, n_process=n_process, batch_size=2, progress=progress)
    ext = {"jsonl": ".jsonl", "parquet": ".parquet", "spacy": ".spacy"}[fmt]
    assert (out / f"s0{ext}").exists() and not (out / f"s1{ext}").exists()
    assert sorted(p.name for p in out.iterdir()) == [".annotate", f"s0{ext}"]  # no .s1{ext}.partial


def test_parquet_and_spacy_outputs(pipeline_dir, tmp_path):
    texts = [t for t in TEXTS if len(t) < 1000]
    write_jsonl(tmp_path / "x.jsonl", [{"text": t, "k": i} for i, t in enumerate(texts)])
    annotate(str(pipeline_dir), str(tmp_path / "x.jsonl"), str(tmp_path / "x.jsonl.out.jsonl"), progress=False)
    annotate(str(pipeline_dir), str(tmp_path / "x.jsonl"), str(tmp_path / "x.parquet"), progress=False)
    assert read_output(tmp_path / "x.parquet") == read_output(tmp_path / "x.jsonl.out.jsonl")
    annotate(
        str(pipeline_dir),
        str(tmp_path / "x.jsonl"),
        str(tmp_path / "spacy"),
        fmt="spacy",
        confidence=True,
        progress=False,
    )
    nlp = spacy.load(pipeline_dir)
    docs = list(DocBin().from_disk(tmp_path / "spacy" / "x.spacy").get_docs(nlp.vocab))
    want = list(nlp.pipe(texts))
    assert [[t.text for t in d] for d in docs] == [[t.text for t in d] for d in want]  # words became tokens
    assert [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in docs] == [
        [(e.start_char, e.end_char, e.label_) for e in d.ents] for d in want
    ]
    assert all(len(d.user_data["crf_ent_confidence"]) == len(d.ents) for d in docs)
    with pytest.raises(AnnotateError, match=r"one output file for \d input shards"):
        write_jsonl(tmp_path / "y.jsonl", [{"text": "我"}])
        annotate(str(pipeline_dir), str(tmp_path / "*.jsonl"), str(tmp_path / "z.jsonl"), progress=False)


#: single spaces between Chinese and Latin words: the segmenter's words may cross them
MIXED = ["我用 Python 写 code", "中文 abc 中文", "今天 hello 天气 world 好", "张三 去 上海 abc 北京", "他说 ok 。"]


def test_jsonl_words_never_cross_whitespace_that_the_spacy_tokens_do_not(pipeline_dir, tmp_path):
    """The JSONL words are the spacy format's tokens before crf_merge_words
    cuts them at entity edges: with entity_policy keep_words (no such cuts)
    the two are the same words."""
    nlp = spacy.load(pipeline_dir)
    crossing = [text for text, doc in zip(MIXED, nlp.pipe(MIXED)) if any(" " in w.text for w in doc.spans["words"])]
    assert crossing, "no word crosses a space: the test would show nothing"
    keep_words = tmp_path / "keep_words"
    spacy.load(pipeline_dir, config={"components.merge.entity_policy": "keep_words"}).to_disk(keep_words)
    write_jsonl(tmp_path / "x.jsonl", [{"text": t} for t in MIXED])
    for pipeline in (pipeline_dir, keep_words):
        out = tmp_path / "out" / pipeline.name
        annotate(str(pipeline), str(tmp_path / "x.jsonl"), str(out / "x.jsonl"), progress=False)
        annotate(str(pipeline), str(tmp_path / "x.jsonl"), str(out / "x.spacy"), progress=False)
        records = read_output(out / "x.jsonl")
        docs = list(DocBin().from_disk(out / "x.spacy").get_docs(nlp.vocab))
        for record, doc in zip(records, docs):
            words = [tuple(w) for w in record["words"]]
            tokens = [(t.idx, t.idx + len(t)) for t in doc if not t.is_space]
            assert all(not any(c.isspace() for c in record["text"][s:e]) for s, e in words), record
            if pipeline == keep_words:
                assert words == tokens, record["text"]
            else:  # every word is a run of whole tokens (entity edges may cut it further)
                bounds = {b for token in tokens for b in token}
                assert all(s in bounds and e in bounds for s, e in words), record["text"]
        assert [r["text"] for r in records] == [d.text for d in docs] == MIXED


def test_words_are_cut_at_whitespace_by_the_rule_crf_merge_words_cuts_tokens_by():
    from spacy.tokens import Span

    from spacy_crf.annotate.records import annotations
    from spacy_crf.pipeline.merge_words import merge_words

    words = ["中", "文", "a", "b", "c", "\t", "中", "文", "x"]
    doc = Doc(spacy.blank("zh").vocab, words=words, spaces=[False, True] + [False] * 5 + [True, False])
    assert doc.text == "中文 abc\t中文 x"
    doc.spans["words"] = [Span(doc, 0, 5), Span(doc, 5, 9)]  # "中文 abc", "\t中文 x"
    got = annotations(doc, "words", False)["words"]
    assert [doc.text[s:e] for s, e in got] == ["中文", "abc", "中文", "x"]
    merged = merge_words(doc)
    assert got == [[t.idx, t.idx + len(t)] for t in merged if not t.is_space]
    assert annotations(merged, "words", False)["words"] == got  # the same on the merged doc


def test_command_line(pipeline_dir, tmp_path):
    from typer.testing import CliRunner

    from spacy_crf.cli import app

    write_jsonl(tmp_path / "in" / "x.jsonl", None, lines=['{"text": "张三去上海"}', "{oops"])
    runner = CliRunner()
    assert "--engine" in runner.invoke(app, ["annotate", "--help"]).output
    args = ["annotate", str(pipeline_dir), str(tmp_path / "in"), str(tmp_path / "out"), "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and "x.jsonl, line 2: invalid JSON" in " ".join(result.output.split())
    result = runner.invoke(app, args + ["--on-error", "skip", "--format", "parquet"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "1 docs" in said and "skipped records: 1" in said
    assert [r["text"] for r in read_output(tmp_path / "out" / "x.parquet")] == ["张三去上海"]
    result = runner.invoke(app, args + ["--sort-buffer", "-1"])
    assert result.exit_code == 2 and "--sort-buffer" in result.output


def test_a_missing_pipeline_or_input_fails_early(tmp_path):
    with pytest.raises(AnnotateError, match="no such folder or installed package"):
        annotate(str(tmp_path / "nope"), str(tmp_path), str(tmp_path / "out"), engine="ray")
    with pytest.raises(AnnotateError, match="no input files"):
        annotate(str(tmp_path), str(tmp_path / "*.jsonl"), str(tmp_path / "out"))


def test_an_output_folder_inside_the_input_is_not_read(pipeline_dir, tmp_path):
    write_jsonl(tmp_path / "in" / "x.jsonl", [{"text": "张三去上海"}])
    for _ in range(2):  # the second run must not take in/out/x.jsonl for an input shard
        summary = annotate(str(pipeline_dir), str(tmp_path / "in"), str(tmp_path / "in" / "out"), progress=False)
        assert summary["shards"] == 1
    assert not (tmp_path / "in" / "out" / "out").exists()


def test_a_loaded_pipeline_drops_the_encoder_output_and_a_handed_one_is_left_alone(pipeline_dir):
    from spacy_transformers.pipeline_component import install_extensions

    install_extensions()  # doc._.trf_data, as a transformer component registers it
    nlp = engines_module.load_pipeline(str(pipeline_dir))
    assert nlp.pipe_names[-1] == "doc_cleaner"
    doc = nlp.make_doc(TEXTS[0])
    doc._.trf_data = "the encoder's output"
    for _, proc in nlp.pipeline:
        doc = proc(doc)
    assert doc._.trf_data is None and doc.text == TEXTS[0] and len(doc.spans["words"])
    handed = spacy.load(pipeline_dir)
    names = list(handed.pipe_names)
    assert engines_module.load_pipeline(handed) is handed and handed.pipe_names == names


def test_the_collector_skips_the_loaded_pipeline_during_a_local_run_only(pipeline_dir, corpus, tmp_path, monkeypatch):
    import gc

    seen = []
    annotate_rows = engines_module.annotate_rows

    def spy(nlp, *args, **kwargs):
        seen.append((gc.get_freeze_count(), any(obj is nlp for obj in gc.get_objects())))
        yield from annotate_rows(nlp, *args, **kwargs)

    monkeypatch.setattr(engines_module, "annotate_rows", spy)
    assert gc.get_freeze_count() == 0
    annotate(str(pipeline_dir), str(corpus), str(tmp_path / "out"), progress=False)
    # frozen with the pipeline in it (the collector no longer lists it), then let go
    assert seen and all(count > 0 and not listed for count, listed in seen)
    assert gc.get_freeze_count() == 0
    # a caller that froze objects itself keeps its freeze as it was
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        with engines_module.collector_spares_the_pipeline():
            assert gc.get_freeze_count() == before
        assert gc.get_freeze_count() == before
    finally:
        gc.unfreeze()
