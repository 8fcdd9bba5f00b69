"""ipywidgets cost-model explorers, one module per chapter, all built on :func:`explorer`.

A static site has no kernel, so an explorer shows its **default view as an ordinary figure** (it
is saved in the executed notebook and appears on the page), then the controls and a live area
that redraws when a control changes. Impossible settings (a ``ValueError`` from the cost model)
show the error's one-line message in the live area instead of a traceback.
"""
from __future__ import annotations

import html
from typing import Callable


def explorer(controls: dict, draw: Callable, title: str = "", show: bool = True):
    """Display ``draw(**defaults)`` as a static figure, then widgets that redraw it live.

    controls: name -> ipywidget (its ``value`` is the default). draw(**values) -> matplotlib
    Figure. Returns the widget box (for tests: ``box.children``; ``box.redraw()`` redraws).
    """
    import ipywidgets as w
    import matplotlib.pyplot as plt
    from IPython.display import display

    def values():
        return {k: c.value for k, c in controls.items()}

    if show:
        fig = draw(**values())
        display(fig)
        plt.close(fig)
    out = w.Output()
    status = w.HTML(value="<i>Change a control to redraw; the figure above is the default "
                          "view.</i>")

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            try:
                fig = draw(**values())
            except ValueError as e:
                status.value = ("<b style='color:#b00'>Impossible setting:</b> "
                                + html.escape(str(e)))
                return
            status.value = ""
            display(fig)
            plt.close(fig)

    for c in controls.values():
        c.observe(redraw, names="value")
    box = w.VBox([w.HTML(f"<b>{title}</b>") if title else w.HTML(""),
                  w.HBox(list(controls.values())[:4]), w.HBox(list(controls.values())[4:]),
                  status, out])
    box.redraw = redraw
    box.status = status
    if show:
        display(box)
    return box
