"""What the chapter's notebook calls from :mod:`.timing`, :mod:`.measurements` and
:mod:`.scaling`, in one namespace (``from ... import experiments as E``).

:func:`run_on_gloo` is :func:`minipar.runtime.launch.run` forced onto gloo (the notebook's counted
experiments keep their tensors on the CPU); prefer ``run_on_ranks`` (``backend="auto"``) in new
code.
"""

from __future__ import annotations

from minipar.runtime import launch

from .measurements import (
    accumulation_traffic_on_rank,
    compression_on_rank,
    pytorch_comparison,
    pytorch_comparison_on_rank,
    ring_bytes,
    traffic_on_rank,
    zero_on_rank,
)
from .scaling import DEFAULT_SCENARIOS, Scenario, scaling_curves, stale_sgd
from .timing import (
    bucket_sweep,
    bucket_sweep_on_rank,
    make_step,
    run_on_ranks,
    straggler,
    time_variants_on_rank,
    timeline_on_rank,
)


def run_on_gloo(fn, world_size: int, *args, **kwargs) -> list:
    """:func:`minipar.runtime.launch.run` on gloo, whatever GPUs there are: CPU ranks for the
    counted runs."""
    return launch.run(fn, world_size, *args, backend="gloo", **kwargs)
