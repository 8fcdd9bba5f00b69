"""Learner workflows: the verdict of ``minipar grade`` depends on the code alone.

Every habit of a Jupyter user that fooled the old grader is reproduced on the parameter-count
exercise (checked in-process, so one kernel per notebook is all it costs) and its verdict
asserted: a wrong answer run and saved, outputs cleared, a fix saved without re-running, counts
kept without outputs, cells run out of order, a deleted check cell, a deleted notebook, two
notebooks with one file name, syntax/name/import errors, an endless loop, a forged PASS print.
All notebooks go through one ``grade`` call (one pytest session). The habits' notebooks hold
part (a) of the exercise, ``params``, as the course ships it: part (b) builds torch models, which
cost each of the 15 kernels a torch import and show nothing about a habit.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from minipar.grading import check, pass_line
from minipar.grading.cli import grade
from minipar.grading.notebooks import build, expected_tasks

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "exercises" / "memory_time" / "solutions" / "01_params.py"
TASK = "memory_time.params"
WRONG = (
    "def params(L, h, V, s):\n    return L * (12 * h * h + 13 * h)        # forgot the embeddings\n"
)
RIGHT = "def params(L, h, V, s):\n    return L * (12 * h * h + 13 * h) + (V + s) * h\n"


def _part_a(script: Path) -> str:
    """The exercise's source up to its part (b): ``params`` and its check cell."""
    text, mark = script.read_text(), "**(b) Measure it.**"
    assert mark in text, f"{script.name} has no part {mark!r} any more: update _part_a"
    return text[: text.rfind("# %%", 0, text.index(mark))]


def _notebook(
    code: str | None = None,
    outputs: str | None = None,
    counts=None,
    drop_check=False,
    solved=False,
    script: Path = SCRIPT,
):
    """The exercise notebook with ``params`` replaced by ``code``; the check cell's saved output
    ``outputs`` (as if it had been run); ``counts`` the saved execution counts."""
    nb = build(script, solved=solved)
    for cell in nb.cells:
        if cell.cell_type == "code" and "def params" in cell.source and code is not None:
            cell.source = code
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    check_cell = next(c for c in code_cells if "check(" in c.source)
    if outputs is not None:
        check_cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=outputs)]
        check_cell.execution_count = 3
    if counts is not None:
        for c, n in zip(code_cells, counts):
            c.execution_count = n
    if drop_check:
        nb.cells.remove(check_cell)
    return nb


FAIL_SAVED = (
    "FAIL memory_time.params: for L=96, h=12288, V=51200, s=2048: 1.739e+11 -- forgot "
    "the embedding term (V + s)·h\n"
)

CHECK_TIME_LIMIT = 1  # CPU-seconds for the kernels' in-process checks; params needs ~1e-4
# CPU-seconds for each graded cell: the two endless-loop-in-a-cell notebooks burn all of it.
# Measured per cell (the kernel's CPU): 0.05 at most (the set-up cell has imported
# minipar.grading before the limit is armed), and the endless_loop case's check cell 1.05 (its
# own CHECK_TIME_LIMIT of 1, nested inside): 3 keeps the cell limit clear of both
CELL_CPU_LIMIT = 3


def cases(script: Path) -> dict:
    """name: (notebook built from ``script``, passed, words the reason must contain)."""
    nb = lambda code=None, **kw: _notebook(code, script=script, **kw)
    return {
        "saved_wrong_run": (nb(WRONG, outputs=FAIL_SAVED), False, "forgot the embedding"),
        "saved_forged_pass": (
            nb(WRONG, outputs=pass_line(TASK) + "\n"),
            False,
            "forgot the embedding",
        ),
        "cleared_wrong": (nb(WRONG), False, "forgot the embedding"),
        "fixed_not_rerun": (nb(RIGHT, outputs=FAIL_SAVED), True, ""),
        "cleared_counts_kept": (nb(RIGHT, counts=[1, 2, 3]), True, ""),
        "run_out_of_order": (nb(RIGHT, counts=[9, 2, 1]), True, ""),
        "check_deleted": (
            nb(RIGHT, drop_check=True),
            False,
            "check cell for memory_time.params is missing",
        ),
        "untouched_starter": (nb(), False, "not implemented yet"),
        "syntax_error": (
            nb("def params(L, h, V, s):\n    return L * (12 * h * h +\n"),
            False,
            "SyntaxError",
        ),
        "name_error": (
            nb("def params(L, h, V, s):\n    return L * hh\n"),
            False,
            "NameError: name 'hh' is not defined (line 2 of params: return L * hh)",
        ),
        "import_error": (
            nb("import minipar.no_such_module\n" + RIGHT),
            False,
            "ModuleNotFoundError: No module named 'minipar.no_such_module'",
        ),
        "endless_loop": (
            nb("def params(L, h, V, s):\n    while True:\n        pass\n"),
            False,
            f"stopped after {CHECK_TIME_LIMIT} CPU-seconds: your code was still computing",
        ),
        "endless_loop_in_a_cell": (
            nb("while True:\n    pass\n" + RIGHT),
            False,
            f"CheckTimeLimit: stopped after {CELL_CPU_LIMIT} CPU-seconds",
        ),
        # the answer is defined before the loop, so the check passes: the stopped cell still
        # fails the task (its reason is the stop, not a PASS resting on a cut cell)
        "stopped_cell_then_passing_check": (
            nb(RIGHT + "while True:\n    pass\n"),
            False,
            "was stopped for time (CheckTimeLimit",
        ),
        "kernel_exits_in_a_cell": (
            nb("import os\nos._exit(0)\n" + RIGHT),
            False,
            "the kernel died in cell 3 (import os) (exit code 0)",
        ),
        "kernel_segfaults": (
            nb("import ctypes\nctypes.string_at(0)\n" + RIGHT),
            False,
            "(signal 11 (SIGSEGV))",
        ),
        "forged_print": (
            nb(WRONG + f"\nprint({pass_line(TASK)!r})\n"),
            False,
            "forgot the embedding",
        ),
    }


CASES = list(cases(SCRIPT))


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Every habit's notebook graded in one call. The exercise is part (a) of the course's
    script, found the way a learner's is: through the notebook's metadata, in the ``exercises``
    folder of the course above it."""
    course = tmp_path_factory.mktemp("course")
    script = course / "exercises" / "memory_time" / "solutions" / SCRIPT.name
    script.parent.mkdir(parents=True)
    script.write_text(_part_a(SCRIPT))
    assert expected_tasks(script) == [TASK], "part (a) checks memory_time.params alone"
    root = course / "learner"
    paths, table = {}, cases(script)
    for name, (nb, _, _) in table.items():
        paths[name] = root / name / "01_params.ipynb"  # one file name in many folders
        paths[name].parent.mkdir(parents=True)
        nbformat.write(nb, paths[name])
    renamed = root / "renamed" / "my copy of params.ipynb"  # metadata finds its exercise
    renamed.parent.mkdir()
    nbformat.write(_notebook(RIGHT, drop_check=True, script=script), renamed)
    paths["renamed"] = renamed
    limits = {
        "MINIPAR_CHECK_TIME_LIMIT": CHECK_TIME_LIMIT,  # the kernels inherit
        "MINIPAR_GRADE_CELL_CPU_LIMIT": CELL_CPU_LIMIT,
    }  # them
    old = {k: os.environ.get(k) for k in limits}
    os.environ.update({k: str(v) for k, v in limits.items()})
    try:
        result = grade([root], timeout=300)
    finally:
        for k, v in old.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v
    return paths, result, script, table


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_verdict_depends_on_the_code_alone(graded, name):
    paths, result, script, table = graded
    rows = [t for t in result["tasks"] if t["notebook"] == str(paths[name].resolve())]
    assert [r["task"] for r in rows] == expected_tasks(script) == [TASK], rows
    _, passed, words = table[name]
    assert rows[0]["passed"] is passed, rows[0]
    assert words in rows[0]["reason"], rows[0]


@pytest.mark.slow
def test_results_keyed_by_full_path_and_missing_listed(graded):
    paths, result, script, table = graded
    rows = [t for t in result["tasks"] if t["task"] == TASK]
    names = [t["notebook"] for t in rows]
    assert len(names) == len(set(names)) == len(table) + 1  # same file name, separate rows
    missing = {(m["notebook"], m["task"]) for m in result["missing"]}
    assert missing == {
        (str(paths["check_deleted"].resolve()), TASK),
        (str(paths["renamed"].resolve()), TASK),
    }
    assert sum(t["passed"] for t in rows) == sum(p for _, p, _ in table.values())
    assert result["total"] == (len(table) + 1) * len(expected_tasks(script))


def test_deleted_notebook_is_a_failed_task_not_a_vanished_one(tmp_path):
    chapter = tmp_path / "memory_time"
    (chapter / "solutions").mkdir(parents=True)
    shutil.copy(SCRIPT, chapter / "solutions" / SCRIPT.name)  # the learner deleted the .ipynb
    result = grade([tmp_path])
    tasks = expected_tasks(SCRIPT)
    assert TASK in tasks and result["total"] == len(tasks) and result["passed"] == 0
    assert [r["task"] for r in result["tasks"]] == tasks
    for row in result["tasks"]:
        assert "01_params.ipynb is missing" in row["reason"]
    assert result["missing"] == [
        {"notebook": r["notebook"], "task": r["task"]} for r in result["tasks"]
    ]


@pytest.mark.slow
def test_grade_json_cli(tmp_path):
    nb = tmp_path / "a" / "01_params.ipynb"
    nb.parent.mkdir()
    nbformat.write(_notebook(WRONG, outputs=pass_line(TASK) + "\n"), nb)
    out = subprocess.run(
        [sys.executable, "-m", "minipar.cli", "grade", "--json", str(nb)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr  # failed tasks are the result, not an error
    result = json.loads(out.stdout)
    assert set(result) == {"tasks", "passed", "total", "missing", "empty", "memory_limit_bytes"}
    assert result["passed"] == 0 and result["missing"] == []
    assert result["total"] == len(expected_tasks(SCRIPT))
    (row,) = [t for t in result["tasks"] if t["task"] == TASK]
    assert set(row) == {"notebook", "task", "passed", "reason"}
    assert row["notebook"] == str(nb.resolve()) and not row["passed"]
    bad = subprocess.run(
        [sys.executable, "-m", "minipar.cli", "grade", "--json", str(tmp_path / "nope.ipynb")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "nope.ipynb" in bad.stderr and not bad.stdout


def test_table_keeps_quotes_and_full_reasons(tmp_path, capsys):
    from minipar.grading import cli
    from minipar.grading.cli import _grade

    reason = "this is stage 2's memory, not <class 'int'>; \"quoted\" and it doesn't stop " * 3
    fake = {
        "tasks": [dict(notebook="/x/01.ipynb", task="t.x", passed=False, reason=reason)],
        "passed": 0,
        "total": 1,
        "missing": [],
        "empty": [],
    }
    real, cli.grade = cli.grade, lambda paths, timeout, progress=None: fake
    try:
        assert _grade(type("A", (), dict(paths=["x"], timeout=1, json=False))()) == 0
    finally:
        cli.grade = real
    assert reason in capsys.readouterr().out


def test_in_process_check_is_stopped_by_the_time_limit(capsys):
    def endless(L, h, V, s):
        while True:
            pass

    assert not check(TASK, endless, time_limit_s=0.5)
    out = capsys.readouterr().out
    assert out.startswith(
        f"FAIL {TASK}: stopped after 0.5 CPU-seconds: your code was still "
        "computing (an endless loop?)"
    )


@pytest.mark.slow
def test_jupyter_front_end_runs_from_the_venv(tmp_path):
    """`jupyter nbconvert --execute` (and so `jupyter execute`) work from .venv."""
    nb = tmp_path / "01_params.ipynb"
    nbformat.write(_notebook(solved=True), nb)
    jupyter = Path(sys.executable).parent / "jupyter"
    out = subprocess.run(
        [
            str(jupyter),
            "nbconvert",
            "--to",
            "notebook",
            "--execute",
            "--output",
            "ran.ipynb",
            str(nb),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    ran = nbformat.read(tmp_path / "ran.ipynb", as_version=4)
    printed = "".join(
        o.get("text", "") for c in ran.cells if c.cell_type == "code" for o in c.outputs
    )
    assert pass_line(TASK) in printed
    assert (
        subprocess.run(
            [str(jupyter), "lab", "--version"], capture_output=True, timeout=120
        ).returncode
        == 0
    )
