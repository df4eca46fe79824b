"""project/crf_project/train.py: the recipe of a run, and --reuse copying a finished
run with the same recipe instead of training again."""

import subprocess
import sys
from pathlib import Path

import pytest
import srsly

from crf_project import paths, train


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "joint.cfg").write_text("[training]\nmax_steps = 10\n", encoding="utf8")
    (tmp_path / "train.spacy").write_bytes(b"corpus v1")
    (tmp_path / "enc").mkdir()
    (tmp_path / "enc" / "config.json").write_text('{"num_hidden_layers": 3}', encoding="utf8")
    return tmp_path


def argv(output, *extra):
    return [
        "train.py",
        "joint.cfg",
        output,
        "--encoder",
        "enc",
        "--paths.train",
        "train.spacy",
        "--training.max_steps",
        "10",
        *extra,
    ]


def run_main(monkeypatch, args):
    calls = []

    def fake_spacy_train(cmd, env):
        calls.append(cmd)
        out = cmd[cmd.index("--output") + 1]
        (train.Path(out) / "model-best").mkdir(parents=True)

    monkeypatch.setattr(train, "spacy_train", fake_spacy_train)
    monkeypatch.setattr(sys, "argv", args)
    train.main()
    return calls


def test_the_recipe_ignores_the_output_but_not_file_contents(inputs):
    first = train.recipe(
        "joint.cfg", "enc", -1, "", ["--paths.train", "train.spacy", train.LOG_OPTION, "a/train_log.jsonl"]
    )
    other_output = train.recipe(
        "joint.cfg", "enc", -1, "", ["--paths.train", "train.spacy", train.LOG_OPTION, "b/train_log.jsonl"]
    )
    assert first == other_output
    assert set(first["files"]) == {"joint.cfg", "train.spacy", "enc/config.json"}
    (inputs / "train.spacy").write_bytes(b"corpus v2")
    assert train.recipe("joint.cfg", "enc", -1, "", ["--paths.train", "train.spacy"])["files"] != first["files"]
    deeper = train.recipe("joint.cfg", "enc", -1, "", [])
    (inputs / "enc" / "config.json").write_text('{"num_hidden_layers": 6}', encoding="utf8")
    assert train.recipe("joint.cfg", "enc", -1, "", []) != deeper
    assert train.recipe("joint.cfg", "enc", 0, "", []) != train.recipe("joint.cfg", "enc", -1, "", [])


def test_reuse_copies_a_finished_run_with_the_same_recipe(inputs, monkeypatch):
    assert len(run_main(monkeypatch, argv("shipped"))) == 1
    (inputs / "shipped" / "model-best" / "weights").write_text("trained", encoding="utf8")
    calls = run_main(monkeypatch, argv("compare", "--reuse", "shipped"))
    assert calls == []
    assert (inputs / "compare" / "model-best" / "weights").read_text(encoding="utf8") == "trained"
    meta = srsly.read_json(inputs / "compare" / "train_meta.json")
    assert meta["reused_from"] == "shipped"
    assert meta["recipe"] == srsly.read_json(inputs / "shipped" / "train_meta.json")["recipe"]


@pytest.mark.parametrize("change", ["override", "corpus", "unfinished"])
def test_reuse_trains_when_anything_in_the_recipe_differs(inputs, monkeypatch, change):
    run_main(monkeypatch, argv("shipped"))
    args = argv("compare", "--reuse", "shipped")
    if change == "override":
        args[args.index("10")] = "20"
    elif change == "corpus":
        (inputs / "train.spacy").write_bytes(b"corpus v2")
    else:
        (inputs / "shipped" / "train_meta.json").unlink()  # stopped before the end
    calls = run_main(monkeypatch, args)
    assert len(calls) == 1 and "compare" in calls[0]
    assert "reused_from" not in srsly.read_json(inputs / "compare" / "train_meta.json")


def test_auto_preloads_jemalloc_unless_told_otherwise(monkeypatch):
    monkeypatch.setattr(train, "find_jemalloc", lambda: "libjemalloc.so.2")
    assert train.allocator_env("auto", {"A": "1"}) == {"A": "1", "LD_PRELOAD": "libjemalloc.so.2"}
    assert train.allocator_env("glibc", {"A": "1"}) == {"A": "1"}
    # the user's own preload wins under auto, and is kept under jemalloc
    assert train.allocator_env("auto", {"LD_PRELOAD": "libx.so"}) == {"LD_PRELOAD": "libx.so"}
    assert train.allocator_env("jemalloc", {"LD_PRELOAD": "libx.so"}) == {"LD_PRELOAD": "libjemalloc.so.2 libx.so"}
    monkeypatch.setattr(train, "find_jemalloc", lambda: None)
    assert train.allocator_env("auto", {}) == {}
    with pytest.raises(ValueError, match="apt-get install libjemalloc2"):
        train.allocator_env("jemalloc", {})
    with pytest.raises(ValueError, match="auto, jemalloc, glibc"):
        train.allocator_env("tcmalloc", {})


@pytest.mark.skipif(train.find_jemalloc() is None, reason="no jemalloc on this system")
def test_the_preloaded_jemalloc_is_the_one_the_child_process_runs():
    env = train.allocator_env("jemalloc", {})
    maps = subprocess.run(
        [sys.executable, "-c", "print(open('/proc/self/maps').read())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "jemalloc" in maps


LAZY_CFG = (
    '[training]\nmax_steps = 10\n\n[training.optimizer]\nlazy_rows = ["embeddings.word_embeddings.weight"]\n\n'
    '[initialize]\n\n[initialize.after_init]\n@callbacks = "spacy_crf.sparse_embeddings.v1"\n'
    'patterns = ["embeddings.word_embeddings.weight"]\n\n'
    '[initialize.before_init]\n@callbacks = "spacy_crf.cpu_autocast.v1"\ndtype = "bfloat16"\n'
)


def test_lazy_embeddings_reach_spacy_train_and_the_recipe(inputs, monkeypatch):
    calls = run_main(monkeypatch, argv("lazy", "--lazy-embeddings", "true"))
    cmd = calls[0]
    at = cmd.index("--training.optimizer.lazy_rows")
    assert srsly.json_loads(cmd[at + 1]) == ["embeddings.word_embeddings.weight"]
    at = cmd.index("--initialize.after_init")
    assert srsly.json_loads(cmd[at + 1]) == {
        "@callbacks": "spacy_crf.sparse_embeddings.v1",
        "patterns": ["embeddings.word_embeddings.weight"],
    }
    meta = srsly.read_json(inputs / "lazy" / "train_meta.json")
    assert "--training.optimizer.lazy_rows" in meta["recipe"]["overrides"]
    assert "--initialize.after_init" in meta["recipe"]["overrides"]
    # a dense run is another recipe: --reuse must not copy the lazy run for it
    calls = run_main(monkeypatch, argv("dense", "--reuse", "lazy"))
    assert len(calls) == 1 and "--training.optimizer.lazy_rows" not in calls[0]


def test_the_variant_flags_leave_a_config_that_has_them_as_it_is(inputs, monkeypatch):
    # configs/joint.cfg has lazy rows and autocast: asking for them again adds nothing to spacy train
    (inputs / "joint.cfg").write_text(LAZY_CFG, encoding="utf8")
    calls = run_main(monkeypatch, argv("same", "--lazy-embeddings", "true", "--autocast", "bfloat16"))
    assert not any(o.startswith("--initialize") or "lazy_rows" in o for o in calls[0])
    run_main(monkeypatch, argv("default"))
    recipe = lambda run: srsly.read_json(inputs / run / "train_meta.json")["recipe"]  # noqa: E731
    assert recipe("same") == recipe("default")


def test_the_variant_flags_replace_what_the_config_says(inputs, monkeypatch):
    # the float32, dense-Adam variant of a config that has autocast and lazy rows (the curve's runs)
    from spacy.cli._util import parse_config_overrides
    from spacy.util import load_config

    (inputs / "joint.cfg").write_text(LAZY_CFG, encoding="utf8")
    cmd = run_main(monkeypatch, argv("plain", "--lazy-embeddings", "false", "--autocast", "none"))[0]
    at = cmd.index("--training.optimizer.lazy_rows")
    overrides = parse_config_overrides(cmd[at : at + 6])
    loaded = load_config(inputs / "joint.cfg", overrides=overrides, interpolate=False)
    assert loaded["training"]["optimizer"]["lazy_rows"] == []
    assert loaded["initialize"]["after_init"] is None and loaded["initialize"]["before_init"] is None
    meta = srsly.read_json(inputs / "plain" / "train_meta.json")
    assert "--initialize.before_init" in meta["recipe"]["overrides"]


def test_the_variant_overrides_load_into_the_joint_config():
    """spaCy parses the overrides as spacy train would, and the callbacks resolve."""
    from spacy.cli._util import parse_config_overrides
    from spacy.util import load_config, registry

    config = Path(__file__).resolve().parents[1] / "configs" / "joint.cfg"
    dense = parse_config_overrides(train.lazy_overrides("false") + train.autocast_overrides("none"))
    loaded = load_config(config, overrides=dense, interpolate=False)
    assert loaded["training"]["optimizer"]["lazy_rows"] == []
    assert loaded["initialize"]["after_init"] is None and loaded["initialize"]["before_init"] is None
    lazy = parse_config_overrides(train.lazy_overrides("true") + train.autocast_overrides("bfloat16"))
    loaded = load_config(config, overrides=lazy, interpolate=False)
    assert loaded["training"]["optimizer"]["lazy_rows"] == ["embeddings.word_embeddings.weight"]
    assert callable(registry.resolve({"cb": loaded["initialize"]["after_init"]})["cb"])
    assert loaded["initialize"]["before_init"]["@callbacks"] == "spacy_crf.cpu_autocast.v1"
    train.check_callback_slot(str(config), [], "after_init", train.SPARSE_CALLBACK, "--lazy-embeddings true")
    train.check_callback_slot(str(config), [], "before_init", train.AUTOCAST_CALLBACK, "--autocast none")


def test_the_variant_flags_refuse_to_replace_another_callback(inputs, monkeypatch, capsys):
    (inputs / "joint.cfg").write_text(
        '[training]\nmax_steps = 10\n\n[initialize]\n\n[initialize.after_init]\n@callbacks = "spacy.copy_from_base_model.v1"\n'
        '\n[initialize.before_init]\n@callbacks = "other.v1"\n',
        encoding="utf8",
    )
    for flag in (
        ["--lazy-embeddings", "true"],
        ["--lazy-embeddings", "false"],
        ["--autocast", "bfloat16"],
        ["--autocast", "none"],
    ):
        with pytest.raises(SystemExit, match="already has another callback"):
            run_main(monkeypatch, argv("variant", *flag))
    (inputs / "joint.cfg").write_text("[training]\nmax_steps = 10\n", encoding="utf8")
    with pytest.raises(SystemExit, match="cannot be overridden as well"):
        run_main(monkeypatch, argv("bf16", "--autocast", "bfloat16", "--initialize.before_init", "{}"))
    with pytest.raises(SystemExit, match="cannot be overridden as well"):
        run_main(monkeypatch, argv("lazy", "--lazy-embeddings", "true", "--initialize.after_init", "{}"))
    assert train.lazy_overrides("config") == train.autocast_overrides("config") == []
    with pytest.raises(SystemExit):
        run_main(monkeypatch, argv("other", "--lazy-embeddings", "yes"))
    assert "'--lazy-embeddings': invalid choice: 'yes'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_main(monkeypatch, argv("bf16", "--autocast", "float16"))
    assert "'--autocast': invalid choice: 'float16'" in capsys.readouterr().err


def test_autocast_reaches_spacy_train_and_the_recipe(inputs, monkeypatch):
    calls = run_main(monkeypatch, argv("bf16", "--autocast", "bfloat16"))
    cmd = calls[0]
    at = cmd.index("--initialize.before_init")
    assert srsly.json_loads(cmd[at + 1]) == {"@callbacks": "spacy_crf.cpu_autocast.v1", "dtype": "bfloat16"}
    meta = srsly.read_json(inputs / "bf16" / "train_meta.json")
    assert "--initialize.before_init" in meta["recipe"]["overrides"]
    # a float32 run is another recipe: --reuse must not copy the bfloat16 run for it
    calls = run_main(monkeypatch, argv("fp32", "--reuse", "bf16"))
    assert len(calls) == 1 and "--initialize.before_init" not in calls[0]


def test_overrides_that_repeat_the_config_are_dropped(inputs):
    # spaCy's CLI reads 0.0003 one ulp off: an override repeating the config's rate
    # would train another model than `spacy train CONFIG` does
    (inputs / "joint.cfg").write_text(
        "[paths]\ntrain = null\n\n[system]\nseed = 0\n\n[training]\nmax_steps = 10\nseed = ${system.seed}\n"
        "flag = true\n\n[training.optimizer]\nrate = 3e-4\nmultiplier = 100.0\n",
        encoding="utf8",
    )
    same = [
        "--training.max_steps",
        "10",
        "--training.optimizer.rate",
        "0.0003",
        "--system.seed",
        "0",
        "--training.optimizer.multiplier",
        "100",
        "--training.flag",
        "true",
    ]
    assert train.drop_unchanged("joint.cfg", same) == []
    differ = [
        "--training.max_steps",
        "20",
        "--training.optimizer.rate",
        "0.001",
        "--paths.train",
        "t.spacy",
        "--training.seed",
        "1",
        "--training.flag",
        "1",
        "--training.new",
        "0",
        "--some-flag",
    ]
    assert train.drop_unchanged("joint.cfg", differ) == differ
    assert train.drop_unchanged("joint.cfg", same + differ) == differ


def test_the_log_goes_to_paths_train_log_where_the_config_has_it(inputs, monkeypatch):
    (inputs / "joint.cfg").write_text("[paths]\ntrain_log = null\n\n[training]\nmax_steps = 10\n", encoding="utf8")
    cmd = run_main(monkeypatch, argv("logged"))[0]
    assert cmd[-2:] == ["--paths.train_log", "logged/train_log.jsonl"]
    # the log's path names the output: not part of the recipe
    assert "--paths.train_log" not in srsly.read_json(inputs / "logged" / "train_meta.json")["recipe"]["overrides"]


def test_a_config_with_a_char_tagger_path_gets_the_tagger_commands_folder(inputs, monkeypatch):
    (inputs / "joint.cfg").write_text("[paths]\nchar_tagger = null\n\n[training]\nmax_steps = 10\n", encoding="utf8")
    cmd = run_main(monkeypatch, argv("tagged", "--out", "root"))[0]
    assert cmd[cmd.index("--paths.char_tagger") + 1] == str(train.Path("root") / "taggers" / "lac")
    given = run_main(monkeypatch, argv("mine", "--out", "root", "--paths.char_tagger", "my/lac"))[0]
    assert given[given.index("--paths.char_tagger") + 1] == "my/lac" and given.count("--paths.char_tagger") == 1
    (inputs / "joint.cfg").write_text("[training]\nmax_steps = 10\n", encoding="utf8")
    assert "--paths.char_tagger" not in run_main(monkeypatch, argv("plain", "--out", "root"))[0]


def test_the_recipe_is_the_same_from_the_study_project_folder(tmp_path, monkeypatch):
    # the study project runs compare from project/studies/ with ../ paths; its
    # --reuse must still find the ship project's run to have the same recipe
    (tmp_path / "repo" / "configs").mkdir(parents=True)
    (tmp_path / "repo" / "configs" / "joint.cfg").write_text("[x]\n", encoding="utf8")
    project = tmp_path / "repo" / "project"
    (project / "smoke" / "corpus").mkdir(parents=True)
    (project / "smoke" / "corpus" / "train.spacy").write_bytes(b"docs")
    (project / "smoke" / "enc").mkdir()
    (project / "studies").mkdir()
    monkeypatch.setattr(paths, "PROJECT_DIR", project)
    monkeypatch.chdir(project)
    shipped = train.recipe("../configs/joint.cfg", "smoke/enc", -1, "", ["--paths.train", "smoke/corpus/train.spacy"])
    monkeypatch.chdir(project / "studies")
    studies = train.recipe(
        "../../configs/joint.cfg", "../smoke/enc", -1, "", ["--paths.train", "../smoke/corpus/train.spacy"]
    )
    assert studies == shipped
    assert shipped["overrides"] == ["--paths.train", "smoke/corpus/train.spacy"]
    # a run recorded before the paths were made project-relative (out "."): still the same recipe
    monkeypatch.chdir(project)
    old = {**shipped, "overrides": ["--paths.train", "./smoke/corpus/train.spacy"]}
    assert train.same_paths(old) == shipped


def test_a_manifest_path_reads_the_same_file_from_the_study_folder(tmp_path, monkeypatch):
    # the corpus step writes paths relative to the ship project's folder
    project = tmp_path / "project"
    (project / "smoke" / "corpus").mkdir(parents=True)
    (project / "studies").mkdir()
    entry = {"task": "cws", "eval": "smoke/corpus/dev.spacy", "eval_split": "dev"}
    srsly.write_json(project / "smoke" / "corpus" / "manifest.json", {"sxu": entry})
    monkeypatch.setattr(paths, "PROJECT_DIR", project)
    monkeypatch.chdir(project)
    assert paths.load_manifest(project / "smoke" / "corpus" / "manifest.json")["sxu"] == entry
    monkeypatch.chdir(project / "studies")
    moved = paths.load_manifest(project / "smoke" / "corpus" / "manifest.json")["sxu"]
    assert moved == {**entry, "eval": "../smoke/corpus/dev.spacy"}


def test_a_manifest_reads_its_own_files_from_any_folder_and_any_clone(tmp_path, monkeypatch):
    # the corpus step of one clone names its files relative to the manifest: a report run from
    # another clone's project (--out pointing here) reads this corpus, not its own clone's
    ours, theirs = tmp_path / "ours" / "project", tmp_path / "theirs" / "project"
    for project in (ours, theirs):
        (project / "corpus" / "sxu").mkdir(parents=True)
        (project / "corpus" / "sxu" / "dev.spacy").write_text(str(project), encoding="utf8")
        (project / "studies").mkdir()
    monkeypatch.setattr(paths, "PROJECT_DIR", ours)
    monkeypatch.chdir(theirs)
    dev = paths.to_manifest("corpus/sxu/dev.spacy", Path("corpus"))
    assert dev == "sxu/dev.spacy" and paths.to_manifest("no/such.spacy", Path("corpus")) == "no/such.spacy"
    entry = {"task": "cws", "eval": dev, "eval_split": "dev", "paths": paths.MANIFEST_RELATIVE}
    srsly.write_json(theirs / "corpus" / "manifest.json", {"sxu": entry})
    for folder in (ours, ours / "studies", theirs / "studies", tmp_path):
        monkeypatch.chdir(folder)
        read = paths.load_manifest(theirs / "corpus" / "manifest.json")["sxu"]
        assert Path(read["eval"]).read_text(encoding="utf8") == str(theirs)
    # a manifest written before (no "paths"): ship-relative as before, absolute paths kept
    srsly.write_json(theirs / "corpus" / "manifest.json", {"sxu": {"eval": "corpus/sxu/dev.spacy", "dev": "/x.spacy"}})
    monkeypatch.chdir(ours / "studies")
    old = paths.load_manifest(theirs / "corpus" / "manifest.json")["sxu"]
    assert old == {"eval": "../corpus/sxu/dev.spacy", "dev": "/x.spacy"}
