"""The course's figures, in one place: how they look (the notebooks' :func:`book_style`, here; the
chapter pages' light and dark themes, :mod:`minipar.plotting.themes`) and what each notebook
draws (``minipar.plotting.<slug>``, one module per chapter, each function returning a matplotlib
Figure). No other minipar module imports this package, only the notebooks and the pages' own
figures (``book/figures/<slug>.py``); importing it loads no matplotlib, a chapter's module does.

Every chapter notebook calls :func:`book_style` first. Figures are stored at twice their CSS
size (a 2× PNG), so high-density screens and zoomed pages show them sharp;
``_static/minipar.css`` scales them to the column. The rcParams below are the only style
settings: a chapter's module sets sizes and labels per figure, never global state.
"""

from __future__ import annotations

#: matplotlib rcParams of every course figure.
RC = {
    "figure.dpi": 100,  # the size a figure is laid out at (inches × 100 CSS px)
    "savefig.dpi": 200,  # files written by savefig: 2× as well
    "font.size": 10,
    "axes.titlesize": 10,
    "legend.fontsize": 8,
}

#: The inline backend's format in a notebook: a 2× PNG (IPython's "retina").
FORMAT = "retina"


def book_style() -> None:
    """Apply :data:`RC`, and in a notebook kernel store inline figures as :data:`FORMAT`.
    Returns nothing, so a notebook's first cell prints nothing."""
    import matplotlib as mpl  # noqa: PLC0415 (lazy: matplotlib)

    mpl.rcParams.update(RC)
    try:
        from IPython import get_ipython  # noqa: PLC0415 (lazy: matplotlib)
        from matplotlib_inline.backend_inline import set_matplotlib_formats  # noqa: PLC0415 (lazy: matplotlib)
    except ImportError:  # no IPython: a script or a test
        return
    if get_ipython() is not None:
        set_matplotlib_formats(FORMAT)
