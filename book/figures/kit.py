"""The figure kit: how a chapter page's figures are registered, loaded and previewed.

A figure function takes a :class:`~minipar.plotting.themes.Palette` (the themes live in
:mod:`minipar.plotting.themes`) and returns a matplotlib ``Figure``::

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
lays the same data out for a 358 px column: at most
:data:`~minipar.plotting.themes.PHONE_WIDTH_IN` inches wide (shown at about its own size, so 9 pt
text stays 9 pt), bars in two rows, labels above instead of beside. The phone layout has no
minimum width and never scrolls.
"""

from __future__ import annotations

import importlib
import io
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from minipar.plotting.themes import DARK, LIGHT, PHONE_THEMES, THEMES, Palette

#: name ("<slug>.<function>") -> registered figure
REGISTRY: dict[str, Figure] = {}


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

    def svg(self, pal: Palette, profile=None) -> str:
        """The figure as SVG text, drawn in theme ``pal`` on a transparent background;
        ``profile``: a :func:`sys.setprofile` hook set while the figure is drawn (not while
        matplotlib writes the SVG)."""
        import matplotlib  # noqa: PLC0415 (lazy: matplotlib)

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt  # noqa: PLC0415 (lazy: matplotlib)

        with matplotlib.rc_context(pal.rc()):
            if profile is None:
                fig = self.draw(pal)
            else:
                sys.setprofile(profile)
                try:
                    fig = self.draw(pal)
                finally:
                    sys.setprofile(None)
            buf = io.StringIO()
            # no date: with the theme's fixed hash salt, a figure drawn again is the same file
            fig.savefig(
                buf, format="svg", transparent=True, bbox_inches="tight", metadata={"Date": None}
            )
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
