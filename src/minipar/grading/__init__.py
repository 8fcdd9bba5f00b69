"""Graded exercises: ``check(task_id, candidate)`` prints one deterministic line.

    PASS collectives.ring_all_reduce: equals dist.all_reduce on 2, 3 and 4 ranks
    FAIL collectives.ring_all_reduce: rank 1 differs from dist.all_reduce (max error 2.0)

A chapter adds exercises (nothing else to register) by writing the solved exercise once, as a
percent script ``exercises/<slug>/solutions/NN_name.py`` (see :mod:`minipar.grading.notebooks`:
every ``check("<slug>.<task>", fn)`` call in it is an **expected task** of its notebook), and
its checkers in ``src/minipar/grading/<slug>.py`` (``@task("<slug>.<task>", "what a pass
proves")``, imported on first use of one of its ids; rank layouts declared once with
:mod:`minipar.grading.declare`, a clause table in ``grading/clauses/<slug>.toml`` that
``tests/test_grading_clauses.py`` holds complete: CONTRIBUTING.md, "A grader is a
declaration"). ``python -m minipar.grading.notebooks --force`` then writes its starter
``exercises/<slug>/NN_name.ipynb`` (``make exercises`` writes only missing ones).

``minipar grade PATH...`` (:mod:`minipar.grading.cli`) grades a notebook from the learner's code
alone, never from what the file has saved: it runs a stripped copy in a fresh kernel that it
watches (:mod:`minipar.grading.runner`) and reads each task's outcome from a side log that
:func:`check` writes (``$MINIPAR_GRADE_LOG``).

A check never crashes and never hangs on a learner's mistake: exceptions on any rank, wrong
shapes, wrong values, deadlocks and endless loops each become one FAIL line with the reason.
No limit that a correct answer can reach counts wall time, so a busy machine never fails one
(:mod:`minipar.grading.limits`). A candidate that still holds a starter's unconditional ``raise
NotImplementedError`` fails at once ("not implemented yet"), without starting ranks
(:func:`minipar.grading.display.unimplemented`).

Modules: :mod:`~minipar.grading.errors` (``GradeFailure``), :mod:`~minipar.grading.registry`
(``task``, ``get_task``, ``pass_line``), :mod:`~minipar.grading.limits` (``run_ranks``,
``cpu_time_limit``), :mod:`~minipar.grading.reasons` (exception -> one-line reason),
:mod:`~minipar.grading.compare` (``close``, ``close_number``), :mod:`~minipar.grading.display`
(``check``, ``Result``); :mod:`~minipar.grading.notebooks` and :mod:`~minipar.grading.cli` build
and grade the exercise notebooks.
"""

from __future__ import annotations

from minipar.grading.compare import as_number, close, close_number
from minipar.grading.display import Result, check
from minipar.grading.errors import CheckTimeLimit, GradeFailure
from minipar.grading.limits import TIME_LIMIT, LimitExceeded, RankFailure, cpu_time_limit, run_ranks
from minipar.grading.reasons import learner_line, reason_for, remote_learner_line
from minipar.grading.registry import Task, get_task, pass_line, task

__all__ = [
    "GradeFailure",
    "CheckTimeLimit",
    "Task",
    "task",
    "get_task",
    "pass_line",
    "learner_line",
    "remote_learner_line",
    "reason_for",
    "close",
    "close_number",
    "as_number",
    "run_ranks",
    "RankFailure",
    "LimitExceeded",
    "cpu_time_limit",
    "TIME_LIMIT",
    "Result",
    "check",
]
