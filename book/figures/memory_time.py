"""Figures of the memory-and-time chapter, drawn from the cost model: the per-GPU memory stack
under ZeRO (``minipar.cost.planner.breakdown``), activation memory per setting of Korthikanti et al.'s
Table 2 (``minipar.cost.chapters.memory_time``), memory against the number of GPUs for four layouts, and a
roofline of one layer's kernels (``minipar.cost.kernels.compute``)."""

from __future__ import annotations

from figures.kit import figure
from minipar.cost.chapters.memory_time import activation_bytes_per_layer
from minipar.cost.kernels import compute
from minipar.cost.kernels.hardware import gpu
from minipar.cost.planner.breakdown import per_gpu_memory
from minipar.cost.units import GiB

PARTS = ("weights", "gradients", "optimizer", "activations")
# A 7B Llama-like shape (Touvron et al. 2023: L = 32, h = 4096, a = 32, V = 32000), 4096 tokens
SHAPE7B = dict(L=32, h=4096, a=32, s=4096, V=32000, b=1, recompute="selective")


def _stack(ax, pal, labels, rows, cap=None, cap_label=""):
    """Stacked bars: one per row of ``rows`` (a MemoryBreakdown), the four parts in GiB."""
    x = range(len(rows))
    bottom = [0.0] * len(rows)
    for i, part in enumerate(PARTS):
        vals = [getattr(r, part) / GiB for r in rows]
        ax.bar(x, vals, bottom=bottom, color=pal.color(i), edgecolor=pal.fg, lw=0.5, label=part)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for i, total in enumerate(bottom):
        ax.text(i, total + 2, f"{total:.0f}", ha="center", va="bottom", fontsize=9, color=pal.fg)
    if cap is not None:
        ax.axhline(cap, color=pal.fg, ls="--", lw=1)
        ax.text(len(rows) - 0.5, cap - 2, cap_label, ha="right", va="top", fontsize=9)
    ax.set_ylim(0, max(bottom) * 1.3)
    ax.set_xticks(list(x), labels)
    ax.tick_params(axis="x", length=0)
    for s in ("top", "right"):
        ax.spines[s].set_visible(False)


@figure(
    draws=[
        "minipar.cost.planner.breakdown.per_gpu_memory",
        "minipar.cost.chapters.memory_time.model_state_bytes",
        "minipar.cost.chapters.memory_time.pipeline_first_stage_activation_bytes",
    ],
    phone=True,
)
def memory_stack(pal):
    """Per-GPU memory of a 7B model (mixed-precision Adam, 4096-token sequences, selective
    recomputation): one GPU, then 8 data-parallel GPUs under each ZeRO stage. On a phone the
    legend goes below the bars, in two columns."""
    rows = [per_gpu_memory(**SHAPE7B)]
    rows += [per_gpu_memory(**SHAPE7B, d=8, zero=z) for z in range(4)]
    labels = ["1 GPU", "d = 8\nZeRO-0", "d = 8\nZeRO-1", "d = 8\nZeRO-2", "d = 8\nZeRO-3"]
    if pal.phone:  # the stage alone under each bar, d = 8 said once
        labels = ["1 GPU", "0", "1", "2", "3"]
    cap = gpu("H100-SXM").memory_bytes / GiB
    fig, ax = pal.subplots(3.7, 4.4) if pal.phone else pal.subplots(6.4, 3.4)
    _stack(ax, pal, labels, rows, cap, f"one H100: {cap:.0f} GiB")
    ax.set_ylabel("GiB per GPU")
    if pal.phone:
        ax.set_xlabel("d = 8 GPUs at ZeRO stage")
        ax.legend(loc="upper left", bbox_to_anchor=(-0.2, -0.2), ncol=2, fontsize=9)
    else:
        ax.legend(loc="upper right", ncol=4, fontsize=9)
    fig.tight_layout()
    return fig


GPT3 = dict(s=2048, b=1, h=12288, a=96)  # Brown et al. 2020; one sequence per micro-batch
SETTINGS = (  # label -> activation_bytes_per_layer keywords
    ("no parallelism", {}),
    ("t = 8", dict(t=8)),
    ("t = 8, sequence parallel", dict(t=8, sp=True)),
    ("t = 8, SP, selective recompute", dict(t=8, sp=True, recompute="selective")),
    ("t = 8, full recompute", dict(t=8, recompute="full")),
)


@figure(draws=["minipar.cost.chapters.memory_time.activation_bytes_per_layer"], phone=True)
def activation_settings(pal):
    """GPT-3's activations for one 2048-token sequence over all 96 layers, per GPU, in each
    setting of Korthikanti et al.'s Table 2. On a phone each setting's name sits above its bar."""
    L = 96
    vals = [L * activation_bytes_per_layer(**GPT3, **kw) / GiB for _, kw in SETTINGS]
    fig, ax = pal.subplots(3.7, 3.9) if pal.phone else pal.subplots(6.4, 2.6)
    y = range(len(SETTINGS))[::-1]
    ax.barh(
        list(y),
        vals,
        height=0.45 if pal.phone else 0.8,
        color=pal.color(3),
        edgecolor=pal.fg,
        lw=0.5,
    )
    for yi, v in zip(y, vals):
        ax.text(v + 3, yi, f"{v:.1f} GiB", va="center", fontsize=9, color=pal.fg)
    if pal.phone:
        for yi, (label, _) in zip(y, SETTINGS):
            ax.text(2, yi + 0.3, label, va="bottom", fontsize=9, color=pal.fg)
        ax.set_yticks([])
        ax.set_ylim(-0.5, len(SETTINGS) - 0.1)
    else:
        ax.set_yticks(list(y), [label for label, _ in SETTINGS])
    ax.set_xlabel("activation memory per GPU, 96 layers (GiB)")
    ax.set_xlim(0, max(vals) * 1.22)
    for s in ("top", "right"):
        ax.spines[s].set_visible(False)
    fig.tight_layout()
    return fig


LAYOUTS = (  # label -> per_gpu_memory keywords for N GPUs
    ("data parallel (ZeRO-0)", lambda n: dict(d=n)),
    ("data parallel + ZeRO-3", lambda n: dict(d=n, zero=3)),
    ("tensor parallel", lambda n: dict(t=n)),
    ("tensor + sequence parallel", lambda n: dict(t=n, sp=True)),
)
SHAPE70B = dict(L=80, h=8192, a=64, s=4096, V=32000, b=1, recompute="selective")


@figure(draws=["minipar.cost.planner.breakdown.per_gpu_memory"], phone=True)
def memory_vs_gpus(pal):
    """Per-GPU memory of a Llama-2-70B-like shape against the number of GPUs N, for four
    layouts, with the ideal total / N. On a phone the legend goes below the axes."""
    ns = (1, 2, 4, 8)
    one = per_gpu_memory(**SHAPE70B).total / GiB
    fig, ax = pal.subplots(3.7, 4.4) if pal.phone else pal.subplots(6.4, 3.4)
    ax.plot(
        ns, [one / n for n in ns], color=pal.fg, ls="--", lw=1.4, label="ideal: total / N", zorder=5
    )
    for i, (label, kw) in enumerate(LAYOUTS):
        ys = [per_gpu_memory(**SHAPE70B, **kw(n)).total / GiB for n in ns]
        ax.plot(ns, ys, marker="o", ms=4, color=pal.color(i), lw=1.6, label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ns, [str(n) for n in ns])
    ticks = [100, 200, 500, 1000]
    ax.set_yticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set(xlabel="GPUs N", ylabel="GiB per GPU (log scale)")
    ax.grid(True, lw=0.5)
    pal.legend(ax, "center left", at=(1.01, 0.5), below=(-0.2, -0.2), fontsize=9)
    fig.tight_layout()
    return fig


MARKERS = ("o", "s", "^", "D", "v", "P")  # one shape per kernel of the roofline


@figure(
    draws=[
        "minipar.cost.kernels.compute.layer_gemms",
        "minipar.cost.kernels.compute.gpu_gemm_seconds",
        "minipar.cost.kernels.compute.optimizer_seconds",
    ],
    phone=True,
)
def roofline(pal):
    """The H100's roofline (the bf16 GEMM ceiling η·F and the HBM slope) with the FLOP rate the
    cost model gives each forward GEMM of one GPT-3 layer at t = 8 and the Adam step. On a phone
    the legend goes below the axes."""
    g = gpu("H100-SXM")
    ceiling = g.peak_flops["bf16"] * g.gemm_efficiency
    names = ("QKV", "projection", "h→4h", "4h→h", "QKᵀ and attention·V", None)
    points = []
    for name, (n, M, N, K) in zip(names, compute.layer_gemms(1, 2048, 12288, 96, 8)):
        if name is None:  # attention·V: the same shape as QKᵀ turned around, the same point
            continue
        flops = 2.0 * n * M * N * K
        moved = 2.0 * n * (M * K + K * N + M * N)  # 16-bit operands and output, once each
        points.append((name, flops / moved, flops / compute.gpu_gemm_seconds(g, M, N, K, n)))
    params = 175e9 / 8  # one tensor-parallel rank's share of GPT-3
    adam_flops = 10 * params  # ~10 FLOPs per parameter, 30 bytes (optimizer_seconds)
    points.append(
        ("Adam step", adam_flops / (30 * params), adam_flops / compute.optimizer_seconds(params, g))
    )
    xs = [10**k for k in range(-1, 5)]
    xs_fine = [10 ** (k / 10) for k in range(-10, 41)]
    fig, ax = pal.subplots(3.7, 5.6) if pal.phone else pal.subplots(6.4, 3.6)
    ax.loglog(
        xs_fine,
        [min(ceiling, x * g.hbm_bandwidth) / 1e12 for x in xs_fine],
        color=pal.fg,
        lw=1.6,
        label="roofline: min(η·F, I·W_HBM)",
    )
    ax.axhline(
        g.peak_flops["bf16"] / 1e12, color=pal.muted, ls=":", lw=1.2, label="datasheet peak F"
    )
    # QKV, h→4h and 4h→h land on nearly one point: hollow markers of distinct shapes, largest
    # first, so the ones that coincide nest inside each other instead of hiding each other.
    for i, (name, x, y) in enumerate(points):
        ax.plot(
            [x],
            [y / 1e12],
            MARKERS[i],
            color=pal.color(i),
            mfc="none",
            mew=1.6,
            ms=12 - 1.5 * i,
            label=f"{name}: {y / 1e12:.3g} TFLOP/s",
        )
    ax.set(
        xlabel="arithmetic intensity I\n(FLOP per byte of HBM traffic)"
        if pal.phone
        else "arithmetic intensity I (FLOP per byte of HBM traffic)",
        ylabel="TFLOP/s",
        xlim=(xs[0], xs[-1]),
        ylim=(0.1, 2000),
    )
    ax.grid(True, which="major", lw=0.5)
    pal.legend(ax, "center left", at=(1.01, 0.5), below=(-0.2, -0.27), fontsize=9)
    fig.tight_layout()
    return fig
