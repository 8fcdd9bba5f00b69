"""Figures for the tensor-parallel chapter (matplotlib; each returns a Figure). Every legend
sits outside the axes, right of them, so it never covers data."""

from __future__ import annotations

import matplotlib.pyplot as plt


def _legend_outside(ax) -> None:
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def activations(ts, measured, model, measured_sp, model_sp, title=""):
    """Saved bytes per rank of one layer: measured bars, Korthikanti's items as markers."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    x = range(len(ts))
    left, right = [i - 0.2 for i in x], [i + 0.2 for i in x]
    kb = lambda values: [m / 1e3 for m in values]
    ax.bar(left, kb(measured), 0.4, label="TP, measured", color="#3182bd")
    ax.bar(right, kb(measured_sp), 0.4, label="TP + SP, measured", color="#9ecae1")
    ax.plot(left, kb(model), "k_", ms=18, mew=2, label="Korthikanti items")
    ax.plot(right, kb(model_sp), "k_", ms=18, mew=2)
    ax.set_xticks(list(x), [f"t = {t}" for t in ts])
    ax.set_ylabel("saved kB per rank")
    ax.set_title(title)
    _legend_outside(ax)
    fig.tight_layout()
    return fig


def comm_compute(ts, ratios: dict[str, list[float]], title=""):
    """Forward communication / computation time of one layer against t, one line per link."""
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for name, r in ratios.items():
        ax.plot(ts, r, "o-", label=name)
    ax.axhline(1.0, color="grey", ls=":", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ts, [str(t) for t in ts])
    ax.set_xlabel("t (tensor-parallel ranks)")
    ax.set_ylabel("comm time / GEMM time")
    ax.set_title(title)
    _legend_outside(ax)
    fig.tight_layout()
    return fig


def overlap(per_rank: list[dict], title=""):
    """One backward of an async column-parallel layer per rank: the input-gradient GEMM, then
    the all-reduce of its result (launch to end of wait) beside the weight-gradient GEMM."""
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.8 * len(per_rank)))
    colors = {"grad_input_gemm": "#9ecae1", "weight_grad_gemm": "#3182bd", "all_reduce": "#e6550d"}
    rows = {"grad_input_gemm": 0.55, "weight_grad_gemm": 0.55, "all_reduce": 0.1}
    for r, ev in enumerate(per_rank):
        for k, c in colors.items():
            s, e = ev[k]
            label = k.replace("_", " ") if r == 0 else None
            ax.broken_barh([(s * 1e3, (e - s) * 1e3)], (2 * r + rows[k], 0.4), color=c, label=label)
    ax.set_yticks(
        [2 * r + 0.5 for r in range(len(per_rank))], [f"rank {r}" for r in range(len(per_rank))]
    )
    ax.set_xlabel("ms since backward reached the layer (all-reduce: launch to end of wait)")
    ax.set_title(title)
    _legend_outside(ax)
    fig.tight_layout()
    return fig
