"""What the report scripts share: their command line and the corpus manifest
(``evaluate_all.py`` too), and for the per-seed ones (``compare_report.py``,
``heads_report.py``) the seed folders they read and a table cell."""

from pathlib import Path
from statistics import mean
from typing import Any, Dict, List, Optional, Tuple

import typer

from crf_project.paths import load_manifest
from spacy_crf.cli._app import check_option


# The options every report command takes: ``--out --eval-limit --profile``.
def out_option() -> Any:
    return typer.Option(".", "--out", help="the project's output root: corpus/, training/, metrics/")


def eval_limit_option() -> Any:
    return typer.Option(0, "--eval-limit", help="first N evaluation docs (0: all)")


def profile_option() -> Any:
    return typer.Option("default", "--profile", help="the run's profile, named in the table")


def read_manifest(out: str, eval_limit: int) -> Tuple[Path, Dict]:
    """Check ``--eval-limit``, and read the corpus manifest of ``--out`` (a usage
    error saying what to run where it is missing)."""
    check_option("--eval-limit", eval_limit, minimum=0, hint="0: all docs")
    manifest_path = Path(out) / "corpus" / "manifest.json"
    if not manifest_path.is_file():
        raise typer.BadParameter(f"{manifest_path}: no such file (run the corpus step first)", param_hint="--out")
    return manifest_path, load_manifest(manifest_path)


def report_inputs(
    out: str, eval_limit: int, seeds_folder: Path, workflow: str, corpus: Optional[str] = None
) -> Tuple[Dict, List[Path]]:
    """The corpus manifest of ``--out`` (with ``--corpus``, which must be in
    it) and the ``seed*`` folders under ``seeds_folder``, each missing one a
    usage error saying what to run."""
    manifest_path, manifest = read_manifest(out, eval_limit)
    if corpus is not None and corpus not in manifest:
        raise typer.BadParameter(
            f"{manifest_path}: no corpus {corpus!r} (it has {', '.join(manifest)})", param_hint="--corpus"
        )
    seed_dirs = sorted(seeds_folder.glob("seed*"))
    if not seed_dirs:
        raise typer.BadParameter(
            f"{seeds_folder}: no seed*/ folders (run the {workflow} workflow first)", param_hint="--out"
        )
    return manifest, seed_dirs


def cell(values: List[Optional[float]], scale: float = 100.0, digits: int = 2) -> str:
    """``mean ± half-range`` of the values given (None left out), times ``scale``."""
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    centre = scale * mean(values)
    if len(values) == 1:
        return f"{centre:,.{digits}f}"
    return f"{centre:,.{digits}f} ± {scale * (max(values) - min(values)) / 2:,.{digits}f}"
