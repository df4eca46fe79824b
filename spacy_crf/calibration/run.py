"""``calibrate()``: fit the temperature of a pipeline's CRF heads on half of
the dev docs, report the calibration on the other half, and write the
calibrated pipeline with its report (``spacy crf calibrate``).

**The split.** The docs of each dev file are split by index parity: the even
ones (0, 2, 4, ...) fit the temperature, the odd ones are held out, and
every figure "on the held-out half" is measured on them only. Parity
interleaves the halves over the whole file, so that a file in reading or
sorted order is not cut into a beginning and an end unlike each other; no
doc is in both.

**Output.** ``output`` is the calibrated pipeline (the input with each
fitted head's ``temperature`` set in its ``cfg``, and the summary in
``meta.json`` under ``calibration``), with the report in ``output/calibration/``:
``report.json`` (the reliability tables before and after, on both halves),
``report.md`` and ``reliability.png`` (:mod:`.diagram`). The directory is
written whole or not at all.
"""

from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

from spacy.language import Language

from ..files import atomic_dir, check_output_dir, check_output_paths, write_json_atomic, write_text_atomic
from ..pipeline.confidence import set_temperature, temperature
from .collect import ENTS, KINDS, WORDS, HeadSet, collect, file_digest, find_heads, pipeline_digest
from .diagram import draw_reliability
from .measure import DEFAULT_BINS, check_bins, log_loss, reliability
from .temperature import check_objective, confidences, fit_temperature

#: the report's folder inside the output pipeline
REPORT_DIR = "calibration"
SPLIT = "doc index parity: even docs fit the temperature, odd docs are held out"
WHAT = {WORDS: "words", ENTS: "entities"}
FILE_ROLE = {WORDS: "dev_words", ENTS: "dev_ents"}


class CalibrationError(ValueError):
    """A setting, input or pipeline that calibration cannot use (one line, naming it)."""


def _read_docs(path: Path, nlp: Language, limit: int) -> list:
    from spacy.tokens import DocBin

    try:
        docs = list(DocBin().from_disk(path).get_docs(nlp.vocab))
    except Exception as e:  # noqa: BLE001 - any unreadable file: one line naming it
        raise CalibrationError(f"cannot read {str(path)!r} as .spacy docs: {e}") from None
    return docs[:limit] if limit else docs


def _measure(head: HeadSet, t: float, n_bins: int) -> Dict[str, Any]:
    conf, correct = confidences(head, t)
    table = reliability(conf, correct, n_bins)
    table["nll"] = log_loss(conf, correct)
    table["temperature"] = t
    return table


def calibrate_heads(
    heads: Dict[str, HeadSet], *, n_bins: int = DEFAULT_BINS, objective: str = "nll"
) -> Dict[str, Dict[str, Any]]:
    """For each collected head: split its docs by parity, fit ``T`` on the
    even ones and measure before (the pipe's temperature as loaded) and after
    on both halves. Sets nothing on the pipes."""
    results = {}
    for kind, head in heads.items():
        fit_half = head.subset(range(0, len(head.docs), 2))
        held_out = head.subset(range(1, len(head.docs), 2))
        t_before = temperature(head.tagger)
        t_after, search = fit_temperature(fit_half, objective, n_bins)
        results[kind] = {
            "component": head.name,
            "temperature": t_after,
            "temperature_before": t_before,
            "n_docs": {"fit": len(fit_half.docs), "held_out": len(held_out.docs)},
            "before": _measure(held_out, t_before, n_bins),
            "after": _measure(held_out, t_after, n_bins),
            "fit": {"before": _measure(fit_half, t_before, n_bins), "after": _measure(fit_half, t_after, n_bins)},
            "search": search,
        }
    return results


def markdown_report(summary: Dict[str, Any]) -> str:
    """The report as a markdown page."""
    lines = [
        "# Calibration",
        "",
        f"Pipeline `{summary['pipeline']}`; split: {summary['split']}; {summary['bins']} equal-width bins; "
        f"temperature fitted by {summary['objective']}.",
        "",
        "| spans | component | T | held-out docs | held-out spans | accuracy | ECE before | ECE after | "
        "log loss before | log loss after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, r in summary["heads"].items():
        before, after = r["before"], r["after"]
        lines.append(
            f"| {WHAT[kind]} | `{r['component']}` | {r['temperature']:.3f} | {r['n_docs']['held_out']:,} | "
            f"{after['n']:,} | {100 * (after['accuracy'] or 0):.2f} % | {100 * before['ece']:.2f} % | "
            f"{100 * after['ece']:.2f} % | {before['nll']:.4f} | {after['nll']:.4f} |"
        )
    for kind, r in summary["heads"].items():
        lines += [
            "",
            f"## {WHAT[kind]}: held-out reliability",
            "",
            "| bin | spans before | confidence before | accuracy before | spans after | confidence after "
            "| accuracy after |",
            "|---|---|---|---|---|---|---|",
        ]
        for b, a in zip(r["before"]["bins"], r["after"]["bins"]):

            def cell(x: Optional[float]) -> str:
                return "–" if x is None else f"{x:.3f}"

            lines.append(
                f"| {b['low']:.3f}–{b['high']:.3f} | {b['count']:,} | {cell(b['confidence'])} | "
                f"{cell(b['accuracy'])} | {a['count']:,} | {cell(a['confidence'])} | {cell(a['accuracy'])} |"
            )
    return "\n".join(lines) + "\n"


def calibrate(
    pipeline: Union[str, Path],
    dev_words: Optional[Path],
    dev_ents: Optional[Path],
    output: Path,
    *,
    n_bins: int = DEFAULT_BINS,
    objective: str = "nll",
    batch_size: int = 64,
    limit: int = 0,
    cache: Optional[Path] = None,
    force: bool = False,
    progress: Optional[Callable[[str], None]] = None,
) -> Dict[str, Any]:
    """Calibrate ``pipeline`` (a directory or an installed package) on
    ``dev_words`` (``.spacy`` docs whose tokens are the gold words; None: the
    segmenter is not calibrated) and ``dev_ents`` (docs with gold entities;
    None: the entity tagger is not), writing ``output`` (module docstring).
    ``limit``: the first N docs of each file (0: all). ``cache``: a folder
    for the encoder's results (:mod:`.collect`). Returns the summary that
    ``report.json`` holds. Raises :class:`CalibrationError` (or
    ``OutputPathError``) before any work for a bad setting or path."""
    import spacy
    from spacy.util import get_package_path, is_package

    try:
        n_bins = check_bins(n_bins)
        check_objective(objective)
    except ValueError as e:
        raise CalibrationError(str(e)) from None
    for option, value in (("batch_size", batch_size), ("limit", limit)):
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if option == "batch_size" else 0):
            raise CalibrationError(
                f"{option} must be a whole number >= {1 if option == 'batch_size' else 0}, got {value!r}"
            )
    given = {WORDS: dev_words, ENTS: dev_ents}
    files: Dict[str, Path] = {k: Path(v) for k, v in given.items() if v is not None}
    if not files:
        raise CalibrationError("nothing to calibrate: give the dev words, the dev entities or both")
    for kind, file in files.items():
        if not file.is_file():
            raise CalibrationError(f"{FILE_ROLE[kind]}: {str(file)!r} is not a file")
    local = Path(pipeline)
    path = local if local.exists() else get_package_path(str(pipeline)) if is_package(str(pipeline)) else None
    if path is None or (path == local and not local.is_dir()):
        raise CalibrationError(f"pipeline {str(pipeline)!r} is neither a directory nor an installed package")
    check_output_dir(output, force=force)
    check_output_paths([path, *files.values(), cache], [], output_dirs=[output])
    say = progress or (lambda text: None)
    try:
        nlp = spacy.load(local if path == local else str(pipeline))
    except Exception as e:  # noqa: BLE001 - any pipeline that does not load: one line naming it
        raise CalibrationError(f"pipeline {str(pipeline)!r} cannot be loaded: {e}") from None
    names = find_heads(nlp)
    for kind in files:
        if names[kind] is None:
            scheme = "'bmes'" if kind == WORDS else "'bio' or 'bioes'"
            raise CalibrationError(
                f"{FILE_ROLE[kind]} given, but pipeline {str(pipeline)!r} has no CRF tagger with scheme {scheme} "
                f"(its pipes: {nlp.pipe_names})"
            )
    digest = pipeline_digest(path) if cache is not None else ""
    heads: Dict[str, HeadSet] = {}
    for kind in (k for k in KINDS if k in files):
        golds = _read_docs(files[kind], nlp, limit)
        key = (digest[:12] + file_digest(files[kind])[:12]) if cache is not None else ""
        say(f"{WHAT[kind]}: predicting {len(golds):,} docs with {names[kind]!r}")
        heads[kind] = collect(
            nlp,
            kind,
            str(names[kind]),
            golds,
            batch_size=batch_size,
            cache=cache,
            key=key,
            progress=lambda n, kind=kind, total=len(golds): say(f"{WHAT[kind]}: {n:,}/{total:,} docs"),
        )
    say("fitting")
    results = calibrate_heads(heads, n_bins=n_bins, objective=objective)
    summary: Dict[str, Any] = {
        "pipeline": str(pipeline),
        "output": str(output),
        "split": SPLIT,
        "bins": n_bins,
        "objective": objective,
        "limit": limit,
        "files": {FILE_ROLE[k]: str(v) for k, v in files.items()},
        "heads": results,
    }
    for r in results.values():
        set_temperature(nlp.get_pipe(r["component"]), r["temperature"])
    nlp.meta["calibration"] = {
        "split": SPLIT,
        "bins": n_bins,
        "objective": objective,
        "heads": {
            r["component"]: {
                "spans": WHAT[k],
                "temperature": r["temperature"],
                "held_out_ece_before": r["before"]["ece"],
                "held_out_ece_after": r["after"]["ece"],
                "held_out_spans": r["after"]["n"],
            }
            for k, r in results.items()
        },
    }
    with atomic_dir(output) as tmp:
        nlp.to_disk(tmp)
        report = tmp / REPORT_DIR
        write_json_atomic(report / "report.json", summary)
        write_text_atomic(report / "report.md", markdown_report(summary))
        draw_reliability(results, report / "reliability.png", title=f"held-out half of the dev docs ({SPLIT})")
    return summary


def headline(summary: Dict[str, Any]) -> List[str]:
    """One line per head: T and the held-out ECE before and after."""
    return [
        f"{WHAT[k]} ({r['component']}): T = {r['temperature']:.3f}, held-out ECE "
        f"{100 * r['before']['ece']:.2f} % -> {100 * r['after']['ece']:.2f} % ({r['after']['n']:,} spans)"
        for k, r in summary["heads"].items()
    ]
