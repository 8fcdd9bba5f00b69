"""The progress line of `minipar grade` shows the CPU-seconds a running cell has used of its budget
(the budget at which a runaway is stopped, whatever the wall time on a busy machine)."""

from minipar.grading import limits
from minipar.grading.cli import budget_used


def test_the_progress_line_shows_cpu_seconds_of_the_budget():
    check = max(limits.TIME_LIMIT, limits.CPU_LIMIT)
    assert budget_used(41.4, check=True) == f"41 of its {check:g} CPU-s budget used"
    assert budget_used(3, check=False) == f"3 of its {limits.CELL_LIMIT:g} CPU-s budget used"
