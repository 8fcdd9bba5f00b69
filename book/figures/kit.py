"""The figure kit: registration, the two themes, and a few drawing helpers every chapter uses.

A figure function takes a :class:`Palette` and returns a matplotlib ``Figure``::

    from figures.kit import figure

    @figure(draws=["minipar.collectives.ring.ring_all_reduce"])
    def ring_steps(pal):
        fig, ax = pal.subplots(6.4, 2.8)
        ...
        return fig

``draws`` lists the dotted names of the library functions the picture is computed from; the test
runs the function under a profiler and fails if one of them is never called. Compute the picture
from those functions (a schedule from the schedule function, a chunk map from the sharding
function), never from a copy of their logic.

Sizes: figures are laid out at 100 px per inch and shown at most at the column's width; a
6.4-inch figure at 390 px is shown at 0.6 of its size, so keep text at 9 pt or more and widths
at 7 inches or less. The page gives every figure a minimum width and its own scrolling box.

Phones: a figure registered with ``phone=True`` is drawn twice more, with ``pal.phone`` true,
and a page narrower than 540 px shows that layout instead of the wide one. The function then
lays the same data out for a 358 px column: at most :data:`PHONE_WIDTH_IN` inches wide (shown at
about its own size, so 9 pt text stays 9 pt), bars in two rows, labels above instead of beside.
The phone layout has no minimum width and never scrolls.
"""

from __future__ import annotations

import importlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field, replace

#: name ("<slug>.<function>") -> registered figure
REGISTRY: dict[str, Figure] = {}


@dataclass(frozen=True)
class Palette:
    """Colours of one theme. ``series`` are distinct hues for ranks, stages, experts (the
    Okabe-Ito palette, readable with colour-blindness), in both themes."""

    theme: str
    fg: str
    muted: str
    grid: str
    box: str
    phone: bool = False  # draw the narrow layout (a figure registered with phone=True)
    series: tuple[str, ...] = (
        "#0072B2",  # blue
        "#E69F00",  # orange
        "#009E73",  # green
        "#CC79A7",  # pink
        "#56B4E9",  # sky
        "#D55E00",  # vermilion
        "#F0E442",  # yellow
        "#999999",  # grey
    )

    def color(self, i: int) -> str:
        """The ``i``-th series colour (cycles)."""
        return self.series[i % len(self.series)]

    def group_colors(self, n: int) -> list[str]:
        """``n`` colours, all different, for a figure that colours ``n`` groups: the series,
        then four darker hues of Paul Tol's palette (wine, indigo, dark green, olive); more than
        twelve groups need labels, not colours."""
        more = ("#882255", "#332288", "#117733", "#999933")
        if n > len(self.series) + len(more):
            raise ValueError(f"groups ({n}) must be at most {len(self.series) + len(more)}")
        return list(self.series + more)[:n]

    def rc(self) -> dict:
        """matplotlib rcParams of this theme (text and axes in the theme's foreground)."""
        return {
            "figure.dpi": 100,
            "font.size": 10,
            "axes.titlesize": 10,
            "legend.fontsize": 9,
            "text.color": self.fg,
            "axes.labelcolor": self.fg,
            "axes.edgecolor": self.muted,
            "xtick.color": self.fg,
            "ytick.color": self.fg,
            "grid.color": self.grid,
            "legend.frameon": False,
            "svg.fonttype": "none",  # text stays text: selectable, crisp at any zoom
            "svg.hashsalt": "minipar",  # ids that do not change between builds
        }

    def subplots(self, width: float, height: float, **kw):
        """``plt.subplots`` at ``width`` × ``height`` inches, in this theme."""
        import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

        return plt.subplots(figsize=(width, height), **kw)


def ink(fill: str) -> str:
    """A label's colour on ``fill``: near-black on a light fill, white on a dark one."""
    from matplotlib.colors import to_rgb  # noqa: PLC0415 (lazy: matplotlib)

    r, g, b = to_rgb(fill)
    return "#111" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.4 else "#fff"


LIGHT = Palette("light", fg="#222222", muted="#666666", grid="#dddddd", box="#f2f2f2")
DARK = Palette("dark", fg="#e6e6e6", muted="#aaaaaa", grid="#444444", box="#2a2a2a")
THEMES = (LIGHT, DARK)
#: the two themes with ``phone`` set: the narrow layout of a figure registered with phone=True
PHONE_THEMES = tuple(replace(p, phone=True) for p in THEMES)
#: the widest a phone layout may be, in inches: a 390 px phone's column is 358 px
PHONE_WIDTH_IN = 3.7


@dataclass(frozen=True)
class Figure:
    """A registered figure: its name, the function that draws it, the library functions it is
    computed from, and whether it has a phone layout."""

    name: str
    draw: Callable
    draws: tuple[str, ...] = field(default_factory=tuple)
    phone: bool = False

    def palettes(self) -> tuple[Palette, ...]:
        """The palettes the page draws it in: both themes, and both phone themes if it has a
        phone layout."""
        return THEMES + (PHONE_THEMES if self.phone else ())

    def svg(self, pal: Palette) -> str:
        """The figure as SVG text, drawn in theme ``pal`` on a transparent background."""
        import matplotlib  # noqa: PLC0415 (lazy: matplotlib)

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

        with matplotlib.rc_context(pal.rc()):
            fig = self.draw(pal)
            buf = io.StringIO()
            fig.savefig(buf, format="svg", transparent=True, bbox_inches="tight")
            plt.close(fig)
        return buf.getvalue()


def figure(draws: list[str] | tuple[str, ...], *, phone: bool = False):
    """Register the decorated function as figure ``<module's last name>.<function name>``;
    ``phone=True``: it also draws a narrow layout when ``pal.phone`` is set."""

    def register(fn):
        name = f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"
        if name in REGISTRY and REGISTRY[name].draw is not fn:
            raise ValueError(f"figure {name} is registered twice")
        REGISTRY[name] = Figure(name, fn, tuple(draws), phone)
        return fn

    return register


def load(name: str) -> Figure:
    """The figure ``<slug>.<function>``, importing ``figures.<slug>`` on first use."""
    slug = name.split(".", 1)[0]
    if name not in REGISTRY:
        importlib.import_module(f"figures.{slug}")
    if name not in REGISTRY:
        raise KeyError(f"no figure {name!r} in book/figures/{slug}.py")
    return REGISTRY[name]


def cells(ax, grid, pal: Palette, *, labels=None, colors=None, row_names=None):
    """Draw ``grid`` (rows of values; ``None`` = empty) as labelled cells, row 0 at the top.

    ``labels(v)`` gives a cell's text (default ``str``), ``colors(v)`` its fill (default: the
    series colour of ``int(v)``). ``row_names`` label the rows on the left."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    labels = labels or str
    colors = colors or (lambda v: pal.color(int(v)))
    width = max(len(r) for r in grid)
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if v is None:
                continue
            ax.add_patch(
                plt.Rectangle((j, -i - 1), 1, 1, facecolor=colors(v), edgecolor=pal.fg, lw=0.6)
            )
            ax.text(
                j + 0.5, -i - 0.5, labels(v), ha="center", va="center", fontsize=9, color="#111"
            )
    ax.set(xlim=(0, width), ylim=(-len(grid), 0))
    ax.set_xticks([])
    if row_names is not None:
        ax.set_yticks([-i - 0.5 for i in range(len(grid))], row_names)
    else:
        ax.set_yticks([])
    for s in ax.spines.values():
        s.set_visible(False)
    ax.set_aspect("equal")


def preview(name: str, path: str, theme: str = "light", phone: bool = False) -> None:
    """Write figure ``name`` as a PNG at ``path`` (to look at it while drawing it); ``phone``:
    its phone layout."""
    import matplotlib  # noqa: PLC0415 (lazy: matplotlib)

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

    pal = replace(LIGHT if theme == "light" else DARK, phone=phone)
    with matplotlib.rc_context(pal.rc()):
        fig = load(name).draw(pal)
        fig.savefig(
            path, dpi=100, bbox_inches="tight", facecolor="white" if theme == "light" else "#1e1e1e"
        )
        plt.close(fig)
