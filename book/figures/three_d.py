"""Figures of the chapter on composing the parallelisms, drawn from ``minipar.grid`` (the rank
grid and its groups) and ``minipar.cost.planner.three_d`` (the planner's memory and step terms)."""

from __future__ import annotations

from figures.kit import figure
from minipar.cost.planner import three_d as planner
from minipar.cost.planner.term_table import TIME_GROUPS
from minipar.grid import Grid
from minipar.plotting.themes import ink

GIB = 2**30


def _ranks(ax, pal, world, per_row, fill, label=str, row_names=None):
    """Ranks 0..world-1 as cells, ``per_row`` to a row (a node or a stage), filled by
    ``fill(rank)`` (a colour, or None for the background box)."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    rows = world // per_row
    for r in range(world):
        i, j = divmod(r, per_row)
        colour = fill(r)
        ax.add_patch(
            plt.Rectangle(
                (j, -i - 1),
                1,
                1,
                facecolor=colour or pal.box,
                edgecolor=pal.fg if colour else pal.muted,
                lw=0.6,
            )
        )
        ax.text(
            j + 0.5,
            -i - 0.5,
            label(r),
            ha="center",
            va="center",
            fontsize=9,
            color=ink(colour) if colour else pal.fg,
        )
    ax.set(xlim=(0, per_row), ylim=(-rows, 0))
    ax.set_xticks([])
    ax.set_yticks([-i - 0.5 for i in range(rows)], row_names or [""] * rows)
    ax.tick_params(length=0)
    for s in ax.spines.values():
        s.set_visible(False)
    ax.set_aspect("equal")


@figure(draws=["minipar.grid.Grid.group_of"], phone=True)
def rank_grid(pal):
    """Rank 13's tensor, data and pipeline groups on (d, t, p) = (2, 4, 4), 8 GPUs per node;
    the three panels side by side, or one above the other on a phone."""
    grid, rank, per_node = Grid(d=2, t=4, p=4), 13, 8
    if pal.phone:
        fig, axes = pal.subplots(3.4, 5.2, nrows=3)
    else:
        fig, axes = pal.subplots(6.8, 1.9, ncols=3)
    for k, (ax, kind, title) in enumerate(
        zip(axes, ("tp", "dp", "pp"), ("tensor group", "data group", "pipeline group"))
    ):
        members = set(grid.group_of(kind, rank))
        _ranks(
            ax,
            pal,
            grid.world_size,
            per_node,
            lambda r, members=members, k=k: pal.color(k) if r in members else None,
            row_names=[f"node {i}" for i in range(grid.world_size // per_node)]
            if k == 0 or pal.phone
            else None,
        )
        ax.set_title(f"rank {rank}'s {title}", fontsize=10)
    fig.tight_layout(w_pad=0.6, h_pad=0.8)
    return fig


def _gpt3(pp: int, zero: int):
    m, cl = planner.MODELS["gpt3-175b"], planner.cluster(1024, 8, "A100-80GB")
    dp = 1024 // (8 * pp)
    return planner.evaluate(m, cl, planner.Layout(1536, 8, pp, dp, 1, recompute="full", zero=zero))


@figure(draws=["minipar.cost.planner.three_d.evaluate"], phone=True)
def memory_by_layout(pal):
    """Memory per GPU of GPT-3 175B at t = 8 against p: states fall as 1/p, activations stay.
    On a phone the same five bars, narrower, with the legend above the axes."""
    ps = (1, 2, 4, 8, 16)
    configs = [_gpt3(p, zero=0) for p in ps]
    states = [c.model_state_bytes / GIB for c in configs]
    acts = [c.activation_bytes / GIB for c in configs]
    limit = configs[0].memory_limit / GIB
    fig, ax = pal.subplots(3.6, 3.0) if pal.phone else pal.subplots(6.0, 2.8)
    x = range(len(ps))
    ax.bar(x, states, color=pal.color(0), label="model states")
    ax.bar(x, acts, bottom=states, color=pal.color(1), label="activations")
    for i, (s, a) in enumerate(zip(states, acts)):
        label = f"{s + a:.0f}" if pal.phone else f"{s + a:.0f} GiB"  # phone: GiB on the axis
        ax.text(i, s + a, label, ha="center", va="bottom", fontsize=9, color=pal.fg)
    ax.axhline(limit, color=pal.color(5), lw=1.2, ls="--")
    ax.text(
        len(ps) - 0.5,
        limit,
        f"{limit:.0f} GiB usable",
        ha="right",
        va="bottom",
        fontsize=9,
        color=pal.color(5),
    )
    ax.set_yscale("log")
    tick = "p={}\nd={}" if pal.phone else "p = {}\n(d = {})"
    ax.set_xticks(list(x), [tick.format(p, 1024 // (8 * p)) for p in ps])
    ax.set_ylabel("GiB per GPU (log)")
    ax.set_ylim(3, max(s + a for s, a in zip(states, acts)) * 2.2)
    if pal.phone:
        ax.legend(loc="lower left", bbox_to_anchor=(-0.05, 1.0), ncols=2)
    else:
        ax.legend(loc="upper right", ncols=2)
    for s in ("top", "right"):
        ax.spines[s].set_visible(False)
    return fig


TERMS = TIME_GROUPS
"""The parts of a step, in the order it spends them: the term table's ``group`` column
(:data:`minipar.cost.planner.term_table.TIME_GROUPS`), so every term is drawn."""


def _terms(c) -> list[float]:
    """The step's seconds per part of :data:`TERMS` (:meth:`Config.group_seconds`)."""
    return list(c.group_seconds().values())


@figure(
    draws=["minipar.cost.planner.three_d.evaluate", "minipar.cost.planner.three_d.search"],
    phone=True,
)
def step_breakdown(pal):
    """The predicted step of GPT-3 175B on 1024 A100, term by term, for four layouts; on a
    phone each layout's name sits above its bar, which then spans the column."""
    m, cl = planner.MODELS["gpt3-175b"], planner.cluster(1024, 8, "A100-80GB")
    same = next(
        c
        for c in planner.search(
            m, cl, 1536, planner.Space(recompute="full", zero=0, micro_batch=1, max_chunks=1)
        )
        if c.fits and not c.sp
    )
    best = next(c for c in planner.search(m, cl, 1536) if c.fits)
    rows = [
        ("hand (16, 8, 8)", _gpt3(8, zero=0)),
        ("hand (8, 8, 16)", _gpt3(16, zero=0)),
        (f"planner, same rules\n({same.dp}, {same.tp}, {same.pp})", same),
        (
            f"planner, best\n({best.dp}, {best.tp}, {best.pp}) b={best.micro_batch} "
            f"v={best.chunks}\n{best.recompute}, SP, ZeRO-{best.zero}",
            best,
        ),
    ]
    if pal.phone:
        rows = [(name.replace("\n", " ", 1), c) for name, c in rows]
    fig, ax = pal.subplots(3.6, 5.4) if pal.phone else pal.subplots(6.8, 3.2)
    gap = 1.6 if pal.phone else 1.0  # phone: room above each bar for its name
    for i, (label, c) in enumerate(rows):
        left = 0.0
        for k, (name, v) in enumerate(zip(TERMS, _terms(c))):
            ax.barh(-i * gap, v, left=left, color=pal.color(k), label=name if i == 0 else None)
            left += v
        ax.text(
            left + 0.3, -i * gap, f"{c.step_seconds:.1f} s", va="center", fontsize=9, color=pal.fg
        )
        if pal.phone:
            ax.text(0, -i * gap + 0.45, label, va="bottom", fontsize=9, color=pal.fg)
    if pal.phone:
        ax.set_yticks([])
        ax.spines["left"].set_visible(False)
    else:
        ax.set_yticks([-i for i in range(len(rows))], [r[0] for r in rows], fontsize=9)
    ax.set_xlabel("predicted seconds per step")
    ax.set_xlim(0, max(c.step_seconds for _, c in rows) * (1.25 if pal.phone else 1.15))
    if pal.phone:
        ax.set_ylim(-(len(rows) - 1) * gap - 0.5, 1.0)
        ax.legend(loc="upper left", bbox_to_anchor=(-0.02, -0.12), ncols=1)
    else:
        ax.legend(loc="upper center", bbox_to_anchor=(0.45, -0.25), ncols=3)
    for s in ("top", "right"):
        ax.spines[s].set_visible(False)
    return fig


@figure(
    draws=["minipar.grid.Grid.coord", "minipar.grid.Grid.groups", "minipar.grid.Grid.expert_coord"],
    phone=True,
)
def five_d_grid(pal):
    """(d, t, p, cp, ep) = (2, 2, 2, 2, 4): attention coordinates above, expert groups below;
    on a phone the same cells, smaller, under titles in two lines."""
    grid = Grid(d=2, t=2, p=2, cp=2, ep=4)
    S = grid.stage_size
    fig, (top, bottom) = (
        pal.subplots(3.2, 5.4, nrows=2) if pal.phone else pal.subplots(6.4, 2.6, nrows=2)
    )
    br = "\n" if pal.phone else " "
    # phone: a stage's ranks wrap onto two rows of S/2
    per_row = S // 2 if pal.phone else S
    stages = [f"stage {i}" for i in range(grid.p)]
    row_names = [n for n in stages for _ in range(2)] if pal.phone else stages

    def coords(r):
        c = grid.coord(r)
        return f"t{c.tp}\nc{c.cp}\nd{c.dp}"

    tp_group = {r: i for i, g in enumerate(grid.groups("tp")) for r in g}
    ep_group = {r: i for i, g in enumerate(grid.groups("ep")) for r in g}
    n_tp = len(grid.groups("tp"))
    colours = pal.group_colors(n_tp + len(grid.groups("ep")))  # every group its own colour
    _ranks(
        top,
        pal,
        grid.world_size,
        per_row,
        lambda r: colours[tp_group[r]],
        label=coords,
        row_names=row_names,
    )
    top.set_title(f"attention: colour = tensor group,{br}t/c/d = indices", fontsize=10)
    _ranks(
        bottom,
        pal,
        grid.world_size,
        per_row,
        lambda r: colours[n_tp + ep_group[r]],
        label=lambda r: "r{0}\nep{2}\nedp{1}".format(r, *grid.expert_coord(r)[1:]),
        row_names=row_names,
    )
    bottom.set_title(f"experts: colour = expert group,{br}ep/edp = indices", fontsize=10)
    fig.tight_layout(h_pad=0.8)
    return fig
