"""The progress line of `minipar grade` shows the CPU-seconds a running cell has used of its budget
(the budget at which a runaway is stopped, whatever the wall time on a busy machine)."""

import pytest

from minipar.grading import limits
from minipar.grading.cli import budget_used


def test_the_progress_line_shows_cpu_seconds_of_the_budget():
    check = max(limits.TIME_LIMIT, limits.CPU_LIMIT)
    assert budget_used(41.4, check=True) == f"41 of its {check:g} CPU-s budget used"
    assert budget_used(3, check=False) == f"3 of its {limits.CELL_LIMIT:g} CPU-s budget used"


@pytest.mark.slow
def test_the_heartbeat_counts_the_busiest_process_not_the_sum(tmp_path, monkeypatch):
    """Three ranks burning 2 CPU-seconds each: the cell's beat reports about 2 (the busiest
    process, which the budget bounds), not the 6 the processes used together."""
    from minipar.grading import runner

    monkeypatch.setattr(runner, "HEARTBEAT_S", 0.5)
    warm = "from minipar.runtime.launch import run\nrun(lambda rank, n: rank, 2, backend='gloo')"
    burn = (
        "def burn(rank, n):\n"
        "    import time\n"
        "    t = time.process_time()\n"
        "    while time.process_time() - t < 2.0:\n"
        "        pass\n"
        "run(burn, 3, backend='gloo')"
    )
    beats = []
    (tmp_path / "k").mkdir()
    run = runner.run_notebook(
        [warm, burn],
        tmp_path / "k",
        str(tmp_path),
        heartbeat=lambda k, s, cpu: beats.append((k, cpu)),
    )
    assert run.cells[1].status == "ok", run.cells[1]
    burned = [cpu for k, cpu in beats if k == 1]
    assert burned and max(burned) >= 1.0, beats  # the ranks' CPU is seen...
    assert max(burned) < 4.0, beats  # ...one process at a time, not summed (6)
