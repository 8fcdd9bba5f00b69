"""``check(task_id, candidate)``: run a task's checker and print its one PASS or FAIL line."""
from __future__ import annotations

import contextlib
import io
import json
import os
import warnings

from minipar.grading import limits
from minipar.grading.errors import CheckTimeLimit
from minipar.grading.reasons import reason_for
from minipar.grading.registry import get_task, pass_line

_LOG_ENV = "MINIPAR_GRADE_LOG"


class Result:
    """Truthy when the check passed. Shows nothing as a cell's value, so a check cell's only
    output is its printed line (which nbval compares)."""

    def __init__(self, passed: bool, line: str):
        self.passed, self.line = passed, line

    def __bool__(self) -> bool:
        return self.passed

    def __eq__(self, other) -> bool:
        return bool(self) == bool(other)

    __hash__ = None

    def __repr__(self) -> str:
        return f"Result({self.line!r})"

    def _ipython_display_(self) -> None:
        pass


def _log(task_id: str, passed: bool, reason: str) -> None:
    """Append this outcome to ``$MINIPAR_GRADE_LOG`` (set by ``minipar grade``) if set."""
    path = os.environ.get(_LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"task": task_id, "passed": passed, "reason": reason}) + "\n")


def check(task_id: str, candidate, time_limit_s: float | None = None, **options) -> Result:
    """Grade ``candidate`` for ``task_id``; print one PASS or FAIL line; return a truthy
    :class:`Result` when it passed.

    Output of the candidate (its ranks' prints, warnings) is swallowed so that the line printed
    is deterministic. Work done in this process is stopped after ``time_limit_s`` CPU-seconds
    (default :data:`minipar.grading.limits.TIME_LIMIT`; see
    :func:`minipar.grading.limits.cpu_time_limit`) with a FAIL line saying so; ranks started
    through :func:`minipar.grading.limits.run_ranks` have their own progress-based limits.
    """
    try:
        t = get_task(task_id)
    except KeyError as e:
        line = f"FAIL {task_id}: {e.args[0]} (check the task id in the check cell)"
        print(line)
        _log(task_id, False, line.split(": ", 1)[1])
        return Result(False, line)
    sink = io.StringIO()
    limit = limits.TIME_LIMIT if time_limit_s is None else time_limit_s
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), \
                warnings.catch_warnings(), limits.cpu_time_limit(limit):
            warnings.simplefilter("ignore")
            t.checker(candidate, **options)
    except (Exception, CheckTimeLimit) as e:  # noqa: BLE001  (every mistake: a FAIL line)
        reason = reason_for(e)
        line = f"FAIL {task_id}: {reason}"
        print(line)
        _log(task_id, False, reason)
        return Result(False, line)
    print(pass_line(task_id))
    _log(task_id, True, "")
    return Result(True, pass_line(task_id))
