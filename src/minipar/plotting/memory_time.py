"""Figure for the claim "N GPUs cut per-GPU memory N times": which parts really shrink."""

from __future__ import annotations

from minipar.cost.planner.breakdown import per_gpu_memory
from minipar.cost.units import GiB

LAYOUTS = {  # label -> keyword arguments of per_gpu_memory for N GPUs
    "data parallel (ZeRO-0)": lambda n: dict(d=n),
    "data parallel + ZeRO-3": lambda n: dict(d=n, zero=3),
    "tensor parallel, no sp": lambda n: dict(t=n),
    "tensor + sequence parallel": lambda n: dict(t=n, sp=True),
}


def memory_vs_gpus(dims: tuple, *, b=1, recompute="selective", ns=(1, 2, 4, 8), title=""):
    """Per-GPU GiB (model states + activations) against N for each layout, with the ideal
    total/N line, for the model ``dims`` = (L, h, a, s, V). Activations of one micro-batch of b
    sequences."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)
    from matplotlib.ticker import NullFormatter  # noqa: PLC0415 (lazy: matplotlib)

    fig, ax = plt.subplots(figsize=(7, 4.4))
    one = per_gpu_memory(*dims, b=b, recompute=recompute).total / GiB
    ax.plot(ns, [one / n for n in ns], "k--", label="ideal: total / N")
    for label, kw in LAYOUTS.items():
        ys = [per_gpu_memory(*dims, b=b, recompute=recompute, **kw(n)).total / GiB for n in ns]
        ax.plot(ns, ys, "o-", label=f"{label} ({ys[-1]:.0f} GiB at N={ns[-1]})")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("GPUs N")
    ax.set_ylabel("GiB per GPU (log scale)")
    ys = [y for line in ax.get_lines() for y in line.get_ydata()]
    lo, hi = min(ys) / 1.5, max(ys) * 1.5
    ticks = [t for t in (10, 20, 50, 100, 200, 500, 1000, 2000, 5000) if lo <= t <= hi]
    ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2, frameon=False)
    fig.tight_layout()
    return fig
