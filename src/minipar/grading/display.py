"""``check(task_id, candidate)``: run a task's checker and print its one PASS or FAIL line."""

from __future__ import annotations

import contextlib
import dis
import functools
import io
import json
import os
import warnings

from minipar.grading import limits
from minipar.grading.errors import CheckTimeLimit
from minipar.grading.reasons import NOT_IMPLEMENTED, reason_for
from minipar.grading.registry import GraderImportError, get_task, pass_line

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


# ----------------------------------------------------------------------------- starters
_STOPS = ("JUMP", "RETURN", "YIELD", "SETUP", "FOR_ITER", "SEND")


def _raises_not_implemented(code) -> bool:
    """``code`` reaches ``raise NotImplementedError`` on every call: the raise comes before
    any branch, loop, return or ``try`` (read from the bytecode)."""
    if getattr(code, "co_exceptiontable", b""):  # a try/with somewhere: not sure
        return False
    named = False
    for ins in dis.get_instructions(code):
        if any(stop in ins.opname for stop in _STOPS):
            return False
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and ins.argval == "NotImplementedError":
            named = True
        elif ins.opname == "RAISE_VARARGS" and named:
            return True
    return False


def unimplemented(candidate, depth: int = 0) -> bool:
    """``candidate`` (a function, a class's own methods, or a tuple/list/dict of them) still
    holds a starter's ``raise NotImplementedError`` that every call reaches: the check can
    fail at once instead of starting ranks that would only raise it."""
    if depth > 2:
        return False
    if isinstance(candidate, functools.partial):
        candidate = [candidate.func]
    elif isinstance(candidate, dict):
        candidate = list(candidate.values())
    elif isinstance(candidate, type):
        members = [(v, getattr(v, "__func__", v)) for v in vars(candidate).values()]
        candidate = [f for v, f in members if callable(f) and not isinstance(v, type)]
    if isinstance(candidate, (tuple, list)):
        return any(unimplemented(c, depth + 1) for c in candidate)
    code = getattr(getattr(candidate, "__func__", candidate), "__code__", None)  # a bound method
    return code is not None and _raises_not_implemented(code)


def check(task_id: str, candidate, time_limit_s: float | None = None, **options) -> Result:
    """Grade ``candidate`` for ``task_id``; print one PASS or FAIL line; return a truthy
    :class:`Result` when it passed. The candidate's output (its ranks' prints, warnings) is
    swallowed, so the line printed is deterministic; work in this process fails after
    ``time_limit_s`` CPU-seconds (default :data:`~minipar.grading.limits.TIME_LIMIT`: see
    :func:`~minipar.grading.limits.cpu_time_limit`); ranks have their own limits."""
    try:
        t = get_task(task_id)
    except GraderImportError as e:  # the grader itself failed to import
        return _verdict(task_id, e.args[0])
    except KeyError as e:
        return _verdict(task_id, f"{e.args[0]} (check the task id in the check cell)")
    if unimplemented(candidate):
        return _verdict(task_id, NOT_IMPLEMENTED)
    sink = io.StringIO()
    limit = limits.TIME_LIMIT if time_limit_s is None else time_limit_s
    try:
        with (
            contextlib.redirect_stdout(sink),
            contextlib.redirect_stderr(sink),
            warnings.catch_warnings(),
            limits.cpu_time_limit(limit),
        ):
            warnings.simplefilter("ignore")
            t.checker(candidate, **options)
    except (Exception, CheckTimeLimit) as e:  # every mistake: a FAIL line
        return _verdict(task_id, reason_for(e))
    return _verdict(task_id, None)


def _verdict(task_id: str, reason: str | None) -> Result:
    """Print the PASS line (``reason`` None) or the FAIL line with ``reason``; append the outcome
    to ``$MINIPAR_GRADE_LOG`` if ``minipar grade`` set it: the one channel that carries a check's
    verdict to the grader."""
    line = pass_line(task_id) if reason is None else f"FAIL {task_id}: {reason}"
    print(line)
    if path := os.environ.get(_LOG_ENV):
        with open(path, "a", encoding="utf-8") as f:
            outcome = {"task": task_id, "passed": reason is None, "reason": reason or ""}
            f.write(json.dumps(outcome) + "\n")
    return Result(reason is None, line)
