"""Figures of the pipeline-parallel chapter, drawn from ``minipar.pipeline_parallel`` (the
schedule functions and the simulator) and ``minipar.cost.chapters.pipeline_parallel`` (the closed forms).

Every schedule grid is the simulator's timeline of the schedule function's action lists, at
p = 4 ranks and m = 8 micro-batches, with t_F = t_B = t_W = 1 (an unsplit backward takes
t_B + t_W = 2), so the four grids share one time axis and can be compared box for box. On a
phone the time axis wraps: its first half above, its second half below, each at the width the
wide grid has for the whole step.
"""

from __future__ import annotations

from figures.kit import figure
from minipar.cost.chapters import pipeline_parallel as cost
from minipar.pipeline_parallel import schedules
from minipar.pipeline_parallel.simulate import simulate

P, M = 4, 8  # the grids' ranks and micro-batches
OPS = {"F": 4, "B": 1, "W": 2}  # series colour of a forward (sky), backward (orange), weight grad
NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved", "zb-h1": "ZB-H1"}
DRAWS = [
    "minipar.pipeline_parallel.schedules.schedule",
    "minipar.pipeline_parallel.simulate.simulate",
]


def _sim(name: str, p: int = P, m: int = M, v: int = 1):
    return simulate(schedules.schedule(name, p, m, v), m, t_f=1.0, t_b=1.0, t_w=1.0)


def _fill(pal, op: str, chunk: int = 0) -> str:
    """A box's colour: the op's series colour; an interleaved rank's later chunks paler."""
    from matplotlib.colors import to_hex, to_rgb  # noqa: PLC0415 (lazy: matplotlib)

    c = to_rgb(pal.color(OPS[op]))
    k = 0.5 if chunk else 0.0
    return to_hex(tuple(x + (1 - x) * k for x in c))


def _grid(ax, pal, sim, *, end: float | None = None, title: str = "", start: float = 0.0):
    """One row per rank, time to the right from ``start`` to ``end``: each action a box labelled
    with its micro-batch (1-based); idle time hatched; the second chunk of an interleaved rank
    drawn lighter. A box cut by ``start`` or ``end`` keeps its digit on the side holding its
    middle, centred in the part shown."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    p = sim.p
    end = end or sim.makespan
    for r in range(p):  # idle time: the gaps between a rank's boxes, up to the step's end
        spans = sorted((t0, t1) for rr, _, t0, t1 in sim.timeline if rr == r)
        edges = [0.0] + [t for span in spans for t in span] + [sim.makespan]
        for g0, g1 in zip(edges[::2], edges[1::2]):
            if g1 - g0 > 1e-9:
                ax.add_patch(
                    plt.Rectangle(
                        (g0, -r - 1),
                        g1 - g0,
                        1,
                        facecolor="none",
                        edgecolor=pal.muted,
                        hatch="////",
                        lw=0,
                    )
                )
    seen = [0] * p  # boxes drawn so far on each rank: a narrow box's digit alternates up, down
    for r, a, t0, t1 in sorted(sim.timeline, key=lambda e: (e[0], e[2])):
        chunk = a.stage // p
        shown = min(t1, end) - max(t0, start)  # the part of the box this grid shows
        narrow = shown < 0.75  # interleaved chunks: digits side by side would touch at 390 px
        shift = (0.25 if seen[r] % 2 else -0.25) if narrow else 0.0
        seen[r] += 1
        ax.add_patch(
            plt.Rectangle(
                (t0, -r - 1),
                t1 - t0,
                1,
                facecolor=_fill(pal, a.op, chunk),
                edgecolor=pal.fg,
                lw=0.5,
            )
        )
        if not start <= (t0 + t1) / 2 < end:
            continue  # its digit is drawn in the other half of a wrapped grid
        ax.text(
            (max(t0, start) + min(t1, end)) / 2,
            -r - 0.5 + shift,
            str(a.microbatch + 1),
            ha="center",
            va="center",
            fontsize=8 if narrow else 9,
            color="#111",
        )
    ax.set(xlim=(start, end), ylim=(-p, 0))
    ax.set_yticks([-r - 0.5 for r in range(p)], [f"rank {r}" for r in range(p)])
    ax.tick_params(axis="y", length=0)
    for s in ("top", "right", "left"):
        ax.spines[s].set_visible(False)
    if title:
        ax.set_title(
            f"{title}: step {sim.makespan:g}, bubble {sim.bubble:.0%} of the step",
            loc="left",
            fontsize=10,
        )


def _legend(fig, pal, ops=("F", "B", "W"), extra=(), ncol: int | None = None):
    import matplotlib.patches as mpatches  # noqa: PLC0415 (lazy: matplotlib)

    words = {"F": "forward F", "B": "backward B", "W": "weight gradient W"}
    handles = [
        mpatches.Patch(facecolor=pal.color(OPS[o]), edgecolor=pal.fg, label=words[o]) for o in ops
    ]
    handles.append(
        mpatches.Patch(facecolor="none", edgecolor=pal.muted, hatch="////", label="idle (bubble)")
    )
    handles += list(extra)
    fig.legend(
        handles=handles,
        loc="lower center",
        ncol=ncol or len(handles),
        fontsize=9,
        bbox_to_anchor=(0.5, -0.02),
        handlelength=1.4,
        columnspacing=1.0,
    )


def _split(sim, end: float) -> float:
    """Where a wrapped grid's time axis breaks: the time within 3 units of the middle, on a
    quarter-unit grid, that cuts the fewest boxes in two (nearest the middle among those)."""
    mid = end / 2 - (end / 2) % 0.25
    cands = [mid + k / 4 for k in range(-12, 13)]

    def cut(c: float) -> int:
        return sum(t0 < c - 1e-9 and c + 1e-9 < t1 for _, _, t0, t1 in sim.timeline)

    return min(cands, key=lambda c: (cut(c), abs(c - end / 2)))


def _one(name: str, pal, v: int = 1, ops=("F", "B"), extra=()):
    sim = _sim(name, v=v)
    title = NAMES[name] + (f", v = {v}" if v > 1 else "")
    end = _sim("1f1b").makespan
    if pal.phone:  # the step wrapped in two halves, one above the other
        fig, (top, bottom) = pal.subplots(3.7, 4.5, nrows=2)
        half = _split(sim, end)
        _grid(top, pal, sim, end=half, title=title)
        _grid(bottom, pal, sim, start=half, end=end)
        top.set_title(
            f"{title}: step {sim.makespan:g},\nbubble {sim.bubble:.0%} of the step",
            loc="left",
            fontsize=10,
        )
        bottom.set_xlabel("time (units of t_F), continued")
        _legend(fig, pal, ops, extra, ncol=2)
        fig.subplots_adjust(bottom=0.24 + 0.03 * (len(ops) + len(extra) > 3), top=0.88, hspace=0.3)
        return fig
    fig, ax = pal.subplots(6.8, 2.3)
    _grid(ax, pal, sim, end=end, title=title)
    ax.set_xlabel("time (units of t_F)")
    _legend(fig, pal, ops, extra)
    fig.subplots_adjust(bottom=0.36, top=0.86)
    return fig


@figure(draws=DRAWS, phone=True)
def gpipe(pal):
    """GPipe on p = 4, m = 8: all forwards, then all backwards; the bubble at both ends."""
    return _one("gpipe", pal)


@figure(draws=DRAWS, phone=True)
def one_f_one_b(pal):
    """1F1B on p = 4, m = 8: the same bubble as GPipe, each rank alternating F and B."""
    return _one("1f1b", pal)


@figure(draws=DRAWS, phone=True)
def interleaved(pal):
    """Interleaved 1F1B, v = 2: each rank's two chunks (the second lighter), half-length boxes."""
    import matplotlib.patches as mpatches  # noqa: PLC0415 (lazy: matplotlib)

    chunk2 = mpatches.Patch(
        facecolor=_fill(pal, "F", 1), edgecolor=pal.fg, label="2nd chunk: paler"
    )
    return _one("interleaved", pal, v=2, extra=[chunk2])


@figure(draws=DRAWS, phone=True)
def zb_h1(pal):
    """ZB-H1: the backward split into B (input gradient) and W (weight gradient)."""
    return _one("zb-h1", pal, ops=("F", "B", "W"))


@figure(
    draws=[
        "minipar.cost.chapters.pipeline_parallel.bubble_fraction_of_total",
        "minipar.cost.chapters.pipeline_parallel.zb_h1_bubble_fraction",
        "minipar.pipeline_parallel.simulate.simulate",
    ],
    phone=True,
)
def bubble_vs_m(pal):
    """The bubble (fraction of the step) against m at p = 4: closed forms as lines, the
    simulator's timelines as dots on them. On a phone: narrower, the legend under the axes."""
    p, ms = 4, [4, 8, 12, 16, 24, 32, 48, 64]
    fig, ax = pal.subplots(3.6, 3.0) if pal.phone else pal.subplots(6.4, 3.2)
    curves = [
        ("GPipe, 1F1B", "1f1b", 1, lambda m: cost.bubble_fraction_of_total("1f1b", p, m)),
        (
            "interleaved, v = 2",
            "interleaved",
            2,
            lambda m: cost.bubble_fraction_of_total("interleaved", p, m, 2),
        ),
        (
            "interleaved, v = 4",
            "interleaved",
            4,
            lambda m: cost.bubble_fraction_of_total("interleaved", p, m, 4),
        ),
        ("ZB-H1 (t_F = t_B = t_W)", "zb-h1", 1, lambda m: cost.zb_h1_bubble_fraction(p, m)),
    ]
    for i, (label, name, v, f) in enumerate(curves):
        c = pal.color(i)
        ax.plot(ms, [f(m) for m in ms], color=c, lw=1.8, label=label)
        ax.plot(ms, [_sim(name, p, m, v).bubble for m in ms], "o", color=c, ms=4)
    ax.set_xscale("log", base=2)
    shown = ms[::2] + [ms[-1]] if pal.phone else ms  # phone: every other tick, and the last
    ax.set_xticks(shown, [str(m) for m in shown])
    ax.minorticks_off()
    ax.set_ylim(0, 0.5)
    ax.yaxis.set_major_formatter(lambda y, _: f"{y:.0%}")
    ax.set(xlabel="micro-batches m per step", ylabel="bubble (fraction of the step)")
    ax.grid(True, lw=0.5)
    if pal.phone:
        ax.set_title(f"p = {p}: lines closed forms,\ndots simulated schedules", loc="left")
        ax.legend(loc="upper left", bbox_to_anchor=(-0.25, -0.2))
    else:
        ax.set_title(
            f"p = {p}: lines are the closed forms, dots the simulated schedules", loc="left"
        )
        ax.legend(loc="upper right")
    for s in ("top", "right"):
        ax.spines[s].set_visible(False)
    return fig


@figure(
    draws=[
        "minipar.pipeline_parallel.simulate.simulate",
        "minipar.cost.chapters.pipeline_parallel.peak_microbatches",
    ],
    phone=True,
)
def activation_peak(pal):
    """Peak activations each rank holds (in stage-equivalents: one stage's activations for one
    micro-batch), p = 4, m = 8, from the simulator; the cost model's count as a tick. On a phone
    one small panel per schedule, two by two."""
    import numpy as np  # noqa: PLC0415 (only to place the bars)

    runs = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1)]
    if pal.phone:
        return _activation_panels(pal, runs)
    fig, ax = pal.subplots(6.4, 3.0)
    x = np.arange(P)
    w = 0.2
    for i, (name, v) in enumerate(runs):
        sim = _sim(name, v=v)
        ys = sim.peak_in_flight_stages
        pos = x + (i - 1.5) * w
        label = NAMES[name] + (f", v = {v}" if v > 1 else "")
        ax.bar(pos, ys, w, color=pal.color(i), edgecolor=pal.fg, lw=0.5, label=label)
        model = [cost.peak_microbatches(name, r, P, M, v) / v for r in range(P)]
        ax.plot(pos, model, "_", color=pal.fg, ms=9, mew=1.5)
        for xx, y in zip(pos, ys):
            ax.text(xx, y + 0.15, f"{y:g}", ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x, [f"rank {r}" for r in range(P)])
    ax.set(ylabel="activations held\n(stage-equivalents)", ylim=(0, M + 3))
    ax.set_title(
        f"p = {P}, m = {M}: peak per rank (bars: simulator; ticks: cost model)", loc="left"
    )
    for s in ("top", "right"):
        ax.spines[s].set_visible(False)
    ax.legend(loc="upper center", ncol=4, bbox_to_anchor=(0.5, 1.0))
    return fig


def _activation_panels(pal, runs):
    """:func:`activation_peak` on a phone: a panel per schedule, its four ranks' bars, the
    cost model's count as a tick on each."""
    fig, axes = pal.subplots(3.6, 4.0, nrows=2, ncols=2, sharey=True)
    for i, (ax, (name, v)) in enumerate(zip(axes.flat, runs)):
        ys = _sim(name, v=v).peak_in_flight_stages
        ax.bar(range(P), ys, 0.7, color=pal.color(i), edgecolor=pal.fg, lw=0.5)
        model = [cost.peak_microbatches(name, r, P, M, v) / v for r in range(P)]
        ax.plot(range(P), model, "_", color=pal.fg, ms=12, mew=1.5)
        for x, y in enumerate(ys):
            ax.text(x, y + 0.4, f"{y:g}", ha="center", va="bottom", fontsize=9, color=pal.fg)
        ax.set_title(NAMES[name] + (f", v = {v}" if v > 1 else ""), fontsize=10)
        ax.set_xticks(range(P), [f"r{r}" for r in range(P)])
        ax.set_ylim(0, M + 2.5)
        for s in ("top", "right"):
            ax.spines[s].set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("stage-equiv.")
    fig.suptitle(f"peak held per rank r, p = {P}, m = {M}", fontsize=10, x=0.05, ha="left")
    fig.tight_layout(h_pad=0.8, w_pad=0.4)
    return fig
