"""Install the packaged pipeline into a fresh virtual environment and use it.

    python crf_project check-package --packages ROOT/packages --venv ROOT/check-venv

The venv is new; it sees this environment's packages through a ``.pth``
file (the same idea as ``--system-site-packages``, but for the current venv),
so nothing is downloaded and pip never resolves a bare ``torch`` requirement.
The pipeline package is installed with ``--no-deps``; its requirements
(``spacy-crf``, with what its ``[onnx]`` extra brings when the encoder is
an ONNX graph) are then checked to be satisfied. A user with internet
installs it with torch pinned first::

    pip install torch==2.13.0 && pip install zh_crf_pipeline-0.1.0.tar.gz

Then ``spacy.load("zh_crf_pipeline")`` runs in the venv, from another
directory, on a few sentences: tokens are the words, ``doc.text`` is
unchanged, the merge step keeps every entity, and ``nlp.pipe(...,
n_process=2)`` gives the same result.
"""

import glob
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import typer

from crf_project.script_cli import run_app, script_app

CHECK = r"""
import os
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # n_process=2 forks after tokenizing
import importlib.metadata as md, spacy
from packaging.requirements import Requirement
reqs = md.requires("zh_crf_pipeline") or []
def check(r):
    v = md.version(r.name)
    assert r.specifier.contains(v, prereleases=True), f"{r} not satisfied by {v}"
    for extra in r.extras:  # spacy-crf[onnx]: what the extra brings must be here too
        for sub in map(Requirement, md.requires(r.name) or []):
            if sub.marker is not None and sub.marker.evaluate({"extra": extra}):
                check(Requirement(str(sub).split(";")[0]))
for r in map(Requirement, reqs):
    check(r)
print("requirements satisfied:", ", ".join(reqs))
nlp = spacy.load("zh_crf_pipeline")
print("pipeline:", nlp.pipe_names, "from", nlp.path)
texts = ["张三在北京大学工作。", "李四住在上海浦东新区，他是华为公司的工程师。", "今天天气很好", "", "中国 人民 银行"]
docs = list(nlp.pipe(texts, batch_size=2))
for text, doc in zip(texts, docs):
    assert doc.text == text, (doc.text, text)
    words = [t.text for t in doc]
    print(words, [(e.text, e.label_) for e in doc.ents])
    assert "".join(t.text_with_ws for t in doc) == text
with nlp.select_pipes(disable=["merge_words"]):
    unmerged = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in nlp.pipe(texts)]
merged = [[(e.start_char, e.end_char, e.label_) for e in d.ents] for d in docs]
assert merged == unmerged, (merged, unmerged)
multi = [[t.text for t in d] for d in nlp.pipe(texts, batch_size=2, n_process=2)]
assert multi == [[t.text for t in d] for d in docs]
import time
many = [t for t in texts if t] * 100
start = time.perf_counter(); list(nlp.pipe(many, batch_size=128)); seconds = time.perf_counter() - start
print(f"whole pipeline: {sum(map(len, many)) / seconds:,.0f} chars/s on {len(many)} short sentences")
print("OK: spacy.load('zh_crf_pipeline'), text unchanged, entities kept by the merge, n_process=2")
"""


app = script_app()


@app.command(help=__doc__)
def check_package_cli(
    packages: str = typer.Option("packages", "--packages", help="the package step's output folder"),
    venv: str = typer.Option("check-venv", "--venv", help="the virtual environment to create"),
) -> None:
    sdists = sorted(glob.glob(str(Path(packages) / "zh_crf_pipeline-*" / "dist" / "zh_crf_pipeline-*.tar.gz")))
    if not sdists:
        sys.exit(f"no zh_crf_pipeline sdist under {packages}")
    venv = Path(venv).resolve()
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    parent_site = sysconfig.get_paths()["purelib"]
    Path(site, "_parent_env.pth").write_text(f"import site; site.addsitedir({parent_site!r})\n", encoding="utf8")
    subprocess.run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            site,
            sdists[-1],
        ],
        check=True,
    )
    with tempfile.TemporaryDirectory() as cwd:  # not the project dir: load the installed package
        subprocess.run([str(py), "-c", CHECK], check=True, cwd=cwd)
    print(f"installed {Path(sdists[-1]).name} into {venv} and loaded it")


def main() -> None:
    run_app(app)
