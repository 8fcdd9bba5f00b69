"""Figures of the tensor-parallel chapter, drawn from ``minipar.tensor_parallel`` and
``minipar.cost.chapters.tensor_parallel``."""

from __future__ import annotations

import textwrap

from figures.kit import figure
from minipar.cost.chapters.tensor_parallel import (
    comm_compute_ratio,
    layer_comm_fraction,
    tp_collectives_per_layer,
)
from minipar.cost.kernels.hardware import gpu, link
from minipar.tensor_parallel.layers import shard


def _owner(shape, dim, t):
    """For every element of a (rows, cols) weight, the rank whose ``shard`` holds it."""
    import torch  # noqa: PLC0415 (lazy: torch)

    full = torch.arange(shape[0] * shape[1]).view(shape)  # element ids
    owner = torch.empty(shape, dtype=torch.long)
    for r in range(t):
        ids = shard(full, dim, r, t)  # rank r's slice, exactly as the layers cut it
        owner.view(-1)[ids.reshape(-1)] = r
    return owner.tolist()


def _matrix(ax, pal, x0, y0, owner, cell, label, shape_text):
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    rows, cols = len(owner), len(owner[0])
    for i in range(rows):
        for j in range(cols):
            ax.add_patch(
                plt.Rectangle(
                    (x0 + j * cell, y0 - (i + 1) * cell),
                    cell,
                    cell,
                    facecolor=pal.color(owner[i][j]),
                    edgecolor=pal.fg,
                    lw=0.3,
                )
            )
    ax.text(x0 + cols * cell / 2, y0 + 0.15, label, ha="center", va="bottom", fontsize=10)
    ax.text(
        x0 + cols * cell / 2, y0 - rows * cell - 0.15, shape_text, ha="center", va="top", fontsize=9
    )


def _op(ax, pal, x, y, name, fwd, bwd):
    ax.text(
        x,
        y,
        name,
        ha="center",
        va="center",
        fontsize=12,
        fontweight="bold",
        bbox=dict(boxstyle="circle,pad=0.3", fc=pal.box, ec=pal.fg, lw=0.8),
    )
    ax.text(x, y - 0.55, f"fwd: {fwd}\nbwd: {bwd}", ha="center", va="top", fontsize=9)


@figure(draws=["minipar.tensor_parallel.layers.shard"], phone=True)
def mlp_split(pal):
    """The MLP Y = GeLU(X A) B on t = 4 ranks (h = 4 for the picture): A cut by columns, B by
    rows, exactly as ColumnParallelLinear and RowParallelLinear shard them; f before, g after.
    On a phone B stands below A, the GeLU arrow pointing down."""
    h, t = 4, 4
    # F.linear stores A as (4h, h) and B as (h, 4h); the maths draws A (h, 4h) and B (4h, h)
    a_stored = _owner((4 * h, h), 0, t)  # ColumnParallelLinear: shard(weight, 0, r, t)
    b_stored = _owner((h, 4 * h), 1, t)  # RowParallelLinear:    shard(weight, 1, r, t)
    a = [list(col) for col in zip(*a_stored)]  # (h, 4h): transpose of the stored weight
    b = [list(col) for col in zip(*b_stored)]  # (4h, h)
    cell = 0.28
    if pal.phone:
        fig, ax = pal.subplots(3.7, 5.0)
        _op(ax, pal, 0.5, -0.6, "f", "copy", "all-reduce")
        _matrix(ax, pal, 1.3, 0, a, cell, "A: column split", "(h, 4h); rank r: (h, 4h/t)")
        ax.annotate(
            "",
            xy=(3.54, -2.55),
            xytext=(3.54, -1.85),
            arrowprops=dict(arrowstyle="->", color=pal.fg),
        )
        ax.text(3.7, -2.2, "GeLU", ha="left", va="center", fontsize=9)
        _matrix(ax, pal, 2.98, -3.0, b, cell, "B: row split", "(4h, h); rank r: (4h/t, h)")
        _op(ax, pal, 5.3, -5.2, "g", "all-reduce", "copy")
        ranks_at, limits = (0.0, -3.0), dict(xlim=(-0.2, 6.6), ylim=(-8.4, 0.8))
    else:
        fig, ax = pal.subplots(6.6, 3.2)
        _op(ax, pal, 0.5, -0.6, "f", "copy", "all-reduce")
        _matrix(ax, pal, 1.3, 0, a, cell, "A: column split", "(h, 4h); rank r: (h, 4h/t)")
        ax.annotate(
            "", xy=(6.6, -0.6), xytext=(5.95, -0.6), arrowprops=dict(arrowstyle="->", color=pal.fg)
        )
        ax.text(6.27, -0.4, "GeLU", ha="center", va="bottom", fontsize=9)
        _matrix(ax, pal, 6.75, 1.6, b, cell, "B: row split", "(4h, h); rank r: (4h/t, h)")
        _op(ax, pal, 9.7, -0.6, "g", "all-reduce", "copy")
        ranks_at, limits = (10.8, 0.6), dict(xlim=(-0.2, 12.0), ylim=(-3.4, 2.2))
    for r in range(t):
        ax.text(
            ranks_at[0],
            ranks_at[1] - r * 0.5,
            f"rank {r}",
            fontsize=9,
            va="center",
            bbox=dict(boxstyle="square,pad=0.2", fc=pal.color(r), ec=pal.fg, lw=0.5),
            color="white" if r == 0 else "#111",  # white on the dark blue
        )
    ax.set(**limits)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig


def _flow_row(ax, pal, stages, shapes, colls, mode):
    """One row of :func:`block_flow`: the steps left to right, the tensor's shape on each arrow,
    f's and g's collectives under their boxes."""
    dx = 1.25
    for i, st in enumerate(stages):
        comm = st in ("f", "g")
        local = mode == "sp" and st in ("LN", "+")  # runs on the rank's s/t tokens
        fc = pal.color(5) if comm else pal.color(2) if local else pal.box
        ax.text(
            i * dx,
            0,
            st,
            ha="center",
            va="center",
            fontsize=9,
            color="#111" if comm or local else pal.fg,
            bbox=dict(boxstyle="round,pad=0.3", fc=fc, ec=pal.fg, lw=0.6),
        )
        if comm:
            fwd, bwd = colls[mode][st]
            ax.text(i * dx, -0.38, f"fwd {fwd}\nbwd {bwd}", ha="center", va="top", fontsize=9)
    half = [0.2 if len(st) == 1 else 0.45 for st in stages]  # box half-widths
    for i, shape in enumerate(shapes[mode]):  # the tensor on the arrow into stage i
        x1 = i * dx - half[i]
        x0 = (i - 1) * dx + half[i - 1] if i else x1 - 0.6
        ax.annotate(
            "",
            xy=(x1, 0),
            xytext=(x0, 0),
            arrowprops=dict(arrowstyle="->", color=pal.muted, lw=0.8),
        )
        ax.text((x0 + x1) / 2, 0.2, shape, ha="center", va="bottom", fontsize=9)
    ax.set(xlim=(-0.95, (len(stages) - 1) * dx + 0.3), ylim=(-1.05, 0.75))
    ax.axis("off")


def _flow_column(ax, pal, stages, shapes, colls, mode):
    """The phone layout of one row of :func:`block_flow`: the steps top to bottom, the tensor's
    shape beside each arrow, f's and g's collectives beside their boxes."""
    dy = 1.0
    half = [0.4 if "\n" in st else 0.24 for st in stages]  # box half-heights, data units
    for i, st in enumerate(stages):
        comm = st in ("f", "g")
        local = mode == "sp" and st in ("LN", "+")
        fc = pal.color(5) if comm else pal.color(2) if local else pal.box
        ink = "#111" if comm or local else pal.fg
        box = dict(boxstyle="round,pad=0.3", fc=fc, ec=pal.fg, lw=0.6)
        ax.text(0, -i * dy, st, ha="center", va="center", fontsize=9, color=ink, bbox=box)
        if comm:
            fwd, bwd = colls[mode][st]
            ax.text(0.45, -i * dy, f"fwd {fwd}\nbwd {bwd}", va="center", fontsize=9)
        y1 = -i * dy + half[i]
        y0 = -(i - 1) * dy - half[i - 1] if i else y1 + 0.45
        arrow = dict(arrowstyle="->", color=pal.muted, lw=0.8)
        ax.annotate("", xy=(0, y1), xytext=(0, y0), arrowprops=arrow)
        ax.text(
            -0.12,
            (y0 + y1) / 2,
            shapes[mode][i].replace("\n", " "),
            ha="right",
            va="center",
            fontsize=9,
        )
    ax.set(xlim=(-2.1, 2.4), ylim=(-(len(stages) - 1) * dy - 0.4, 0.75))
    ax.axis("off")


@figure(draws=["minipar.cost.chapters.tensor_parallel.tp_collectives_per_layer"], phone=True)
def block_flow(pal):
    """The MLP half of a layer under tensor parallelism (top) and with sequence parallelism
    (bottom): the shape between steps, where f and g sit and which collective each is, with
    the counts and sizes of the cost model for GPT-3's layer (attention is split the same way).
    On a phone each half runs top to bottom."""
    b, s, h, t = 1, 2048, 12288, 8
    ((ar, size, calls),) = tp_collectives_per_layer(b, s, h, t, 2)
    ops_sp = {op: (sz, n) for op, sz, n in tp_collectives_per_layer(b, s, h, t, 2, sp=True)}
    stages = ["LN", "f", "fc1\ncolumn", "GeLU", "fc2\nrow", "g", "+"]
    shapes = {
        "tp": [
            "(b,s,h)",
            "(b,s,h)",
            "(b,s,h)",
            "(b,s,4h/t)",
            "(b,s,4h/t)",
            "partial\n(b,s,h)",
            "(b,s,h)",
        ],
        "sp": [
            "(b,s/t,h)",
            "(b,s/t,h)",
            "(b,s,h)",
            "(b,s,4h/t)",
            "(b,s,4h/t)",
            "partial\n(b,s,h)",
            "(b,s/t,h)",
        ],
    }
    colls = {
        "tp": {"f": ("identity", ar), "g": (ar, "identity")},
        "sp": {"f": ("all-gather", "reduce-scatter"), "g": ("reduce-scatter", "all-gather")},
    }
    fig, axes = pal.subplots(3.7, 9.4, nrows=2) if pal.phone else pal.subplots(6.8, 3.6, nrows=2)
    for ax, mode in zip(axes, ("tp", "sp")):
        (_flow_column if pal.phone else _flow_row)(ax, pal, stages, shapes, colls, mode)
        if mode == "tp":
            title = f"TP, t = {t}: per layer {calls} {ar}s of {size / 1e6:.0f} MB (attention's 2 included)"
        else:
            ag, rs = ops_sp["all-gather"], ops_sp["reduce-scatter"]
            title = (
                f"TP + SP: {ag[1]} all-gathers, {rs[1]} reduce-scatters of {ag[0] / 1e6:.0f} MB;"
                " green steps run on s/t tokens"
            )
        ax.set_title(textwrap.fill(title, 40) if pal.phone else title, loc="left", fontsize=9)
    fig.tight_layout()
    return fig


@figure(draws=["minipar.cost.chapters.tensor_parallel.layer_comm_fraction"], phone=True)
def comm_share(pal):
    """Share of a GPT-3 layer's forward + backward time in its four all-reduces (nothing
    overlapped), H100 bf16 peak, b = 1, s = 2048, h = 12288, against t for three links. On a
    phone the legend goes below the axes."""
    flops = gpu("H100-SXM").peak_flops["bf16"]
    ts = [2, 4, 8, 16, 32, 64]
    links = [
        ("NVLink 4, 450 GB/s", "nvlink4-h100"),
        ("PCIe 5 x16, 63 GB/s", "pcie5-x16"),
        ("InfiniBand NDR, 50 GB/s", "ib-ndr400"),
    ]
    fig, ax = pal.subplots(3.7, 4.0) if pal.phone else pal.subplots(6.4, 3.0)
    for k, (label, name) in enumerate(links):
        L = link(name)
        share = [
            100
            * layer_comm_fraction(
                1, 2048, 12288, t, flops=flops, bandwidth=L.bandwidth, alpha=L.alpha
            )
            for t in ts
        ]
        ax.plot(ts, share, "o-", color=pal.color(k), label=label)
        ax.annotate(
            f"{share[2]:.0f} %",
            (8, share[2]),
            textcoords="offset points",
            xytext=(6, (-12, -12, 4)[k]),
            fontsize=9,
            color=pal.color(k),
        )
    ax.axvline(8, color=pal.muted, ls="--", lw=1)
    ax.text(8.4, 3, "one 8-GPU node", fontsize=9, color=pal.muted)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ts, [str(t) for t in ts])
    ax.set(xlabel="tensor-parallel degree t", ylabel="% of layer time communicating", ylim=(0, 100))
    ax.grid(True, lw=0.5)
    pal.legend(ax, "upper left", below=(-0.2, -0.2))
    for s in ("top", "right"):
        ax.spines[s].set_visible(False)
    return fig


#: hidden sizes of published shapes, marked on the roofline (Touvron et al. 2023; Brown et al. 2020)
SHAPES = (("Llama 2 7B", 4096), ("Llama 2 70B", 8192), ("GPT-3", 12288))


@figure(draws=["minipar.cost.chapters.tensor_parallel.comm_compute_ratio"], phone=True)
def tp_roofline(pal):
    """The forward all-reduce time over the GEMM time of one layer (H100 bf16 peak, b = 1,
    s = 2048) against the hidden size h, for t = 4 and 8 on NVLink 4 and t = 8 on InfiniBand:
    below 1 the layer is compute-bound, above 1 communication-bound."""
    flops = gpu("H100-SXM").peak_flops["bf16"]
    hs = [2 ** (k / 4) for k in range(40, 62)]  # 1024 ... 32768
    cases = [
        ("t = 4, NVLink 4", 4, "nvlink4-h100"),
        ("t = 8, NVLink 4", 8, "nvlink4-h100"),
        ("t = 8, InfiniBand NDR", 8, "ib-ndr400"),
    ]
    fig, ax = pal.subplots(3.7, 4.2) if pal.phone else pal.subplots(6.4, 3.2)
    ax.axhspan(1, 100, color=pal.grid, alpha=0.5, lw=0)
    ax.axhline(1, color=pal.fg, lw=1)
    ax.text(1100, 1.15, "communication-bound", fontsize=9, va="bottom")
    ax.text(1100, 0.87, "compute-bound", fontsize=9, va="top")
    for k, (label, t, name) in enumerate(cases):
        L = link(name)
        ratio = [
            comm_compute_ratio(
                1, 2048, round(h), t, flops=flops, bandwidth=L.bandwidth, alpha=L.alpha
            )
            for h in hs
        ]
        ax.loglog(hs, ratio, color=pal.color(k), lw=1.8, label=label)
        for j, (_, h) in enumerate(SHAPES):
            r = comm_compute_ratio(1, 2048, h, t, flops=flops, bandwidth=L.bandwidth, alpha=L.alpha)
            ax.plot([h], [r], ("o", "s", "^")[j], color=pal.color(k), ms=6)
    for name_, h in SHAPES:
        ax.axvline(h, color=pal.muted, ls=":", lw=1)
        ax.text(h * 1.03, 0.055, name_, fontsize=9, color=pal.muted, rotation=90, va="bottom")
    ax.set(
        xlabel="hidden size h",
        ylabel="all-reduce time / GEMM time",
        xlim=(hs[0], hs[-1]),
        ylim=(0.05, 40),
    )
    ax.set_xticks([1024, 2048, 4096, 8192, 16384, 32768], ["1k", "2k", "4k", "8k", "16k", "32k"])
    ax.minorticks_off()
    pal.legend(ax, "lower left", fontsize=9)
    for s_ in ("top", "right"):
        ax.spines[s_].set_visible(False)
    fig.tight_layout()
    return fig


#: the links the bandwidth view marks: (label, preset)
LINK_MARKS = (
    ("Ethernet", "eth-100g"),
    ("InfiniBand", "ib-ndr400"),
    ("NVLink 4", "nvlink4-h100"),
    ("NVLink 5", "nvlink5-b200"),
)


def bandwidth_to_break_even(h: int, t: int = 8, alpha: float = 2e-6) -> float:
    """Per-direction bandwidth (bytes/s) at which a layer's forward all-reduce time equals its
    GEMM time (b = 1, s = 2048, H100 bf16 peak), found by bisection on ``comm_compute_ratio``."""
    flops = gpu("H100-SXM").peak_flops["bf16"]
    lo, hi = 1e9, 1e14
    for _ in range(100):
        mid = (lo * hi) ** 0.5
        r = comm_compute_ratio(1, 2048, h, t, flops=flops, bandwidth=mid, alpha=alpha)
        lo, hi = (mid, hi) if r > 1 else (lo, mid)
    return hi


@figure(draws=["minipar.cost.chapters.tensor_parallel.comm_compute_ratio"], phone=True)
def tp_ratio_bandwidth(pal):
    """The forward all-reduce time over the GEMM time of one layer at t = 8 (H100 bf16 peak,
    b = 1, s = 2048, α = 2 µs) against the link's per-direction bandwidth, for three hidden
    sizes, with the link presets marked. On a phone the legend goes below the axes."""
    flops = gpu("H100-SXM").peak_flops["bf16"]
    ws = [10 ** (k / 20) for k in range(186, 251)]  # 2 GB/s ... 3.2 TB/s
    fig, ax = pal.subplots(3.7, 4.2) if pal.phone else pal.subplots(6.4, 3.2)
    ax.axhspan(1, 1000, color=pal.grid, alpha=0.5, lw=0)
    ax.axhline(1, color=pal.fg, lw=1)
    if pal.phone:  # the corners the lines leave empty
        ax.text(3e12, 40, "communication-\nbound", fontsize=9, va="center", ha="right")
        ax.text(2.2e9, 0.45, "compute-bound", fontsize=9, va="center")
    else:
        ax.text(2.2e9, 1.15, "communication-bound", fontsize=9, va="bottom")
        ax.text(2.2e9, 0.87, "compute-bound", fontsize=9, va="top")
    for j, (name, h) in enumerate(SHAPES):
        ratio = [
            comm_compute_ratio(1, 2048, h, 8, flops=flops, bandwidth=w, alpha=2e-6) for w in ws
        ]
        ax.loglog(ws, ratio, color=pal.color(j), lw=1.8, label=f"{name} (h = {h})")
        w_star = bandwidth_to_break_even(h)
        ax.plot([w_star], [1], "o", color=pal.color(j), ms=6, mec=pal.fg, mew=0.6)
    for label, name in LINK_MARKS:
        w = link(name).bandwidth
        ax.axvline(w, color=pal.muted, ls=":", lw=1)
        ax.text(w * 1.06, 0.033, label, fontsize=9, color=pal.muted, rotation=90, va="bottom")
    ax.set(
        xlabel="link bandwidth per direction (GB/s)",
        ylabel="all-reduce time / GEMM time",
        xlim=(ws[0], ws[-1]),
        ylim=(0.03, 100),
    )
    ticks = [1e10, 1e11, 1e12]
    ax.set_xticks(ticks, [f"{w / 1e9:.0f}" for w in ticks])
    ax.minorticks_off()
    pal.legend(ax, "upper right", fontsize=9)
    for s_ in ("top", "right"):
        ax.spines[s_].set_visible(False)
    fig.tight_layout()
    return fig
