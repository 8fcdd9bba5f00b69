"""Explorers: the default view draws (it is what the static site shows); impossible settings
show a one-line message in the widget instead of a traceback."""
import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402


def _controls(box):
    return {w.description: w for row in box.children[1:3] for w in row.children}


def test_collectives_explorer():
    from minipar.widgets.collectives import collectives_explorer, draw
    assert draw("all-reduce", "ring", 8, 2**26, "nvlink4-h100").axes
    box = collectives_explorer(show=False)
    c = _controls(box)
    c["op"].value = "all-gather"
    c["algorithm"].value = "rabenseifner"
    assert "Impossible setting" in box.status.value and "all-gather" in box.status.value
    c["algorithm"].value = "ring"
    assert box.status.value == ""
    c["link"].value = c["link"].options[-1]      # "this machine, fitted" without a fit
    assert "Impossible" not in box.status.value


def test_data_parallel_explorers():
    from minipar.widgets.data_parallel import (dp_step_explorer, dp_step_figure,
                                               zero_memory_explorer, zero_memory_figure)
    assert dp_step_figure().axes and zero_memory_figure().axes
    with pytest.raises(ValueError, match=r"ranks \(0\) must be >= 1"):
        dp_step_figure(ranks=0)
    box = dp_step_explorer(show=False)
    c = _controls(box)
    c["overlap"].value = False
    assert box.status.value == ""
    zbox = zero_memory_explorer(show=False)
    assert zbox.status.value.startswith("<i>")  # untouched: the hint, no error


def test_explorer_shows_the_message_of_a_value_error():
    import ipywidgets as w

    from minipar.widgets import explorer

    def draw(x):
        if x < 0:
            raise ValueError(f"x ({x}) must be >= 0")
        import matplotlib.pyplot as plt
        return plt.figure()
    box = explorer({"x": w.IntText(value=1, description="x")}, draw, show=False)
    box.children[1].children[0].value = -2
    assert "x (-2) must be &gt;= 0" in box.status.value          # escaped: it is HTML
