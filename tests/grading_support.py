"""Shared by the chapters' grader tests: load an exercise's function, assert a one-line FAIL."""
from pathlib import Path

from minipar.grading import check
from minipar.grading.notebooks import exercise_namespace

EXERCISES = Path(__file__).resolve().parents[1] / "exercises"


def exercise_function(chapter: str, stem: str, name: str, solved: bool):
    """``name`` from the reference solution (``solved``) or the untouched starter notebook."""
    script = EXERCISES / chapter / "solutions" / f"{stem}.py"
    return exercise_namespace(script, solved=solved)[name]


def failure(task_id, fn, capsys, **options) -> str:
    """Grade ``fn``; assert it failed with exactly one ``FAIL task_id: reason`` line; return it."""
    capsys.readouterr()
    assert not check(task_id, fn, **options)
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"FAIL {task_id}: ")
    return out
