"""End to end, as a learner runs it: ``minipar grade`` on every reference solution scores every
task; every untouched starter fails each task with "not implemented yet"; the grader's limits
pass the references and still catch mistakes while other torch work competes for the cores;
starters ship clean.

(Each chapter's ``test_grading_<chapter>.py`` shows realistic wrong answers rejected with a named
reason; ``test_grading_workflows.py`` the learner's Jupyter habits.)
"""

import contextlib
import io
import json
import sys
from pathlib import Path

import cloudpickle
import nbformat
import pytest
from grading_support import competing_torch_work, exercise_function

from minipar.grading import check, display, limits
from minipar.grading.cli import grade
from minipar.grading.notebooks import (
    _cells,
    _committed,
    build,
    exercise_namespace,
    expected_tasks,
    scripts,
    starter_path,
)

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = scripts(ROOT / "exercises")

# The wrong answers below reach the ranks by value, as a learner's notebook functions do: a rank
# then does not import this module (pytest, nbformat: about 1 CPU-s per rank).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.mark.slow
@pytest.mark.skipif(not SCRIPTS, reason="no exercises yet")
def test_grade_scores_every_reference_solution(tmp_path):
    """One ``minipar grade`` over one solved notebook of every chapter (one pytest session):
    the notebook machinery (stripped copy, fresh kernel, PASS lines from the registry, side
    log) end to end in every chapter. Every other reference solution is graded through the same
    ``check`` by its chapter's ``test_solution_passes_and_starter_fails``; grading all 30
    notebooks here again took 156 s of an idle 2-core machine for no extra coverage."""
    firsts = {}
    for script in SCRIPTS:
        firsts.setdefault(script.parent.parent.name, script)
    chosen = list(firsts.values())
    for script in chosen:
        target = tmp_path / script.parent.parent.name / starter_path(script).name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(build(script, solved=True), target)
        # the kernel runs where the learner's notebook lives
        for extra in script.parent.parent.glob("*"):
            if extra.is_file() and extra.suffix != ".ipynb":
                (target.parent / extra.name).write_bytes(extra.read_bytes())
    result = grade([tmp_path])
    want = sum(len(expected_tasks(s)) for s in chosen)
    assert len(chosen) == len({s.parent.parent.name for s in SCRIPTS})
    assert result["total"] == want and not result["missing"], result
    failed = [(t["task"], t["reason"]) for t in result["tasks"] if not t["passed"]]
    assert not failed, failed


def _run_check_cells(script, namespace, log):
    """Run the check cells of ``script`` in ``namespace`` with the grade log at ``log``; return
    {task: reason} of the failed tasks."""
    for kind, text in _cells(script.read_text()):
        if kind == "check":
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(text, f"<check cell of {script.stem}>", "exec"), namespace)
    records = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return {r["task"]: r["reason"] for r in records if not r["passed"]}, records


@pytest.mark.slow
@pytest.mark.skipif(not SCRIPTS, reason="no exercises yet")
def test_every_starter_fails_every_task_as_not_implemented(tmp_path, monkeypatch):
    """The starters' check cells, run in this process on the starters' code: each expected task
    fails with "not implemented yet" -- at once, without starting ranks, wherever the candidate
    itself still raises NotImplementedError (tensor_parallel's f and g reach their stub through
    an autograd Function and so run on ranks)."""
    for script in SCRIPTS:
        log = tmp_path / f"{script.parent.parent.name}-{script.stem}.log"
        monkeypatch.setenv("MINIPAR_GRADE_LOG", str(log))
        failed, records = _run_check_cells(script, exercise_namespace(script, solved=False), log)
        assert [r["task"] for r in records] == expected_tasks(script), script
        for task_id in expected_tasks(script):
            assert "not implemented yet" in failed.get(task_id, ""), (task_id, failed)


@pytest.mark.skipif(not SCRIPTS, reason="no exercises yet")
def test_no_reference_solution_looks_unimplemented():
    """The starter fast path can never fail a finished answer: no name a solved notebook
    defines is taken for a stub (and every starter's candidate of a task that is checked in
    this process is)."""
    for script in SCRIPTS:
        solved = exercise_namespace(script, solved=True)
        stubs = [
            k
            for k, v in solved.items()
            if getattr(v, "__module__", "") == "exercise" and display.unimplemented(v)
        ]  # what the notebook defines, not imports
        assert not stubs, (script, stubs)
    assert display.unimplemented(exercise_function("memory_time", "01_params", "params", False))
    bucketed = exercise_function("data_parallel", "02_bucketed", "Bucketed", solved=False)
    assert display.unimplemented(bucketed)  # a class's stub methods

    def finished_after_all(x):
        if x is None:
            raise NotImplementedError("a branch, not a stub")
        return 2 * x

    assert not display.unimplemented(finished_after_all)


# ----------------------------------------------------------------------------- under load
def _ring_wrong_peer(t):
    """Every rank receives from the wrong side: a deadlock, whatever the load."""
    import torch
    import torch.distributed as dist

    r, n = dist.get_rank(), dist.get_world_size()
    buf = torch.empty_like(t)
    dist.send(t.clone(), dst=(r + 1) % n)
    dist.recv(buf, src=(r + 1) % n)
    return t


def _accumulate_syncing_every_step(model, dp, micro_batches, loss_fn):
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
        dp.finish()


@pytest.mark.slow
def test_references_pass_and_mistakes_are_caught_under_competing_torch_work(
    tmp_path, monkeypatch, short_stall_window
):
    """Failures seen on a busy machine, reproduced where they happened: the reference solutions that were
    failed for "time limit"/"timed out" on a busy machine (collectives.ring_all_reduce,
    data_parallel.bucketed and .accumulation), graded while two other processes run gloo ranks
    of their own, pass; a deadlock and a classic mistake are still named. The limits hold a
    margin: no reference rank comes near CPU_LIMIT (the grader's only budget besides a stall of
    STALL_S with no CPU used, which a working rank never shows, however busy the machine).
    The references and the classic mistake are graded with the production limits; the deadlock,
    blocked for good whatever the window, with the short test window (conftest.py)."""
    stats = tmp_path / "stats.jsonl"
    monkeypatch.setenv("MINIPAR_GRADE_STATS", str(stats))
    refs = [
        ("collectives.ring_all_reduce", "collectives", "01_ring_all_reduce", "ring_all_reduce"),
        ("data_parallel.bucketed", "data_parallel", "02_bucketed", "Bucketed"),
        ("data_parallel.accumulation", "data_parallel", "03_accumulation", "accumulation_step"),
    ]
    lines = {}
    with competing_torch_work(tmp_path, processes=2, ranks=3):
        for task_id, chapter, stem, name in refs:
            with contextlib.redirect_stdout(io.StringIO()) as out:
                check(task_id, exercise_function(chapter, stem, name, solved=True))
            lines[task_id] = out.getvalue().strip()
        ref_calls = [json.loads(line) for line in stats.read_text().splitlines()]
        with contextlib.redirect_stdout(io.StringIO()) as out:
            with short_stall_window() as stall_s:
                check("collectives.ring_all_reduce", _ring_wrong_peer)
            check("data_parallel.accumulation", _accumulate_syncing_every_step)
        wrong = out.getvalue().splitlines()
    for task_id, *_ in refs:
        assert lines[task_id].startswith(f"PASS {task_id}"), lines[task_id]
    assert wrong[0].startswith(
        "FAIL collectives.ring_all_reduce: n=2, 8 elements, float32: "
        f"deadlock on 2 ranks: for {stall_s:g} s"
    ), wrong[0]
    assert "rank 0 waiting at line" in wrong[0] and "(in send)" in wrong[0], wrong[0]
    assert (
        wrong[1].startswith("FAIL data_parallel.accumulation: ")
        and "must run under dp.no_sync()" in wrong[1]
    ), wrong[1]
    assert all(c["verdict"] == "ok" for c in ref_calls), ref_calls
    heaviest = max(max(c["cpu_s"] or [0.0]) for c in ref_calls)
    assert limits.CPU_LIMIT >= 10 * heaviest, (
        f"a reference rank used {heaviest} CPU-s: under 10x margin to CPU_LIMIT"
    )


def committed_starter(script):
    """The starter notebook of ``script`` as git holds it (the index: what was committed or
    staged), never the working copy, where a learner saves answers and outputs; the file itself
    only for a starter git does not hold (a new exercise, or a copy outside a git checkout)."""
    text = _committed(starter_path(script))
    if text is None:
        return nbformat.read(starter_path(script), as_version=4)
    return nbformat.reads(text, as_version=4)


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_starter_is_clean(script):
    nb = committed_starter(script)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert any("check(" in c.source for c in code), "every exercise notebook needs a check cell"
    assert expected_tasks(script), "its solution script must call check()"
    assert not any("BEGIN SOLUTION" in c.source for c in code)
    assert any("NotImplementedError" in c.source for c in code)
    assert all(not c.outputs and c.execution_count is None for c in code), (
        "starters ship with no stored outputs (they would give answers away)"
    )
