"""The reliability diagram of a calibration: for each head (words,
entities), the accuracy of each confidence bin against its mean confidence,
before and after calibration, over the diagonal of perfect calibration, and
below it how many spans each bin holds (log scale). matplotlib, as the
package's other plots (:mod:`spacy_crf.plots`)."""

from pathlib import Path
from typing import Any, Dict

from ..files import atomic_path
from ..plots import pyplot

#: how a head's panel is titled
TITLES = {"words": "words", "ents": "entities"}
STYLES = {"before": ("tab:red", "o", "before"), "after": ("tab:blue", "s", "after")}


def _panel(top, bottom, result: Dict[str, Any]) -> None:
    width = None
    for which, (colour, marker, label) in STYLES.items():
        table = result[which]
        bins = [b for b in table["bins"] if b["count"]]
        t = result["temperature"] if which == "after" else result.get("temperature_before", 1.0)
        label = f"{label.split(' (')[0]} (T = {t:.3g})"
        top.plot(
            [b["confidence"] for b in bins],
            [b["accuracy"] for b in bins],
            marker=marker,
            color=colour,
            markersize=4,
            linewidth=1,
            label=f"{label}: ECE {100 * table['ece']:.2f} %",
        )
        width = table["bins"][0]["high"] - table["bins"][0]["low"]
        shift = -width / 4 if which == "before" else width / 4
        bottom.bar(
            [(b["low"] + b["high"]) / 2 + shift for b in table["bins"]],
            [b["count"] for b in table["bins"]],
            width=width / 2,
            color=colour,
            alpha=0.7,
        )
    top.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=0.8)
    top.set_xlim(0, 1.02)
    top.set_ylim(0, 1.02)
    top.set_ylabel("accuracy (exact span)")
    top.grid(alpha=0.3)
    top.legend(fontsize=7, loc="upper left")
    bottom.set_xlim(0, 1.02)
    bottom.set_yscale("log")
    bottom.set_xlabel("confidence (bin)")
    bottom.set_ylabel("spans")
    bottom.grid(alpha=0.3)


def draw_reliability(results: Dict[str, Dict[str, Any]], path: Path, title: str = "") -> Path:
    """Write the diagram as a PNG to ``path`` (through a temporary name).
    ``results``: by kind (``words``, ``ents``), ``{"component", "temperature",
    "n_docs", "before", "after"}`` with the reliability tables
    (:func:`spacy_crf.calibration.measure.reliability`) of the held-out docs."""
    plt = pyplot()
    kinds = [k for k in TITLES if k in results]
    fig, axes = plt.subplots(
        2, len(kinds), figsize=(4.2 * len(kinds), 4.8), squeeze=False, gridspec_kw={"height_ratios": [3, 1]}
    )
    for col, kind in enumerate(kinds):
        result = results[kind]
        _panel(axes[0][col], axes[1][col], result)
        n = result["after"]["n"]
        axes[0][col].set_title(f"{TITLES[kind]} ({result['component']}): {n:,} held-out spans", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        fig.savefig(f, format="png", dpi=90)
    plt.close(fig)
    return Path(path)
