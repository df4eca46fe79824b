"""configs/joint.cfg is the recipe of the shipped pipeline: it holds every
value the default trains with, spaCy's own `debug config` passes on it, and
the project's train-joint runs it as it is (issue 32 item 1)."""

import configparser
import re
import shlex
import sys
from pathlib import Path

import pytest
import srsly
from spacy.util import load_config

import spacy_crf.training.loggers  # noqa: F401  (the logger's entry point needs an installed checkout)
from crf_project import train

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "joint.cfg"
WORD_EMBEDDINGS = ["embeddings.word_embeddings.weight"]

# What README.md and project/README.md say the shipped model trains with.
STATED = {
    ("training", "max_steps"): 14000,
    ("training", "eval_frequency"): 500,
    ("training", "optimizer", "learn_rate", "@schedules"): "warmup_linear.v1",
    ("training", "optimizer", "learn_rate", "initial_rate"): 3e-4,
    ("training", "optimizer", "learn_rate", "warmup_steps"): 1400,
    ("training", "optimizer", "learn_rate", "total_steps"): 14000,
    ("training", "optimizer", "@optimizers"): "spacy_crf.GroupedAdam.v1",
    ("training", "optimizer", "crf_lr_multiplier"): 100,
    ("training", "optimizer", "lazy_rows"): WORD_EMBEDDINGS,
    ("training", "batcher", "@batchers"): "spacy.batch_by_padded.v1",
    ("training", "batcher", "size"): 1150,
    ("training", "logger", "@loggers"): "spacy_crf.TimedConsoleLogger.v1",
    ("training", "seed"): 0,
    ("corpora", "train", "ents_share"): 0.5,
    ("corpora", "dev", "limit"): 1000,
    ("initialize", "before_init"): {"@callbacks": "spacy_crf.cpu_autocast.v1", "dtype": "auto"},
    ("initialize", "after_init"): {"@callbacks": "spacy_crf.sparse_embeddings.v1", "patterns": WORD_EMBEDDINGS},
    ("components", "segmenter", "model", "lexicon_width"): 32,
    ("components", "crf_ner", "model", "lexicon_width"): 32,
}


def _at(config, keys):
    for key in keys:
        config = config[key]
    return config


@pytest.mark.parametrize("keys", list(STATED), ids=[".".join(k) for k in STATED])
def test_the_shipped_config_holds_the_recipe_the_docs_state(keys):
    config = load_config(CONFIG, interpolate=True)
    assert _at(config, keys) == STATED[keys]


def test_the_readmes_state_the_recipe_of_the_config():
    # the sentences that state the recipe name the config and its figures
    for readme in (ROOT / "README.md", ROOT / "project" / "README.md"):
        text = readme.read_text(encoding="utf8")
        at = text.find("`configs/joint.cfg` is the recipe")
        assert at >= 0, f"{readme.name}: no sentence stating the recipe"
        paragraph = " ".join(text[at : text.find("\n\n", at)].split())
        for figure in (
            "14,000 steps",
            "3e-4",
            "1,400 warmup",
            "1,150",
            "lazy",
            "bfloat16",
            "1,000 dev docs",
            "lexicon features of width 32",
        ):
            assert figure in paragraph, f"{readme.name}: {figure!r} missing from {paragraph!r}"


def test_the_logger_writes_to_paths_train_log():
    config = load_config(CONFIG, interpolate=False, overrides={"paths.train_log": "out/train_log.jsonl"})
    assert config["paths"]["train_log"] == "out/train_log.jsonl"
    assert config.interpolate()["training"]["logger"]["output_file"] == "out/train_log.jsonl"
    assert load_config(CONFIG, interpolate=True)["training"]["logger"]["output_file"] is None


def test_the_logger_is_an_entry_point():
    # spaCy finds the config's logger through the installed package, without --code
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg", encoding="utf8")
    entries = dict(line.split(" = ") for line in setup["options.entry_points"]["spacy_loggers"].strip().splitlines())
    target = "spacy_crf.training.loggers:timed_console_logger"
    assert entries == {"spacy_crf.TimedConsoleLogger.v1": target}
    from spacy.util import registry

    assert registry.loggers.get("spacy_crf.TimedConsoleLogger.v1") is spacy_crf.training.loggers.timed_console_logger


def _tiny_corpora(tmp_path):
    import spacy
    from spacy.tokens import DocBin

    nlp = spacy.blank("zh")
    words, ents = DocBin(), DocBin()
    doc = nlp.make_doc("我在北京工作")
    words.add(doc)
    doc = nlp.make_doc("张三去上海")
    doc.ents = [doc.char_span(3, 5, label="LOC")]
    ents.add(doc)
    words.to_disk(tmp_path / "words.spacy")
    ents.to_disk(tmp_path / "ents.spacy")
    return tmp_path / "words.spacy", tmp_path / "ents.spacy"


def test_spacy_debug_config_passes_on_the_shipped_config(tiny_bert_dir, tmp_path):
    from spacy.cli import app
    from typer.testing import CliRunner

    words, ents = _tiny_corpora(tmp_path)
    lexicon = tmp_path / "dict.txt"
    lexicon.write_text("北京 100 ns\n张三 10 nr\n工作 50 vn\n", encoding="utf8")
    result = CliRunner().invoke(
        app,
        [
            "debug",
            "config",
            str(CONFIG),
            "--paths.train_words",
            str(words),
            "--paths.train_ents",
            str(ents),
            "--paths.dev_words",
            str(words),
            "--paths.dev_ents",
            str(ents),
            "--paths.encoder",
            str(tiny_bert_dir),
            "--paths.train_log",
            str(tmp_path / "train_log.jsonl"),
            "--paths.lexicon_features",
            str(lexicon),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Config is valid" in result.output


def _script_argv(command: str, variables: dict, out: Path):
    """``command``'s script line of project.yml with ``variables`` over the defaults, as argv."""
    project = srsly.read_yaml(ROOT / "project" / "project.yml")
    values = {**project["vars"], **variables, "out": str(out)}
    script = next(c for c in project["commands"] if c["name"] == command)["script"][0]
    script = re.sub(r"\$\{vars\.(\w+)\}", lambda m: str(values[m.group(1)]), script)
    argv = shlex.split(script)
    return argv[argv.index("crf_project") + 1 :]


def _spacy_train_of(argv, monkeypatch):
    calls = []

    def fake_spacy_train(cmd, env):
        calls.append(cmd)
        Path(cmd[cmd.index("--output") + 1], "model-best").mkdir(parents=True)

    monkeypatch.chdir(ROOT / "project")
    monkeypatch.setattr(train, "spacy_train", fake_spacy_train)
    monkeypatch.setattr(sys, "argv", argv)
    train.main()
    (cmd,) = calls
    return cmd


def _options(cmd):
    at = cmd.index("train") + 2  # after `train CONFIG`
    pairs = cmd[at:]
    return dict(zip(pairs[::2], pairs[1::2]))


def test_train_joint_runs_the_shipped_config_as_it_is(tmp_path, monkeypatch):
    # the default profile passes paths only: `spacy train configs/joint.cfg --paths...` is the shipped model
    cmd = _spacy_train_of(_script_argv("train-joint", {}, tmp_path), monkeypatch)
    assert cmd[3:5] == ["train", "../configs/joint.cfg"]
    options = _options(cmd)
    assert "--code" not in options
    assert sorted(options) == [
        "--gpu-id",
        "--output",
        "--paths.char_tagger",
        "--paths.dev_ents",
        "--paths.dev_words",
        "--paths.encoder",
        "--paths.lexicon_features",
        "--paths.train_ents",
        "--paths.train_log",
        "--paths.train_words",
    ]
    assert options["--paths.train_log"] == str(tmp_path / "training" / "joint" / "train_log.jsonl")
    assert options["--paths.char_tagger"] == str(tmp_path / "taggers" / "lac")  # the tagger command's folder


def _smoke_vars():
    """The vars of the smoke profile's `all` run in .ci/run."""
    text = (ROOT / ".ci" / "run").read_text(encoding="utf8").replace("\\\n", " ")
    line = next(line for line in text.splitlines() if line.startswith("spacy project run all "))
    return dict(re.findall(r"--vars\.(\w+)=(\S+)", line))


def test_the_smoke_profile_overrides_only_its_size(tmp_path, monkeypatch):
    smoke = _smoke_vars()
    assert smoke["profile"] == "smoke"
    options = _options(_spacy_train_of(_script_argv("train-joint", smoke, tmp_path), monkeypatch))
    recipe = {k: v for k, v in options.items() if not k.startswith(("--paths.", "--output", "--gpu-id"))}
    assert recipe == {
        "--training.max_steps": smoke["joint_max_steps"],
        "--training.optimizer.learn_rate.warmup_steps": smoke["joint_warmup_steps"],
        "--training.batcher.size": smoke["joint_batch_size"],
        "--training.eval_frequency": smoke["eval_frequency"],
        "--corpora.dev.limit": smoke["dev_limit"],
    }


def test_the_gpu_profile_turns_autocast_off(tmp_path, monkeypatch):
    # cpu_autocast refuses GPU ops: the GPU profile's autocast=none must reach the config
    variables = {"gpu_id": 0, "autocast": "none", "learn_rate": 3e-5}
    options = _options(_spacy_train_of(_script_argv("train-joint", variables, tmp_path), monkeypatch))
    assert options["--initialize.before_init"] == "null"
    assert options["--training.optimizer.learn_rate.initial_rate"] == "3e-05"
    assert "--initialize.after_init" not in options
