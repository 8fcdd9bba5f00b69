"""Figures of the parallelism chapters that a reader reported illegible or ambiguous, each held to
what now fixes it: no two labels of a schedule grid touch at a 390 px phone's width, and a
figure that colours groups gives every group its own colour."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book"))

from figures import kit  # noqa: E402 (book/ joins sys.path above)

PHONE_PX = 390  # the narrowest column a figure is shown in (its box scrolls below 480 px)
MIN_GAP_PX = 1.5  # labels closer than this on screen run into each other


def _drawn(name: str):
    """The figure ``name`` drawn in the light theme, rendered, with its renderer."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    with matplotlib.rc_context(kit.LIGHT.rc()):
        fig = kit.load(name).draw(kit.LIGHT)
        fig.canvas.draw()
    return fig, fig.canvas.get_renderer()


def label_gap_px(fig, renderer) -> float:
    """The smallest distance between two digit labels of the first axes, in pixels at
    :data:`PHONE_PX` (the figure is scaled to the column as a whole)."""
    boxes = [t.get_window_extent(renderer) for t in fig.axes[0].texts if t.get_text().isdigit()]
    gap = min(
        max(b.x0 - a.x1, a.x0 - b.x1, b.y0 - a.y1, a.y0 - b.y1)
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
    )
    width = fig.get_tightbbox(renderer).width * fig.dpi
    return gap * min(1.0, PHONE_PX / width)


@pytest.mark.parametrize(
    "name",
    [
        "pipeline_parallel.gpipe",
        "pipeline_parallel.one_f_one_b",
        "pipeline_parallel.interleaved",
        "pipeline_parallel.zb_h1",
    ],
)
def test_schedule_grid_digits_do_not_touch_on_a_phone(name):
    import matplotlib.pyplot as plt

    fig, renderer = _drawn(name)
    try:
        gap = label_gap_px(fig, renderer)
    finally:
        plt.close(fig)
    assert gap >= MIN_GAP_PX, (
        f"{name}: two micro-batch digits are {gap:.2f} px apart at {PHONE_PX} px "
        f"(at least {MIN_GAP_PX})"
    )


def test_ring_figure_and_prose_count_the_same_chunk_pairs():
    """The ring figure writes each cell's work beside it (a diagonal pair counts one half); a
    rank's four cells add up to the cost model's causal-kernel count, and the page states that
    count and the whole-diagonal one without confusing them."""
    import matplotlib.pyplot as plt

    from minipar.cost.chapters import context_parallel as C

    fig, _ = _drawn("context_parallel.ring_steps")
    try:
        rows: dict[float, float] = {}
        for t in fig.axes[0].texts:
            if t.get_color() == kit.LIGHT.muted:  # the work beside each cell
                rows[round(t.get_position()[1], 3)] = rows.get(round(t.get_position()[1], 3), 0)
                rows[round(t.get_position()[1], 3)] += float(t.get_text())
    finally:
        plt.close(fig)
    half = C.pairs_per_rank(4, "zigzag", causal=True, diagonal="half")
    whole = C.pairs_per_rank(4, "zigzag", causal=True, diagonal="whole")
    assert sorted(rows.values()) == sorted(half) == [8.0] * 4
    page = (ROOT / "book" / "context_parallel.md").read_text(encoding="utf-8")
    assert f"{half[0]:g} pairs of work" in page and f"{whole[0]:g} with `minipar`'s blocks" in page
