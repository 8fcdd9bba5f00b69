"""Figures for the expert-parallel chapter (matplotlib; each returns a Figure)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from minipar.cost.chapters.expert_parallel import imbalance


def _imbalance(ax, runs: dict[str, dict], ep: int, **kw) -> None:
    """Most loaded rank / mean rank (routed rows) at every training step, one line per run."""
    for label, r in runs.items():
        ax.plot(
            [imbalance(l, ep)["max/mean rank"] for l in r["routed per expert"]], label=label, **kw
        )
    ax.axhline(1.0, color="grey", ls=":", lw=0.8)
    ax.set_xlabel("training step")
    ax.set_ylabel(f"most loaded rank / mean (ep = {ep})")


def balance(runs: dict[str, dict], ep: int, title: str = ""):
    """:func:`_imbalance` of every run."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    _imbalance(ax, runs, ep)
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def rows_matrix(rows: list[list[int]], title: str = ""):
    """rows[s][d]: assignments rank s dispatches to rank d, as a heat map."""
    fig, ax = plt.subplots(figsize=(3.4, 3.0))
    im = ax.imshow(rows, cmap="Blues")
    for s, row in enumerate(rows):
        for d, v in enumerate(row):
            ax.text(d, s, str(v), ha="center", va="center", fontsize=9)
    ax.set_xlabel("to rank d")
    ax.set_ylabel("from rank s")
    ax.set_xticks(range(len(rows)))
    ax.set_yticks(range(len(rows)))
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    return fig


def balancing(runs: dict[str, dict], ep: int = 4):
    """Left: most loaded of ``ep`` ranks over the mean per step, one line per method. Right:
    dropped fraction of the assignments per step (the runs with a capacity)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
    _imbalance(a, runs, ep, lw=1)
    for label, r in runs.items():
        if any(r["dropped fraction"]):
            b.plot(r["dropped fraction"], label=label, lw=1)
    a.legend(fontsize=7)
    b.set_xlabel("training step")
    b.set_ylabel("dropped fraction of assignments")
    b.legend(fontsize=7)
    fig.tight_layout()
    return fig
