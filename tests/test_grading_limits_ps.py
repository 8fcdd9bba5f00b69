"""The grader's progress watch without /proc (macOS): the same verdicts from `ps`, forced here
on Linux. No fixed wall-clock budget is left for a system without /proc."""

import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist

from minipar.grading import LimitExceeded, limits, run_ranks

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _deadlocks(rank, world_size):
    x = torch.zeros(1)
    if rank == 0:
        dist.recv(x, src=1)  # rank 1 never sends
    else:
        dist.all_reduce(x)
    return 0


def _loops(rank, world_size):
    n = 0
    while rank == 0 or n < 0:
        n += 1
    return n


@pytest.fixture
def without_proc(monkeypatch):
    monkeypatch.setattr(limits, "_PROC", False)
    monkeypatch.setattr(limits, "STALL_S", 2.0)  # a true deadlock: any window catches it
    monkeypatch.setattr(limits, "CPU_LIMIT", 3.0)
    assert limits.can_watch() and limits._stat(limits.os.getpid())[2] != 0  # ps's start time


def test_ps_reads_state_and_cpu_time():
    state, cpu, start = limits._stat_ps(limits.os.getpid())
    assert state in "RSD" and cpu >= 0 and start
    assert limits._stat_ps(2**22 + 12345) is None  # no such process


def test_a_slow_ps_is_no_sample_not_an_exit(monkeypatch):
    """On a busy machine `ps` may not answer in time: the rank stays alive and watched, and
    the wait grows with the load (an idle machine's 5 s at load 1 per core, 20 s at 4)."""

    def slow(cmd, **kw):
        raise limits.subprocess.TimeoutExpired(cmd, kw["timeout"])

    monkeypatch.setattr(limits, "_PROC", False)
    monkeypatch.setattr(limits.subprocess, "run", slow)
    assert limits._stat(limits.os.getpid()) is limits.UNKNOWN
    assert limits._alive(limits.os.getpid()) and limits.can_watch()
    monkeypatch.setattr(limits.os, "getloadavg", lambda: (8.0, 8.0, 8.0))
    monkeypatch.setattr(limits.os, "cpu_count", lambda: 2)
    assert limits.busy_factor() == 4.0


@pytest.mark.slow  # starts ranks: not part of make fast
def test_a_deadlock_is_reported_from_ps(without_proc):
    with pytest.raises(LimitExceeded) as e:
        run_ranks(_deadlocks, 2)
    assert e.value.kind == "deadlock" and str(e.value).startswith(
        "deadlock on 2 ranks: for 2 s no rank made progress"
    ), str(e.value)
    assert "rank 0 waiting at line" in str(e.value) and "dist.recv(x, src=1)" in str(e.value)


@pytest.mark.slow  # starts ranks: not part of make fast
def test_an_endless_loop_is_stopped_by_cpu_time_from_ps(without_proc):
    with pytest.raises(LimitExceeded) as e:
        run_ranks(_loops, 2)
    assert e.value.kind == "endless loop" and "rank 0" in str(e.value), str(e.value)
