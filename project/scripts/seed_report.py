"""What the per-seed report scripts share (``compare_report.py``, ``heads_report.py``):
their command line, the manifest and seed folders they read, and a table cell."""
import argparse
from pathlib import Path
from statistics import mean
from typing import Callable, Dict, List, Optional, Tuple

import srsly


def parse_report_args(description: str, seeds_folder: Callable[[argparse.Namespace], Path], workflow: str,
                      add_arguments: Callable[[argparse.ArgumentParser], None] = lambda p: None,
                      ) -> Tuple[argparse.Namespace, Dict, List[Path]]:
    """``--out --eval-limit --readme --profile`` (plus ``add_arguments``); the
    corpus manifest of ``--out`` (with ``--corpus``, which must be in it) and
    the ``seed*`` folders under ``seeds_folder(args)``, each missing one a
    usage error saying what to run."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=".")
    p.add_argument("--eval-limit", type=int, default=0)
    p.add_argument("--readme", default="")
    p.add_argument("--profile", default="default")
    add_arguments(p)
    args = p.parse_args()
    if args.eval_limit < 0:
        p.error(f"--eval-limit must be >= 0 (0: all docs), got {args.eval_limit}")
    manifest_path = Path(args.out) / "corpus" / "manifest.json"
    if not manifest_path.is_file():
        p.error(f"{manifest_path}: no such file (run the corpus step first)")
    manifest = srsly.read_json(manifest_path)
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
