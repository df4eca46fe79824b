"""Other Chinese segmenters timed on the same texts as a pipeline
(``spacy crf speed --peers``), so that the comparison is one command.

Each peer is timed only when its package is installed (none is a
requirement): jieba (``jieba.lcut``, its default mode with the HMM for
unknown words), pkuseg (``pkuseg.pkuseg().cut``, the default model) and
thulac (``thulac.thulac(seg_only=True).cut``). They segment one text per
call, as their APIs take it; the chars/s is the median over ``repeats``
passes after one untimed warm-up text, like the pipeline's own figure.
"""

import contextlib
import io
import statistics
import time
from typing import Any, Callable, Dict, List, Optional


def _jieba() -> Optional[Callable[[str], Any]]:
    try:
        import jieba
    except ImportError:
        return None
    jieba.setLogLevel(60)  # the dictionary-loading messages would interleave with the tables
    return jieba.lcut


def _pkuseg() -> Optional[Callable[[str], Any]]:
    try:
        import pkuseg
    except ImportError:
        return None
    return pkuseg.pkuseg().cut


def _thulac() -> Optional[Callable[[str], Any]]:
    try:
        import thulac
    except ImportError:
        return None
    with contextlib.redirect_stdout(io.StringIO()):  # it prints while loading its model
        segmenter = thulac.thulac(seg_only=True)
    return lambda text: segmenter.cut(text, text=False)


PEERS: Dict[str, Callable[[], Optional[Callable[[str], Any]]]] = {
    "jieba": _jieba,
    "pkuseg": _pkuseg,
    "thulac": _thulac,
}


def peer_chars_per_second(segment: Callable[[str], Any], texts: List[str], repeats: int) -> float:
    """Median chars/s of ``segment`` called on each text, over ``repeats`` passes."""
    segment(texts[0])  # warm-up: lazy dictionary or model loading
    n_chars = sum(map(len, texts))
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for text in texts:
            segment(text)
        rates.append(n_chars / (time.perf_counter() - start))
    return statistics.median(rates)


def measure_peers(texts: List[str], repeats: int) -> List[Dict[str, Any]]:
    """``{"name", "version", "chars_per_s"}`` for each installed peer; one
    that fails to load or run is reported with its error instead."""
    from importlib.metadata import PackageNotFoundError, version

    results: List[Dict[str, Any]] = []
    for name, load in PEERS.items():
        try:
            segment = load()
        except Exception as err:  # a broken install: say so, time the others
            results.append({"name": name, "error": f"{type(err).__name__}: {err}"})
            continue
        if segment is None:
            continue
        try:
            package_version = version(name)
        except PackageNotFoundError:
            package_version = None
        try:
            rate = peer_chars_per_second(segment, texts, repeats)
        except Exception as err:
            results.append({"name": name, "version": package_version, "error": f"{type(err).__name__}: {err}"})
            continue
        results.append({"name": name, "version": package_version, "chars_per_s": round(rate, 1)})
    return results
