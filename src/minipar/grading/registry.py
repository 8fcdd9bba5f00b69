"""The task registry: ``@task("<slug>.<name>", summary)`` registers a checker; a chapter's
module ``minipar.grading.<slug>`` is imported on first use of one of its ids."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    id: str
    summary: str  # what a pass proves; the PASS line's text
    checker: Callable  # checker(candidate, **options) -> None, raises GradeFailure


_TASKS: dict[str, Task] = {}


def task(task_id: str, summary: str):
    """Decorator registering ``checker(candidate, **options)`` as the grader of ``task_id``."""

    def register(checker):
        _TASKS[task_id] = Task(task_id, summary, checker)
        return checker

    return register


class GraderImportError(KeyError):
    """A chapter's grader module exists but raised while importing (a missing dependency, a
    syntax error): a ``KeyError`` still, so callers that report an unknown task report this one,
    with what failed."""

    def __str__(self) -> str:
        return str(self.args[0])


def get_task(task_id: str) -> Task:
    """The registered task ``task_id``, importing ``minipar.grading.<chapter>`` on first use;
    ``KeyError`` "unknown exercise task" when no chapter module or no such task exists."""
    if task_id not in _TASKS:
        module = f"minipar.grading.{task_id.split('.')[0]}"
        try:
            importlib.import_module(module)
        except Exception as e:  # any error while importing the grader but its absence
            if not (isinstance(e, ModuleNotFoundError) and e.name == module):
                raise GraderImportError(
                    f"the grader of {task_id!r} could not be loaded: {module} failed to import "
                    f"({type(e).__name__}: {e})"
                ) from e
    if task_id not in _TASKS:
        raise KeyError(f"unknown exercise task {task_id!r}")
    return _TASKS[task_id]


def pass_line(task_id: str) -> str:
    return f"PASS {task_id}: {get_task(task_id).summary}"
