"""What a chapter's grader declares, and the rank machinery every chapter shares.

A chapter's grader (``minipar.grading.<slug>``) is a declaration:

* its **group layouts** on ranks, the ``[layouts]`` of its clause table read as one
  :class:`Layouts` (``CH.layouts(...)``: world size -> [(label, groups or None for the whole
  world)]), with the hint a failing case gets;
* its **tasks** (``@CH.task("<name>")``, :mod:`minipar.grading.registry`), each a checker that
  runs its inputs and names the first mistake it recognises; every task holds the one rule on
  the course's code (:data:`minipar.grading.imports.RULE`): before the checker runs, a
  candidate that refers to the chapter's forbidden modules fails (``allow``: the course helpers
  the task hands the learner), and its calls are watched wherever it runs;
* its **clause table**, data in ``grading/clauses/<slug>.toml`` (:func:`clause_table`): for every
  task, each clause of the starter's specification (:class:`Clause`) with the input that makes it
  matter, a realistic wrong answer that breaks only that clause (a function of that name in
  ``tests/test_grading_<slug>.py``) and the words of the one-line reason the grader gives it.
  ``tests/test_grading_clauses.py`` grades every clause's wrong answer and checks it fails with
  its reason;
* beside the clauses, in the same file (:class:`Chapter`), each task's PASS line (``[summary]``)
  and the words of its **named mistakes** (``[reasons]``): templates with {fields}, filled in
  where the mistake shows.

The rank side: :meth:`Layouts.launch` runs ``body(group_rank, group_size, group, fn)`` on every
layout of every world size (``CH.layouts()``: the table ``[layouts]``; ``CH.layouts("name")``: a
task's own ``[layouts.name]``) (:func:`~minipar.grading.limits.run_ranks`: under the grader's limits,
inside the chapter's course-code watch), and yields each rank's case: the dict ``body`` returned
with ``label``, ``rank``, ``gr``, ``members``, ``world``, ``where``, ``whole`` (the default
group), ``used`` (course modules it called), the group size under the chapter's symbol,
``gr_of``/``size_of`` for every world rank and ``batch`` (every case of its launch).
:func:`current_case` is, on a rank, the case being run.
"""

from __future__ import annotations

import functools
import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from minipar.grading.errors import GradeFailure
from minipar.grading.imports import (
    course_calls,
    forbid_course_code,
    forbidden_modules,
    reject_course_calls,
)
from minipar.grading.limits import run_ranks
from minipar.grading.reasons import reason_for
from minipar.grading.registry import task

_CURRENT = {"where": ""}  # on a rank: the case being run


def current_case() -> str:
    """On a rank: the ``where`` of the case being run (for a body's own progress lines)."""
    return _CURRENT["where"]


def call_own(chapter: str, fn, *args, allow=(), **kwargs):
    """``fn(*args, **kwargs)`` in this process, rejecting an answer that called the chapter's
    own implementation (:mod:`minipar.grading.imports`)."""
    with course_calls(forbidden_modules(chapter), allow) as used:
        try:
            out = fn(*args, **kwargs)
        except Exception:
            reject_course_calls(used)  # an error inside the course's code: the call is the reason
            raise
    reject_course_calls(used)
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


@cache
def _clauses_file(chapter: str) -> dict:
    return tomllib.loads((Path(__file__).with_name("clauses") / f"{chapter}.toml").read_text())


def clause_table(chapter: str) -> dict[str, tuple[Clause, ...]]:
    """The chapter's clause table, ``grading/clauses/<chapter>.toml``: task id -> its clauses
    (each clause's input is written once under ``[inputs]`` and named by its key)."""
    data = _clauses_file(chapter)
    inputs = data["inputs"]
    return {
        task_id: tuple(Clause(**{**row, "input": inputs[row["input"]]}) for row in rows)
        for task_id, rows in data["task"].items()
    }


def clauses_of(chapter: str) -> list[tuple[str, Clause]]:
    """(task id, clause) for every clause of the chapter's clause table."""
    return [(t, c) for t, clauses in clause_table(chapter).items() for c in clauses]


class Chapter:
    """What a chapter's clause table declares beside its clauses: ``[summary]``, each task's
    PASS line (``@CH.task(name)`` registers ``<chapter>.<name>``), and ``[reasons]``, the words
    of each named mistake (``CH.why(name, **fields)``, its {fields} filled in by str.format)."""

    def __init__(self, chapter: str):
        self.data = data = _clauses_file(chapter)  # and any other table the grader reads
        self.chapter, self.summary = chapter, data.get("summary", {})
        self.reasons = data.get("reasons", {})

    def task(self, name: str, allow: tuple = ()):
        """The decorator registering a checker as ``<chapter>.<name>`` (:func:`task`). Before
        the checker runs, a candidate that refers to the course's implementation (the chapter's
        forbidden modules, but the helpers named in ``allow``) fails with the one reason of
        :mod:`minipar.grading.imports`."""

        def register(checker):
            @functools.wraps(checker)
            def checked(candidate, **options):
                forbid_course_code(candidate, self.chapter, allow=allow)
                return checker(candidate, **options)

            return task(f"{self.chapter}.{name}", self.summary[name])(checked)

        return register

    def call(self, fn, *args, allow: tuple = (), **kwargs):
        """``fn(*args, **kwargs)`` here, its calls into the course's implementation rejected."""
        return call_own(self.chapter, fn, *args, allow=allow, **kwargs)

    def layouts(self, name: str | None = None, /, **how) -> Layouts:
        """The chapter's ``[layouts]`` (or ``[layouts.<name>]``: world size -> [label, groups,
        [] for the whole world]), run in this order, as :class:`Layouts` (``how``: its other
        fields)."""
        table = self.data["layouts"] if name is None else self.data["layouts"][name]
        rows = table.items()
        by_world = {int(w): [(label, groups or None) for label, groups in r] for w, r in rows}
        return Layouts(self.chapter, by_world, **how)

    def why(self, name: str, /, **fields) -> str:
        return self.reasons[name].format(**fields)

    def fail(self, name: str, where: str = "", /, **fields) -> GradeFailure:
        """The failure "<where>: <reason name>" (the reason alone without ``where``)."""
        return GradeFailure((f"{where}: " if where else "") + self.why(name, **fields))

    def first_slip(self, where: str, slips: dict, otherwise: str, /, **fields) -> GradeFailure:
        """The failure of the first name in ``slips`` ({name: whether the answer matches that
        mistake, recomputed}) that the answer matches, else of ``otherwise``."""
        return self.fail(next((n for n, hit in slips.items() if hit), otherwise), where, **fields)


@dataclass(frozen=True)
class Layouts:
    """A chapter's group layouts and how its cases run on them.

    ``size``: the symbol of the group size in a case (``t``, ``cp``, ``ep``); ``allow``: course
    functions an answer may call (by default for every task); ``hint(case, message)``: words
    added to a rank's exception; ``deadlock_note(world)``: words added to a deadlock;
    ``reject_course``: reject a case that called the course's implementation; ``on_error(e,
    world)``: the failure a rank's exception becomes (default: :meth:`_failure`)."""

    chapter: str
    by_world: dict
    size: str = "size"
    allow: tuple = ()
    hint: Callable | None = None
    deadlock_note: Callable | None = None
    reject_course: bool = True
    on_error: Callable | None = None

    def on_rank(self, rank, world, body, fn, allow):
        """On one rank: every layout of ``world``'s cases (see the module's docstring). Every rank
        creates every group of a layout (``new_group`` is collective); the case in progress is
        written to stderr first, so that a rank that dies mid-case names it."""
        import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

        out = []
        for label, groups in self.by_world[world]:
            every = groups or [list(range(world))]
            handles = [dist.new_group(g) for g in groups] if groups else [None]
            k = next(i for i, g in enumerate(every) if rank in g)
            members, gr = every[k], every[k].index(rank)
            where = f"{label}, rank {rank}" + (f" (rank {gr} of group {members})" if groups else "")
            os.write(2, f"minipar check: running case {where}\n".encode())
            _CURRENT["where"] = where
            with course_calls(forbidden_modules(self.chapter), allow) as used:
                res = body(gr, len(members), handles[k], fn)
            res.update(label=label, rank=rank, gr=gr, members=members, world=world, where=where)
            res.update(whole=groups is None, used=list(used))  # used: in the order of first use
            res[self.size] = len(members)
            res["gr_of"] = [next(g.index(r) for g in every if r in g) for r in range(world)]
            res["size_of"] = [next(len(g) for g in every if r in g) for r in range(world)]
            out.append(res)
        return out

    def launch(self, body, fn, allow=None, reject=None):
        """Every layout's cases in the order they ran (a generator: a world size is launched
        only once the previous one's cases were all checked). A rank's exception is one
        :class:`~minipar.grading.GradeFailure` naming the case it happened in; a case that
        called the course's implementation is rejected (``reject``, default ``reject_course``:
        the one reason of :mod:`minipar.grading.imports`)."""
        for batch in self.batches(body, fn, allow, reject):
            yield from batch

    def batches(self, body, fn, allow=None, reject=None):
        """:meth:`launch`'s cases one launch (world size) at a time: a list per world."""
        allow = self.allow if allow is None else allow
        reject = self.reject_course if reject is None else reject
        labels = [label for rows in self.by_world.values() for label, _ in rows]
        for world in self.by_world:
            try:
                per_rank = run_ranks(_run_on_rank, world, self, body, fn, allow)
            except Exception as e:  # a rank raised, died or hung: one reason
                failure = self.on_error(e, world) if self.on_error else None
                raise (failure or self._failure(e, world)) from None
            batch = [c for cases in zip(*per_rank) for c in cases]
            batch.sort(key=lambda c: (labels.index(c["label"]), c["rank"]))
            for c in batch:
                c["batch"] = batch
                if reject:
                    reject_course_calls(c["used"])
            yield batch

    def _failure(self, e: Exception, world: int) -> GradeFailure:
        """A rank's exception as one reason, with the case it was running (the line a rank
        writes first), ``hint(case, message)`` and, for a deadlock, ``deadlock_note(world)``."""
        inner = getattr(e, "error", e)
        tail = getattr(e, "stderr_tail", "") or getattr(inner, "stderr_tail", "") or ""
        case = re.findall(r"minipar check: running case ([^\n]*)", tail)
        msg = reason_for(e)
        if getattr(e, "kind", None) == "deadlock" and self.deadlock_note:
            msg += self.deadlock_note(world)
        if not case:
            return GradeFailure(msg)
        return GradeFailure(f"{case[-1]}: {msg}" + (self.hint(case[-1], msg) if self.hint else ""))


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
