"""Figures for the context-parallel chapter (matplotlib; each returns a Figure)."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch


def balance(cp: int, measured: dict[str, list[float]], model: dict[str, list[float]], title=""):
    """Forward attention GFLOPs per rank, contiguous and zigzag: measured bars, model markers."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for k, (layout, color) in enumerate((("contiguous", "#3182bd"), ("zigzag", "#e6550d"))):
        xs = [r + (k - 0.5) * 0.4 for r in range(cp)]
        gflop = [f / 1e9 for f in measured[layout]]
        ax.bar(xs, gflop, 0.4, color=color, label=f"{layout}, FlopCounterMode")
        ax.plot(xs, [f / 1e9 for f in model[layout]], "k_", ms=16, mew=2)
    ax.plot([], [], "k_", ms=16, mew=2, label="cost model")
    ax.set_xticks(range(cp), [f"rank {r}" for r in range(cp)])
    ax.set_ylabel("attention GFLOP (forward)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def memory(cps, measured: list[int], scores: int, title=""):
    """Saved bytes per rank against cp, with the materialised-scores layer at cp = 1."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    xs, label = [str(c) for c in cps], "CP layers (blockwise attention), measured"
    ax.bar(xs, [m / 1e3 for m in measured], color="#3182bd", label=label)
    ax.plot(xs, [measured[0] / c / 1e3 for c in cps], "k_", ms=18, mew=2, label="cp = 1 value / cp")
    label = "course layer with s × s scores, cp = 1"
    ax.axhline(scores / 1e3, color="#e6550d", ls="--", lw=1, label=label)
    ax.set_xlabel("cp")
    ax.set_ylabel("saved kB per rank")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def timeline(per_rank: list[list[dict]], title=""):
    """One ring-attention forward: per rank and step, block compute (bars) and the K/V transfer
    from post to completed wait (thin bars below)."""
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.7 * len(per_rank)))
    for r, events in enumerate(per_rank):
        for e in events:
            c0, c1 = e["compute"]
            kw = dict(height=0.35, color="#3182bd", edgecolor="white")
            ax.barh(r + 0.15, (c1 - c0) * 1e3, left=c0 * 1e3, **kw)
            kw = dict(ha="center", va="center", color="white", fontsize=7)
            ax.text((c0 + c1) / 2 * 1e3, r + 0.15, f"{e['src']}", **kw)
            if e["comm"] is not None:
                m0, m1 = e["comm"]
                ax.barh(r - 0.22, (m1 - m0) * 1e3, left=m0 * 1e3, height=0.18, color="#e6550d")

    handles = [
        Patch(color="#3182bd", label="block compute (number: K/V's home rank)"),
        Patch(color="#e6550d", label="K/V transfer, posted → wait returned"),
    ]
    ax.set_yticks(range(len(per_rank)), [f"rank {r}" for r in range(len(per_rank))])
    ax.invert_yaxis()
    ax.set_xlabel("ms since the rank's call began (ranks start together after a barrier)")
    ax.set_title(title)
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig
