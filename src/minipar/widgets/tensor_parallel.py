"""Explorer for the tensor-parallel chapter: one layer's communication against computation, and
its activation memory per GPU, as t, h, s, b and the link vary.

``widgets/tensor_parallel.js`` is the JavaScript twin of :func:`tp_layer_model`, which composes
:mod:`minipar.cost.chapters.tensor_parallel` (Shoeybi et al. 2019 for the collectives; Narayanan
et al. 2021 for the FLOPs) and :func:`minipar.cost.chapters.memory_time.activation_bytes_per_layer`
(Korthikanti et al. 2022, Table 2); tests/test_tensor_parallel_explorer.py checks they agree.
"""

from __future__ import annotations

from dataclasses import dataclass

from minipar.cost.chapters.memory_time import activation_bytes_per_layer
from minipar.cost.chapters.tensor_parallel import (
    comm_compute_ratio,
    layer_comm_fraction,
    tp_sent_bytes_per_layer,
)
from minipar.widgets import Explorer, links_and_peaks
from minipar.widgets.inputs import check_numbers, check_values


@dataclass(frozen=True)
class TPLayerControls:
    """The tp-layer explorer's controls: width ``h``, ``a`` heads, ``b`` sequences of ``s``
    tokens, TP over ``t``; a GPU's dense ``flops`` (FLOP/s), a link's per-direction
    ``bandwidth`` (B/s) and latency ``alpha`` (s); ``sp``: sequence parallelism."""

    h: int = 12288
    a: int = 96
    s: int = 2048
    b: int = 1
    t: int = 8
    flops: float = 989.4e12
    bandwidth: float = 450e9
    alpha: float = 2e-6
    sp: bool = False


def tp_layer_model(**controls) -> dict:
    """One layer, bf16: forward comm/compute ratio, share of forward + backward time in the
    four all-reduces without overlap, bytes a rank sends per micro-batch, and saved activation
    bytes per rank (``sp``: with sequence parallelism), the counts checked first
    (:mod:`minipar.widgets.inputs`); ``controls``: :class:`TPLayerControls`'s fields by name."""
    c = TPLayerControls(**controls)
    h, a, s, b, t, sp = c.h, c.a, c.s, c.b, c.t, c.sp
    check_numbers(t=t, h=h, a=a, s=s, b=b)
    kw = dict(flops=c.flops, bandwidth=c.bandwidth, alpha=c.alpha)
    return {
        "ratio": comm_compute_ratio(b, s, h, t, **kw),
        "share": layer_comm_fraction(b, s, h, t, **kw),
        "sent_bytes": tp_sent_bytes_per_layer(b, s, h, t, 2, sp=sp),
        "activation_bytes": activation_bytes_per_layer(s, b, h, a, t=t, sp=sp),
    }


tp_config = links_and_peaks  # the explorer's data


def tp_explorer(**values):
    """Live explorer of :func:`tp_layer_model`; ``values`` override the default controls."""
    check_values("tensor_parallel", "tp-layer", values)  # the page's own input rules
    return Explorer("tensor_parallel", "tp-layer", config=tp_config(), values=values)
