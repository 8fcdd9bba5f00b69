"""Our vocab-parallel cross-entropy against DTensor's ``loss_parallel`` (float64, gloo, t = 2, 3),
with a negative control: cross-entropy on the local vocab slice must not match."""

import pytest

from minipar.runtime.launch import run
from minipar.tensor_parallel.dtensor import compare_loss_parallel_on_rank

TOL = 1e-10


def _both(rank, t):
    return compare_loss_parallel_on_rank(rank, t)


@pytest.mark.slow
@pytest.mark.parametrize("t", [2, 3])
def test_loss_parallel_matches_ours(t):
    results = run(_both, t, backend="gloo", timeout=300)
    for d in results:
        for k in ("loss ours-dtensor", "dX ours-dtensor", "dW ours-dtensor", "loss ours-full"):
            assert d[k] < TOL, (k, d[k])
        assert d["loss control-dtensor"] > 1e-3, d["loss control-dtensor"]
