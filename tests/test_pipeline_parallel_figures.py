"""No legend covers plotted data in the pipeline and tensor-parallel chapters' figures: the
figures are drawn with the chapters' plotting functions, and every bar, line point and patch of
each axes is tested against the legend's bounding box in display coordinates. The control draws
the old legend placement (inside the axes, upper right) and is caught."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pytest

from minipar.pipeline_parallel import schedule, simulate
from minipar.plotting import tensor_parallel as tp_plots
from minipar.plotting.pipeline_parallel import COLORS, plot_timeline


def legend_overlaps(fig) -> list[str]:
    """Descriptions of the data artists whose extent meets a legend of their axes."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    hits = []
    for ax in fig.axes:
        leg = ax.get_legend()
        if leg is None:
            continue
        box = leg.get_window_extent(renderer)
        for patch in ax.patches:
            if patch.get_visible() and patch.get_window_extent(renderer).overlaps(box):
                hits.append(f"patch at {patch.get_window_extent(renderer).bounds}")
        for line in ax.lines:
            xy = ax.transData.transform(np.column_stack(line.get_data()).astype(float))
            inside = [(x, y) for x, y in xy if box.contains(x, y)]
            if inside:
                hits.append(f"line {line.get_label()!r} point {inside[0]}")
        for coll in ax.collections:
            for path in coll.get_paths():
                ext = path.get_extents(coll.get_transform())
                if ext.overlaps(box):
                    hits.append(f"collection extent {ext.bounds}")
    return hits


def _timeline(name, v=1):
    sim = simulate(schedule(name, 4, 8, v))
    fig, ax = plt.subplots(figsize=(9, 2.6))
    plot_timeline(sim.timeline, 4, ax=ax, title=name, unit="units of t")
    fig.tight_layout()
    return fig


@pytest.mark.parametrize("name, v", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1)])
def test_pipeline_timeline_legend_covers_no_bar(name, v):
    fig = _timeline(name, v)
    assert legend_overlaps(fig) == []
    assert fig.axes[0].get_xlabel() == "time (units of t)"
    plt.close(fig)


def test_control_legend_inside_is_caught():
    fig = _timeline("1f1b")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    fig.axes[0].legend(handles, ["F", "B", "W"], loc="upper right", fontsize=7, ncol=3)
    assert legend_overlaps(fig)  # the old placement covered rank 0's last bars
    plt.close(fig)


def test_activation_bars_legend_covers_no_bar():
    # the notebook's figure: bytes at peak per rank, one bar group per schedule
    fig, ax = plt.subplots(figsize=(7, 2.8))
    for k, (name, peak) in enumerate(
        {
            "gpipe": [9, 9, 9, 9],
            "1f1b": [4, 3, 2, 1],
            "interleaved": [5, 4, 3, 2],
            "zb-h1": [4, 4, 4, 4],
        }.items()
    ):
        ax.bar([x + 0.2 * k for x in range(4)], peak, width=0.2, label=name)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    assert legend_overlaps(fig) == []
    plt.close(fig)


def test_tensor_parallel_figures_legends_cover_no_data():
    figs = [
        tp_plots.activations(
            [1, 2, 3], [9e3, 6e3, 5e3], [9e3, 6e3, 5e3], [9e3, 4e3, 3e3], [9e3, 4e3, 3e3]
        ),
        tp_plots.comm_compute([2, 4, 8], {"a": [0.1, 0.3, 0.5], "b": [1, 2, 4]}),
        tp_plots.overlap(
            [
                {
                    "grad_input_gemm": (0, 1e-3),
                    "weight_grad_gemm": (1e-3, 3e-3),
                    "all_reduce": (1e-3, 2e-3),
                }
            ]
            * 2
        ),
    ]
    for fig in figs:
        assert legend_overlaps(fig) == []
        plt.close(fig)
