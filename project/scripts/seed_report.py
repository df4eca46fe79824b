"""What the report scripts share: their command line and the corpus manifest
(``evaluate_all.py`` too), and for the per-seed ones (``compare_report.py``,
``heads_report.py``) the seed folders they read and a table cell."""
import argparse
from pathlib import Path
from statistics import mean
from typing import Callable, Dict, List, Optional, Tuple

import srsly


def add_report_options(p: argparse.ArgumentParser) -> None:
    """The options every report script takes: ``--out --eval-limit --readme --profile``."""
    p.add_argument("--out", default=".")
    p.add_argument("--eval-limit", type=int, default=0)
    p.add_argument("--readme", default="")
    p.add_argument("--profile", default="default")


def read_manifest(p: argparse.ArgumentParser, args: argparse.Namespace) -> Tuple[Path, Dict]:
    """Check ``--eval-limit``, and read the corpus manifest of ``--out`` (a usage
    error saying what to run where it is missing)."""
    if args.eval_limit < 0:
        p.error(f"--eval-limit must be >= 0 (0: all docs), got {args.eval_limit}")
    manifest_path = Path(args.out) / "corpus" / "manifest.json"
    if not manifest_path.is_file():
        p.error(f"{manifest_path}: no such file (run the corpus step first)")
    return manifest_path, srsly.read_json(manifest_path)


def parse_report_args(description: str, seeds_folder: Callable[[argparse.Namespace], Path], workflow: str,
                      add_arguments: Callable[[argparse.ArgumentParser], None] = lambda p: None,
                      ) -> Tuple[argparse.Namespace, Dict, List[Path]]:
    """``--out --eval-limit --readme --profile`` (plus ``add_arguments``); the
    corpus manifest of ``--out`` (with ``--corpus``, which must be in it) and
    the ``seed*`` folders under ``seeds_folder(args)``, each missing one a
    usage error saying what to run."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_report_options(p)
    add_arguments(p)
    args = p.parse_args()
    manifest_path, manifest = read_manifest(p, args)
    corpus = getattr(args, "corpus", None)
    if corpus is not None and corpus not in manifest:
        p.error(f"{manifest_path}: no corpus {corpus!r} (it has {', '.join(manifest)})")
    folder = seeds_folder(args)
    seed_dirs = sorted(folder.glob("seed*"))
    if not seed_dirs:
        p.error(f"{folder}: no seed*/ folders (run the {workflow} workflow first)")
    return args, manifest, seed_dirs


def cell(values: List[Optional[float]], scale: float = 100.0, digits: int = 2) -> str:
    """``mean ± half-range`` of the values given (None left out), times ``scale``."""
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    centre = scale * mean(values)
    if len(values) == 1:
        return f"{centre:,.{digits}f}"
    return f"{centre:,.{digits}f} ± {scale * (max(values) - min(values)) / 2:,.{digits}f}"
