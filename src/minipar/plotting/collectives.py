"""Figures for the collectives chapter: primitives before/after, the ring step by step, and the
α-β cost of all-reduce algorithms (from :mod:`minipar.cost.network.collectives`)."""

from __future__ import annotations

from minipar.cost.kernels.hardware import LINKS
from minipar.cost.network import collectives as cc


def _cells(ax, rows, n, title, label=str, color=None):
    """Draw ``rows`` (one list of numbers per rank) as a grid of labelled, coloured cells."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    width = max(len(r) for r in rows)
    for i, row in enumerate(rows):
        for j, v in enumerate(row):
            c = color(v) if color else (plt.cm.tab10(int(v) // 10) if v < 10 * n else "0.8")
            ax.add_patch(plt.Rectangle((j, -i), 1, 1, facecolor=c, edgecolor="w", alpha=0.75))
            ax.text(j + 0.5, -i + 0.5, label(v), ha="center", va="center", fontsize=8)
    ax.set(xlim=(0, width), ylim=(-len(rows) + 1, 1), title=title)
    ax.set_yticks([-i + 0.5 for i in range(len(rows))], [f"rank {i}" for i in range(len(rows))])
    ax.set_xticks([])
    for s in ax.spines.values():
        s.set_visible(False)


def draw_primitives(demo: dict, ops=None):
    """Before (left) and after (right) of each primitive; colour = source rank, grey = a sum."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    ops = ops or list(demo)
    n = len(demo[ops[0]]["inputs"])
    size, ratios = (9, 1.45 * n * len(ops) / 3.2), dict(width_ratios=[1, 2])
    fig, axes = plt.subplots(len(ops), 2, figsize=size, squeeze=False, gridspec_kw=ratios)
    for (left, right), op in zip(axes, ops):
        note = " (non-root ranks: unspecified)" if op == "reduce" else ""
        _cells(left, demo[op]["inputs"], n, f"{op}: before", label=lambda v: f"{v:g}")
        _cells(right, demo[op]["outputs"], n, f"{op}: after{note}", label=lambda v: f"{v:g}")
    fig.tight_layout()
    return fig


def draw_ring_steps(steps: dict):
    """Each panel: rank (rows) × chunk (columns); a cell lists the ranks summed into it."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    n = steps["n"]
    snaps = list(zip(*steps["snapshots"]))  # step -> per-rank snapshot
    fig, axes = plt.subplots(2, n, figsize=(2.3 * n, 4.6), squeeze=False)
    who = lambda v: "".join(str(r) for r in range(n) if int(v) >> r & 1)
    shade = lambda v: plt.cm.Blues(0.15 + 0.8 * bin(int(v)).count("1") / n)
    slots = [axes[0][k] for k in range(n)] + [axes[1][k] for k in range(n - 1)]
    for ax, step in zip(slots, snaps):
        phase, k, _ = step[0]
        rows = [s[2][:: max(1, len(s[2]) // n)][:n] for s in step]  # one value per chunk
        title = "start" if phase == "start" else f"{phase} step {k + 1}"
        _cells(ax, rows, n, title, label=who, color=shade)
        ax.title.set_fontsize(9)
    axes[1][n - 1].axis("off")
    note = "cell text = ranks\nwhose values are\nsummed into it\n\n"
    note += f"sent per rank:\n{steps['sent'][0]} B = 2(n−1)/n·S\n(S = {steps['S']} B)"
    axes[1][n - 1].text(0, 0.5, note, fontsize=9, va="center")
    fig.tight_layout()
    return fig


ALL_REDUCE = ("parameter-server", "binomial-tree", "recursive-doubling", "rabenseifner", "ring")


def _sizes(lo=2**10, hi=2**32):
    out = [lo]
    while out[-1] < hi:
        out.append(out[-1] * 2)
    return out


def draw_all_reduce_algorithms(link: str = "ib-ndr400", n: int = 16, S: float = 1e9):
    """α-β time of each all-reduce algorithm: vs S at n ranks (left), vs n at S bytes (right)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    L = LINKS[link]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    sizes, ranks = _sizes(), [2, 4, 8, 16, 32, 64, 128]
    for algo in ALL_REDUCE:
        t = lambda m, s, algo=algo: cc.collective_time(
            "all-reduce", algo, m, s, L.alpha, L.bandwidth
        )
        a.loglog(sizes, [t(n, s) for s in sizes], label=algo)
        b.loglog(ranks, [t(m, S) for m in ranks], "o-", label=algo)
    a.set(title=f"all-reduce on {n} ranks, {link}", xlabel="S (bytes)", ylabel="time (s)")
    b.set(title=f"all-reduce of S = {S / 1e9:g} GB, {link}", xlabel="ranks n", ylabel="time (s)")
    b.set_xscale("log", base=2)
    a.legend(fontsize=8)
    fig.tight_layout()
    return fig


def draw_hierarchical(
    nodes=(2, 4, 8, 16, 32, 64),
    gpus_per_node: int = 8,
    S: float = 1e9,
    intra: str = "nvlink4-h100",
    inter: str = "ib-ndr400",
):
    """Hierarchical all-reduce (ring RS in node, all-reduce across, ring AG) vs ONE flat ring
    whose every step waits for an inter-node hop; S bytes, ``gpus_per_node`` GPUs per node."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    A, B = LINKS[intra], LINKS[inter]
    flat = [
        cc.collective_time("all-reduce", "ring", m * gpus_per_node, S, B.alpha, B.bandwidth)
        for m in nodes
    ]
    hier = [cc.hierarchical_all_reduce_time(m, gpus_per_node, S, A, B) for m in nodes]
    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    ax.plot(nodes, flat, "o-", label=f"one flat ring, every step over {inter}")
    ax.plot(nodes, hier, "s-", label=f"hierarchical: {intra} in node, {inter} across")
    title = f"all-reduce of {S / 1e9:g} GB, {gpus_per_node} GPUs per node"
    ax.set(xscale="log", yscale="log", xlabel="nodes", ylabel="time (s)", title=title)
    ax.set_xscale("log", base=2)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _bytes_label(x: float) -> str:
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if x >= 2**k:
            return f"{x / 2**k:g} {unit}"
    return f"{x:g} B"


def draw_benchmark(result: dict, cols: int = 2):
    """Measured time vs S (dots) and the fitted α-β model (line), one panel per op, two panels
    per row so the tick labels stay legible at page width. ``result``: run_benchmark's."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: PLC0415 (lazy: matplotlib)

    ops = list(dict.fromkeys(r["op"] for r in result["results"]))
    rows = -(-len(ops) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(9, 3.3 * rows), squeeze=False)
    for ax, op in zip(axes.flat, ops):
        for k, f in enumerate(x for x in result["fits"] if x["op"] == op):
            pts = [r for r in result["results"] if (r["op"], r["n"]) == (op, f["n"])]
            xs, ms = [r["bytes"] for r in pts], [r["seconds"] * 1e3 for r in pts]
            ax.loglog(xs, ms, "o", color=f"C{k}", label=f"n = {f['n']}, measured")
            if f["error"] is None:
                fit = (f["algorithm"], f["n"])
                ab = (max(f["alpha"], 0.0), f["bandwidth"])
                model = [cc.collective_time(op, *fit, x, *ab) * 1e3 for x in xs]
                ax.loglog(xs, model, "-", color=f"C{k}", label=f"n = {f['n']}, α-β fit")
        sizes = sorted({r["bytes"] for r in result["results"] if r["op"] == op})
        ax.set_xticks(sizes, [_bytes_label(s) for s in sizes])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set(title=op, xlabel="S (message size)", ylabel="time (ms, log scale)")
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(ops) :]:
        ax.axis("off")
    fig.tight_layout()
    return fig
