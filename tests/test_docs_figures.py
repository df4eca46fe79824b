"""The figures that README.md and docs/results.md quote from a run are the
committed metrics of that run (project/metrics/), and what they count in
the code (the compiled kernels) is what setup.py builds."""

import ast
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "results.md"
METRICS = ROOT / "project" / "metrics"
NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def _metrics(name: str):
    return json.loads((METRICS / name).read_text(encoding="utf8"))


def _pct(value: float) -> str:
    return f"{value * 100:.2f}"


def _rows(text: str, heading: str):
    """{first cell: other cells} of the first table after ``heading``."""
    after = text[text.index(heading) :]
    table = re.search(r"(?:^\|.*\n)+", after, re.M)
    assert table, f"no table after {heading!r}"
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.group(0).splitlines()]
    return {row[0]: row[1:] for row in rows[2:]}


def _row(rows, containing: str):
    found = [cells for first, cells in rows.items() if containing in first]
    assert len(found) == 1, f"{len(found)} rows name {containing!r}"
    return found[0]


def _package_figures():
    """The installed package's word F, OOV recall, entity F and chars/s
    (n_process=1, then 2) as the committed metrics of its run give them."""
    api, speed = _metrics("pipeline_public_api.json"), _metrics("pipeline_speed.json")
    rates = {run["n_process"]: f"{round(run['chars_per_s']):,}" for run in speed["runs"]}
    words = api["words"]
    return [_pct(words["words_f"]), _pct(words["words_oov_recall"]), _pct(api["ents"]["ents_f"])], rates


def test_the_readme_headline_is_the_committed_metrics():
    rows = _rows(README.read_text(encoding="utf8"), "## Results")
    scores, rates = _package_figures()
    assert _row(rows, "through `nlp.pipe`") == [*scores, rates[1]]
    api, ner = _metrics("pipeline_public_api.json"), _metrics("joint_msra_dev.json")
    segmenter = [_pct(api["segmenter_words"]["words_f"]), _pct(api["segmenter_words"]["words_oov_recall"])]
    assert _row(rows, "per component") == [*segmenter, _pct(ner["scores"]["ents_f"]), "–"]


def test_the_results_page_gives_the_package_as_its_metrics_do():
    rows = _rows(RESULTS.read_text(encoding="utf8"), "### The pipeline as users get it")
    scores, rates = _package_figures()
    assert _row(rows, "the shipped package") == [f"**{s}**" for s in scores] + [
        f"**{rates[1]}** ({rates[2]} with `n_process=2`)"
    ]


def test_the_results_page_states_the_dev_sets_once_as_the_metrics_count_them():
    text = RESULTS.read_text(encoding="utf8")
    blocks = [f"{_metrics(f'joint_{c}_dev.json')['speed']['docs']:,}" for c in ("sxu", "msra")]
    lines = [f"{_metrics(f'seed0/joint_{c}_dev.json')['speed']['docs']:,}" for c in ("sxu", "msra")]
    flat = " ".join(text.split())
    stated = re.findall(r"SXU dev \(([\d,]+) docs\) for words and MSRA dev \(([\d,]+) docs\)", flat)
    assert stated == [tuple(blocks)]
    assert re.findall(r"seed 0: ([\d,]+) SXU and ([\d,]+) MSRA docs", flat) == [tuple(lines)]
    # nowhere else does the page give a dev set's size, which could drift from these
    for count in blocks + lines:
        assert len(re.findall(rf"(?<![\d,]){count}(?!\d|,\d)", flat)) == 1, f"{count} appears more than once"


def test_the_readme_counts_the_kernels_setup_py_builds():
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf8"))
    kernels = next(
        ast.literal_eval(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "KERNELS" for t in node.targets)
    )
    sentence = re.search(r"compiles (\w+) small Cython kernels \(([^)]*)\)", " ".join(README.read_text().split()))
    assert sentence, "README.md no longer says which kernels pip compiles"
    assert sentence.group(1) == NUMBER_WORDS[len(kernels)]
    assert len(sentence.group(2).split(",")) == len(kernels), sentence.group(2)
    architecture = (ROOT / "docs" / "architecture.md").read_text(encoding="utf8")
    assert all(f"`ml/{name}.pyx`" in architecture for name in kernels)
