"""Faults: ``minipar grade`` signalled while its kernel starts, and signalled again while the
first signal tears it down, leaves nothing behind; a learner's saved work never breaks the
starter tests.

Each run tags its environment with a fresh token (every process the call starts inherits it:
the kernel, the launcher's zygote, the ranks, a rank's own child) and gets its own ``TMPDIR``
(``fault_support.sandbox``). After SIGINT, SIGTERM or SIGHUP the test asserts that no process
carries the token, that ``TMPDIR`` is empty (no ``minipar-grade-*`` folder, no kernel
connection file, no launcher socket folder), that ``minipar grade`` printed one line and no
traceback and exited with 128 + the signal's number.

The other fault tests, one file per theme so that no worker of ``make unit`` (``--dist
loadfile``) carries them all: ``test_faults_ranks.py`` (signalled or killed while ranks run),
``test_faults_verdicts.py`` (what grade says and its exit codes), ``test_faults_kernel.py``
(the kernel watch), ``test_faults_launch.py`` (a launch), ``test_faults_grade.py`` (limits).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from fault_support import (
    RANKS_CELL,
    ROOT,
    SIGNALS,
    _tagged,
    _wait_for,
    assert_clean_exit,
    exercise_notebook,
    grade_process,
    wait_for_both_ranks,
)


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_grade_signalled_while_the_kernel_starts(sandbox, sig):
    env, tmp, side, tag = sandbox
    nb = exercise_notebook(side / "nbs", "x = 1")
    p = grade_process(env, nb)
    # the kernel process exists (it carries the tag) but is still importing
    _wait_for(lambda: any(pid != p.pid for pid in _tagged(tag)), 60, "the kernel to start")
    p.send_signal(sig)
    assert_clean_exit(p, sig, tag, tmp, side)


@pytest.mark.slow
def test_grade_signalled_again_during_teardown_still_cleans_up(sandbox):
    env, tmp, side, tag = sandbox
    nb = exercise_notebook(side / "nbs", RANKS_CELL)
    p = grade_process(env, nb)
    wait_for_both_ranks(p, side)
    p.send_signal(signal.SIGTERM)
    for _ in range(5):  # while the first one tears down
        time.sleep(0.1)
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    assert_clean_exit(p, signal.SIGTERM, tag, tmp, side)


# ------------------------------------------------------------------ a learner's saved work
COURSE_FILES = [
    "pyproject.toml",
    "tests/test_exercises.py",
    "tests/grading_support.py",
    "tests/conftest.py",
    "tests/fault_support.py",
    "exercises",
]
GIT = ["git", "-c", "user.name=learner", "-c", "user.email=l@example.invalid"]


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, timeout=120)


def course_from_git(checkout: Path, dst: Path) -> list[str]:
    """Copy :data:`COURSE_FILES` as git's index of ``checkout`` holds them (``git ls-files``,
    then ``git show :path``) into ``dst``: never the working tree, where a learner's saved
    answers and outputs live. Returns the paths copied."""
    listed = _git(checkout, "ls-files", "-z", "--", *COURSE_FILES).stdout.decode()
    paths = [p for p in listed.split("\0") if p]
    for rel in paths:
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(_git(checkout, "show", f":{rel}").stdout)
    return paths


def _save_answers(exercises: Path) -> int:
    """Every exercise notebook under ``exercises`` as a learner saves it: solved, with stored
    outputs and execution counts. Returns how many."""
    from minipar.grading.notebooks import build, scripts, starter_path

    worked = 0
    for script in scripts(exercises):
        nb = build(script, solved=True)
        for n, c in enumerate(c for c in nb.cells if c.cell_type == "code"):
            c.execution_count = n + 1
            c.outputs = [nbformat.v4.new_output("stream", name="stdout", text="answer\n")]
        nbformat.write(nb, starter_path(script))
        worked += 1
    return worked


@pytest.mark.slow
def test_the_starter_tests_pass_after_a_learner_saved_answers_and_outputs(tmp_path):
    """A learner's checkout of the course whose exercise notebooks hold answers, stored outputs
    and execution counts (saved in its working tree, not committed): the temporary repository
    the starter tests run in is built from git's copies, the learner's work is saved on top, and
    the starter tests (which read git's index) pass. Built from the working tree instead, every
    saved starter would be committed with its answers and fail ``test_starter_is_clean``."""
    checkout = tmp_path / "checkout"  # the learner's clone, answers saved in its working tree
    subprocess.run(
        ["git", "clone", "-q", "--shared", str(ROOT), str(checkout)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert _save_answers(checkout / "exercises") >= 10
    course = tmp_path / "course"
    copied = course_from_git(checkout, course)
    assert "tests/test_exercises.py" in copied and any(p.endswith(".ipynb") for p in copied)
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "course"]):
        _git(course, *cmd)
    worked = _save_answers(course / "exercises")  # and the learner's work on top, again
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0"]
        + ["-k", "starter_is_clean", "tests/test_exercises.py"],
        cwd=course,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert f"{worked} passed" in r.stdout, r.stdout[-2000:]
