"""Figures for the data-parallel chapter (matplotlib; each returns a Figure)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt


def timeline(per_rank: list[dict], title: str = ""):
    """Per-rank rows: forward, backward (with gradient-ready ticks), each bucket's all-reduce.

    The legend sits below the axes, so it covers no bar."""
    fig, ax = plt.subplots(figsize=(9, 1.6 + 0.9 * len(per_rank)))
    for r, t in enumerate(per_rank):
        y = 2 * r
        for key, color in (("forward", "#9ecae1"), ("backward", "#3182bd")):
            s, e = t[key]
            label = key if r == 0 else None
            ax.broken_barh([(s * 1e3, (e - s) * 1e3)], (y + 1, 0.8), color=color, label=label)
        ax.vlines(
            [s * 1e3 for s in t["ready"]],
            y + 1,
            y + 1.8,
            color="k",
            lw=0.6,
            label="a gradient is ready" if r == 0 else None,
        )
        for i, (s, e) in enumerate(t["buckets"]):
            ax.broken_barh(
                [(s * 1e3, (e - s) * 1e3)],
                (y + 0.1 + 0.15 * (i % 4), 0.15),
                color="#e6550d",
                label="bucket all-reduce" if r == 0 and i == 0 else None,
            )
        label = "finish() returns" if r == 0 else None
        ax.axvline(t["finish"] * 1e3, color="grey", ls=":", lw=0.8, label=label)
    ax.set_yticks(
        [2 * r + 1 for r in range(len(per_rank))], [f"rank {r}" for r in range(len(per_rank))]
    )
    ax.set_xlabel("time since the step started (ms)")
    ax.set_title(f"{title}: step {step_ms(per_rank):.0f} ms (slowest rank)", fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.28), fontsize=8, ncol=5, frameon=False)
    fig.tight_layout()
    return fig


def step_ms(per_rank: list[dict]) -> float:
    """Milliseconds from the step's start until the slowest rank's finish() returned."""
    return max(t["finish"] for t in per_rank) * 1e3


def bucket_sweep(caps_mb, measured_s, modelled_s, no_overlap_s, compute_s):
    """Step time against bucket cap: measured and modelled, with the naive and compute-only
    levels as references."""
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.plot(caps_mb, [s * 1e3 for s in measured_s], "o-", label="measured: bucketed, overlap")
    ax.plot(caps_mb, [s * 1e3 for s in modelled_s], "s--", label="model: dp_step_time")
    ax.axhline(no_overlap_s * 1e3, color="C3", ls=":", label="measured: naive, no overlap")
    ax.axhline(compute_s * 1e3, color="grey", ls="-.", label="measured: compute only")
    ax.set_xscale("log")
    ax.set_xticks(caps_mb, [f"{c:g}" for c in caps_mb])
    ax.set_xlabel("bucket cap (MiB)")
    ax.set_ylabel("step time (ms)")
    ax.set_ylim(0, None)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    fig.tight_layout()
    return fig


def stale_sgd(stale: dict):
    """Loss above the best loss any run reached, per update, for each staleness τ (log scale;
    float32 rounding sets the floor near 1e-7 of the loss)."""
    best = min(v for losses in stale.values() for v in losses if math.isfinite(v))
    fig, ax = plt.subplots(figsize=(7, 3.6))
    styles = ["-", "--", "-.", ":"]
    for k, (tau, losses) in enumerate(stale.items()):
        ax.semilogy(
            [max(v - best, 1e-8) if math.isfinite(v) else float("nan") for v in losses],
            styles[k % 4],
            lw=2,
            label=f"staleness τ = {tau}",
        )
    ax.set_ylim(1e-8, 1e4)
    ax.set_xlabel("update")
    ax.set_ylabel("loss − best loss reached")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    return fig


def memory_bars(measured: dict, modelled: dict, n: int):
    """Stacked per-rank model-state bytes per ZeRO stage: measured (left) vs modelled (right)."""
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    parts, colors = ("weights", "gradients", "optimizer"), ("#3182bd", "#31a354", "#e6550d")
    for stage in sorted(measured):
        for j, (src, off) in enumerate(((measured, -0.2), (modelled, 0.2))):
            bottom = 0
            for part, c in zip(parts, colors):
                v = src[stage][part] / 1024
                label = f"{part} ({'measured' if j == 0 else 'model'})" if stage == 0 else None
                alpha = 1 if j == 0 else 0.5
                ax.bar(stage + off, v, 0.38, bottom=bottom, color=c, alpha=alpha, label=label)
                bottom += v
    ax.set_xticks(sorted(measured), [f"ZeRO-{s}" for s in sorted(measured)])
    ax.set_ylabel(f"KiB per rank (n = {n})")
    ax.legend(fontsize=8, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    fig.tight_layout()
    return fig


def scaling(ns, curves: dict, title=""):
    fig, ax = plt.subplots(figsize=(7, 4.8))
    for label, eff in curves.items():
        ax.plot(ns, [100 * e for e in eff], "o-", label=label)
    ax.axhspan(80, 90, color="C2", alpha=0.1, label="claimed for 8 GPUs: 80–90 %")
    ax.axhspan(50, 70, color="C3", alpha=0.1, label="claimed for 64 GPUs: 50–70 %")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("GPUs (data-parallel ranks)")
    ax.set_ylabel("scaling efficiency (%)")
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    fig.tight_layout()
    return fig
