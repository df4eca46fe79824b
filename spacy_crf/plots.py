"""Matplotlib set-up shared by the transition heatmaps and the project's
report plots (dev curves, the learning-rate study, the CPU-time curve).

matplotlib is an optional dependency (``spacy-crf[plot]``), so it is imported
only when a figure is drawn, on the Agg backend: the plots are written to
files by training machines that have no display.
"""

from pathlib import Path
from typing import Optional, Union


def pyplot():
    """``matplotlib.pyplot`` on the file-only Agg backend."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("Plotting needs matplotlib: pip install 'spacy-crf[plot]'") from None
    return plt


def subplots(*args, **kwargs):
    """``plt.subplots`` on the Agg backend: ``(fig, axes)``."""
    return pyplot().subplots(*args, **kwargs)


def finish_axes(ax, xlabel: str, ylabel: str, legend_size: int = 8) -> None:
    """Axis labels, a light grid and a legend of the labelled lines."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_size)


def save_figure(fig, path: Union[str, Path], title: Optional[str] = None, dpi: int = 120) -> Path:
    """Title (over all panels), lay out, write as PNG (creating folders) and
    close a figure, so that a report drawing many plots does not keep them."""
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path
