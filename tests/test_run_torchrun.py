"""The same worker functions run under torchrun (``python -m minipar.run``)."""
import re
import subprocess
import sys

import pytest

from minipar.launch import free_port, run


@pytest.mark.slow
def test_worker_runs_under_torchrun_and_under_launch():
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
         "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
         "-m", "minipar.run", "minipar.collectives.smoke:ring_vs_dist", "1000", "--backend", "gloo"],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    diffs = dict(re.findall(r"\[rank (\d)\] \{'max_abs_diff': ([0-9.e-]+)",
                            out.stdout))
    assert sorted(diffs) == ["0", "1"], out.stdout
    assert all(float(d) < 1e-5 for d in diffs.values())
    from minipar.collectives.smoke import ring_vs_dist
    results = run(ring_vs_dist, 2, 1000, backend="gloo")
    assert all(r["max_abs_diff"] < 1e-5 and r["bytes"] == 4000 for r in results)


def test_run_without_torchrun_explains():
    out = subprocess.run([sys.executable, "-m", "minipar.run", "minipar.collectives.smoke:x"],
                         capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in __import__("os").environ.items()
                              if k not in ("RANK", "WORLD_SIZE")})
    assert out.returncode != 0 and "start this module with torchrun" in out.stderr
