"""Faults inside a learner's notebook that ``minipar grade`` must survive and name.

One ``minipar grade --json`` run (a module fixture) over seven copies of the params exercise,
each with one learner cell added: a cell that double-forks daemons (one leaves the kernel's
session, one clears its environment), one that sends SIGTERM to its parent (the grader), a
50 GB allocation before the answer is defined, ``os.environ.clear()``, ``sys.stdout = None``, a
corrupt notebook file, and an untouched solved notebook. Each test reads its notebook's rows:
the run ends normally (status 0), nothing it started is left, the signalling notebook fails
naming the signal while the others are graded, the failed allocation names ``MemoryError`` and
the grader's memory limit, the cleared environment and stream are named and put back, the
corrupt file is "unreadable", never "missing".
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from fault_support import _settled, _tagged, exercise_notebook

from minipar.grading import limits, runner

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "exercises" / "memory_time" / "solutions" / "01_params.py"
TASKS = ["memory_time.params", "memory_time.params_measured"]

DAEMONS = textwrap.dedent("""
    import os, subprocess, time
    if os.fork() == 0:  # a daemon that leaves the kernel's session: found by its environment
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    os.wait()
    if os.fork() == 0:  # one that clears its environment: found by its session
        if os.fork() == 0:
            os.execve("/bin/sleep", ["sleep", "600"], {})
        os._exit(0)
    os.wait()
""")
CELLS = {  # folder -> (learner cell, where: "before" the first code cell, "inside" or "after" it)
    "daemons": (DAEMONS, "before"),
    "parent": ("import os, signal\nos.kill(os.getppid(), signal.SIGTERM)", "before"),
    "memory": ("_hoard = bytearray(50 * 10**9)", "inside"),
    "environ": ("import os\nos.environ.clear()", "before"),
    "stdout": ("import sys\nsys.stdout = None", "before"),
    "good": ("", "before"),
    # a learner's own check, after the grader's is imported: the check cells call it
    "owncheck": ("def check(task, fn):\n    print('my check of', task)", "after"),
}


@pytest.fixture(scope="module")
def graded():
    base = Path(tempfile.mkdtemp(prefix="mg", dir="/tmp"))
    tmp = base / "t"
    tmp.mkdir()
    tag = uuid.uuid4().hex
    env = dict(os.environ, TMPDIR=str(tmp), MINIPAR_FAULT_TAG=tag, PYTHONUNBUFFERED="1")
    paths = {name: exercise_notebook(base / name, *spec) for name, spec in CELLS.items()}
    corrupt = base / "corrupt" / "memory_time" / "01_params.ipynb"
    corrupt.parent.mkdir(parents=True)
    corrupt.write_text('{"cells": [{"cell_type": "code", "sou')  # a save cut short
    paths["corrupt"] = corrupt
    try:
        r = subprocess.run(
            [sys.executable, "-m", "minipar.cli", "grade", "--json"]
            + [str(p.parent.parent) for p in paths.values()],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=1800,
            start_new_session=True,
        )
        left = _settled(tag, tmp, seconds=30)
        rows = {}
        if r.returncode == 0:
            for t in json.loads(r.stdout)["tasks"]:
                name = Path(t["notebook"]).parent.parent.name
                rows.setdefault(name, {})[t["task"]] = (t["passed"], t["reason"])
        yield r, rows, left
    finally:
        for pid in _tagged(tag):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_the_run_ends_normally_and_leaves_no_process_or_file(graded):
    r, rows, (procs, files) = graded
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert procs == [] and files == [], (procs, files)
    assert set(rows) == set(CELLS) | {"corrupt"}, rows
    assert json.loads(r.stdout)["memory_limit_bytes"] == limits.KERNEL_MEMORY_BYTES


@pytest.mark.slow
def test_a_cell_that_signals_the_grader_fails_its_notebook_only(graded):
    r, rows, _ = graded
    for task in TASKS:
        passed, reason = rows["parent"][task]
        assert not passed
        assert "the cell sent SIGTERM to the grader, its parent process" in reason, reason
    assert all(passed for passed, _ in rows["good"].values()), rows["good"]
    assert all(passed for passed, _ in rows["daemons"].values()), rows["daemons"]


@pytest.mark.slow
def test_a_failed_allocation_is_named_with_the_memory_limit(graded):
    r, rows, _ = graded
    gib = limits.KERNEL_MEMORY_BYTES / 2**30
    for task in TASKS:
        passed, reason = rows["memory"][task]
        assert not passed
        assert "raised MemoryError" in reason, reason
        assert f"the grader's memory limit is {gib:g} GiB per kernel and per rank" in reason


@pytest.mark.slow
def test_a_cleared_environment_or_stdout_is_put_back_and_the_checks_run(graded):
    """Before: "the check cell did not run to completion" for both."""
    r, rows, _ = graded
    for name in ("environ", "stdout"):
        assert all(passed for passed, _ in rows[name].values()), (name, rows[name])


@pytest.mark.slow
def test_a_corrupt_notebook_is_unreadable_not_missing(graded):
    r, rows, _ = graded
    assert set(rows["corrupt"]) == set(TASKS)
    for passed, reason in rows["corrupt"].values():
        assert not passed
        assert reason.startswith("unreadable: restore it from git or delete it"), reason
    missing = json.loads(r.stdout)["missing"]
    assert not any("corrupt" in m["notebook"] for m in missing), missing


def test_the_memory_limit_is_set_on_a_process_and_inherited():
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        runner.limit_memory(child.pid, 3 * 2**30)
        assert resource.prlimit(child.pid, resource.RLIMIT_DATA) == (3 * 2**30, 3 * 2**30)
    finally:
        child.communicate(b"", timeout=60)
    assert limits.KERNEL_MEMORY_BYTES == 8 * 2**30


def test_the_report_states_the_memory_limit():
    from minipar.grading.notebooks import error_text, memory_limit_text

    assert memory_limit_text() == "the grader's memory limit is 8 GiB per kernel and per rank"
    assert error_text(MemoryError()) == (
        "MemoryError (the grader's memory limit is 8 GiB per kernel and per rank: an "
        "allocation past it fails)"
    )


def _sleeping(arg: str) -> list[int]:
    """Live processes running ``sleep arg`` (what ``pgrep -f "sleep arg"`` finds)."""
    found = []
    for name in os.listdir("/proc"):
        try:
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if cmd[:2] == [b"sleep", arg.encode()] and state != "Z":
            found.append(int(name))
    return found


SETSID = textwrap.dedent("""
    import os, subprocess, time
    def command(p):  # a process listed a moment ago may have ended since
        try:
            return open(f"/proc/{{p}}/cmdline", "rb").read().split(b"\\0")[:2]
        except OSError:
            return []
    subprocess.Popen("setsid sleep {arg} >/dev/null 2>&1 &", shell=True, env={{"PATH": "/usr/bin:/bin"}})
    for _ in range(200):  # until the daemon runs: its own session, parent init, no marker
        pids = [p for p in os.listdir("/proc") if p.isdigit() and command(p) == [b"sleep", b"{arg}"]]
        if pids:
            open({seen!r}, "w").write(pids[0])
            break
        time.sleep(0.05)
""")


@pytest.mark.slow
def test_a_re_sessioned_grandchild_with_a_clean_environment_is_killed(tmp_path):
    """A cell whose shell starts ``setsid sleep`` in the background with a bare environment:
    the daemon leaves the kernel's session, carries no marker and loses its parent at once. The
    kernel is a child subreaper, so the daemon stays under it, and grading kills it."""
    arg = f"304.{uuid.uuid4().int % 10**9:09d}"  # unique: runs beside this one are not touched
    seen = tmp_path / "seen"
    folder = tmp_path / "kernel"
    folder.mkdir()
    try:
        run = runner.run_notebook([SETSID.format(arg=arg, seen=str(seen))], folder, str(tmp_path))
        assert run.cells[0].status == "ok", run.cells[0]
        assert seen.exists(), "the daemon never started: the check below would prove nothing"
        deadline = time.monotonic() + 10
        while _sleeping(arg) and time.monotonic() < deadline:  # an orphan's exit takes a moment
            time.sleep(0.1)
        assert _sleeping(arg) == [], f"sleep {arg} outlived grading"
    finally:
        for pid in _sleeping(arg):
            with contextlib.suppress(OSError):
                os.kill(pid, 9)


@pytest.mark.slow
def test_a_learners_own_check_is_named(graded):
    """Before: "the check cell did not run to completion", which says nothing of the cause."""
    r, rows, _ = graded
    for task in TASKS:
        passed, reason = rows["owncheck"][task]
        assert not passed
        assert "defined its own `check` (a function), which hides the grader's check()" in reason
