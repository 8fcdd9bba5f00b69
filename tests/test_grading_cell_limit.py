"""The grader's in-process limit: nested limits keep the outer one, and time the caller spends
in minipar.runtime.launch.run (its ranks' time, under their own watch) is not counted as waiting."""

import time

import pytest

from minipar.grading import CheckTimeLimit, cpu_time_limit


def _spin(cpu_seconds):
    end = time.process_time() + cpu_seconds
    while time.process_time() < end:
        pass


def test_an_inner_limit_leaves_the_outer_one_running():
    """A check inside a graded cell: after the check's own limit ends, the cell's goes on."""
    with pytest.raises(CheckTimeLimit, match="stopped after 0.5 CPU-seconds"):
        with cpu_time_limit(0.5):
            with cpu_time_limit(5):
                _spin(0.1)
            _spin(3)  # without the outer limit restored this would simply finish
            pytest.fail("the outer limit was lost after the inner one ended")


def _sleeps(rank, world_size, seconds):
    import time

    time.sleep(seconds)
    return rank


@pytest.mark.slow  # starts ranks: not part of make fast
def test_waiting_on_launched_ranks_is_not_the_cells_waiting():
    """A learner's own minipar.runtime.launch.run (not the grader's run_ranks) that outlasts the wall
    backstop (10 × 0.2 s) is the ranks' time: no limit fires after it returns."""
    from minipar.runtime.launch import ranks_wall_seconds, run

    before = ranks_wall_seconds()
    with cpu_time_limit(0.2):
        assert run(_sleeps, 2, 2.5, backend="gloo") == [0, 1]
        time.sleep(0.3)  # the backstop would fire here if the 2.5 s counted
    assert ranks_wall_seconds() - before >= 2.5


def _spin_thread(cpu_seconds):
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        pass


@pytest.mark.slow  # 3 CPU-seconds
def test_only_the_main_threads_cpu_time_counts():
    """Work on other threads (torch's intra-op pool; here a Python thread) while the main
    thread waits is not the learner's loop: 3 CPU-seconds beside a 2-second limit pass. The
    same work on the main thread is stopped (negative control)."""
    import threading

    from minipar.grading.limits import _main_thread_clock

    if _main_thread_clock() is None:
        pytest.skip("no per-thread CPU clock here: the process-wide clock is used")
    with cpu_time_limit(2):
        side = threading.Thread(target=_spin_thread, args=(3,))
        side.start()
        side.join()
    with pytest.raises(CheckTimeLimit, match="stopped after 0.5 CPU-seconds"):
        with cpu_time_limit(0.5):
            _spin_thread(3)
