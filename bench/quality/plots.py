"""The PNG plots of the quality bench (matplotlib, headless), one per study, in docs/img/."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench._report import ROOT

IMG = ROOT / "docs" / "img"
#: a bench run with --no-write prints only: its plots would overwrite the recorded ones
ENABLED = True


def _plt():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bars(path: Path, sets: Sequence[str], systems: Sequence[str],
         values: dict[tuple[str, str], float], ylabel: str, title: str) -> None:
    """Grouped bars: one group per set, one bar per system."""
    if not ENABLED:
        return
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(7, 1.6 * len(sets) * len(systems) / 3), 3.8))
    width = 0.8 / max(len(systems), 1)
    for j, system in enumerate(systems):
        xs = [i + j * width for i in range(len(sets))]
        ys = [values.get((s, system), 0.0) for s in sets]
        ax.bar(xs, ys, width, label=system)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(sets))], sets)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    IMG.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def tradeoff(path: Path, points: dict[str, list[tuple[str, float, float]]], xlabel: str,
             ylabel: str, title: str, logx: bool = False) -> None:
    """Per series (a set): labelled points (label, x, y) joined by a line."""
    if not ENABLED:
        return
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, pts in points.items():
        ax.plot([p[1] for p in pts], [p[2] for p in pts], marker="o", label=name)
        for label, x, y in pts:
            ax.annotate(label, (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    IMG.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
