"""What a chapter's grader declares, and the rank machinery every chapter shares.

A chapter's grader (``minipar.grading.<slug>``) is a declaration:

* its **group layouts** on ranks, one :class:`Layouts` (world size -> [(label, groups or None
  for the whole world)]), with the hint a failing case gets;
* its **tasks** (``@task("<slug>.<name>", summary)``, :mod:`minipar.grading.registry`), each a
  checker that runs its inputs and names the first mistake it recognises;
* its **clause table**, data in ``grading/clauses/<slug>.toml`` (:func:`clause_table`): for every
  task, each clause of the starter's specification (:class:`Clause`) with the input that makes it matter, a realistic wrong answer that breaks
  only that clause (a function of that name in ``tests/test_grading_<slug>.py``) and the words
  of the one-line reason the grader gives it. ``tests/test_grading_clauses.py`` grades every
  clause's wrong answer and checks it fails with its reason.

The rank side: :meth:`Layouts.launch` runs ``body(group_rank, group_size, group, fn)`` on every
layout of every world size (:func:`minipar.grading.layouts.on_every_layout`, under the grader's
limits), and yields each rank's case (``where``, ``rank``, ``gr``, ``members``, ``whole``,
``used``, the group size under the chapter's symbol, ``gr_of``/``size_of`` for every world rank,
``batch``: every case of its launch). :func:`current_case` is, on a rank, the case being run.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from minipar.grading.compare import launch_layouts
from minipar.grading.imports import course_calls, forbidden_modules, reject_course_calls
from minipar.grading.layouts import on_every_layout

_CURRENT = {"where": ""}  # on a rank: the case being run


def current_case() -> str:
    """On a rank: the ``where`` of the case being run (for a body's own progress lines)."""
    return _CURRENT["where"]


def _note(where: str) -> None:
    _CURRENT["where"] = where


def call_own(chapter: str, fn, *args, allow=(), what: str = "write it", **kwargs):
    """``fn(*args, **kwargs)`` in this process, rejecting an answer that called the chapter's
    own implementation (:mod:`minipar.grading.imports`)."""
    with course_calls(forbidden_modules(chapter), allow) as used:
        out = fn(*args, **kwargs)
    reject_course_calls(used, what)
    return out


def not_whole_world_hint(kind: str) -> Callable[[str, str], str]:
    """The hint a failing case inside a subgroup gets: use the group's own rank and size."""
    return lambda case, msg: (
        f" -- this case's {kind} group is not the whole world: use dist.get_rank(group) and "
        "dist.get_world_size(group), and pass group= to every collective"
        if "of group" in case
        else ""
    )


@dataclass(frozen=True)
class Clause:
    """One clause of a task's specification, and how the grader holds an answer to it.

    ``clause``: what the starter's text says; ``input``: the grader's input that makes it
    matter; ``wrong``: the name of a realistic wrong answer that breaks only this clause (a
    function in the chapter's grader tests); ``reason``: words the one-line reason contains.
    """

    clause: str
    input: str
    wrong: str
    reason: str


def clause_table(chapter: str) -> dict[str, tuple[Clause, ...]]:
    """The chapter's clause table, ``grading/clauses/<chapter>.toml``: task id -> its clauses
    (each clause's input is written once under ``[inputs]`` and named by its key)."""
    data = tomllib.loads((Path(__file__).with_name("clauses") / f"{chapter}.toml").read_text())
    inputs = data["inputs"]
    return {
        task_id: tuple(Clause(**{**row, "input": inputs[row["input"]]}) for row in rows)
        for task_id, rows in data["task"].items()
    }


def clauses_of(chapter: str) -> list[tuple[str, Clause]]:
    """(task id, clause) for every clause of the chapter's clause table."""
    return [(t, c) for t, clauses in clause_table(chapter).items() for c in clauses]


@dataclass(frozen=True)
class Layouts:
    """A chapter's group layouts and how its cases run on them.

    ``size``: the symbol of the group size in a case (``t``, ``cp``, ``ep``); ``allow``: course
    functions an answer may call (by default for every task); ``hint(case, message)``: words
    added to a rank's exception; ``deadlock_note(world)``: words added to a deadlock;
    ``reject_course``: reject a case that called the course's implementation (what to write)."""

    chapter: str
    by_world: dict
    size: str = "size"
    allow: tuple = ()
    hint: Callable | None = None
    deadlock_note: Callable | None = None
    reject_course: str | None = "write this part"

    def on_rank(self, rank, world, body, fn, allow):
        """On one rank: every layout of ``world``'s cases (see the module's docstring)."""
        out = []
        for res, groups in on_every_layout(
            rank,
            world,
            self.by_world,
            self.chapter,
            lambda gr, size, group: body(gr, size, group, fn),
            allow,
            note=_note,
        ):
            every = groups or [list(range(world))]
            res[self.size] = len(res["members"])
            res["gr_of"] = [next(g.index(r) for g in every if r in g) for r in range(world)]
            res["size_of"] = [next(len(g) for g in every if r in g) for r in range(world)]
            out.append(res)
        return out

    def launch(self, body, fn, allow=None, what=None):
        """Every layout's cases in the order they ran (a generator: a world size is launched
        only once the previous one's cases were all checked). A rank's exception is one
        :class:`~minipar.grading.GradeFailure` naming the case it happened in; a case that
        called the course's implementation is rejected ("... <what> yourself")."""
        allow = self.allow if allow is None else allow
        what = what or self.reject_course
        for _, batch in launch_layouts(
            _run_on_rank,
            self.by_world,
            self,
            body,
            fn,
            allow,
            hint=self.hint,
            deadlock_note=self.deadlock_note,
        ):
            for c in batch:
                c["batch"] = batch
                if what:
                    reject_course_calls(c["used"], what)
            yield from batch


def _run_on_rank(rank, world, layouts: Layouts, body, fn, allow):
    return layouts.on_rank(rank, world, body, fn, allow)


def after_whole(cases):
    """Each case, with ``c["after_whole"]``: it is in a subgroup and a whole-world case passed
    before it, so a failure here comes from the group (the generator resumes only once the
    caller has checked the case it yielded)."""
    passed = False
    for c in cases:
        c["after_whole"] = passed and not c["whole"]
        yield c
        passed = passed or c["whole"]
