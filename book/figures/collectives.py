"""Figures of the collectives chapter: the primitives' definitions, the ring all-reduce's chunks
step by step (from ``minipar.collectives``), and the α-β cost of the all-reduce algorithms (from
``minipar.cost.network.collectives``)."""

from __future__ import annotations

from figures.kit import figure
from minipar.collectives import primitives, ring
from minipar.cost.kernels.hardware import LINKS
from minipar.cost.network import collectives as cc

SUM = "#c8c8c8"  # fill of a cell that holds a sum (the same in both themes, dark text on it)
INK = "#111111"  # text on a filled cell
DARK_FILLS = ("#0072B2", "#D55E00")  # the blue and vermilion series colours: white text


def _box(ax, x, y, fill, text, pal, *, lw=0.6, edge=None, dashed=False, size=9):
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    ax.add_patch(
        plt.Rectangle(
            (x, y),
            1,
            1,
            facecolor=fill,
            edgecolor=edge or pal.fg,
            lw=lw,
            ls="--" if dashed else "-",
        )
    )
    ink = "white" if fill in DARK_FILLS else INK  # dark text is hard to read on these
    ax.text(x + 0.5, y + 0.5, text, ha="center", va="center", fontsize=size, color=ink)


def _bare(ax):
    ax.set_xticks([])
    ax.set_yticks([])
    for s in ax.spines.values():
        s.set_visible(False)
    ax.set_aspect("equal")


SHOWN = ("broadcast", "reduce", "all-reduce", "reduce-scatter", "all-gather", "all-to-all")


@figure(
    draws=[
        "minipar.collectives.primitives.example_inputs",
        "minipar.collectives.primitives.primitive_outputs",
    ],
    phone=True,
)
def primitives_before_after(pal):
    """Each primitive on 3 ranks: every rank's buffer before (left) and after (right). A cell's
    colour is the rank its value came from; grey cells hold sums; dashed: unspecified. On a
    phone the six panels stand in one column."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    n = 3
    if pal.phone:
        fig, axes = pal.subplots(3.7, 8.4, nrows=6, ncols=1)
    else:
        fig, axes = pal.subplots(6.8, 4.4, nrows=3, ncols=2)
    for ax, op in zip(axes.flat, SHOWN):
        before = primitives.example_inputs(op, n)
        after = primitives.primitive_outputs(op, before)
        x_after = n + 1.2  # the same place in every panel
        for r in range(n):
            y = n - 1 - r
            ax.text(-0.25, y + 0.5, f"r{r}", ha="right", va="center", fontsize=9, color=pal.fg)
            for j, v in enumerate(before[r]):
                _box(ax, j, y, pal.color(int(v) // 10), f"{v:g}", pal)
            if after[r] is None:
                ax.add_patch(
                    plt.Rectangle(
                        (x_after, y), len(before[r]), 1, fill=False, ec=pal.muted, ls="--", lw=0.6
                    )
                )
                ax.text(
                    x_after + len(before[r]) / 2,
                    y + 0.5,
                    "unspecified",
                    ha="center",
                    va="center",
                    fontsize=9,
                    color=pal.muted,
                )
                continue
            for j, v in enumerate(after[r]):
                fill = SUM if v >= 10 * n else pal.color(int(v) // 10)
                _box(ax, x_after + j, y, fill, f"{v:g}", pal)
        ax.annotate(
            "",
            xy=(x_after - 0.15, n / 2),
            xytext=(len(before[0]) + 0.15, n / 2),
            arrowprops=dict(arrowstyle="->", color=pal.fg, lw=1.2),
        )
        ax.set_title(op, fontsize=10, color=pal.fg)
        ax.set(xlim=(-0.9, 3 * n + 1.3), ylim=(-0.1, n + 0.1))
        _bare(ax)
    fig.tight_layout(h_pad=0.6, w_pad=0.8)
    return fig


def _fill(count: int, n: int) -> str:
    """Fill of a chunk that holds ``count`` of the n ranks' values: light to the full sum."""
    if count == n:
        return "#009E73"  # green: the finished sum
    ramp = ("#e6e6e6", "#bfe0f5", "#7cc3ec", "#56B4E9")
    return ramp[min(count - 1, len(ramp) - 1)]


@figure(
    draws=[
        "minipar.collectives.ring.ring_all_reduce_contributions",
        "minipar.collectives.ring.reduce_scatter_step",
        "minipar.collectives.ring.all_gather_step",
    ],
    phone=True,
)
def ring_all_reduce(pal):
    """The ring all-reduce on 4 ranks, one panel per step: rank (rows) × chunk (columns); a
    cell lists the ranks whose values it sums; the cells with a thick orange edge were just received.
    On a phone the panels stand in four rows of two."""
    n = 4
    snaps = ring.ring_all_reduce_contributions(n)
    if pal.phone:  # four rows of two panels, the key in the last slot
        fig, axes = pal.subplots(3.7, 7.6, nrows=4, ncols=2)
        panels = [ax for row in axes for ax in row]
        slots, key, labelled = panels[:7], panels[7], [row[0] for row in axes]
    else:
        fig, axes = pal.subplots(6.8, 3.9, nrows=2, ncols=4)
        slots, key = list(axes[0]) + list(axes[1][:3]), axes[1][3]
        labelled = [axes[0][0], axes[1][0]]
    for ax, (phase, k, held) in zip(slots, snaps):
        step = {"reduce-scatter": ring.reduce_scatter_step, "all-gather": ring.all_gather_step}
        received = {r: step[phase](r, n, k)[1] for r in range(n)} if k >= 0 else {}
        for r in range(n):
            for c in range(n):
                ranks = held[r][c]
                thick = received.get(r) == c
                _box(
                    ax,
                    c,
                    n - 1 - r,
                    _fill(len(ranks), n),
                    "all" if len(ranks) == n else "".join(str(q) for q in sorted(ranks)),
                    pal,
                    lw=2.4 if thick else 0.5,
                    edge=pal.color(5) if thick else "#666666",
                )
        title = "start" if phase == "start" else f"{phase}\nstep {k + 1}"
        ax.set_title(title, fontsize=9, color=pal.fg)
        ax.set(xlim=(0, n), ylim=(0, n))
        _bare(ax)
    for ax in labelled:
        ax.set_yticks([n - 0.5 - r for r in range(n)], [f"rank {r}" for r in range(n)])
        ax.tick_params(length=0, labelsize=9)
    axes[0][0].set_xticks([c + 0.5 for c in range(n)], [f"c{c}" for c in range(n)])
    axes[0][0].xaxis.tick_top()
    axes[0][0].tick_params(length=0, labelsize=9)
    key.axis("off")
    key.text(
        0.0,
        0.5,
        "cell: the ranks summed\ninto that chunk\n\norange edge: received\nin this step\n\n"
        "green, all: the full sum",
        fontsize=9,
        va="center",
        color=pal.fg,
        transform=key.transAxes,
    )
    fig.tight_layout(h_pad=0.8, w_pad=0.4)
    return fig


ALGORITHMS = ("parameter-server", "binomial-tree", "recursive-doubling", "rabenseifner", "ring")


@figure(
    draws=[
        "minipar.cost.network.collectives.collective_time",
        "minipar.cost.network.collectives.double_binary_tree_all_reduce_time",
    ],
    phone=True,
)
def all_reduce_cost(pal):
    """α-β time of each all-reduce algorithm on the InfiniBand NDR preset: against the message
    size S on 16 ranks (left) and against the ranks n for S = 1 GB (right). On a phone the two
    panels stack."""
    link = LINKS["ib-ndr400"]
    sizes = [2.0**k for k in range(10, 33)]  # 1 KiB … 4 GiB
    ranks = [2, 4, 8, 16, 32, 64, 128]
    n, S = 16, 1e9

    def t(algo, m, x):
        if algo == "double binary tree":
            return cc.double_binary_tree_all_reduce_time(m, x, link.alpha, link.bandwidth)
        return cc.collective_time("all-reduce", algo, m, x, link.alpha, link.bandwidth)

    # Rabenseifner has the ring's bandwidth term, so at large S the two lines coincide: draw it
    # dotted, wider and above the ring, so both stay visible where they overlap.
    styles = {
        "rabenseifner": dict(ls=":", lw=2.6, zorder=4),
        "double binary tree": dict(ls="--", lw=1.6, zorder=3),
    }
    if pal.phone:
        fig, (a, b) = pal.subplots(3.7, 6.8, nrows=2)
    else:
        fig, (a, b) = pal.subplots(6.8, 3.4, ncols=2)
    for i, algo in enumerate((*ALGORITHMS, "double binary tree")):
        style = dict(color=pal.color(i), **styles.get(algo, dict(ls="-", lw=1.6, zorder=2)))
        a.loglog(sizes, [t(algo, n, x) for x in sizes], label=algo, **style)
        b.loglog(ranks, [t(algo, m, S) for m in ranks], marker="o", ms=3, **style)
    a.set(xlabel="S (bytes)", ylabel="time (s)", title=f"n = {n} ranks")
    b.set(xlabel="ranks n", title="S = 1 GB", ylabel="time (s)" if pal.phone else "")
    b.set_xscale("log", base=2)
    for ax in (a, b):
        ax.grid(True, which="major", lw=0.5)
    ncol, bottom = (2, 0.09) if pal.phone else (3, 0.14)
    fig.legend(loc="lower center", ncol=ncol, fontsize=9, bbox_to_anchor=(0.5, -0.02))
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


@figure(
    draws=[
        "minipar.cost.network.collectives.hierarchical_all_reduce_time",
        "minipar.cost.network.collectives.collective_time",
    ],
    phone=True,
)
def hierarchical(pal):
    """All-reduce of 1 GB over nodes of 8 GPUs: one flat ring whose every step crosses
    InfiniBand, against the hierarchical all-reduce (NVLink inside the node, a ring or a double
    binary tree across nodes). On a phone the legend goes below the axes."""
    intra, inter = LINKS["nvlink4-h100"], LINKS["ib-ndr400"]
    nodes, g, S = [2, 4, 8, 16, 32, 64, 128], 8, 1e9
    flat = [
        cc.collective_time("all-reduce", "ring", m * g, S, inter.alpha, inter.bandwidth)
        for m in nodes
    ]
    ring = [cc.hierarchical_all_reduce_time(m, g, S, intra, inter) for m in nodes]
    tree = [
        cc.hierarchical_all_reduce_time(m, g, S, intra, inter, "double-binary-tree") for m in nodes
    ]
    fig, ax = pal.subplots(3.7, 4.2) if pal.phone else pal.subplots(6.4, 3.2)
    ax.plot(
        nodes,
        [x * 1e3 for x in flat],
        marker="o",
        color=pal.color(5),
        label="one flat ring, every step over InfiniBand",
    )
    ax.plot(
        nodes,
        [x * 1e3 for x in ring],
        marker="s",
        color=pal.color(0),
        label="hierarchical, ring across nodes",
    )
    ax.plot(
        nodes,
        [x * 1e3 for x in tree],
        marker="^",
        ls="--",
        color=pal.color(2),
        label="hierarchical, double binary tree across nodes",
    )
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, max(flat) * 1e3 * 1.15)
    ax.set_xticks(nodes, [str(m) for m in nodes])
    ax.minorticks_off()
    ax.set(xlabel="nodes of 8 GPUs", ylabel="time (ms)")
    ax.grid(True, lw=0.5)
    pal.legend(ax, "center right", below=(-0.2, -0.2), fontsize=9)
    for s in ("top", "right"):
        ax.spines[s].set_visible(False)
    fig.tight_layout()
    return fig
