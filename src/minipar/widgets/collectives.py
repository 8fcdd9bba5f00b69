"""Explorer for collective costs: op, algorithm, ranks, message size, link preset.

``widgets/collectives.js`` is the JavaScript twin of
:func:`minipar.cost.network.collectives.collective_time` (α-β model, Thakur et al. 2005) and of
nccl-tests' busbw (tests/test_explorer_parity.py). "this machine, fitted" uses the α and
bandwidth that ``minipar bench collectives`` fitted in the notebook (or a rough default).
"""

from __future__ import annotations

from minipar.widgets import Explorer, links_config
from minipar.widgets.inputs import check_values

MACHINE = "this machine, fitted"
DEFAULT_FIT = (1e-3, 0.3e9)  # α (s), bandwidth (bytes/s): order of gloo on a shared 2-core CPU


def collectives_config(fitted: tuple[float, float] | None = None) -> dict:
    """The explorer's data: every link preset {alpha, bandwidth, source}, plus this machine."""
    links = links_config("source")
    alpha, bandwidth = fitted or DEFAULT_FIT
    links[MACHINE] = {
        "alpha": max(alpha, 0.0),
        "bandwidth": bandwidth,
        "source": "fitted in this notebook by minipar bench collectives (gloo, loopback)"
        if fitted
        else "rough default (run the benchmark cell to fit this machine)",
    }
    return {"links": links}


def collectives_explorer(fitted: tuple[float, float] | None = None, **values):
    """The chapter's explorer; ``fitted`` = (α, bandwidth) from the notebook's benchmark.

    ``values`` override the default controls (op, algorithm, n, size, link).
    """
    check_values("collectives", "collectives", values)  # the page's own input rules

    return Explorer("collectives", "collectives", config=collectives_config(fitted), values=values)
