"""Shared by the chapters' grader tests: load an exercise's function, assert a one-line FAIL whose
reason quotes no line of a reference solution, and load the machine the way a learner's is."""

import contextlib
import inspect
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from functools import lru_cache
from pathlib import Path

import pytest

from minipar.grading import check
from minipar.grading.declare import clauses_of
from minipar.grading.notebooks import exercise_namespace, scripts

EXERCISES = Path(__file__).resolve().parents[1] / "exercises"
_BLOCK = re.compile(r"# BEGIN SOLUTION[^\n]*\n(.*?)# END SOLUTION", re.S)
MIN_QUOTE = 16  # shorter lines ("return out", "x = x.clone()") say nothing away


def exercise_function(chapter: str, stem: str, name: str, solved: bool):
    """``name`` from the reference solution (``solved``) or the untouched starter notebook."""
    script = EXERCISES / chapter / "solutions" / f"{stem}.py"
    return exercise_namespace(script, solved=solved)[name]


@lru_cache(maxsize=1)
def solution_lines() -> frozenset:
    """Every line (stripped, comments dropped) of every ``BEGIN``/``END SOLUTION`` block."""
    lines = set()
    for script in scripts(EXERCISES):
        for block in _BLOCK.findall(script.read_text()):
            for line in block.splitlines():
                code = line.split("  #")[0].strip()
                if len(code) >= MIN_QUOTE and not code.startswith("#"):
                    lines.add(code)
    return frozenset(lines)


def _own_source(fn) -> str:
    """The source of the module that defines ``fn`` (its helpers are the learner's code too)."""
    try:
        return inspect.getsource(inspect.getmodule(fn) or fn)
    except (OSError, TypeError):
        return ""


def assert_no_solution_code(reason: str, fn=None) -> None:
    """The reason quotes no reference-solution line (a line the wrong answer's own module
    contains is the learner's code, fine to quote)."""
    own = _own_source(fn)
    leaked = [line for line in solution_lines() if line in reason and line not in own]
    assert not leaked, f"the reason gives the solution away: {leaked} in {reason!r}"


def clause_cases(chapter: str, slow=lambda task_id: True) -> list:
    """One pytest param per clause of ``chapter``'s clause table (id: task-wrong answer), marked
    slow where ``slow(task_id)`` (the task starts ranks)."""
    return [
        pytest.param(
            task_id,
            c,
            id=f"{task_id.split('.', 1)[1]}-{c.wrong}",
            marks=[pytest.mark.slow] if slow(task_id) else [],
        )
        for task_id, c in clauses_of(chapter)
    ]


def clause_fails(task_id, clause, wrong: dict, capsys, **options) -> None:
    """The clause's wrong answer (``wrong[clause.wrong]``) fails with the clause's reason."""
    out = failure(task_id, wrong[clause.wrong], capsys, **options)
    assert clause.reason in out, f"{clause.wrong}: expected {clause.reason!r} in {out!r}"


def failure(task_id, fn, capsys, **options) -> str:
    """Grade ``fn``; assert it failed with exactly one ``FAIL task_id: reason`` line quoting no
    solution line; return it."""
    capsys.readouterr()
    assert not check(task_id, fn, **options)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"FAIL {task_id}: ")
    assert_no_solution_code(out, fn)
    return out


# ----------------------------------------------------------------------------- a busy machine
_LOAD = textwrap.dedent("""\
    import sys, time
    from minipar.runtime.launch import run

    def work(rank, world_size, steps):       # what a notebook's ranks do: compute, all-reduce
        import torch, torch.distributed as dist
        a = torch.randn(192, 192)
        for _ in range(steps):
            b = a @ a
            dist.all_reduce(b)
        return rank

    while True:
        run(work, {ranks}, 300, backend="gloo", threads=1)
        with open(sys.argv[1], "a") as f:
            f.write(".")
""")


@contextlib.contextmanager
def competing_torch_work(tmp_path, processes: int = 2, ranks: int = 3):
    """Background multi-process torch work while the body runs, as on a learner's machine while a
    second notebook trains: ``processes`` Python processes, each launching ``ranks`` gloo ranks
    over and over (matmuls and all-reduces), from the moment the body starts (their torch imports
    are load too). Yields a function returning how many launches have finished; on exit asserts
    that each process finished one (the load was real), then kills them (process groups)."""
    markers = [tmp_path / f"load-{i}.txt" for i in range(processes)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _LOAD.format(ranks=ranks), str(m)],
            env=env,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for m in markers
    ]

    def launches() -> int:
        return sum(len(m.read_text()) for m in markers if m.exists())

    try:
        yield launches
        deadline = time.monotonic() + 120  # the load really ran ranks during the body
        each = lambda: all(m.exists() and m.read_text() for m in markers)
        while not each() and time.monotonic() < deadline:
            assert all(p.poll() is None for p in procs), "the background load died"
            time.sleep(0.2)
        assert each(), "the background load never finished a launch of its ranks"
    finally:
        for p in procs:
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGKILL)  # its zygote and ranks too
            p.wait()
