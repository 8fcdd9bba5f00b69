"""Faults: ``minipar grade`` signalled (SIGINT, SIGTERM, SIGHUP) while a check's ranks and their
own children run leaves no rank, child or file; killed (SIGKILL), it leaves a folder the next
grade removes (see ``test_faults.py`` for the sandbox and what is checked).
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from fault_support import (
    RANKS_CELL,
    ROOT,
    SIGNALS,
    _settled,
    _tagged,
    assert_clean_exit,
    exercise_notebook,
    grade_process,
    wait_for_both_ranks,
)


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_grade_signalled_mid_check_leaves_no_rank_child_or_file(sandbox, sig):
    env, tmp, side, tag = sandbox
    nb = exercise_notebook(side / "nbs", RANKS_CELL)
    p = grade_process(env, nb)
    wait_for_both_ranks(p, side)
    markers = [side / "rank.0", side / "rank.1"]
    assert p.poll() is None, p.communicate()[1][-3000:]
    children = [int(m.read_text()) for m in markers]
    assert all(pid in _tagged(tag) for pid in children)  # the rank children are alive
    p.send_signal(sig)
    assert_clean_exit(p, sig, tag, tmp, side)


@pytest.mark.slow
def test_after_a_sigkill_the_next_grade_removes_the_folder_left(sandbox):
    """SIGKILL cannot be handled: the kernel and everything under it exit by themselves (the
    kernel polls its parent), and the next `minipar grade` removes the folder left behind.
    A folder of another host token (another container's /tmp) stays."""
    env, tmp, side, tag = sandbox
    nb = exercise_notebook(side / "nbs", RANKS_CELL)
    p = grade_process(env, nb)
    wait_for_both_ranks(p, side)
    p.kill()
    p.wait()
    procs, _ = _settled(tag, tmp, seconds=30, ignore="minipar-grade-")  # the folder stays
    assert procs == []
    left = [f.name for f in tmp.iterdir()]
    assert len(left) == 1 and left[0].startswith("minipar-grade-"), left
    neighbour = tmp / f"minipar-grade-0000beef-{p.pid}-x"
    neighbour.mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "minipar.cli", "grade", "no-such.ipynb"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 2  # a bad path: nothing graded, and yet
    again = grade_process(env, exercise_notebook(side / "nbs2", "x = 1"))
    again.communicate(timeout=300)
    assert sorted(f.name for f in tmp.iterdir()) == [neighbour.name]
