"""Figures of the parallelism chapters that a reader reported illegible or ambiguous, each held to
what now fixes it: no two labels of a schedule grid touch at a 390 px phone's width, a figure with
a phone layout draws it within a phone's column and loses nothing in it, and a figure that
colours groups gives every group its own colour."""

from __future__ import annotations

import ast
import functools
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from minipar.plotting.themes import PHONE_WIDTH_IN

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book"))

from figures import kit  # noqa: E402 (book/ joins sys.path above)

PHONE_PX = 390  # the narrowest column a figure is shown in (its box scrolls below 480 px)
MIN_GAP_PX = 1.5  # labels closer than this on screen run into each other


@functools.cache
def _drawn(name: str, phone: bool = False):
    """The figure ``name`` drawn in the light theme (its phone layout if ``phone``), rendered,
    with its renderer: drawn once for this module's tests, which only read it (closed by
    :func:`_close_the_figures`)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    # kept open for the module's tests: about 30 figures, so no warning about more than 20
    with matplotlib.rc_context({**kit.LIGHT.rc(), "figure.max_open_warning": 0}):
        fig = kit.load(name).draw(replace(kit.LIGHT, phone=phone))
        fig.canvas.draw()
    return fig, fig.canvas.get_renderer()


@pytest.fixture(autouse=True, scope="module")
def _close_the_figures():
    yield
    if _drawn.cache_info().currsize:
        import matplotlib.pyplot as plt

        plt.close("all")
        _drawn.cache_clear()


def label_gap_px(fig, renderer) -> float:
    """The smallest distance between two digit labels of one axes, in pixels at
    :data:`PHONE_PX` (the figure is scaled to the column as a whole)."""
    gaps = []
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.texts if t.get_text().isdigit()]
        gaps += [
            max(b.x0 - a.x1, a.x0 - b.x1, b.y0 - a.y1, a.y0 - b.y1)
            for i, a in enumerate(boxes)
            for b in boxes[i + 1 :]
        ]
    width = fig.get_tightbbox(renderer).width * fig.dpi
    return min(gaps) * min(1.0, PHONE_PX / width)


def _phone_figures() -> list[str]:
    """``<module>.<function>`` of every figure registered with ``phone=True``, read from the
    figure modules' source (no import at collection)."""
    out = []
    for path in sorted((ROOT / "book" / "figures").glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for d in node.decorator_list:
                kws = {k.arg: k.value for k in getattr(d, "keywords", [])}
                if isinstance(kws.get("phone"), ast.Constant) and kws["phone"].value is True:
                    out.append(f"{path.stem}.{node.name}")
    return out


PHONE_FIGURES = _phone_figures()


SCHEDULE_GRIDS = [
    "pipeline_parallel.gpipe",
    "pipeline_parallel.one_f_one_b",
    "pipeline_parallel.interleaved",
    "pipeline_parallel.zb_h1",
]


@pytest.mark.parametrize("phone", [False, True], ids=["wide", "phone"])
@pytest.mark.parametrize("name", SCHEDULE_GRIDS)
def test_schedule_grid_digits_do_not_touch_on_a_phone(name, phone):
    fig, renderer = _drawn(name, phone=phone)
    gap = label_gap_px(fig, renderer)
    assert gap >= MIN_GAP_PX, (
        f"{name}: two micro-batch digits are {gap:.2f} px apart at {PHONE_PX} px "
        f"(at least {MIN_GAP_PX})"
    )


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_ring_figure_and_prose_count_the_same_chunk_pairs():
    """The ring figure writes each cell's work beside it (a diagonal pair counts one half); a
    rank's four cells add up to the cost model's causal-kernel count, and the page states that
    count and the whole-diagonal one without confusing them."""
    from minipar.cost.chapters import context_parallel as C

    fig, _ = _drawn("context_parallel.ring_steps")
    rows: dict[float, float] = {}
    for t in fig.axes[0].texts:
        if t.get_color() == kit.LIGHT.muted:  # the work beside each cell
            rows[round(t.get_position()[1], 3)] = rows.get(round(t.get_position()[1], 3), 0)
            rows[round(t.get_position()[1], 3)] += float(t.get_text())
    half = C.pairs_per_rank(4, "zigzag", causal=True, diagonal="half")
    whole = C.pairs_per_rank(4, "zigzag", causal=True, diagonal="whole")
    assert sorted(rows.values()) == sorted(half) == [8.0] * 4
    page = (ROOT / "book" / "context_parallel.md").read_text(encoding="utf-8")
    assert f"{half[0]:g} pairs of work" in page and f"{whole[0]:g} with `minipar`'s blocks" in page


def _cells(ax) -> dict[tuple[int, int], str]:
    """(column, row) of every filled rectangle of ``ax`` -> its fill colour, as hex."""
    from matplotlib.colors import to_hex
    from matplotlib.patches import Rectangle

    return {
        (round(p.get_x()), round(-p.get_y() - 1)): to_hex(p.get_facecolor())
        for p in ax.patches
        if isinstance(p, Rectangle) and p.get_fill()
    }


def _one_colour_per_group(groups: list[tuple[str, list[tuple[int, int]]]], cells) -> list[str]:
    """The faults: a group drawn in two colours, or two groups drawn in one."""
    faults, owner = [], {}
    for name, where in groups:
        colours = {cells[c] for c in where}
        if len(colours) != 1:
            faults.append(f"{name} is drawn in {sorted(colours)}")
            continue
        (colour,) = colours
        if colour in owner:
            faults.append(f"{name} and {owner[colour]} share {colour}")
        owner[colour] = name
    return faults


def test_folding_figure_gives_every_group_its_own_colour():
    from minipar.grid import Grid

    fig, _ = _drawn("expert_parallel.folding")
    cells = _cells(fig.axes[0])
    grid = Grid(d=2, t=4, ep=4)
    groups = [
        (f"{kind}{i}", [(r, y) for r in members])
        for y, kind in enumerate(("tp", "dp", "ep", "edp"))
        for i, members in enumerate(grid.groups(kind))
    ]
    assert len(groups) == 12
    assert _one_colour_per_group(groups, cells) == []


def test_five_d_figure_gives_every_group_its_own_colour():
    from minipar.grid import Grid

    fig, _ = _drawn("three_d.five_d_grid")
    top, bottom = (_cells(ax) for ax in fig.axes[:2])
    grid = Grid(d=2, t=2, p=2, cp=2, ep=4)
    S = grid.stage_size
    cells = {("top", *c): v for c, v in top.items()} | {
        ("bottom", *c): v for c, v in bottom.items()
    }
    groups = [
        (f"{kind}{i}", [(panel, r % S, r // S) for r in members])
        for panel, kind in (("top", "tp"), ("bottom", "ep"))
        for i, members in enumerate(grid.groups(kind))
    ]
    assert _one_colour_per_group(groups, cells) == []


def test_the_colour_check_names_a_shared_colour():
    cells = {(0, 0): "#000", (1, 0): "#000", (2, 0): "#fff", (3, 0): "#111"}
    assert _one_colour_per_group([("a", [(0, 0)]), ("b", [(1, 0)])], cells) == [
        "b and a share #000"
    ]
    assert _one_colour_per_group([("c", [(2, 0), (3, 0)])], cells) == [
        "c is drawn in ['#111', '#fff']"
    ]


def test_the_phone_figures_are_found():
    assert set(SCHEDULE_GRIDS) | {"three_d.step_breakdown", "three_d.memory_by_layout"} <= set(
        PHONE_FIGURES
    ), PHONE_FIGURES


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
@pytest.mark.parametrize("name", PHONE_FIGURES)
def test_phone_layout_fits_a_phone_column(name):
    """The phone layout is shown at about its own size in a 358 px column (no minimum width,
    no scrolling), so it must be at most ``PHONE_WIDTH_IN`` wide, text at 8 pt or more,
    and be a layout of its own, not the wide one again."""
    fig, renderer = _drawn(name, phone=True)
    wide, _ = _drawn(name, phone=False)
    width = fig.get_tightbbox(renderer).width
    sizes = [t.get_fontsize() for ax in fig.axes for t in ax.texts]
    wide_width = wide.get_tightbbox(wide.canvas.get_renderer()).width
    assert width <= PHONE_WIDTH_IN + 0.02, (
        f"{name}: its phone layout is {width:.2f} in wide (at most {PHONE_WIDTH_IN})"
    )
    assert min(sizes, default=9) >= 8, f"{name}: text at {min(sizes)} pt on a phone"
    assert width < wide_width, f"{name}: the phone layout is as wide as the wide one"


def _digits(fig) -> list[str]:
    return sorted(t.get_text() for ax in fig.axes for t in ax.texts if t.get_text().isdigit())


@pytest.mark.slow
@pytest.mark.parametrize("name", SCHEDULE_GRIDS)
def test_wrapped_schedule_grid_labels_every_action_once(name):
    """Wrapping the time axis in two halves loses no box's micro-batch digit and doubles none:
    the phone grid's digits are the wide grid's."""
    phone, _ = _drawn(name, phone=True)
    wide, _ = _drawn(name, phone=False)
    assert len(phone.axes) >= 2, f"{name}: the phone layout does not wrap"
    assert _digits(phone) == _digits(wide)


def test_the_page_tags_each_layout_for_the_stylesheet():
    """A figure with a phone layout gets four images, each tagged with its theme and layout;
    the stylesheet shows the phone ones below 540 px and hides the wide ones there. A figure
    without one keeps its two theme images, untagged, scrolling with a cue."""
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    from minipar_figures import variants

    css = (ROOT / "_static" / "minipar.css").read_text(encoding="utf-8")
    assert "@media (max-width: 540px)" in css and "img.minipar-phone" in css
    phone = kit.load("three_d.step_breakdown")
    assert [(f, c) for _, f, c in variants(phone)] == [
        ("three_d.step_breakdown-light.svg", ["only-light", "minipar-wide"]),
        ("three_d.step_breakdown-dark.svg", ["only-dark", "minipar-wide"]),
        ("three_d.step_breakdown-phone-light.svg", ["only-light", "minipar-phone"]),
        ("three_d.step_breakdown-phone-dark.svg", ["only-dark", "minipar-phone"]),
    ]
    assert [p.phone for p, _, _ in variants(phone)] == [False, False, True, True]
    plain = kit.Figure("x.y", lambda pal: None)
    assert [c for _, _, c in variants(plain)] == [["only-light"], ["only-dark"]]
