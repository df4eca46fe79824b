"""spacy_crf.util: the output rules every command follows (no output over an
input or another output, atomic files and directories) and numeric checks."""

import os

import numpy
import pytest

from spacy_crf.files import (
    OutputPathError,
    atomic_dir,
    atomic_path,
    check_output_dir,
    check_output_paths,
    write_json_atomic,
    write_text_atomic,
)
from spacy_crf.util import RowBlocks, check_number, flat_rows, joined_rows, matmul, run_offsets, split_rows


def test_check_output_paths_sees_through_relative_paths_dotdot_and_links(tmp_path, monkeypatch):
    src = tmp_path / "data" / "train.txt"
    src.parent.mkdir()
    src.write_text("x", encoding="utf8")
    monkeypatch.chdir(tmp_path)
    same = [src, "data/train.txt", tmp_path / "data" / ".." / "data" / "train.txt"]
    (tmp_path / "link.txt").symlink_to(src)
    same.append(tmp_path / "link.txt")
    os.link(src, tmp_path / "hard.txt")
    same.append(tmp_path / "hard.txt")
    for out in same:
        with pytest.raises(OutputPathError, match="overwrite the input"):
            check_output_paths([src], [out])
    # two outputs that are one file, even when neither exists yet
    with pytest.raises(OutputPathError, match="also the output"):
        check_output_paths([src], ["out/a.spacy", tmp_path / "out" / "." / "a.spacy"])
    check_output_paths([src, None], ["out/a.spacy", "out/b.spacy", None])
    with pytest.raises(OutputPathError, match="directory"):
        check_output_paths([src], [tmp_path / "data"])
    with pytest.raises(OutputPathError, match="train.txt is not a directory"):
        check_output_paths([], [src / "sub" / "out.json"])


def test_check_output_paths_an_output_dir_may_not_hold_an_input(tmp_path):
    model = tmp_path / "training" / "model-best"
    model.mkdir(parents=True)
    for out in (model, tmp_path / "training", tmp_path):
        with pytest.raises(OutputPathError, match="overwrite the input"):
            check_output_paths([model], [], output_dirs=[out])
    check_output_paths([model], [], output_dirs=[tmp_path / "pipeline"])
    # nothing is written into an input directory either (a model's meta.json, a new file)
    for out in (model / "meta.json", model / "new" / "x.json"):
        with pytest.raises(OutputPathError, match="inside the input directory"):
            check_output_paths([model], [out])
    with pytest.raises(OutputPathError, match="inside the input directory"):
        check_output_paths([model], [], output_dirs=[model / "pipeline"])
    with pytest.raises(OutputPathError, match="also the output"):
        check_output_paths([], [tmp_path / "pipeline" / "x.json"], output_dirs=[tmp_path / "pipeline"])


def test_atomic_path_replaces_only_on_success(tmp_path):
    out = tmp_path / "sub" / "out.txt"
    with atomic_path(out) as tmp:
        assert tmp.parent == out.parent and tmp != out
        tmp.write_text("one", encoding="utf8")
        assert not out.exists()
    assert out.read_text(encoding="utf8") == "one"
    with pytest.raises(RuntimeError):
        with atomic_path(out) as tmp:
            tmp.write_text("half", encoding="utf8")
            raise RuntimeError("interrupted")
    assert out.read_text(encoding="utf8") == "one"
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.txt"]  # no temp file left
    write_json_atomic(out, {"a": "北京"})
    assert out.read_text(encoding="utf8") == '{\n  "a": "北京"\n}\n'
    write_text_atomic(out, "two")
    assert out.read_text(encoding="utf8") == "two"


def test_atomic_dir_swaps_a_whole_directory(tmp_path):
    out = tmp_path / "model"
    with atomic_dir(out) as tmp:
        (tmp / "a").write_text("1")
        assert not out.exists()
    assert sorted(p.name for p in out.iterdir()) == ["a"]
    with pytest.raises(RuntimeError):
        with atomic_dir(out) as tmp:
            (tmp / "b").write_text("2")
            raise RuntimeError("interrupted")
    assert sorted(p.name for p in out.iterdir()) == ["a"]
    with atomic_dir(out) as tmp:
        (tmp / "c").write_text("3")
    assert sorted(p.name for p in out.iterdir()) == ["c"]  # replaced, no stale file kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_check_output_dir(tmp_path):
    check_output_dir(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    check_output_dir(tmp_path / "empty")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    with pytest.raises(OutputPathError, match="not empty"):
        check_output_dir(tmp_path / "full", marker="meta.json")
    check_output_dir(tmp_path / "full", force=True)
    (tmp_path / "full" / "meta.json").write_text("{}")
    check_output_dir(tmp_path / "full", marker="meta.json")
    with pytest.raises(OutputPathError, match="not a directory"):
        check_output_dir(tmp_path / "full" / "notes.txt", force=True)


@pytest.mark.parametrize("value", [-1, float("nan"), 1.0, "3", True])
def test_check_number_rejects(value):
    with pytest.raises(ValueError, match="--dev-ratio must be >= 0 and < 1, got"):
        check_number("--dev-ratio", value, minimum=0, maximum=1, max_open=True)


def test_check_number_accepts():
    check_number("--dev-ratio", 0.0, minimum=0, maximum=1, max_open=True)
    check_number("--limit", 0, minimum=0)


def test_run_offsets_counts_within_each_run_and_skips_empty_runs():
    lengths = numpy.array([3, 0, 2, 1, 0])
    expected = [i for n in lengths.tolist() for i in range(n)]
    assert run_offsets(lengths).tolist() == expected == [0, 1, 2, 0, 1, 0]
    assert run_offsets(numpy.zeros(0, dtype=int)).tolist() == []
    assert run_offsets(numpy.zeros(3, dtype=int)).tolist() == []


def test_joined_rows_reads_unflattened_blocks_without_copying():
    from thinc.api import NumpyOps

    ops = NumpyOps()
    X = numpy.arange(24, dtype="float32").reshape(12, 2)
    blocks = ops.unflatten(X, [3, 0, 5, 4])
    joined = joined_rows(blocks)
    assert numpy.array_equal(joined, X) and numpy.shares_memory(joined, X)
    assert not joined.flags.writeable
    assert numpy.array_equal(joined_rows(blocks[:3]), X[:8])
    inner = X[2:]  # a view of a view: still one buffer
    assert numpy.array_equal(joined_rows(ops.unflatten(inner, [6, 4])), inner)


def test_split_rows_is_unflatten_and_hands_its_array_back():
    from thinc.api import NumpyOps

    ops = NumpyOps()
    X = numpy.arange(24, dtype="float32").reshape(12, 2)
    blocks = split_rows(ops, X, [3, 0, 5, 4])
    assert isinstance(blocks, RowBlocks)
    assert [b.tolist() for b in blocks] == [b.tolist() for b in ops.unflatten(X, [3, 0, 5, 4])]
    assert all(numpy.shares_memory(b, X) for b in blocks if len(b))
    flat = flat_rows(ops, blocks)
    assert numpy.array_equal(flat, X) and numpy.shares_memory(flat, X) and not flat.flags.writeable
    assert split_rows(ops, X[:0], []) == [] and flat_rows(ops, split_rows(ops, X[:0], [0])).shape == (0, 2)
    with pytest.raises(ValueError, match="sum to 11"):
        split_rows(ops, X, [3, 8])


@pytest.mark.parametrize(
    "change",
    [
        lambda b, new: b.__setitem__(0, new),
        lambda b, new: b.__delitem__(1),
        lambda b, new: b.append(new),
        lambda b, new: b.extend([new]),
        lambda b, new: b.insert(0, new),
        lambda b, new: b.pop(),
        lambda b, new: b.remove(b[0]),
        lambda b, new: b.reverse(),
        lambda b, new: b.sort(key=len),
        lambda b, new: b.clear(),
        lambda b, new: b.__iadd__([new]),
        lambda b, new: b.__imul__(2),
    ],
)
def test_a_changed_row_blocks_list_is_flattened_from_its_blocks(change):
    """Any change to the list drops the kept array: flat_rows then reads the blocks."""
    from thinc.api import NumpyOps

    ops = NumpyOps()
    X = numpy.arange(24, dtype="float32").reshape(12, 2)
    blocks = split_rows(ops, X, [3, 5, 4])
    change(blocks, numpy.full((2, 2), -1.0, dtype="float32"))
    assert blocks.flat is None
    expected = numpy.concatenate(list(blocks)) if len(blocks) else numpy.zeros((0, 2), dtype="float32")
    assert numpy.array_equal(flat_rows(ops, blocks).reshape(-1, 2), expected)


@pytest.mark.parametrize(
    "case",
    ["copies", "reordered", "gap", "columns", "two buffers", "dtype", "empty", "1-d"],
)
def test_joined_rows_is_none_unless_the_blocks_are_one_buffer_in_order(case):
    X = numpy.arange(24, dtype="float32").reshape(12, 2)
    blocks = {
        "copies": [X[:4].copy(), X[4:].copy()],
        "reordered": [X[4:], X[:4]],
        "gap": [X[:4], X[5:]],
        "columns": [X[:4, :1], X[4:, :1]],
        "two buffers": [X[:4], numpy.arange(16, dtype="float32").reshape(8, 2)[:8]],
        "dtype": [X[:4], X.view("int32")[4:]],
        "empty": [],
        "1-d": [X.reshape(-1)[:4], X.reshape(-1)[4:]],
    }[case]
    assert joined_rows(blocks) is None


@pytest.mark.parametrize("trans1,trans2", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_is_thincs_gemm(trans1, trans2):
    from thinc.api import NumpyOps

    ops = NumpyOps()
    rng = numpy.random.default_rng(0)
    A = rng.standard_normal((7, 5) if trans1 else (5, 7)).astype("float32")
    B = rng.standard_normal((3, 7) if trans2 else (7, 3)).astype("float32")
    expected = ops.gemm(A, B, trans1=trans1, trans2=trans2)
    got = matmul(ops, A, B, trans1=trans1, trans2=trans2)
    assert got.shape == expected.shape == (5, 3) and got.dtype == numpy.float32
    numpy.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_one_blas_thread_limits_numpys_blas_inside_and_restores_after():
    from threadpoolctl import threadpool_info, threadpool_limits

    from spacy_crf.util import one_blas_thread

    def blas_threads():  # numpy's own (other packages may load a BLAS of their own later)
        return [
            lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas" and "numpy" in lib["filepath"]
        ]

    if not blas_threads():  # pragma: no cover (a numpy whose BLAS is not in its wheel)
        pytest.skip("numpy's BLAS library not found")
    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        with one_blas_thread():
            assert set(blas_threads()) == {1}
            with one_blas_thread():  # nested: still one, and the outer block's end restores
                assert set(blas_threads()) == {1}
            assert set(blas_threads()) == {1}
        assert blas_threads() == before
        with pytest.raises(RuntimeError):
            with one_blas_thread():
                raise RuntimeError("inside")
        assert blas_threads() == before


def test_matmul_works_where_threadpoolctl_cannot_inspect_the_process(monkeypatch):
    import threadpoolctl
    from thinc.api import NumpyOps

    from spacy_crf import util

    def broken(*args, **kwargs):
        raise OSError("no dl_iterate_phdr here")

    monkeypatch.setattr(threadpoolctl, "ThreadpoolController", broken)
    monkeypatch.setitem(util._blas_state, "libraries", None)
    A = numpy.arange(6, dtype="float32").reshape(2, 3)
    numpy.testing.assert_array_equal(util.matmul(NumpyOps(), A, A, trans2=True), A @ A.T)
    assert util._blas_state["libraries"] == [] and util._blas_state["depth"] == 0
