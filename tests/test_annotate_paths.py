"""spacy_crf.annotate: what it may overwrite, what a resume trusts, which
options and shards it refuses before any work, and a Ray actor killed mid-run."""

import json
import os

import pytest
from test_annotate import TEXTS, outputs, pipeline_dir, write_jsonl  # noqa: F401  (pipeline_dir: a fixture)
from typer.testing import CliRunner

from spacy_crf.annotate import AnnotateError, annotate, read_output
from spacy_crf.annotate import engines as engines_module
from spacy_crf.annotate import ray_engine as ray_engine_module
from spacy_crf.cli import app

RECORDS = [{"text": t, "id": f"r{i}"} for i, t in enumerate(TEXTS[:4])]


@pytest.fixture
def no_engine(monkeypatch):
    """Fail the test if an engine is started: the checks must come first."""

    def refuse(*args, **kwargs):
        raise AssertionError("the engine was started before the paths and options were checked")
        yield  # pragma: no cover

    for name in ("local", "ray"):
        monkeypatch.setitem(engines_module.ENGINES, name, refuse)


def run_cli(*args):
    result = CliRunner().invoke(app, ["annotate", *map(str, args), "--no-progress"])
    return result.exit_code, " ".join(result.output.split())


# --- item 1: an output is never an input -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "how", ["same", "dotdot", "symlink", "hardlink", "folder_is_input_folder", "folder_holds_input"]
)
def test_an_output_that_is_the_input_is_refused_and_the_input_kept(pipeline_dir, tmp_path, monkeypatch, no_engine, how):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "d"
    write_jsonl(data / "in.jsonl", RECORDS)
    (data / "sub").mkdir()
    before = (data / "in.jsonl").read_bytes()
    input_path, output = {
        "same": ("d/in.jsonl", "d/in.jsonl"),
        "dotdot": ("d/in.jsonl", "d/sub/../in.jsonl"),
        "symlink": ("d/in.jsonl", "link.jsonl"),
        "hardlink": ("d/in.jsonl", "hard.jsonl"),
        "folder_is_input_folder": ("d", "d"),
        "folder_holds_input": ("d/in.jsonl", "d"),
    }[how]
    if how == "symlink":
        os.symlink(data / "in.jsonl", tmp_path / "link.jsonl")
    if how == "hardlink":
        os.link(data / "in.jsonl", tmp_path / "hard.jsonl")
    with pytest.raises(AnnotateError, match=r"would overwrite the input .*in\.jsonl"):
        annotate(str(pipeline_dir), input_path, output, progress=False)
    assert (data / "in.jsonl").read_bytes() == before


def test_a_users_shard_inside_the_output_folder_is_neither_dropped_nor_overwritten(pipeline_dir, tmp_path, no_engine):
    write_jsonl(tmp_path / "in" / "x.jsonl", RECORDS)
    write_jsonl(tmp_path / "in" / "out" / "x.jsonl", [{"text": "我的文件"}])  # an input, where x's output would go
    before = (tmp_path / "in" / "out" / "x.jsonl").read_bytes()
    with pytest.raises(AnnotateError, match=r"would overwrite the input .*out.x\.jsonl"):
        annotate(str(pipeline_dir), str(tmp_path / "in"), str(tmp_path / "in" / "out"), progress=False)
    assert (tmp_path / "in" / "out" / "x.jsonl").read_bytes() == before


def test_the_command_refuses_output_equal_to_input_in_one_line(pipeline_dir, tmp_path):
    write_jsonl(tmp_path / "in.jsonl", RECORDS)
    before = (tmp_path / "in.jsonl").read_bytes()
    code, said = run_cli(pipeline_dir, tmp_path / "in.jsonl", tmp_path / "in.jsonl")
    assert code == 1 and "would overwrite the input" in said and "Traceback" not in said
    assert (tmp_path / "in.jsonl").read_bytes() == before


# --- item 2: only annotate's own files are overwritten, unless --force ----------------------------------------------


def test_an_existing_file_annotate_did_not_write_is_kept_unless_force(pipeline_dir, tmp_path):
    write_jsonl(tmp_path / "in.jsonl", RECORDS)
    notes = tmp_path / "notes.jsonl"
    notes.write_text("notes\n", encoding="utf8")
    with pytest.raises(AnnotateError, match=r"notes\.jsonl exists and annotate did not write it.*--force"):
        annotate(str(pipeline_dir), str(tmp_path / "in.jsonl"), str(notes), progress=False)
    assert notes.read_text(encoding="utf8") == "notes\n"
    annotate(str(pipeline_dir), str(tmp_path / "in.jsonl"), str(notes), force=True, progress=False)
    assert [r["id"] for r in read_output(notes)] == ["r0", "r1", "r2", "r3"]
    # now it is annotate's own: a rerun from scratch may replace it, an edit makes it the user's again
    annotate(str(pipeline_dir), str(tmp_path / "in.jsonl"), str(notes), resume=False, progress=False)
    with open(notes, "a", encoding="utf8") as f:
        f.write('{"my": "edit"}\n')
    with pytest.raises(AnnotateError, match="did not write it"):
        annotate(str(pipeline_dir), str(tmp_path / "in.jsonl"), str(notes), resume=False, progress=False)
    assert read_output(notes)[-1] == {"my": "edit"}


def test_a_users_file_in_the_output_folder_stops_the_run_before_any_shard(pipeline_dir, tmp_path):
    for name in ("a", "b"):
        write_jsonl(tmp_path / "in" / f"{name}.jsonl", RECORDS)
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "b.jsonl").write_text("mine\n", encoding="utf8")  # where b's output would go
    (out / "notes.txt").write_text("also mine\n", encoding="utf8")  # no output goes there: left alone
    with pytest.raises(AnnotateError, match=r"b\.jsonl exists and annotate did not write it"):
        annotate(str(pipeline_dir), str(tmp_path / "in"), str(out), progress=False)
    assert not (out / "a.jsonl").exists()  # refused before any work, not after shard a
    assert (out / "b.jsonl").read_text(encoding="utf8") == "mine\n"
    summary = annotate(str(pipeline_dir), str(tmp_path / "in"), str(out), force=True, progress=False)
    assert summary["shards_written"] == 2 and len(read_output(out / "b.jsonl")) == len(RECORDS)
    assert (out / "notes.txt").read_text(encoding="utf8") == "also mine\n"


def test_a_users_errors_file_in_the_output_folder_is_kept(pipeline_dir, tmp_path):
    write_jsonl(tmp_path / "in" / "x.jsonl", RECORDS)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "errors.jsonl").write_text("my error log\n", encoding="utf8")
    with pytest.raises(AnnotateError, match=r"errors\.jsonl exists and annotate did not write it"):
        annotate(str(pipeline_dir), str(tmp_path / "in"), str(tmp_path / "out"), progress=False)
    assert (tmp_path / "out" / "errors.jsonl").read_text(encoding="utf8") == "my error log\n"
    # its own errors file is rewritten and removed as the errors change
    write_jsonl(tmp_path / "in2" / "x.jsonl", None, lines=['{"text": "张三"}', "{oops"])
    annotate(str(pipeline_dir), str(tmp_path / "in2"), str(tmp_path / "out2"), on_error="skip", progress=False)
    assert (tmp_path / "out2" / "errors.jsonl").exists()
    write_jsonl(tmp_path / "in2" / "x.jsonl", None, lines=['{"text": "张三"}'])
    annotate(str(pipeline_dir), str(tmp_path / "in2"), str(tmp_path / "out2"), on_error="skip", progress=False)
    assert not (tmp_path / "out2" / "errors.jsonl").exists()


def test_the_command_has_force(pipeline_dir, tmp_path):
    write_jsonl(tmp_path / "in.jsonl", RECORDS)
    (tmp_path / "notes.jsonl").write_text("notes\n", encoding="utf8")
    code, said = run_cli(pipeline_dir, tmp_path / "in.jsonl", tmp_path / "notes.jsonl")
    assert code == 1 and "annotate did not write it" in said and "--force" in said
    code, said = run_cli(pipeline_dir, tmp_path / "in.jsonl", tmp_path / "notes.jsonl", "--force")
    assert code == 0, said
    assert len(read_output(tmp_path / "notes.jsonl")) == len(RECORDS)


# --- item 3: a resume redoes a shard whose input changed --------------------------------------------------------------


def test_a_resume_redoes_a_shard_whose_input_changed(pipeline_dir, tmp_path):
    src, out = tmp_path / "in", tmp_path / "out"
    write_jsonl(src / "a.jsonl", RECORDS[:2])
    write_jsonl(src / "b.jsonl", RECORDS[2:])
    annotate(str(pipeline_dir), str(src), str(out), progress=False)
    with open(src / "a.jsonl", "a", encoding="utf8") as f:  # one record appended
        f.write(json.dumps({"text": "他们是中国大学生", "id": "new"}, ensure_ascii=False) + "\n")
    summary = annotate(str(pipeline_dir), str(src), str(out), progress=False)
    assert [r["id"] for r in read_output(out / "a.jsonl")] == ["r0", "r1", "new"]
    assert summary["shards_written"] == 1 and summary["shards_resumed"] == 1
    assert [(os.path.basename(r["shard"]), "changed" in r["reason"]) for r in summary["redone"]] == [("a.jsonl", True)]
    # same size, same modification time, other content: still seen
    stat = (src / "b.jsonl").stat()
    text = (src / "b.jsonl").read_text(encoding="utf8")
    (src / "b.jsonl").write_text(text.replace('"r2"', '"x2"'), encoding="utf8")
    os.utime(src / "b.jsonl", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    summary = annotate(str(pipeline_dir), str(src), str(out), progress=False)
    assert [r["id"] for r in read_output(out / "b.jsonl")] == ["x2", "r3"]
    assert [r["reason"] for r in summary["redone"]] == [
        "its input changed since it was annotated (same size, different SHA-256)"
    ]
    again = annotate(str(pipeline_dir), str(src), str(out), progress=False)
    assert again["shards_resumed"] == 2 and again["redone"] == [] and again["docs"] == 0


def test_the_command_says_which_shard_it_redid_and_why(pipeline_dir, tmp_path):
    write_jsonl(tmp_path / "in.jsonl", RECORDS[:2])
    assert run_cli(pipeline_dir, tmp_path / "in.jsonl", tmp_path / "out.jsonl")[0] == 0
    write_jsonl(tmp_path / "in.jsonl", RECORDS[:3])
    code, said = run_cli(pipeline_dir, tmp_path / "in.jsonl", tmp_path / "out.jsonl")
    assert code == 0 and "redid" in said and "in.jsonl: its input changed" in said
    assert "1 written, 0 already complete" in said
    assert len(read_output(tmp_path / "out.jsonl")) == 3


@pytest.mark.parametrize("how", ["edited", "halved"])
def test_a_resume_refuses_a_finished_output_that_changed_and_redoes_a_missing_one(pipeline_dir, tmp_path, how):
    src, out = tmp_path / "in", tmp_path / "out"
    write_jsonl(src / "a.jsonl", RECORDS[:2])
    write_jsonl(src / "b.jsonl", RECORDS)
    annotate(str(pipeline_dir), str(src), str(out), progress=False)
    path = out / "b.jsonl"
    text = path.read_text(encoding="utf8")
    if how == "edited":  # same size, other bytes
        changed = text.replace('"r1"', '"x1"')
        what = "same size, different SHA-256"
    else:  # cut to half its records
        changed = "".join(text.splitlines(keepends=True)[:2])
        what = f"{len(text.encode())} bytes when annotate wrote it, {len(changed.encode())} now"
    assert changed != text
    path.write_text(changed, encoding="utf8")
    code, said = run_cli(pipeline_dir, src, out)  # was: exit 0, "2 already complete", records still missing
    assert code == 1 and "already complete" not in said, said
    with pytest.raises(AnnotateError) as err:
        annotate(str(pipeline_dir), str(src), str(out), progress=False)
    said = str(err.value)
    assert "\n" not in said and said.startswith(f"{path}: ") and what in said and "--force" in said, said
    assert path.read_text(encoding="utf8") == changed  # refused: left as it is
    summary = annotate(str(pipeline_dir), str(src), str(out), force=True, progress=False)
    assert [r["id"] for r in read_output(path)] == ["r0", "r1", "r2", "r3"]
    assert summary["shards_written"] == 1 and summary["shards_resumed"] == 1
    assert [(os.path.basename(r["shard"]), "output" in r["reason"]) for r in summary["redone"]] == [("b.jsonl", True)]
    # an output that is gone is redone, and the resume after it trusts the new one
    path.unlink()
    summary = annotate(str(pipeline_dir), str(src), str(out), progress=False)
    assert [r["id"] for r in read_output(path)] == ["r0", "r1", "r2", "r3"]
    assert summary["shards_written"] == 1 and [r["reason"] for r in summary["redone"]] == ["its output is missing"]
    again = annotate(str(pipeline_dir), str(src), str(out), progress=False)
    assert again["shards_resumed"] == 2 and again["docs"] == 0 and again["redone"] == []


# --- item 6: options refused before any work --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "option,value",
    [
        ("workers", 0),
        ("batch_size", 0),
        ("batch_size", -5),
        ("n_process", 0),
        ("n_process", -1),
        ("threads", 0),
        ("threads", -2),
        ("cpus_per_worker", -1.0),
        ("gpus_per_worker", -0.5),
        ("workers", 1.5),
    ],
)
def test_an_option_out_of_range_is_refused_before_the_engine_starts(pipeline_dir, tmp_path, no_engine, option, value):
    write_jsonl(tmp_path / "in.jsonl", RECORDS)
    with pytest.raises(AnnotateError, match=rf"^{option} must be"):
        annotate(
            str(pipeline_dir),
            str(tmp_path / "in.jsonl"),
            str(tmp_path / "out"),
            engine="ray",
            progress=False,
            **{option: value},
        )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "option,value",
    [
        ("--workers", "0"),
        ("--batch-size", "-5"),
        ("--n-process", "-1"),
        ("--threads", "0"),
        ("--cpus-per-worker", "-1"),
        ("--gpus-per-worker", "-1"),
    ],
)
def test_the_command_names_the_option_out_of_range(pipeline_dir, tmp_path, no_engine, option, value):
    write_jsonl(tmp_path / "in.jsonl", RECORDS)
    code, said = run_cli(pipeline_dir, tmp_path / "in.jsonl", tmp_path / "out", "--engine", "ray", option, value)
    assert code == 2 and option in said and "Traceback" not in said


# --- Ray: a shard that cannot be read, and an actor killed mid-run ---------------------------------------------------


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Ray Data's own, on its context
def test_ray_names_a_non_utf8_shard_as_local_does_and_keeps_the_shards_before(ray_session, pipeline_dir, tmp_path):
    src = tmp_path / "in"
    write_jsonl(src / "a.jsonl", RECORDS)
    write_jsonl(src / "b.jsonl", RECORDS)
    (src / "c.jsonl").write_bytes(b'{"text": "\xe5\xbc\xa0"}\n{"text": "\xff\xfe"}\n')
    said = {}
    for engine in ("local", "ray"):
        out = tmp_path / engine
        with pytest.raises(AnnotateError) as err:
            annotate(str(pipeline_dir), str(src), str(out), engine=engine, batch_size=2, progress=False)
        said[engine] = str(err.value)
        assert sorted(outputs(out)) == ["a.jsonl", "b.jsonl"]  # the good shards before it are committed
    assert said["ray"] == said["local"]
    assert "c.jsonl" in said["ray"] and "\n" not in said["ray"] and "Ray" not in said["ray"]


def _dead(pid: int) -> bool:
    """Whether process ``pid`` has ended: gone, or a zombie that its parent
    (Ray's raylet, for a worker killed from outside) has not reaped yet."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="utf8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return os.path.isdir("/proc")  # gone in between (where /proc lists the processes)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize(
    "how",
    [
        "ray.kill",
        # the worker process killed from outside, as the kernel's OOM killer or `kill -9` would
        pytest.param("SIGKILL", marks=pytest.mark.slow),
    ],
)
def test_ray_gives_every_record_once_in_order_when_an_actor_is_killed(
    ray_session, pipeline_dir, tmp_path, monkeypatch, how
):
    import signal
    import threading
    import time

    src = tmp_path / "in"
    for k in range(3):
        write_jsonl(src / f"s{k}.jsonl", [{"text": t, "id": f"{k}-{i}"} for i, t in enumerate(TEXTS)])
    killed = tmp_path / "killed"

    class KilledOnce(ray_engine_module.RayAnnotator):
        """During its first chunk of the second shard, once per run, kills its
        own actor (ray.kill, as a lost node would), or waits for this test to
        kill its process (SIGKILL)."""

        def __call__(self, batch):
            import ray

            shard = batch.column("rows").to_pylist()[0][0]["shard"]
            if shard == 1 and not killed.exists():
                (tmp_path / "pid").write_text(str(os.getpid()), encoding="utf8")
                os.replace(tmp_path / "pid", killed)  # whole, for the test's thread to read
                if how == "ray.kill":
                    ray.kill(ray.get_runtime_context().current_actor, no_restart=False)
                time.sleep(300)  # killed while this chunk is in flight (long before this ends)
            return super().__call__(batch)

    sent = []
    run_over = threading.Event()

    def kill_the_worker():
        """SIGKILL the worker process that says it holds a chunk of shard 1
        (however long a busy machine takes to get there)."""
        while not killed.exists():
            if run_over.wait(0.05):
                return
        os.kill(int(killed.read_text(encoding="utf8")), signal.SIGKILL)
        sent.append(True)

    monkeypatch.setattr(ray_engine_module, "RayAnnotator", KilledOnce)
    killer = threading.Thread(target=kill_the_worker, daemon=True) if how == "SIGKILL" else None
    # Only map_batches' named, undeprecated parameters: **ray_remote_args (where
    # max_restarts went) and concurrency are deprecated in Ray 2.60 and removed
    # in 2.64, so the restart below must come from Ray's own defaults.
    import inspect

    import ray.data

    map_batches = ray.data.Dataset.map_batches
    named = set(inspect.signature(map_batches).parameters) - {"self", "fn", "ray_remote_args", "concurrency"}
    named.discard("ray_remote_args_fn")
    passed = []

    def recording_map_batches(self, fn, **kwargs):
        passed.append(set(kwargs))
        return map_batches(self, fn, **kwargs)

    monkeypatch.setattr(ray.data.Dataset, "map_batches", recording_map_batches)
    if killer is not None:
        killer.start()
    try:
        summary = annotate(
            str(pipeline_dir), str(src), str(tmp_path / "out"), engine="ray", workers=2, batch_size=2, progress=False
        )
    finally:
        run_over.set()
    if killer is not None:
        killer.join(5)
        assert sent == [True]
    pid = int(killed.read_text(encoding="utf8"))
    assert _dead(pid)  # that actor's process is gone: its chunk was redone elsewhere
    got = outputs(tmp_path / "out")
    assert {name: [r["id"] for r in records] for name, records in got.items()} == {
        f"s{k}.jsonl": [f"{k}-{i}" for i in range(len(TEXTS))] for k in range(3)
    }
    assert summary["docs"] == 3 * len(TEXTS) and summary["shards_written"] == 3
    assert len(passed) == 2 and all(kwargs <= named for kwargs in passed), passed
