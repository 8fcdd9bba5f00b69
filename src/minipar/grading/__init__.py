"""Graded exercises: ``check(task_id, candidate)`` prints one deterministic line.

    PASS collectives.ring_all_reduce: equals dist.all_reduce on 2, 3 and 4 ranks
    FAIL collectives.ring_all_reduce: rank 1 differs from dist.all_reduce (max error 2.0)

The PASS line of each task is fixed (its ``summary``), so a notebook's check cell can store it as
its expected output and ``pytest --nbval-lax`` becomes the grader: a learner's notebook passes
exactly when every check cell prints its PASS line. A check never crashes and never hangs on a
learner's mistake: exceptions on any rank, wrong shapes, wrong values and hangs (the launcher's
timeout) each become one FAIL line with the reason.

Checkers live in ``minipar/grading/<chapter>.py`` and register with :func:`task`; the chapter
module is imported on first use of a ``"<chapter>.<name>"`` id.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import warnings
from dataclasses import dataclass
from typing import Callable


class GradeFailure(Exception):
    """Raised by a checker: the message is the one-line reason shown to the learner."""


@dataclass(frozen=True)
class Task:
    id: str
    summary: str           # what a pass proves; the PASS line's text
    checker: Callable      # checker(candidate, **options) -> None, raises GradeFailure


_TASKS: dict[str, Task] = {}


def task(task_id: str, summary: str):
    """Decorator registering ``checker(candidate, **options)`` as the grader of ``task_id``."""
    def register(checker):
        _TASKS[task_id] = Task(task_id, summary, checker)
        return checker
    return register


def get_task(task_id: str) -> Task:
    if task_id not in _TASKS:
        chapter = task_id.split(".")[0]
        try:
            importlib.import_module(f"minipar.grading.{chapter}")
        except ModuleNotFoundError:
            pass
    if task_id not in _TASKS:
        raise KeyError(f"unknown exercise task {task_id!r}")
    return _TASKS[task_id]


def pass_line(task_id: str) -> str:
    return f"PASS {task_id}: {get_task(task_id).summary}"


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def reason_for(exc: BaseException) -> str:
    """A learner-facing one-line reason for an exception raised while checking."""
    from minipar.launch import RankError

    if isinstance(exc, GradeFailure):
        return _one_line(exc)
    if isinstance(exc, RankError):
        if exc.summary.startswith("NotImplementedError"):
            return "not implemented yet (the starter code still raises NotImplementedError)"
        if "timed out" in exc.summary.lower():
            return _one_line(f"rank {exc.rank} timed out waiting in a collective or recv -- "
                             "does every rank make the same collective calls, in the same "
                             "order, and does every send have a matching recv?")
        return _one_line(f"your code raised on rank {exc.rank}: {exc.summary}")
    if isinstance(exc, NotImplementedError):
        return "not implemented yet (the starter code still raises NotImplementedError)"
    if isinstance(exc, TimeoutError):
        return _one_line(f"timed out: {exc} -- does every rank make the same collective calls, "
                         "in the same order, and does every send have a matching recv?")
    return _one_line(f"your code raised {type(exc).__name__}: {exc}")


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


def check(task_id: str, candidate, **options) -> Result:
    """Grade ``candidate`` for ``task_id``; print one PASS or FAIL line; return a truthy
    :class:`Result` when it passed.

    Output of the candidate (its ranks' prints, warnings) is swallowed so that the line printed
    is deterministic.
    """
    t = get_task(task_id)
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t.checker(candidate, **options)
    except Exception as e:  # noqa: BLE001  (every mistake becomes a FAIL line)
        line = f"FAIL {task_id}: {reason_for(e)}"
        print(line)
        return Result(False, line)
    print(pass_line(task_id))
    return Result(True, pass_line(task_id))


def close(actual, expected, what: str, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Raise :class:`GradeFailure` unless tensors/numbers ``actual`` match ``expected``."""
    import torch

    if not isinstance(actual, torch.Tensor):
        try:
            actual = torch.as_tensor(actual, dtype=torch.float64)
        except Exception:  # noqa: BLE001
            raise GradeFailure(f"{what}: expected a tensor or number, got "
                               f"{type(actual).__name__}") from None
    expected = torch.as_tensor(expected)
    if tuple(actual.shape) != tuple(expected.shape):
        raise GradeFailure(f"{what}: shape {tuple(actual.shape)}, expected "
                           f"{tuple(expected.shape)}")
    a, e = actual.double(), expected.double()
    if not torch.allclose(a, e, rtol=rtol, atol=atol):
        err = (a - e).abs().max().item()
        raise GradeFailure(f"{what}: wrong values (max abs error {err:.3g})")


def as_number(value, complaint: str) -> float:
    """``float(value)``, or :class:`GradeFailure` "<complaint>, got <value>"."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise GradeFailure(f"{complaint}, got {value!r}") from None


def close_number(actual, expected: float, what: str, rel: float = 0.01) -> None:
    """Numeric answer within a relative tolerance, with the expected order of magnitude hinted."""
    x = as_number(actual, f"{what}: expected a number")
    if not abs(x - expected) <= rel * abs(expected):
        side = "too large" if x > expected else "too small"
        raise GradeFailure(f"{what}: {x:.4g} is {side} (tolerance {rel:.0%}); check units "
                           "(bytes vs elements, GB vs GiB) and which factors apply")
