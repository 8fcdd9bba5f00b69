"""Figures for the data-parallel chapter (matplotlib; each returns a Figure)."""
from __future__ import annotations

import matplotlib.pyplot as plt


def timeline(per_rank: list[dict], title: str = ""):
    """Per-rank rows: forward, backward (with gradient-ready ticks), each bucket's all-reduce."""
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.9 * len(per_rank)))
    for r, t in enumerate(per_rank):
        y = 2 * r
        ax.broken_barh([(t["forward"][0] * 1e3, (t["forward"][1] - t["forward"][0]) * 1e3)],
                       (y + 1, 0.8), color="#9ecae1", label="forward" if r == 0 else None)
        ax.broken_barh([(t["backward"][0] * 1e3, (t["backward"][1] - t["backward"][0]) * 1e3)],
                       (y + 1, 0.8), color="#3182bd", label="backward" if r == 0 else None)
        ax.vlines([s * 1e3 for s in t["ready"]], y + 1, y + 1.8, color="k", lw=0.6)
        for i, (s, e) in enumerate(t["buckets"]):
            ax.broken_barh([(s * 1e3, (e - s) * 1e3)], (y + 0.1 + 0.15 * (i % 4), 0.15),
                           color="#e6550d", label="all-reduce" if r == 0 and i == 0 else None)
        ax.axvline(t["finish"] * 1e3, ymin=0, ymax=1, color="grey", ls=":", lw=0.8)
    ax.set_yticks([2 * r + 1 for r in range(len(per_rank))],
                  [f"rank {r}" for r in range(len(per_rank))])
    ax.set_xlabel("ms since the step started (ticks: a gradient is ready; dotted: finish())")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8, ncol=3)
    fig.tight_layout()
    return fig


def bucket_sweep(caps_mb, measured_s, modelled_s, no_overlap_s, compute_s):
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    ax.plot(caps_mb, [s * 1e3 for s in measured_s], "o-", label="measured (bucketed, overlap)")
    ax.plot(caps_mb, [s * 1e3 for s in modelled_s], "s--", label="model (dp_step_time)")
    ax.axhline(no_overlap_s * 1e3, color="C3", ls=":", label="measured: naive, no overlap")
    ax.axhline(compute_s * 1e3, color="grey", ls="-.", label="compute only")
    ax.set_xscale("log")
    ax.set_xlabel("bucket cap (MiB)")
    ax.set_ylabel("step time (ms)")
    ax.legend(fontsize=8)
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
                ax.bar(stage + off, v, 0.38, bottom=bottom, color=c, alpha=1 if j == 0 else 0.5,
                       label=f"{part} ({'measured' if j == 0 else 'model'})"
                       if stage == 0 else None)
                bottom += v
    ax.set_xticks(sorted(measured), [f"ZeRO-{s}" for s in sorted(measured)])
    ax.set_ylabel(f"KiB per rank (n = {n})")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def scaling(ns, curves: dict, title=""):
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    for label, eff in curves.items():
        ax.plot(ns, [100 * e for e in eff], "o-", label=label)
    ax.axhspan(80, 90, color="C2", alpha=0.1, label="article: 8 GPUs 80–90%")
    ax.axhspan(50, 70, color="C3", alpha=0.1, label="article: 64 GPUs 50–70%")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("GPUs (data-parallel ranks)")
    ax.set_ylabel("scaling efficiency (%)")
    ax.set_ylim(0, 105)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
