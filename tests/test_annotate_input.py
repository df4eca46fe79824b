"""spacy_crf.annotate: inputs that are not clean UTF-8 (lone surrogates, a
line that is not UTF-8, a BOM, a truncated .gz), refused pipelines and options,
signals with worker processes, and very long records."""

import gzip
import json
import os

import pytest
from test_annotate import outputs, pipeline_dir, write_jsonl  # noqa: F401  (pipeline_dir: a fixture)
from typer.testing import CliRunner

from spacy_crf.annotate import AnnotateError, annotate, read_output
from spacy_crf.cli import app


def run_cli(*args):
    result = CliRunner().invoke(app, ["annotate", *map(str, args), "--no-progress"])
    return result.exit_code, " ".join(result.output.split())


def read_errors(path):
    return [json.loads(line) for line in path.read_text(encoding="utf8").splitlines()]


# --- lone surrogates --------------------------------------------------------------------------------------------------

SURROGATE_LINES = [
    '{"text": "张三去上海"}',
    '{"text": "张三\\ud800去上海"}',
    '{"text": "我在北京", "url": "\\udfff"}',
    '{"text": "李四住广州"}',
]


def test_a_lone_surrogate_is_a_bad_record_skipped_to_the_errors_file(pipeline_dir, tmp_path):
    write_jsonl(tmp_path / "in" / "x.jsonl", None, lines=SURROGATE_LINES)
    summary = annotate(str(pipeline_dir), str(tmp_path / "in"), str(tmp_path / "out"), on_error="skip", progress=False)
    assert summary["docs"] == 2 and summary["skipped"] == 2
    assert [r["text"] for r in read_output(tmp_path / "out" / "x.jsonl")] == ["张三去上海", "李四住广州"]
    errors = read_errors(tmp_path / "out" / "errors.jsonl")
    assert [e["line"] for e in errors] == [2, 3]
    assert "'text' is not valid Unicode: a lone surrogate '\\ud800' at char 2" in errors[0]["reason"]
    assert "lone surrogate" in errors[1]["reason"]


def test_a_lone_surrogate_stops_the_run_in_one_line_naming_file_and_line(pipeline_dir, tmp_path):
    write_jsonl(tmp_path / "x.jsonl", None, lines=SURROGATE_LINES)
    code, said = run_cli(pipeline_dir, tmp_path / "x.jsonl", tmp_path / "out")
    assert code == 1 and "x.jsonl, line 2: 'text' is not valid Unicode" in said and "Traceback" not in said


# --- lines that are not UTF-8, a BOM, a truncated .gz ----------------------------------------------------------------


@pytest.mark.parametrize("n_process", [1, 2])
def test_on_error_skip_skips_a_line_that_is_not_utf8(pipeline_dir, tmp_path, n_process):
    src = tmp_path / "in"
    src.mkdir()
    (src / "x.jsonl").write_bytes(b'{"text": "\xe5\xbc\xa0"}\n{"text": "\xff\xfe"}\n{"text": "\xe6\xb5\xb7"}\n')
    (src / "y.txt").write_bytes(b"\xe5\xbc\xa0\n\xff\n\xe6\xb5\xb7\n")
    summary = annotate(
        str(pipeline_dir), str(src), str(tmp_path / "out"), on_error="skip", n_process=n_process, progress=False
    )
    assert summary["docs"] == 4 and summary["skipped"] == 2
    assert [r["text"] for r in read_output(tmp_path / "out" / "x.jsonl")] == ["张", "海"]
    assert [r["text"] for r in read_output(tmp_path / "out" / "y.jsonl")] == ["张", "海"]
    errors = read_errors(tmp_path / "out" / "errors.jsonl")
    assert [(os.path.basename(e["file"]), e["line"]) for e in errors] == [("x.jsonl", 2), ("y.txt", 2)]
    assert all(e["reason"].startswith("not UTF-8 text") for e in errors)


def test_a_line_that_is_not_utf8_stops_the_run_naming_file_and_line(pipeline_dir, tmp_path):
    (tmp_path / "x.jsonl").write_bytes(b'{"text": "\xe5\xbc\xa0"}\n{"text": "\xff\xfe"}\n')
    code, said = run_cli(pipeline_dir, tmp_path / "x.jsonl", tmp_path / "out")
    assert code == 1 and "x.jsonl, line 2: not UTF-8 text" in said and "Traceback" not in said


def test_a_utf8_bom_opening_a_shard_is_read_as_utf8_sig(pipeline_dir, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "x.jsonl").write_bytes(b"\xef\xbb\xbf" + '{"text": "张三去上海"}\n{"text": "\ufeff上海"}\n'.encode("utf8"))
    (src / "y.txt").write_bytes(b"\xef\xbb\xbf" + "我在北京\n".encode("utf8"))
    summary = annotate(str(pipeline_dir), str(src), str(tmp_path / "out"), progress=False)
    assert summary["skipped"] == 0
    # only the BOM that opens the file goes; a U+FEFF inside a text is kept
    assert [r["text"] for r in read_output(tmp_path / "out" / "x.jsonl")] == ["张三去上海", "\ufeff上海"]
    assert [r["text"] for r in read_output(tmp_path / "out" / "y.jsonl")] == ["我在北京"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray Data's own, on its context
@pytest.mark.parametrize("engine,n_process", [("local", 1), ("local", 2), ("ray", 1)])
def test_a_truncated_gz_shard_is_named_in_one_line(pipeline_dir, tmp_path, request, engine, n_process):
    if engine == "ray":
        request.getfixturevalue("ray_session")
    src = tmp_path / "in"
    write_jsonl(src / "a.jsonl", [{"text": "张三去上海"}])
    data = gzip.compress("".join(json.dumps({"text": "我在北京" * 50, "id": i}) + "\n" for i in range(200)).encode())
    (src / "b.jsonl.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(AnnotateError, match=r"b\.jsonl\.gz: truncated or corrupt gzip file after line \d+"):
        annotate(
            str(pipeline_dir),
            str(src),
            str(tmp_path / "out"),
            on_error="skip",
            n_process=n_process,
            engine=engine,
            progress=False,
        )
    assert sorted(outputs(tmp_path / "out")) == ["a.jsonl"] and not (tmp_path / "out" / "b.jsonl").exists()
    if engine == "ray":
        return
    code, said = run_cli(pipeline_dir, src, tmp_path / "out2", "--on-error", "skip")
    assert code == 1 and "b.jsonl.gz: truncated or corrupt gzip file" in said and "Aborted" not in said


# --- pipelines refused in one line -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def segmenter_only_dir(tmp_path_factory):
    """A pipeline with a word segmenter and no entity tagger."""
    import spacy
    from spacy.training import Example
    from test_annotate import CONFIG
    from thinc.api import Config

    config = Config().from_str(CONFIG)
    config["nlp"]["pipeline"] = ["tok2vec", "segmenter"]
    del config["components"]["crf_ner"], config["components"]["merge"]
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    examples = [
        Example.from_dict(nlp.make_doc("张三去上海"), {"spans": {"words": [(0, 2, ""), (2, 3, ""), (3, 5, "")]}})
    ]
    nlp.initialize(lambda: examples)
    path = tmp_path_factory.mktemp("segmenter_only") / "nlp"
    nlp.to_disk(path)
    return path


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_confidence_without_an_entity_tagger_is_refused_before_any_work(segmenter_only_dir, tmp_path, engine):
    write_jsonl(tmp_path / "x.jsonl", [{"text": "张三去上海"}])
    code, said = run_cli(segmenter_only_dir, tmp_path / "x.jsonl", tmp_path / "out", "--confidence", "--engine", engine)
    assert code == 1 and "--confidence needs an entity tagger" in said and "Traceback" not in said
    assert not (tmp_path / "out").exists()


def test_confidence_finds_a_tagger_made_by_the_crf_ner_factory():
    import spacy

    from spacy_crf.annotate.records import add_confidence, check_confidence, words_key

    listener = {"@architectures": "spacy.Tok2VecListener.v1", "width": 96, "upstream": "*"}
    nlp = spacy.blank("zh")
    nlp.add_pipe("tok2vec")
    for factory in ("crf_segmenter", "crf_ner"):
        nlp.add_pipe(factory, config={"model": {"@architectures": "spacy_crf.CRFTagger.v1", "tok2vec": listener}})
    check_confidence(nlp)
    assert add_confidence(nlp) == "crf_ner" and nlp.pipe_names[-1] == "crf_ent_confidence"
    assert words_key(nlp) == nlp.get_pipe("crf_segmenter").cfg["spans_key"]


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_a_pipeline_with_truncated_weights_is_named_in_one_line(pipeline_dir, tmp_path, engine):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(pipeline_dir, broken)
    weights = broken / "crf_ner" / "model"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    write_jsonl(tmp_path / "x.jsonl", [{"text": "张三去上海"}])
    code, said = run_cli(broken, tmp_path / "x.jsonl", tmp_path / "out", "--engine", engine)
    assert code == 1 and "Traceback" not in said and "Ray" not in said
    assert f"pipeline '{broken}' cannot be loaded" in said and "truncated" in said
    assert not (tmp_path / "out" / "x.jsonl").exists()


# --- signals with --n-process 2 --------------------------------------------------------------------------------------


def _alive_children(pids):
    """The pids that still run (a zombie left to an init that does not reap is not running)."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf8") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            alive.append(pid)
    return alive


def _sigint_as_from_a_terminal():
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _children(pid):
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf8") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return found


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads processes from /proc")
@pytest.mark.parametrize(
    "sig,to_group,code,sort_buffer",
    [("SIGINT", True, 130, 0), ("SIGINT", True, 130, 8), ("SIGINT", False, 130, 8), ("SIGTERM", False, 143, 8)],
)
def test_a_signal_stops_n_process_workers_and_a_rerun_resumes_exactly(
    pipeline_dir, tmp_path, sig, to_group, code, sort_buffer
):
    import random
    import signal
    import subprocess
    import sys
    import time

    rng = random.Random(7)
    chars = "我在北京工作张三去上海今天天气好李四住广州他们的是了人有中国大学生。"
    src, out = tmp_path / "in", tmp_path / "out"
    for k in range(8):
        write_jsonl(
            src / f"s{k}.jsonl",
            [{"text": "".join(rng.choice(chars) for _ in range(200)), "id": f"{k}-{i}"} for i in range(150)],
        )
    cmd = [
        sys.executable,
        "-m",
        "spacy_crf",
        "annotate",
        str(pipeline_dir),
        str(src),
        str(out),
        "--n-process",
        "2",
        "--batch-size",
        "4",
        "--no-progress",
        "--sort-buffer",
        str(sort_buffer),
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # A shell starts a background job (`pytest ... &`, as CI scripts do) with
        # SIGINT ignored, its children inherit that, and annotate rightly leaves an
        # ignored signal ignored (nohup): start the run as a terminal would.
        preexec_fn=_sigint_as_from_a_terminal,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        deadline = time.time() + 180
        while not (out / "s0.jsonl").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        workers = _children(proc.pid)
        assert proc.poll() is None and len(workers) >= 2, "the run ended before the signal"
        if to_group:  # as Ctrl-C sends it
            os.killpg(proc.pid, getattr(signal, sig))
        else:
            proc.send_signal(getattr(signal, sig))
        said = " ".join(proc.communicate(timeout=60)[0].decode().split())
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, said
    assert "Traceback" not in said and "rerun the same command to resume" in said
    time.sleep(0.5)
    assert _alive_children(workers) == []
    assert not (out / "s7.jsonl").exists()  # stopped mid-run
    summary = annotate(str(pipeline_dir), str(src), str(out), progress=False)
    assert summary["shards_resumed"] >= 1
    got = outputs(out)
    assert {name: [r["id"] for r in records] for name, records in got.items()} == {
        f"s{k}.jsonl": [f"{k}-{i}" for i in range(150)] for k in range(8)
    }


# --- very long records -----------------------------------------------------------------------------------------------


def _long_texts():
    import random

    rng = random.Random(5)
    chars = "我在北京工作今天天气好他们的是了人有中国大学生"
    sentences = []
    for _ in range(120):
        body = "".join(rng.choice(chars) for _ in range(rng.randint(10, 60)))
        sentences.append(
            body[:5]
            + rng.choice(["张三去上海", "李四住广州", "我在北京工作"])
            + body[5:]
            + rng.choice(["。", "！", "？”"])
        )
    punctuated = "".join(sentences)
    bare = "".join(rng.choice(chars + "张三上海") for _ in range(3000))  # no sentence end anywhere
    return punctuated, bare


@pytest.mark.parametrize("n_process", [1, 2])
def test_a_long_record_is_annotated_in_pieces_and_written_whole(pipeline_dir, tmp_path, n_process):
    import spacy
    from test_annotate import by_pieces

    punctuated, bare = _long_texts()
    assert len(punctuated) > 3000
    write_jsonl(
        tmp_path / "x.jsonl",
        [{"text": "张三去上海", "id": "short"}, {"text": punctuated, "id": "long"}, {"text": bare, "id": "bare"}],
    )
    summary = annotate(
        str(pipeline_dir),
        str(tmp_path / "x.jsonl"),
        str(tmp_path / "x.out.jsonl"),
        max_chars=500,
        n_process=n_process,
        batch_size=4,
        progress=False,
    )
    records = read_output(tmp_path / "x.out.jsonl")
    assert [r["id"] for r in records] == ["short", "long", "bare"]  # one record each, in order
    assert [r["text"] for r in records] == ["张三去上海", punctuated, bare]
    nlp = spacy.load(pipeline_dir)
    for r in records:
        assert (r["words"], r["ents"]) == by_pieces(nlp, r["text"], 500)
    assert any(r["ents"] for r in records[1:])
    # every word and entity lies inside the text, in order, and none overlaps another
    for r in records:
        for key in ("words", "ents"):
            spans = [(s, e) for s, e in r[key]] if key == "words" else [(e["start"], e["end"]) for e in r[key]]
            assert all(0 <= s < e <= len(r["text"]) for s, e in spans)
            assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))
    assert summary["records_split"] == 2
    assert summary["cuts"]["sentence"] >= len(punctuated) // 500 and "hard" not in summary["cuts"]


def test_a_long_record_in_a_docbin_keeps_its_text_entities_and_confidences(pipeline_dir, tmp_path):
    import spacy
    from spacy.tokens import DocBin
    from test_annotate import by_pieces

    from spacy_crf.corpora.split import split_long

    punctuated, _ = _long_texts()
    write_jsonl(tmp_path / "x.jsonl", [{"text": punctuated}])
    annotate(
        str(pipeline_dir),
        str(tmp_path / "x.jsonl"),
        str(tmp_path / "x.spacy"),
        max_chars=700,
        confidence=True,
        progress=False,
    )
    nlp = spacy.load(pipeline_dir)
    (doc,) = DocBin().from_disk(tmp_path / "x.spacy").get_docs(nlp.vocab)
    assert doc.text == punctuated
    _, want_ents = by_pieces(nlp, punctuated, 700)
    pieces = [p.text for p in split_long(nlp.tokenizer(punctuated), 700)]
    want_tokens, offset = [], 0
    for piece in nlp.pipe(pieces):
        want_tokens += [(t.idx + offset, t.idx + offset + len(t)) for t in piece]
        offset += len(piece.text)
    assert [(t.idx, t.idx + len(t)) for t in doc] == want_tokens
    assert [{"start": e.start_char, "end": e.end_char, "label": e.label_} for e in doc.ents] == want_ents
    confidences = doc.user_data["crf_ent_confidence"]
    assert [(s, e, label) for s, e, label, _ in confidences] == [(e["start"], e["end"], e["label"]) for e in want_ents]


def test_a_token_longer_than_max_chars_is_cut_at_the_bound():
    from collections import Counter

    import spacy

    from spacy_crf.annotate.pieces import piece_bounds

    cuts = Counter()
    nlp = spacy.blank("en")
    assert piece_bounds(nlp, "x" * 50, 20, cuts) == [(0, 20), (20, 40), (40, 50)]
    assert cuts == {"inside_token": 2}
    assert piece_bounds(nlp, "short", 20) == [(0, 5)]


def test_max_chars_out_of_range_is_refused_before_any_work(pipeline_dir, tmp_path):
    write_jsonl(tmp_path / "x.jsonl", [{"text": "张三去上海"}])
    with pytest.raises(AnnotateError, match="^max_chars must be >= 1"):
        annotate(str(pipeline_dir), str(tmp_path / "x.jsonl"), str(tmp_path / "out"), max_chars=0, progress=False)
    code, said = run_cli(pipeline_dir, tmp_path / "x.jsonl", tmp_path / "out", "--max-chars", "-3")
    assert code == 2 and "--max-chars" in said and "Traceback" not in said
    assert not (tmp_path / "out").exists()


def test_the_command_says_how_long_records_were_cut(pipeline_dir, tmp_path):
    punctuated, _ = _long_texts()
    write_jsonl(tmp_path / "x.jsonl", [{"text": punctuated}])
    code, said = run_cli(pipeline_dir, tmp_path / "x.jsonl", tmp_path / "out", "--max-chars", "1000")
    assert code == 0, said
    assert "1 records longer than 1,000 characters were annotated in pieces" in said and "sentence" in said


def test_a_record_over_the_pipelines_max_length_is_cut_to_it(pipeline_dir, tmp_path):
    import spacy

    punctuated, _ = _long_texts()
    nlp = spacy.load(pipeline_dir)
    nlp.max_length = 300  # nlp.pipe refuses a longer text (spaCy's E088)
    write_jsonl(tmp_path / "x.jsonl", [{"text": punctuated}])
    summary = annotate(nlp, str(tmp_path / "x.jsonl"), str(tmp_path / "x.out.jsonl"), progress=False)
    assert read_output(tmp_path / "x.out.jsonl")[0]["text"] == punctuated
    assert summary["records_split"] == 1 and sum(summary["cuts"].values()) >= len(punctuated) // 300


def test_a_truncated_parquet_shard_is_named_in_one_line(pipeline_dir, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["张三去上海"] * 100}), tmp_path / "x.parquet")
    data = (tmp_path / "x.parquet").read_bytes()
    (tmp_path / "x.parquet").write_bytes(data[: len(data) // 2])
    code, said = run_cli(pipeline_dir, tmp_path / "x.parquet", tmp_path / "out")
    assert code == 1 and "x.parquet: truncated or corrupt Parquet file" in said and "Traceback" not in said


def test_an_ignored_sigint_stays_ignored_and_the_default_one_is_restored_after():
    # nohup and a shell's background jobs start annotate with SIGINT ignored: the
    # run must not start stopping on it (that is why the signal test above resets it)
    import signal

    from spacy_crf.annotate.engines import workers_stop_on_signal

    before = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with workers_stop_on_signal():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with workers_stop_on_signal():
            assert signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, signal.default_int_handler)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_workers_forked_during_a_run_die_of_a_signal_by_its_default_action():
    # A Python handler runs only when the worker's main thread is back in the
    # interpreter: a worker stuck in native code would outlive SIGTERM, and
    # nlp.pipe would join it forever. Forked during a run, a worker has the
    # default actions; forked outside one, a child keeps what it inherits.
    import signal

    from spacy_crf.annotate.engines import workers_stop_on_signal

    def child_handlers():
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report its handlers and leave at once
            os.close(read)
            got = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)]
            os.write(write, ",".join("default" if h is signal.SIG_DFL else "other" for h in got).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as f:
            said = f.read()
        os.waitpid(pid, 0)
        return said

    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        # as a process starts (other tests or libraries may have left handlers)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with workers_stop_on_signal():
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # the run's own handler, here
            assert child_handlers() == "default,default"
            with workers_stop_on_signal():  # nested: the outer run's handler is the one installed
                assert child_handlers() == "default,default"
            assert child_handlers() == "default,default"
        assert child_handlers() == "other,default"  # Python's KeyboardInterrupt handler, inherited
        # someone else's handler is theirs, in the workers too
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with workers_stop_on_signal():
            assert child_handlers() == "default,other"
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
