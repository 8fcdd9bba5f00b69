"""The task registry: ``@task("<slug>.<name>", summary)`` registers a checker; a chapter's
module ``minipar.grading.<slug>`` is imported on first use of one of its ids."""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable


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
