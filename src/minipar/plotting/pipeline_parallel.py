"""A schedule drawn as a timeline: one row per rank, time to the right, idle time blank."""

from __future__ import annotations

COLORS = {"F": "#4c78a8", "B": "#e45756", "W": "#54a24b"}


def text_timeline(timeline, p: int, unit: float | None = None) -> str:
    """Rows like ``rank 0 |0123....0 1 2 3|`` with ``unit`` seconds per character: forwards
    show the micro-batch digit, backwards a letter (a = 0, b = 1, ...), W's an upper-case
    letter, idle a dot. ``timeline`` is :attr:`Simulation.timeline` or measured
    ``(rank, action, start, end)`` tuples."""
    if unit is None:
        unit = min(t1 - t0 for _, _, t0, t1 in timeline)
    end = max(t1 for _, _, _, t1 in timeline)
    width = round(end / unit)
    rows = [["."] * width for _ in range(p)]
    for r, a, t0, t1 in timeline:
        i = a.microbatch % 10 if a.op == "F" else a.microbatch % 26
        ch = str(i) if a.op == "F" else chr((97 if a.op == "B" else 65) + i)
        for k in range(round(t0 / unit), max(round(t1 / unit), round(t0 / unit) + 1)):
            if k < width:
                rows[r][k] = ch
    return "\n".join(f"rank {r} |{''.join(row)}|" for r, row in enumerate(rows))


def plot_timeline(timeline, p: int, ax=None, title: str = "", unit: str = "s"):
    """Matplotlib chart of ``(rank, action, start, end)`` tuples, time in ``unit`` (seconds for
    a measured timeline, "units of t" for a simulated one); the legend sits outside the axes,
    to the right, so it never covers a bar. Returns the axes."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.45 * p + 0.8))
    for r, a, t0, t1 in timeline:
        ax.barh(r, t1 - t0, left=t0, color=COLORS[a.op], edgecolor="white", linewidth=0.5)
        if t1 - t0 > 0.02 * max(e for *_, e in timeline):
            kw = dict(ha="center", va="center", color="white", fontsize=7)
            ax.text((t0 + t1) / 2, r, str(a.microbatch), **kw)
    ax.set_yticks(range(p), [f"rank {r}" for r in range(p)])
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    kw = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, borderaxespad=0.0)
    ax.legend(handles, ["F", "B", "W"], **kw)
    if title:
        ax.set_title(title)
    return ax
