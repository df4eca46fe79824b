"""Conversion of a corpus file to spaCy's ``.spacy`` format, with counts
printed and returned at every step (``spacy crf convert-corpus``)."""

import warnings
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from spacy.tokens import Doc, DocBin
from spacy.vocab import Vocab
from wasabi import msg

from ..files import atomic_path, check_output_paths
from ..util import check_number
from .base import CorpusFormatError, CorpusWarning, PathLike
from .char_tags import read_char_bio, read_char_bmes, read_weibo
from .cluener import read_cluener
from .rates import split_rates
from .sighan import read_sighan
from .split import CARVES, CUT_KINDS, DEFAULT_BLOCK_SIZE, carve_dev, carve_lines, split_long

FORMATS = ("sighan", "bio", "bmes", "weibo", "cluener")


def read_corpus(fmt: str, path: PathLike, vocab: Vocab, *, stats: Optional[Counter] = None) -> Iterator[Doc]:
    """Dispatch to the reader of ``fmt`` (one of :data:`FORMATS`)."""
    readers: Dict[str, Callable[..., Iterator[Doc]]] = {
        "sighan": read_sighan,
        "bio": read_char_bio,
        "bmes": read_char_bmes,
        "weibo": read_weibo,
        "cluener": read_cluener,
    }
    if fmt not in readers:
        raise ValueError(f"unknown corpus format {fmt!r}; expected one of {', '.join(FORMATS)}")
    return readers[fmt](path, vocab, stats=stats)


def corpus_counts(docs: Iterable[Doc], words: bool) -> Dict[str, object]:
    """Docs, characters, words (CWS docs: tokens) or entities per label."""
    counts: Dict[str, object] = {"docs": 0, "chars": 0}
    n_words = 0
    ents: Counter = Counter()
    for doc in docs:
        counts["docs"] += 1  # type: ignore[operator]
        counts["chars"] += len(doc.text)  # type: ignore[operator]
        n_words += len(doc)
        ents.update(ent.label_ for ent in doc.ents)
    if words:
        counts["words"] = n_words
    else:
        counts["entities"] = dict(sorted(ents.items()))
        counts["entities_total"] = sum(ents.values())
    return counts


def _split_all(docs: Sequence[Doc], max_chars: int, stats: Counter) -> List[Doc]:
    out: List[Doc] = []
    for doc in docs:
        out.extend(split_long(doc, max_chars, stats=stats))
    return out


def _print_counts(title: str, counts: Dict[str, object]) -> None:
    parts = [f"{counts['docs']:,} docs", f"{counts['chars']:,} chars"]
    if "words" in counts:
        parts.append(f"{counts['words']:,} words")
    else:
        parts.append(f"{counts['entities_total']:,} entities")
    msg.info(f"{title}: " + ", ".join(parts))
    if "entities" in counts and counts["entities"]:
        msg.table(counts["entities"], header=("label", "entities"), divider=True)  # type: ignore[arg-type]


def _print_rates(rates: Dict[str, Any]) -> None:
    if rates.get("oov_rate") is not None:
        msg.info(f"dev words not in training (OOV rate): {rates['oov_rate'] * 100:.2f}% of {rates['words']:,}")
    if rates.get("seen_rate") is not None:
        msg.info(
            f"dev entities also in training (text and label): {rates['seen_rate'] * 100:.2f}% of {rates['entities']:,}"
        )


def check_convert_options(
    fmt: str,
    *,
    max_chars: int,
    dev_ratio: float,
    seed: int,
    limit: Optional[int],
    carve: str = "blocks",
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> None:
    """Raise ``ValueError`` naming the option for an invalid :func:`convert_corpus` setting."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown corpus format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if not isinstance(max_chars, int) or isinstance(max_chars, bool):
        raise ValueError(f"max_chars must be an integer, got {max_chars!r}")
    check_number("max_chars", max_chars, minimum=0, hint="0: no splitting")
    check_number("dev_ratio", dev_ratio, minimum=0, maximum=1, max_open=True)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    if carve not in CARVES:
        raise ValueError(f"unknown dev carve {carve!r}; expected one of {', '.join(CARVES)}")
    if not isinstance(block_size, int) or isinstance(block_size, bool):
        raise ValueError(f"block_size must be an integer, got {block_size!r}")
    check_number("block_size", block_size, minimum=1)
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool):
            raise ValueError(f"limit must be an integer, got {limit!r}")
        check_number("limit", limit, minimum=1, hint="leave it out to keep every doc")


def convert_corpus(
    fmt: str,
    input_path: PathLike,
    output_path: PathLike,
    *,
    max_chars: int = 500,
    dev_output: Optional[PathLike] = None,
    dev_ratio: float = 0.1,
    seed: int = 0,
    carve: str = "blocks",
    block_size: int = DEFAULT_BLOCK_SIZE,
    lines_dev_output: Optional[PathLike] = None,
    limit: Optional[int] = None,
    max_warnings: int = 10,
) -> Dict[str, object]:
    """Read a corpus and write it as ``.spacy`` (``DocBin``) file(s).

    Order of steps: read everything; keep the first ``limit`` docs (if given);
    carve ``dev_ratio`` of the docs into ``dev_output`` (if given, by whole
    sentences with ``seed``: runs of ``block_size`` consecutive docs with
    ``carve="blocks"``, single docs with ``carve="lines"``, see
    :func:`~.split.carve_dev`); split docs longer than ``max_chars`` characters
    (:func:`split_long`, ``0`` = no splitting). Counts are printed and returned
    for each step: ``read`` (the whole file), ``kept`` (after ``limit``), and
    ``outputs[NAME]`` with ``before_split`` and ``written`` counts, where NAME
    is ``train`` and ``dev`` when a dev set is carved, else ``output``; with
    a carved dev, its settings (``carve``) and how much of it training has
    seen (``dev_rates``, :func:`~.rates.split_rates`). The
    reader's own counts (blank lines, repairs) are under ``reader`` and the
    number of warnings under ``warnings``. Splitting is checked to keep every
    character, word and entity.

    ``lines_dev_output`` (with ``dev_output`` and ``carve="blocks"`` only)
    also carves, after the block dev, as many single docs at random from
    what is left (:func:`~.split.carve_lines`, same ``seed``) into a second
    dev set, written there (``outputs["dev_lines"]``, rates in
    ``lines_dev_rates``). Training then excludes both, so that one trained
    model can be scored on the carve of earlier versions and on the block
    carve: the difference is how much easier random lines make dev.

    Everything is checked before anything is written, and nothing partial is
    ever written: the options (``max_chars >= 0``, ``0 <= dev_ratio < 1``,
    ``carve``, ``block_size >= 1``, ``limit >= 1`` or None) and the paths (no output may be the input or
    the other output, see :func:`~spacy_crf.files.check_output_paths`) before
    reading; an empty corpus (no docs), or a dev carving that leaves the dev
    or the training part empty, is an error naming the input file; every
    part is split before the first is written; and each output is written
    to a temporary file in its directory and renamed into place.
    """
    check_convert_options(
        fmt, max_chars=max_chars, dev_ratio=dev_ratio, seed=seed, limit=limit, carve=carve, block_size=block_size
    )
    if lines_dev_output is not None and (dev_output is None or carve != "blocks"):
        raise ValueError("lines_dev_output needs a block-carved dev set: give dev_output and carve='blocks'")
    check_output_paths([input_path], [output_path, dev_output, lines_dev_output])
    is_cws = fmt == "sighan"
    stats: Dict[str, object] = {"format": fmt, "input": str(input_path)}
    docs = _read(fmt, input_path, stats, max_warnings)
    if limit is not None:
        docs = docs[:limit]
        stats["kept"] = corpus_counts(docs, is_cws)
        _print_counts(f"kept (limit {limit})", stats["kept"])  # type: ignore[arg-type]
    parts: List[Tuple[str, List[Doc], PathLike]]
    if dev_output is not None:
        train, dev = carve_dev(docs, dev_ratio, seed, carve=carve, block_size=block_size)
        carved: Dict[str, object] = {"carve": carve, "dev_ratio": dev_ratio, "seed": seed}
        if carve == "blocks":
            carved["block_size"] = block_size
        stats["carve"] = carved
        if not train or not dev:
            raise ValueError(
                f"{input_path}: carving a dev set with ratio {dev_ratio} from {len(docs)} docs leaves "
                f"{len(train)} training and {len(dev)} dev docs; both need at least one"
            )
        lines_dev: List[Doc] = []
        if lines_dev_output is not None:
            train, lines_dev = carve_lines(train, len(dev), seed)
            if not train:
                raise ValueError(
                    f"{input_path}: carving two dev sets of {len(dev)} docs from {len(docs)} docs leaves no training docs"
                )
            carved["lines_dev"] = len(lines_dev)
        parts = [("train", train, output_path), ("dev", dev, dev_output)]
        task = "cws" if is_cws else "ner"
        stats["dev_rates"] = split_rates(task, train, dev)
        _print_rates(stats["dev_rates"])  # type: ignore[arg-type]
        if lines_dev_output is not None:
            parts.append(("dev_lines", lines_dev, lines_dev_output))
            stats["lines_dev_rates"] = split_rates(task, train, lines_dev)
            msg.info("the second dev set, single lines drawn from the rest:")
            _print_rates(stats["lines_dev_rates"])  # type: ignore[arg-type]
    else:
        parts = [("output", docs, output_path)]
    how = (
        f"dev ratio {dev_ratio}, seed {seed}, " + (f"blocks of {block_size}" if carve == "blocks" else "lines")
        if dev_output is not None
        else None
    )
    # split every part before writing any, so that a SplitError leaves no output behind
    lines_how = f"as many single lines drawn from the rest, seed {seed}"
    prepared = [
        _split_part(name, part, path, max_chars, is_cws, lines_how if name == "dev_lines" else how)
        for name, part, path in parts
    ]
    stats["outputs"] = _write(prepared, max_chars)
    return stats


def _read(fmt: str, input_path: PathLike, stats: Dict[str, object], max_warnings: int) -> List[Doc]:
    """Every doc of the corpus; the counts, the reader's repairs and its
    warnings (the first ``max_warnings`` printed) go to ``stats``."""
    reader_stats: Counter = Counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CorpusWarning)
        docs = list(read_corpus(fmt, input_path, Vocab(), stats=reader_stats))
    corpus_warnings = [w for w in caught if issubclass(w.category, CorpusWarning)]
    for w in caught:
        if not issubclass(w.category, CorpusWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if not docs:
        raise CorpusFormatError(input_path, None, "no documents: the file is empty or has only blank lines")
    msg.divider(f"{fmt}: {input_path}")
    stats["read"] = corpus_counts(docs, fmt == "sighan")
    _print_counts("read", stats["read"])  # type: ignore[arg-type]
    stats["reader"] = dict(sorted(reader_stats.items()))
    if reader_stats:
        msg.table(stats["reader"], header=("reader count", "n"), divider=True)  # type: ignore[arg-type]
    stats["warnings"] = len(corpus_warnings)
    for w in corpus_warnings[:max_warnings]:
        msg.warn(str(w.message))
    if len(corpus_warnings) > max_warnings:
        msg.warn(f"... and {len(corpus_warnings) - max_warnings} more warnings")
    return docs


def _split_part(name: str, part: List[Doc], path: PathLike, max_chars: int, is_cws: bool, how: Optional[str]):
    """``part`` split into docs of at most ``max_chars`` characters, with the
    counts before and after (checked to keep every character, word and entity)."""
    before = corpus_counts(part, is_cws)
    if how is not None:
        _print_counts(f"{name} ({how})", before)
    cuts: Counter = Counter()
    pieces = _split_all(part, max_chars, cuts)
    written = corpus_counts(pieces, is_cws)
    for key in ("chars", "words", "entities"):
        if before.get(key) != written.get(key):  # pragma: no cover - guarded by split_long
            raise RuntimeError(f"splitting changed the {key} count: {before.get(key)} -> {written.get(key)}")
    n_split = sum(1 for doc in part if len(doc.text) > max_chars > 0)
    return name, pieces, Path(path), before, cuts, written, n_split


def _write(prepared, max_chars: int) -> Dict[str, object]:
    """Write every prepared part, each renamed into place only once all are written."""
    outputs: Dict[str, object] = {}
    with ExitStack() as stack:  # every output is renamed into place only once all are written
        for _name, pieces, out, *_ in prepared:
            DocBin(docs=pieces, store_user_data=False).to_disk(stack.enter_context(atomic_path(out)))
    for name, _pieces, out, before, cuts, written, n_split in prepared:
        outputs[name] = {
            "path": str(out),
            "before_split": before,
            "docs_split": n_split,
            "cuts": {kind: cuts[kind] for kind in reversed(CUT_KINDS)},
            "written": written,
        }
        msg.good(
            f"{name}: wrote {written['docs']:,} docs to {out}; {n_split:,} docs longer than "
            f"{max_chars} characters were split at {cuts['sentence']} sentence ends, "
            f"{cuts['clause']} clause marks, {cuts['token']} other token boundaries and "
            f"{cuts['hard']} cuts inside runs of digits/Latin letters"
        )
    return outputs
