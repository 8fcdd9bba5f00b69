"""Figures of the expert-parallel chapter, drawn from ``minipar.expert_parallel`` (the router's
top-K gates, the all-to-all dispatcher's index map, DeepSeek-V3's bias step), the cost model's
row counts and the folded rank grid of ``minipar.grid``."""

from __future__ import annotations

from figures.kit import figure
from minipar.cost.chapters import expert_parallel as cost
from minipar.grid import Grid
from minipar.plotting.themes import ink

E, K, EP = 8, 2, 4  # experts, top-K, expert-parallel degree x of the pictures


def _routed(tokens: int, seed: int, skew: float = 0.0, bias=None):
    """(probs, gates, experts) of ``tokens`` random tokens through a random router; ``skew``
    raises expert 0's logit (a router that favours it)."""
    import torch  # noqa: PLC0415 (lazy: torch)

    from minipar.expert_parallel.routing import top_k_gates  # noqa: PLC0415 (lazy: torch)

    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, E, generator=g, dtype=torch.float64)
    logits[:, 0] += skew
    return top_k_gates(logits, K, bias=bias)


@figure(draws=["minipar.expert_parallel.routing.top_k_gates"])
def routing(pal):
    """Eight tokens' router probabilities over eight experts; each token's top-2 boxed with its
    gate; the experts grouped by the rank that owns them (x = 4)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    n = 8
    probs, gates, experts = _routed(n, seed=3)
    fig, ax = pal.subplots(6.4, 3.4)
    ax.imshow(probs.numpy(), cmap="Blues", vmin=0, vmax=1.6 * float(probs.max()), aspect="auto")
    for i in range(n):
        for j in range(K):
            e = int(experts[i, j])
            ax.add_patch(
                plt.Rectangle((e - 0.5, i - 0.5), 1, 1, fill=False, edgecolor=pal.color(5), lw=2.2)
            )
            ax.text(
                e,
                i,
                f"{float(gates[i, j]):.2f}",
                ha="center",
                va="center",
                fontsize=9,
                color="#111",
                fontweight="bold",
            )
    for r in range(1, EP):
        ax.axvline(r * E // EP - 0.5, color=pal.fg, lw=1.5)
    ax.set_xticks(range(E), [f"e{e}" for e in range(E)])
    ax.set_yticks(range(n), [f"token {i}" for i in range(n)])
    sec = ax.secondary_xaxis("top")
    sec.set_xticks(
        [r * E // EP + (E // EP - 1) / 2 for r in range(EP)], [f"rank {r}" for r in range(EP)]
    )
    sec.tick_params(length=0)
    ax.set_xlabel("expert (shade: router probability; box: chosen, with its gate)")
    return fig


@figure(
    draws=[
        "minipar.expert_parallel.routing.top_k_gates",
        "minipar.expert_parallel.dispatchers.assignments",
        "minipar.cost.chapters.expert_parallel.node_dedup_rows",
    ]
)
def dispatch(pal):
    """Rows each rank sends each rank in the all-to-all dispatch (x = 4, 16 tokens per rank,
    top-2), from the dispatcher's sorted index map; and the rows that cross between two nodes
    of two ranks, per choice (all-to-all) and per node (node-deduplicated)."""
    import torch  # noqa: PLC0415 (lazy: torch)

    from minipar.expert_parallel.dispatchers import assignments  # noqa: PLC0415 (lazy: torch)

    n, node_size = 16, 2
    send, choices = [], []
    for rank in range(EP):
        _, gates, experts = _routed(n, seed=10 + rank)
        kept = torch.ones_like(experts, dtype=torch.bool)
        _, expert, _ = assignments(experts, gates, kept)  # sorted by expert, so by owner
        counts = torch.bincount(expert, minlength=E).view(EP, E // EP).sum(1)  # rows per owner
        send.append(counts.tolist())
        choices.append(experts.tolist())
    fig, (ax, bx) = pal.subplots(6.8, 3.0, ncols=2, width_ratios=[1.1, 1])
    ax.imshow(send, cmap="Oranges", vmin=0, vmax=max(map(max, send)) * 1.3)
    for s in range(EP):
        for d in range(EP):
            ax.text(d, s, str(send[s][d]), ha="center", va="center", fontsize=10, color="#111")
    ax.set_xticks(range(EP), [f"{d}" for d in range(EP)])
    ax.set_yticks(range(EP), [f"{s}" for s in range(EP)])
    ax.set_xlabel("to rank (its experts)")
    ax.set_ylabel("from rank")
    ax.set_title(f"dispatch rows ({n} tokens × top-{K} per rank)", fontsize=10)
    # inter-node rows: ranks 0-1 are node 0, ranks 2-3 node 1
    per_choice = [
        sum(send[s][d] for d in range(EP) if d // node_size != s // node_size) for s in range(EP)
    ]
    rail = cost.node_dedup_rows(choices, E, node_size)["rail"]
    per_node = [
        sum(rail[s][v] for v in range(EP // node_size) if v != s // node_size) for s in range(EP)
    ]
    w = 0.38
    bx.bar(
        [r - w / 2 for r in range(EP)],
        per_choice,
        w,
        color=pal.color(1),
        label="all-to-all: one row per choice",
    )
    bx.bar(
        [r + w / 2 for r in range(EP)],
        per_node,
        w,
        color=pal.color(2),
        label="node-deduplicated: one per node",
    )
    bx.set_xticks(range(EP), [f"rank {r}" for r in range(EP)])
    bx.set_ylabel("rows leaving the node")
    bx.set_ylim(0, max(per_choice) * 1.6)
    bx.legend(loc="upper left", fontsize=9)
    bx.set_title("2 nodes of 2 ranks", fontsize=10)
    for s in ("top", "right"):
        bx.spines[s].set_visible(False)
    fig.tight_layout(w_pad=1.5)
    return fig


@figure(
    draws=[
        "minipar.expert_parallel.balancing.update_bias",
        "minipar.cost.chapters.expert_parallel.imbalance",
    ]
)
def load_balance(pal):
    """Assignments per expert from a router that favours expert 0, before and after 60 steps
    of DeepSeek-V3's bias update; each rank's load over the mean (x = 4)."""
    import torch  # noqa: PLC0415 (lazy: torch)

    from minipar.expert_parallel.balancing import update_bias  # noqa: PLC0415 (lazy: torch)

    n, steps = 512, 60
    bias = torch.zeros(E, dtype=torch.float64)
    loads = []
    for step in range(steps + 1):
        _, _, experts = _routed(n, seed=100 + step, skew=1.5, bias=bias)
        load = torch.bincount(experts.reshape(-1), minlength=E)
        if step in (0, steps):
            loads.append(load.tolist())
        update_bias(bias, load, rate=0.01)
    fig, axes = pal.subplots(6.8, 2.6, ncols=2, sharey=True)
    for ax, load, title in zip(axes, loads, ("skewed router", f"after {steps} bias steps")):
        ranks = cost.imbalance(load, EP)
        ax.bar(range(E), load, color=[pal.color(e // (E // EP)) for e in range(E)])
        ax.axhline(n * K / E, color=pal.fg, lw=1, ls="--")
        ax.set_xticks(range(E), [f"e{e}" for e in range(E)])
        ax.set_title(f"{title}\nbusiest rank {ranks['max/mean rank']:.2f}× the mean", fontsize=10)
        for s in ("top", "right"):
            ax.spines[s].set_visible(False)
    axes[0].set_ylabel("assignments per expert")
    fig.tight_layout(w_pad=1.0)
    return fig


@figure(
    draws=["minipar.grid.Grid.groups", "minipar.cost.chapters.expert_parallel.folded_expert_dp"]
)
def folding(pal):
    """The 8 ranks of one stage with t = 4, d = 2 for attention, folded into x = 4 expert
    ranks times 2 expert-data ranks for the MoE layer."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    grid = Grid(d=2, t=4, ep=4)
    edp = cost.folded_expert_dp(t=grid.t, cp=grid.cp, d=grid.d, ep=grid.ep)
    rows = [
        ("attention: tensor groups", "tp", lambda g, i: f"TP{i}"),
        ("attention: data groups", "dp", lambda g, i: f"DP{i}"),
        ("MoE: expert groups", "ep", lambda g, i: f"EP{i}"),
        (f"MoE: expert-data groups ({edp} ranks)", "edp", lambda g, i: f"e{2 * i}-{2 * i + 1}"),
    ]
    fig, ax = pal.subplots(6.8, 2.6)
    n = grid.world_size
    groups = [
        (y, i, members) for y, r in enumerate(rows) for i, members in enumerate(grid.groups(r[1]))
    ]
    colours = pal.group_colors(len(groups))  # every group its own colour, across the four rows
    for (y, i, members), colour in zip(groups, colours):
        for r in members:
            ax.add_patch(
                plt.Rectangle((r, -y - 1), 1, 0.8, facecolor=colour, edgecolor=pal.fg, lw=0.6)
            )
            ax.text(
                r + 0.5,
                -y - 0.6,
                rows[y][2](members, i),
                ha="center",
                va="center",
                fontsize=9,
                color=ink(colour),
            )
    for y, (name, _, _) in enumerate(rows):
        ax.text(-0.2, -y - 0.6, name, ha="right", va="center", fontsize=9, color=pal.fg)
    for r in range(n):
        ax.text(r + 0.5, 0.15, str(r), ha="center", va="bottom", fontsize=9, color=pal.fg)
    ax.text(-0.2, 0.15, "rank", ha="right", va="bottom", fontsize=9, color=pal.fg)
    ax.set(xlim=(-4.2, n), ylim=(-len(rows) - 0.1, 0.7))
    ax.axis("off")
    return fig


@figure(
    draws=[
        "minipar.cost.chapters.expert_parallel.even_dispatch_bytes",
        "minipar.cost.chapters.expert_parallel.all_to_all_time",
        "minipar.cost.chapters.expert_parallel.off_node_fraction",
    ],
    phone=True,
)
def a2a_roofline(pal):
    """The expert layer's roofline: one dispatch all-to-all over the forward GEMMs of the rows a
    rank receives (SwiGLU, 6hf FLOPs per row at the H100's bf16 peak), against the expert width
    f. Per row both scale with h, so only f and the link decide: x = 8 inside an NVLink node, and
    x = 64 over 8 nodes with the off-node rows on one 50 GB/s InfiniBand port per GPU. On a
    phone the legend goes below the axes."""
    from minipar.cost.kernels.hardware import gpu, link  # noqa: PLC0415 (figures import lazily)

    flops, nv, ib = gpu("H100-SXM").peak_flops["bf16"], link("nvlink4-h100"), link("ib-ndr400")
    n, h, k = 4096, 4096, 2  # tokens per rank, width, top-K (Mixtral's layer)
    fs = [2**i for i in range(9, 16)]  # expert widths 512 .. 32768
    S, _ = cost.even_dispatch_bytes(n, k, h, 8, 2)

    def gemm(f):  # the k·n rows a rank receives under even routing, three h×f matrices
        return 2 * k * n * 3 * h * f / flops

    node = [cost.all_to_all_time(S, 8, nv.alpha, nv.bandwidth) / gemm(f) for f in fs]
    share = cost.off_node_fraction(64, 8)
    cross = [S * share / ib.bandwidth / gemm(f) for f in fs]
    fig, ax = pal.subplots(3.7, 4.2) if pal.phone else pal.subplots(6.4, 3.2)
    ax.set_facecolor("none")
    ax.plot(fs, node, "o-", color=pal.color(0), label="x = 8, one NVLink node")
    ax.plot(fs, cross, "s-", color=pal.color(5), label="x = 64 over 8 nodes, InfiniBand")
    ax.axhline(1, color=pal.fg, lw=1, ls="--")
    label = "all-to-all\n= GEMMs" if pal.phone else "all-to-all = GEMMs"  # clear of the lines
    ax.text(fs[-1], 1.15, label, fontsize=9, color=pal.fg, va="bottom", ha="right")
    for f, ys, name in ((14336, node, "Mixtral"), (2048, cross, "DeepSeek-V3")):
        y = ys[0] * fs[0] / f  # both curves fall as 1/f
        ax.plot([f], [y], "*", ms=13, color=pal.color(6), mec=pal.fg)
        ax.annotate(name, (f, y), textcoords="offset points", xytext=(8, 4), fontsize=9)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(fs, [f"{f // 1024}K" if f >= 1024 else str(f) for f in fs])
    ax.minorticks_off()
    ax.set_xlabel("expert width f")
    ax.set_ylabel("all-to-all time / expert GEMM time")
    ax.grid(True, which="major", lw=0.5)
    pal.legend(ax, "upper right")
    for sp in ("top", "right"):
        ax.spines[sp].set_visible(False)
    return fig


def deepseek_v3_runs():
    """(label, Config) of the runs the figure draws, from
    :func:`minipar.widgets.three_d.deepseek_v3_what_ifs`: DeepSeek-V3 as published on 2048 H800,
    without DualPipe's overlap, with TP 8; as published and with TP 8 on GB200 NVL72."""
    from minipar.cost.planner.three_d import evaluate  # noqa: PLC0415 (figures import lazily)
    from minipar.widgets.three_d import deepseek_v3_what_ifs  # noqa: PLC0415 (figures import lazily)

    model_shape, runs = deepseek_v3_what_ifs()
    labels = {
        "h800": "H800, published:\nPP 16, EP 64, no TP",
        "h800_exposed": "H800, no DualPipe:\nall-to-alls exposed",
        "h800_tp8": "H800, TP 8 added",
        "nvl72": "GB200 NVL72:\nPP 16, EP 64, no TP",
        "nvl72_tp8": "GB200 NVL72,\nTP 8 added",
    }
    return [(label, evaluate(model_shape, *runs[key])) for key, label in labels.items()]


@figure(
    draws=[
        "minipar.cost.planner.three_d.evaluate",
        "minipar.cost.planner.breakdown.StepBreakdown.group_seconds",
    ],
    phone=True,
)
def deepseek_v3_step(pal):
    """Seconds per step of DeepSeek-V3 (15360 sequences of 4096 tokens) in the planner, split
    by the term table's groups: at its published layout on H800, without DualPipe's overlap,
    with TP 8 added, and the published layout and TP 8 on GB200 NVL72; every part of the step the
    planner prices, each in its own colour. On a phone the run names are short and the legend
    one column below the axes."""
    from minipar.cost.planner.term_table import TIME_GROUPS  # noqa: PLC0415 (figures import lazily)

    runs = deepseek_v3_runs()
    parts = [c.group_seconds() for _, c in runs]
    colors = dict(zip(TIME_GROUPS, pal.group_colors(len(TIME_GROUPS))))
    shown = [
        g
        for g in TIME_GROUPS
        if any(p[g] > 0.005 * max(sum(q.values()) for q in parts) for p in parts)
    ]
    fig, ax = pal.subplots(3.7, 5.8) if pal.phone else pal.subplots(6.4, 4.2)
    ys = list(range(len(runs)))[::-1]
    for y, p in zip(ys, parts):
        left = 0.0
        for g in TIME_GROUPS:
            ax.barh(
                y,
                p[g],
                left=left,
                color=colors[g],
                edgecolor=pal.fg,
                lw=0.4,
                label=g if y == ys[0] and g in shown else None,
            )
            left += p[g]
        ax.text(left, y, f" {left:.1f} s", va="center", fontsize=9, color=pal.fg)
    short = (
        "H800\npublished",
        "H800 no\nDualPipe",
        "H800\n+ TP 8",
        "NVL72\npublished",
        "NVL72\n+ TP 8",
    )
    ax.set_yticks(ys, short if pal.phone else [label for label, _ in runs])
    ax.set_xlabel("seconds per step (planner)")
    ax.set_xlim(0, 1.18 * max(sum(p.values()) for p in parts))
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.3 if pal.phone else 0.45, -0.14 if pal.phone else -0.2),
        ncol=1 if pal.phone else 2,
    )
    for sp in ("top", "right"):
        ax.spines[sp].set_visible(False)
    return fig
