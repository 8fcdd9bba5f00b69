"""Every graded task has a clause table (its specification, clause by clause, beside its grader),
and every clause names a wrong answer that the chapter's grader tests send and a reason.

A clause table row is: what the starter says -> the grader's input that makes it matter -> a
realistic wrong answer that breaks only that clause -> words of the one-line reason it gets
(:class:`minipar.grading.declare.Clause`). The chapters' grader tests grade every row's wrong
answer (``test_every_clause_has_a_wrong_answer_that_fails_with_its_reason``); this file checks
that the tables are complete and that every row points at a wrong answer that exists."""

import importlib
import pkgutil

import pytest

import minipar.grading as grading
from minipar import chapters
from minipar.grading.declare import Clause, clause_table, clauses_of
from minipar.grading.registry import _TASKS

CHAPTERS = list(chapters.SLUGS)


def _wrong_names(chapter: str) -> set:
    tests = importlib.import_module(f"test_grading_{chapter}")
    return set(getattr(tests, "WRONG", {})) | set(getattr(tests, "LAZY_WRONG", {}))


def test_every_chapter_with_tasks_is_listed():
    for m in pkgutil.iter_modules(grading.__path__):
        importlib.import_module(f"minipar.grading.{m.name}")
    # tasks the course's graders register (a test may register a task of its own, e.g. the
    # framework's "selftest.double", in the same process)
    ours = {
        t for t, task in _TASKS.items() if task.checker.__module__.startswith("minipar.grading.")
    }
    assert {t.split(".")[0] for t in ours} == set(CHAPTERS)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_task_has_a_clause_table(chapter):
    importlib.import_module(f"minipar.grading.{chapter}")
    tasks = {t for t in _TASKS if t.startswith(f"{chapter}.")}
    table = clause_table(chapter)
    assert tasks, chapter
    assert set(table) == tasks, (
        f"tasks without a clause table: {sorted(tasks - set(table))}; "
        f"tables of no task: {sorted(set(table) - tasks)}"
    )
    for task_id, clauses in table.items():
        assert clauses, f"{task_id} has an empty clause table"
        assert all(isinstance(c, Clause) for c in clauses)
        assert all(c.clause and c.input and c.wrong and c.reason for c in clauses), task_id


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_clause_names_a_wrong_answer_the_tests_send(chapter):
    names = _wrong_names(chapter)
    rows = clauses_of(chapter)
    missing = [c.wrong for _, c in rows if c.wrong not in names]
    assert not missing, (
        f"clauses whose wrong answer tests/test_grading_{chapter}.py lacks: {missing}"
    )
    used = {c.wrong for _, c in rows}
    assert len(used) == len(rows), "two clauses share one wrong answer"
    assert names <= used, f"wrong answers no clause uses: {sorted(names - used)}"
