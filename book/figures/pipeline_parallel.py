"""Figures of the pipeline-parallel chapter, drawn from ``minipar.pipeline_parallel``."""

from __future__ import annotations

from figures.kit import figure
from minipar.pipeline_parallel import schedules
from minipar.pipeline_parallel.simulate import simulate

OPS = {"F": 0, "B": 5, "W": 2}  # series colour of a forward, a backward, a weight-gradient step


def _grid(ax, pal, sim, p):
    """One row per rank, time to the right: each action a box labelled with its micro-batch."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (matplotlib: loaded only when a figure is drawn)

    for r, a, t0, t1 in sim.timeline:
        ax.add_patch(
            plt.Rectangle(
                (t0, -r - 1), t1 - t0, 1, facecolor=pal.color(OPS[a.op]), edgecolor=pal.fg, lw=0.5
            )
        )
        ax.text(
            (t0 + t1) / 2,
            -r - 0.5,
            str(a.microbatch + 1),
            ha="center",
            va="center",
            fontsize=9,
            color="#111",
        )
    end = max(t1 for *_, t1 in sim.timeline)
    ax.set(xlim=(0, end), ylim=(-p, 0), xlabel="time (units of one stage's forward)")
    ax.set_yticks([-r - 0.5 for r in range(p)], [f"rank {r}" for r in range(p)])
    for s in ("top", "right", "left"):
        ax.spines[s].set_visible(False)


@figure(
    draws=[
        "minipar.pipeline_parallel.schedules.schedule",
        "minipar.pipeline_parallel.simulate.simulate",
    ]
)
def one_f_one_b(pal):
    """1F1B on p = 4 ranks with m = 8 micro-batches: forwards (blue) and backwards (red)."""
    p, m = 4, 8
    sim = simulate(
        schedules.schedule("1f1b", p, m), m, t_f=1.0, t_b=1.0, t_w=1.0
    )  # unsplit B = t_b + t_w
    fig, ax = pal.subplots(6.4, 2.0)
    _grid(ax, pal, sim, p)
    return fig
