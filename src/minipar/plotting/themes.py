"""The book figures' two themes, light and dark, each in a wide and a phone layout, and the
colour rules the figures share. A figure function of ``book/figures/<slug>.py`` takes a
:class:`Palette` and draws in it; the book's build draws it once per palette
(``book/figures/kit.py`` registers the functions).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


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

    def legend(self, ax, loc: str, *, below=(-0.25, -0.2), at=None, **kw):
        """``ax``'s legend at ``loc`` (``at``: its ``bbox_to_anchor``) in the wide layout; in the
        phone layout under the axes, its upper left corner at ``below`` (axes fractions), where
        the narrow plot leaves the lines their room. ``kw`` goes to ``ax.legend`` in both."""
        if self.phone:
            return ax.legend(loc="upper left", bbox_to_anchor=below, **kw)
        return ax.legend(loc=loc, **({} if at is None else {"bbox_to_anchor": at}), **kw)

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
