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
       def check_thing(candidate, timeout=20.0):
           ...            # raise GradeFailure("the reason, naming the value") when wrong

   The module is imported on first use of a ``"<slug>.<name>"`` id.
3. ``make exercises`` (``python -m minipar.grading.notebooks``) writes the starter
   ``exercises/<slug>/NN_name.ipynb``: solution blocks become ``raise NotImplementedError``,
   no stored outputs, and the notebook's metadata names its solution script.

How a notebook is graded (``minipar grade PATH...``)
----------------------------------------------------
The verdict depends only on the learner's code, never on what the file has saved: the grader
builds a copy of each notebook with every output and execution count stripped, gives each check
cell the PASS lines of its tasks (from the course's registry, not from the file) as expected
output, runs the copy from a fresh kernel under ``pytest --nbval-lax``, and reads each task's
outcome and full reason from a side log that :func:`check` writes (``$MINIPAR_GRADE_LOG``). A
task of the reference script whose check cell is gone is a failed task ("check cell for X is
missing"); results are keyed by the notebook's full path. See :mod:`minipar.grading.cli`.

A check never crashes and never hangs on a learner's mistake: exceptions on any rank, wrong
shapes, wrong values and hangs (the launcher's timeout; for code that runs in this process a
time limit, :data:`TIME_LIMIT` seconds) each become one FAIL line with the reason.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import signal
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

TIME_LIMIT = float(os.environ.get("MINIPAR_CHECK_TIME_LIMIT", "60"))
_LOG_ENV = "MINIPAR_GRADE_LOG"


class GradeFailure(Exception):
    """Raised by a checker: the message is the one-line reason shown to the learner."""


class CheckTimeLimit(BaseException):
    """Raised inside a check that ran past its time limit (outside the launcher). A
    ``BaseException``, so that a learner's ``except Exception`` cannot swallow it."""


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


def _one_line(text: str, limit: int = 1000) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


# ----------------------------------------------------------------------------- the learner's line
_PACKAGE = str(Path(__file__).resolve().parents[1])        # .../minipar
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)\s*\n(?:(\s+)(\S[^\n]*)\n)?', re.M)


def _library(filename: str) -> bool:
    f = filename.replace("\\", "/")
    return (f.startswith(_PACKAGE) or "/site-packages/" in f or "/lib/python" in f
            or "/torch/" in f or f.startswith("<frozen"))


def _where(filename: str, line: int, func: str, code: str | None) -> str:
    where = f"line {line}" + (f" of {func}" if func not in ("<module>", "") else "")
    return f"{where}: {code.strip()}" if code and code.strip() else where


def learner_line(exc: BaseException) -> str | None:
    """'line 7 of ring_all_reduce: chunks = x.chunk(n)' for the learner's innermost frame."""
    import linecache

    found = None
    tb = exc.__traceback__
    while tb is not None:
        co = tb.tb_frame.f_code
        if not _library(co.co_filename):
            found = _where(co.co_filename, tb.tb_lineno, co.co_name,
                           linecache.getline(co.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) and exc.lineno:
        return _where("", exc.lineno, "", exc.text)
    return found


def remote_learner_line(remote_traceback: str) -> str | None:
    """The same for a rank's formatted traceback (a string)."""
    found = None
    for m in _FRAME.finditer(remote_traceback or ""):
        if not _library(m.group(1)):
            found = _where(m.group(1), int(m.group(2)), m.group(3), m.group(5))
    return found


def _stderr_tail(exc, lines: int = 4) -> str:
    """The last lines a dead rank wrote to its stderr (from :class:`RankError`)."""
    tail = None
    for name in ("stderr_tail", "log_tail", "stderr"):
        tail = getattr(exc, name, None)
        if callable(tail):
            tail = tail()
        if tail:
            break
    if not tail:
        tb = getattr(exc, "remote_traceback", "") or ""
        tail = tb.split(":\n", 1)[1] if "the end of its log" in tb and ":\n" in tb else tb
    text, where = str(tail), ""
    if "Stack (most recent call first):" in text:          # a faulthandler dump: keep the
        text, stack = text.split("Stack (most recent call first):", 1)   # messages and the
        for f, line, func in re.findall(r'File "([^"]+)", line (\d+) in (\S+)', stack):
            if not _library(f):                             # learner's innermost frame
                where = f" (at line {line} of {func})"
                break
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return " | ".join(kept[-lines:]) + where


def reason_for(exc: BaseException) -> str:
    """A learner-facing one-line reason for an exception raised while checking."""
    from minipar.launch import RankError

    if isinstance(exc, GradeFailure):
        return _one_line(exc)
    if isinstance(exc, CheckTimeLimit):
        return _one_line(str(exc))
    if isinstance(exc, RankError) and getattr(exc, "rank", 0) is None:     # StartError
        return _one_line(f"the ranks could not start: {exc.summary}; likely cause: "
                         f"{getattr(exc, 'cause', 'unknown')}")
    if isinstance(exc, RankError):
        summary = exc.summary
        if summary.startswith("NotImplementedError"):
            return "not implemented yet (the starter code still raises NotImplementedError)"
        if "timed out" in summary.lower():
            return _one_line(f"rank {exc.rank} timed out waiting in a collective or recv -- "
                             "does every rank make the same collective calls, in the same "
                             "order, and does every send have a matching recv?")
        if summary.startswith(("a process exit", "died")) or \
                "without a Python exception" in summary:
            how = re.sub(r"^died \((.*)\) without a Python exception$", r"\1", summary)
            tail = _stderr_tail(exc)
            return _one_line(f"rank {exc.rank} died ({how}) without a Python exception; "
                             f"the last lines of its stderr: {tail or '(empty)'}")
        where = remote_learner_line(getattr(exc, "remote_traceback", ""))
        return _one_line(f"your code raised on rank {exc.rank}: {summary}"
                         + (f" ({where})" if where else ""))
    if isinstance(exc, NotImplementedError):
        return "not implemented yet (the starter code still raises NotImplementedError)"
    if isinstance(exc, TimeoutError):
        return _one_line(f"timed out: {exc} -- does every rank make the same collective calls, "
                         "in the same order, and does every send have a matching recv?")
    where = learner_line(exc)
    return _one_line(f"your code raised {type(exc).__name__}: {exc}"
                     + (f" ({where})" if where else ""))


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


# ----------------------------------------------------------------------------- time limit
def _in_launcher(frame) -> bool:
    while frame is not None:
        if frame.f_globals.get("__name__") == "minipar.launch":
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Raise :class:`CheckTimeLimit` in this (main) thread after ``seconds`` of wall time spent
    outside :mod:`minipar.launch` (whose calls have their own timeouts and must not be
    interrupted half-way). A no-op off the main thread, without SIGALRM, or for ``None``/0."""
    if not seconds or threading.current_thread() is not threading.main_thread() \
            or not hasattr(signal, "setitimer"):
        yield
        return

    def fire(signum, frame):
        if _in_launcher(frame):
            signal.setitimer(signal.ITIMER_REAL, 1.0)     # retry once the launcher returns
            return
        raise CheckTimeLimit(f"stopped after the time limit of {seconds:g} s: your code was "
                             "still running (an endless loop, or a wait that never ends?)")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


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
    is deterministic. Work done in this process is stopped after ``time_limit_s`` seconds
    (default :data:`TIME_LIMIT`) with a FAIL line saying so.
    """
    try:
        t = get_task(task_id)
    except KeyError as e:
        line = f"FAIL {task_id}: {e.args[0]} (check the task id in the check cell)"
        print(line)
        _log(task_id, False, line.split(": ", 1)[1])
        return Result(False, line)
    sink = io.StringIO()
    limit = TIME_LIMIT if time_limit_s is None else time_limit_s
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), \
                warnings.catch_warnings(), time_limit(limit):
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
