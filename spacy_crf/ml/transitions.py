"""Reading learned transition scores: a labelled table, a heatmap, and how
well the transitions agree with the tag scheme.

``validity`` is the share of (state, impossible next, possible next) triples
in which the impossible transition scores lower: 1.0 means that from every
state every forbidden move scores below every allowed one; about 0.5 means
the CRF learned nothing about the scheme's structure.
"""

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy

from ..plots import pyplot, save_figure
from .schemes import TransitionMask

START_ROW, END_COL = "<start>", "<end>"


class TransitionTable:
    """Transition scores labelled by tag, with start and end scores.

    ``matrix`` is the (K+1) x (K+1) table shown by ``str()`` and the heatmap:
    row ``<start>`` holds the start scores, column ``<end>`` the end scores,
    and cell (i, j) of the rest the score of tag i followed by tag j.
    """

    def __init__(
        self,
        tags: Sequence[str],
        transitions: numpy.ndarray,
        start: Optional[numpy.ndarray] = None,
        end: Optional[numpy.ndarray] = None,
        allowed: Optional[TransitionMask] = None,
    ):
        self.tags = list(tags)
        self.transitions = numpy.asarray(transitions, dtype="float64")
        K = len(self.tags)
        if self.transitions.shape != (K, K):
            raise ValueError(f"transitions has shape {self.transitions.shape}, expected ({K}, {K}).")
        self.start = numpy.zeros(K) if start is None else numpy.asarray(start, dtype="float64")
        self.end = numpy.zeros(K) if end is None else numpy.asarray(end, dtype="float64")
        self.allowed = allowed

    @property
    def row_labels(self) -> List[str]:
        return [START_ROW] + self.tags

    @property
    def col_labels(self) -> List[str]:
        return self.tags + [END_COL]

    @property
    def matrix(self) -> numpy.ndarray:
        K = len(self.tags)
        table = numpy.full((K + 1, K + 1), numpy.nan)
        table[0, :K] = self.start
        table[1:, :K] = self.transitions
        table[1:, K] = self.end
        return table

    def score(self, prev: str, nxt: str) -> float:
        """Score of ``nxt`` after ``prev``; ``<start>``/``<end>`` allowed."""
        if prev == START_ROW:
            return float(self.start[self.tags.index(nxt)])
        if nxt == END_COL:
            return float(self.end[self.tags.index(prev)])
        return float(self.transitions[self.tags.index(prev), self.tags.index(nxt)])

    def _rankings(self):
        """Per state (start first): the state's label, the indices of its
        impossible and possible next tags, and the matrix ``right`` with
        ``right[a, b]`` true where impossible tag a scores below possible tag b."""
        if self.allowed is None:
            raise ValueError("validity needs the scheme's allowed transitions.")
        rows = [(START_ROW, self.start, self.allowed.start)]
        rows += [(tag, self.transitions[i], self.allowed.transitions[i]) for i, tag in enumerate(self.tags)]
        for state, scores, ok in rows:
            impossible, possible = numpy.flatnonzero(~ok), numpy.flatnonzero(ok)
            if len(impossible) and len(possible):
                yield state, impossible, possible, scores[impossible][:, None] < scores[possible][None, :]

    def validity(self) -> Optional[float]:
        """Share of (state, impossible next, possible next) triples ranked right.

        Start (as a state) is included when the scheme restricts first tags.
        None when the scheme forbids nothing (e.g. "tag").
        """
        good = total = 0
        for _, _, _, right in self._rankings():
            good += int(right.sum())
            total += right.size
        return good / total if total else None

    def violations(self) -> List[Tuple[str, str, str]]:
        """The (state, impossible next, possible next) triples ranked wrong:
        the impossible move scores at least as high as the possible one."""
        return [
            (state, self.tags[impossible[a]], self.tags[possible[b]])
            for state, impossible, possible, right in self._rankings()
            for a, b in zip(*numpy.nonzero(~right))
        ]

    def to_dict(self) -> Dict[str, object]:
        out: Dict[str, object] = {
            "tags": self.tags,
            "transitions": self.transitions.tolist(),
            "start": self.start.tolist(),
            "end": self.end.tolist(),
        }
        if self.allowed is not None:
            out["allowed"] = self.allowed.transitions.tolist()
            out["validity"] = self.validity()
        return out

    @classmethod
    def from_dict(cls, data: Dict[str, object], allowed: Optional[TransitionMask] = None) -> "TransitionTable":
        return cls(
            data["tags"],
            numpy.array(data["transitions"]),
            numpy.array(data["start"]),
            numpy.array(data["end"]),
            allowed,
        )

    def __str__(self) -> str:
        from wasabi import table

        rows = [
            [label] + [f"{v:.2f}" if not numpy.isnan(v) else "" for v in row]
            for label, row in zip(self.row_labels, self.matrix)
        ]
        return table(
            rows, header=["from \\ to"] + self.col_labels, divider=True, aligns=["l"] + ["r"] * len(self.col_labels)
        )

    def plot(self, path: Union[str, Path], title: Optional[str] = None) -> Path:
        """Save the table as a heatmap PNG; forbidden moves are hatched."""
        plt = pyplot()
        table = self.matrix
        K = len(self.tags)
        size = max(4.0, 0.45 * (K + 1) + 2)
        fig, ax = plt.subplots(figsize=(size + 1, size))
        limit = float(numpy.nanmax(numpy.abs(table))) or 1.0
        image = ax.imshow(numpy.ma.masked_invalid(table), cmap="RdBu_r", vmin=-limit, vmax=limit)
        ax.set_xticks(range(K + 1), self.col_labels, rotation=90 if K > 8 else 0)
        ax.set_yticks(range(K + 1), self.row_labels)
        ax.set_xlabel("next tag")
        ax.set_ylabel("previous tag")
        if K <= 12:
            for r in range(K + 1):
                for c in range(K + 1):
                    if not numpy.isnan(table[r, c]):
                        ax.text(c, r, f"{table[r, c]:.1f}", ha="center", va="center", fontsize=8)
        if self.allowed is not None:
            forbidden = numpy.zeros((K + 1, K + 1), dtype=bool)
            forbidden[0, :K] = ~self.allowed.start
            forbidden[1:, :K] = ~self.allowed.transitions
            forbidden[1:, K] = ~self.allowed.end
            for r, c in zip(*numpy.nonzero(forbidden)):
                ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch="//", edgecolor="0.3", lw=0))
        validity = self.validity() if self.allowed is not None else None
        subtitle = f" (validity {validity:.2f})" if validity is not None else ""
        ax.set_title((title or "CRF transition scores") + subtitle)
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
        return save_figure(fig, path, dpi=110)
