"""Graded exercises: ``check(task_id, candidate)`` prints one deterministic line.

    PASS collectives.ring_all_reduce: equals dist.all_reduce on 2, 3 and 4 ranks
    FAIL collectives.ring_all_reduce: rank 1 differs from dist.all_reduce (max error 2.0)

How a chapter adds exercises (nothing else to register)
--------------------------------------------------------
1. Write the solved exercise once, as a percent script
   ``exercises/<slug>/solutions/NN_name.py``: ``# %% [markdown]`` cells, ``# %%`` code cells
   whose answer sits between ``# BEGIN SOLUTION`` and ``# END SOLUTION``, and ``# %% [check]``
   cells that call ``check("<slug>.<task>", fn)``. Every ``check`` call in the script is an
   **expected task** of that notebook (see :func:`minipar.grading.notebooks.expected_tasks`).
2. Write the checker in ``src/minipar/grading/<slug>.py``::

       @task("<slug>.<task>", "what a pass proves (the PASS line's text)")
       def check_thing(candidate):
           per_rank = run_ranks(worker, 3, candidate)   # ranks: grader-owned limits
           ...            # raise GradeFailure("the reason, naming the value") when wrong

   The module is imported on first use of a ``"<slug>.<name>"`` id. A chapter whose answers
   run on process groups declares its layouts once, ``RANKS = Layouts(CHAPTER, LAYOUTS,
   size="t")``, and a checker iterates ``RANKS.launch(body, fn)``
   (:mod:`minipar.grading.declare`). Beside the checkers, ``grading/clauses/<slug>.toml`` gives every
   task its clause table: each clause of the starter's text, the input that makes it matter, a wrong
   answer breaking only that clause (a function in ``tests/test_grading_<slug>.py``) and the
   words of its reason; ``tests/test_grading_clauses.py`` holds the tables complete.
3. ``python -m minipar.grading.notebooks --force`` writes the starter
   ``exercises/<slug>/NN_name.ipynb`` (``make exercises`` writes only missing ones): solution
   blocks become ``raise NotImplementedError``, no stored outputs, and the notebook's metadata
   names its solution script.

How a notebook is graded (``minipar grade PATH...``)
----------------------------------------------------
The verdict depends only on the learner's code, never on what the file has saved: the grader
builds a copy of each notebook with every output and execution count stripped, runs it cell by
cell in a fresh kernel that it watches (:mod:`minipar.grading.runner`: a dead kernel ends the
notebook at once, a stalled one is stopped), and reads each task's outcome and full reason from
a side log that :func:`check` writes (``$MINIPAR_GRADE_LOG``). A task of the reference script
whose check cell is gone is a failed task ("check cell for X is missing"); results are keyed by
the notebook's full path. See :mod:`minipar.grading.cli`.

A check never crashes and never hangs on a learner's mistake: exceptions on any rank, wrong
shapes, wrong values, deadlocks and endless loops each become one FAIL line with the reason.
No limit that a correct answer can reach counts wall time, so a busy machine never fails one:
see :mod:`minipar.grading.limits` (ranks are stopped when none makes progress, or when one has
computed far longer than any reference needs; code in this process gets a CPU-time limit, and a
wall-clock backstop ten times longer only for waits outside the ranks). A candidate that still
holds a starter's unconditional ``raise NotImplementedError`` fails at once ("not implemented
yet"), without starting ranks (:func:`minipar.grading.display.unimplemented`).

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
