"""The exercise pattern itself: one source of truth, PASS lines as stored outputs, one-line FAILs."""

import inspect
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import cloudpickle
import nbformat
import pytest

from minipar.grading import GradeFailure, check, close, close_number, reason_for, task
from minipar.grading.notebooks import (
    build,
    expected_tasks,
    graded_copy,
    scripts,
    starter_path,
)
from minipar.grading.notebooks import (
    main as build_main,
)

ROOT = Path(__file__).resolve().parents[1]

# The rank functions below reach the ranks by value, as a learner's notebook functions do: the
# ranks then spend their CPU-seconds in them, not in importing this module (pytest, nbformat:
# about 1 CPU-s per rank, over 2 in a fresh clone with cold caches under xdist).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@task("selftest.double", "double(x) returns 2x for several x")
def _check_double(candidate):
    for x in (1, 2.5, 3):
        close_number(candidate(x), 2 * x, f"double({x})", rel=1e-9)


def test_check_prints_one_deterministic_line(capsys):
    assert check("selftest.double", lambda x: 2 * x)
    assert capsys.readouterr().out == "PASS selftest.double: double(x) returns 2x for several x\n"


@pytest.mark.parametrize(
    "candidate, reason",
    [
        (lambda x: 3 * x, "too large"),
        (lambda x: x, "too small"),
        (lambda x: "two", "expected a number"),
        (lambda x: 1 / 0, "ZeroDivisionError"),
        (lambda x: (_ for _ in ()).throw(NotImplementedError()), "not implemented yet"),
    ],
)
def test_wrong_answers_get_one_line_reasons(capsys, candidate, reason):
    assert not check("selftest.double", candidate)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("FAIL selftest.double: ")
    assert reason in out


def test_candidate_output_is_swallowed(capsys):
    def noisy(x):
        print("debug output")
        return 2 * x

    check("selftest.double", noisy)
    assert "debug" not in capsys.readouterr().out


def test_close_reports_shape_mismatch():
    import torch

    with pytest.raises(GradeFailure, match=r"shape \(2,\), expected \(3,\)"):
        close(torch.zeros(2), torch.zeros(3), "out")


def test_reason_for_rank_error():
    from minipar.runtime.launch import RankError

    e = RankError(2, "ValueError: bad\nmore", "tb")
    assert reason_for(e) == "your code raised on rank 2: ValueError: bad more"


SOURCE = textwrap.dedent("""\
    # %% [markdown]
    # # Double it
    # Write `double`.

    # %%
    def double(x):
        # BEGIN SOLUTION
        return 2 * x
        # END SOLUTION

    # %% [check]
    import sys; sys.path.insert(0, {tests!r})
    import test_grading_framework
    from minipar.grading import check
    check("selftest.double", double)
""")


def _write_exercise(tmp_path):
    sol = tmp_path / "ex" / "selftest" / "solutions" / "01_double.py"
    sol.parent.mkdir(parents=True)
    sol.write_text(SOURCE.format(tests=str(ROOT / "tests")))
    return sol


def test_starter_and_solution_from_one_source(tmp_path):
    sol = _write_exercise(tmp_path)
    starter, solved = build(sol, solved=False), build(sol, solved=True)
    code = lambda nb: "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "raise NotImplementedError" in code(starter) and "return 2 * x" not in code(starter)
    assert "return 2 * x" in code(solved) and "BEGIN SOLUTION" not in code(solved)
    checks = [c for c in starter.cells if "check(" in c.source and c.cell_type == "code"]
    assert len(checks) == 1
    assert all(
        c.get("outputs", []) == [] and c.get("execution_count") is None
        for c in starter.cells
        if c.cell_type == "code"
    ), "starters store no outputs"
    assert starter.metadata["minipar"]["exercise"] == "selftest/01_double"
    assert expected_tasks(sol) == ["selftest.double"]
    copy, origin = graded_copy(starter, str(tmp_path), str(tmp_path / "log"))
    code = [i for i, c in enumerate(starter.cells) if c.cell_type == "code"]
    assert origin == [None, *code] and "grading_setup" in copy.cells[0].source
    assert [c.source for c in copy.cells[1:]] == [starter.cells[i].source for i in code]
    assert all(c.outputs == [] for c in copy.cells), "the side log alone carries the verdict"
    marked = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("# NBVAL_SKIP\nx = 1")])
    assert graded_copy(marked, str(tmp_path), "log")[0].cells[1].source == "x = 1"
    assert starter.cells[0].cell_type == "markdown" and starter.cells[0].source.startswith(
        "# Double"
    )


@pytest.mark.slow
def test_grade_cli_scores_starter_and_solution(tmp_path):
    sol = _write_exercise(tmp_path)
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    nbformat.write(build(sol, solved=False), nbs / "01_starter.ipynb")
    nbformat.write(build(sol, solved=True), nbs / "02_solved.ipynb")
    out = subprocess.run(
        [sys.executable, "-m", "minipar.cli", "grade", str(nbs)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert "01_starter.ipynb: 0/1 passed" in out.stdout, out.stdout + out.stderr
    assert "not implemented yet" in out.stdout
    assert "02_solved.ipynb: 1/1 passed" in out.stdout
    assert "score: 1/2 tasks passed" in out.stdout
    assert out.returncode == 0, "the score is the result: failed tasks are not an error"


def test_grade_cli_bad_path_is_one_line():
    out = subprocess.run(
        [sys.executable, "-m", "minipar.cli", "grade", "no/such.ipynb"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "no/such.ipynb" in out.stderr
    assert "Traceback" not in out.stderr


def test_committed_starters_are_up_to_date():
    assert build_main(["--check"]) == 0, (
        "a course author rebuilds the starters with `python -m "
        "minipar.grading.notebooks --force` (it overwrites "
        "them) and commits them"
    )
    for script in scripts(ROOT / "exercises"):
        assert starter_path(script).exists()


def _dies_on_rank_1(rank, world_size):
    import os

    if rank == 1:
        os.write(2, b"native message before the abort\n")  # what a C++ library prints
        os.abort()  # the learner's fatal line
    return rank


def _deadlocks(rank, world_size):
    import torch
    import torch.distributed as dist

    x = torch.ones(3)
    if rank == 0:
        dist.recv(x, src=1)  # rank 1 never sends
    else:
        dist.all_reduce(x)  # and rank 0 never joins
    return rank


def _loops_on_rank_1(rank, world_size):
    import torch.distributed as dist

    n = 0
    while rank == 1:  # never ends
        n += 1
    dist.barrier()
    return n


@pytest.mark.slow
def test_reason_for_a_rank_that_died_shows_its_stderr_tail_and_line():
    from minipar.grading import RankFailure, run_ranks

    with pytest.raises(RankFailure) as info:
        run_ranks(_dies_on_rank_1, 2)
    reason = str(info.value)
    assert reason.startswith(
        "rank 1 died (killed by signal 6 (SIGABRT)) without a Python exception at line"
    ), reason
    assert "of _dies_on_rank_1: os.abort()" in reason
    assert "native message before the abort | Fatal Python error: Aborted" in reason
    assert "Extension modules" not in reason and "\n" not in reason


@pytest.mark.slow
def test_deadlock_is_reported_with_every_ranks_line_without_a_wall_clock_budget():
    """No rank uses CPU: stopped after STALL_S seconds (10), not after a fixed timeout. The one
    test that waits out the production window: the others that need a deadlock shorten it."""
    import time

    from minipar.grading import LimitExceeded, limits, run_ranks

    if "MINIPAR_GRADE_STALL_S" not in os.environ:
        assert limits.STALL_S == 10.0, "the production stall window is 10 s (limits.py)"
    t = time.monotonic()
    with pytest.raises(LimitExceeded) as info:
        run_ranks(_deadlocks, 3)
    waited = time.monotonic() - t
    reason = str(info.value)
    assert info.value.kind == "deadlock", reason
    assert reason.startswith(
        f"deadlock on 3 ranks: for {limits.STALL_S:g} s no rank made progress"
    ), reason
    parts = reason.split("using no CPU): ", 1)[1].split(" -- ")[0].split("; ")
    assert len(parts) == 3, reason
    for part, (rank, code, op) in zip(
        parts,
        [
            (0, "dist.recv(x, src=1)", "recv"),
            (1, "dist.all_reduce(x)", "all_reduce"),
            (2, "dist.all_reduce(x)", "all_reduce"),
        ],
    ):
        assert (
            part.startswith(f"rank {rank} waiting at line ")
            and code in part
            and part.endswith(f"(in {op})")
        ), part
    assert waited >= limits.STALL_S, "stopped before the ranks were idle for STALL_S"
    # (how soon after: STALL_S plus the abort; not asserted, a busy machine may take longer)


@pytest.mark.slow
def test_endless_loop_is_stopped_by_cpu_time_and_named(monkeypatch):
    import re

    from minipar.grading import LimitExceeded, limits, run_ranks

    monkeypatch.setattr(limits, "CPU_LIMIT", 4.0)  # CPU-seconds; the default is 60
    # _loops_on_rank_1 goes by value (see the top of this module): its ranks spend the 4 CPU-s
    # in the loop, not in importing this test module
    with pytest.raises(LimitExceeded) as info:
        run_ranks(_loops_on_rank_1, 2)
    reason = str(info.value)
    assert info.value.kind == "endless loop", reason
    looping = re.split(r"rank 1 \([0-9.]+ CPU-s, ", reason, maxsplit=1)[1].split(")", 1)[0]
    first = _loops_on_rank_1.__code__.co_firstlineno
    loop = first + next(
        i
        for i, ln in enumerate(inspect.getsource(_loops_on_rank_1).splitlines())
        if "while rank == 1:" in ln
    )
    assert looping in (
        f"line {loop} of _loops_on_rank_1: while rank == 1:",
        f"line {loop + 1} of _loops_on_rank_1: n += 1",
    ), reason
    assert "rank 0 waiting at line" in reason and "dist.barrier()" in reason


@task("selftest.sleepy", "returns after waiting (no CPU)")
def _check_sleepy(candidate):
    candidate()


def test_in_process_limit_counts_cpu_time_not_waiting(capsys):
    import time

    assert check("selftest.sleepy", lambda: time.sleep(1.5), time_limit_s=0.5), (
        "1.5 s of waiting is 0 CPU-seconds: under a 0.5 CPU-s limit"
    )

    def spin():
        while True:
            pass

    assert not check("selftest.sleepy", spin, time_limit_s=0.5)
    assert "stopped after 0.5 CPU-seconds: your code was still computing" in capsys.readouterr().out
    assert not check("selftest.sleepy", lambda: time.sleep(3600), time_limit_s=0.2)
    assert (
        "stopped after 2 s of waiting: your code was still running (a wait that never "
        "ends?)" in capsys.readouterr().out
    ), "a wait is stopped by the wall backstop, 10x"


def test_reasons_are_one_line_and_cut_only_a_learners_long_message_at_a_word():
    long_words = " ".join(f"word{i}" for i in range(400))  # ~3600 characters
    reason = reason_for(ValueError(long_words + "\nsecond line"))
    assert "\n" not in reason and len(reason) < 600, reason
    kept = reason.split("ValueError: ", 1)[1].split(" … (")[0]
    assert long_words.startswith(kept + " "), "cut between words, never inside one"
    assert reason.endswith("more characters)"), reason
    groups = str([[r, r + 1] for r in range(0, 400, 2)])  # a checker's own list
    assert (
        reason_for(GradeFailure(f"groups {groups}\nshould be {groups}"))
        == f"groups {groups} should be {groups}"
    ), "a checker's reason is never cut"


def test_reason_for_names_the_learners_line():
    def learner(x):
        return x.nope  # the learner's own line

    try:
        learner(3)
    except AttributeError as e:
        reason = reason_for(e)
    assert reason.startswith("your code raised AttributeError: 'int' object has no attribute")
    assert "(line" in reason and "of learner: return x.nope" in reason


def test_unknown_task_id_is_a_fail_line_not_a_crash(capsys):
    assert not check("selftest.no_such_task", lambda: None)
    assert "unknown exercise task 'selftest.no_such_task'" in capsys.readouterr().out
