"""``minipar grade [--json] [--timeout S] PATH...``: grade exercise notebooks from the learner's code alone.

For every notebook under PATH the grader

1. finds its solution script (:func:`~minipar.grading.notebooks.find_script`) and with it the
   **expected tasks** (every ``check`` call in the script); a notebook with neither a script nor
   a check cell is not an exercise ("No tasks found in X"), and is not run;
2. runs its **graded copy** (:func:`~minipar.grading.notebooks.graded_copy`) in a fresh kernel,
   cells top to bottom as "Restart and Run All" would, watched by :mod:`minipar.grading.runner`
   (no wall-clock limit unless ``--timeout``), while :func:`minipar.grading.check` and the
   copy's set-up cell log each task's outcome, full reason and every cell error to a side file;
3. scores each expected task: PASS only if its check ran, printed exactly its PASS line and no
   earlier cell was stopped for time. A task whose check cell is gone fails ("check cell for X
   is missing"); a check that did not run gets the first error of the learner's cells (with the
   learner's line), or the cell the kernel died in and how.

Progress goes to stderr: one line as each notebook starts and ends, and a heartbeat for a cell
running past 10 s, with the CPU-seconds its busiest process used of its budget
(:func:`budget_used`). Results are keyed by the notebook's full path. Exit status: 0 whatever the
score (the score is the result), 2 for a bad path or argument, 3 when no path holds a task (not
an exercise notebook), 128 + N after signal N (SIGINT, SIGTERM, SIGHUP: the kernels and every
process under them are stopped and every file the call made is removed first).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import re
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from minipar.errors import InputError
from minipar.grading.limits import CELL_LIMIT, CPU_LIMIT, KERNEL_MEMORY_BYTES, TIME_LIMIT
from minipar.grading.notebooks import (
    cell_tasks,
    expected_tasks,
    find_script,
    graded_copy,
    import_nbformat,
    memory_limit_text,
    scripts,
    starter_path,
)
from minipar.grading.runner import (
    Interrupted,
    first_signal,
    run_notebook,
    shielded,
    signals_unwind,
)
from minipar.jsonio import print_json

_FOLDER = re.compile(r"minipar-grade-([0-9a-f]{8})-(\d+)-\w+$")  # host token, grader's pid


def _seconds(text: str) -> float:
    value = float("nan")
    with contextlib.suppress(ValueError):
        value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"--timeout must be a finite number of seconds > 0, got {text!r}"
        )
    return value


def add_parser(sub) -> None:
    p = sub.add_parser(
        "grade",
        help="grade exercise notebooks from a fresh kernel and print a score table (or --json)",
    )
    p.add_argument(
        "paths",
        nargs="*",
        help="notebooks or folders (default: the course's exercises/ folder, found from here: "
        "./exercises, or the exercises folder you are in)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object {"tasks": [...], "passed", "total", "missing", "empty"}',
    )
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        help="wall-clock seconds per cell (default: none; every cell and every check "
        "stops deadlocks and endless loops by progress, however busy the "
        "machine)",
    )
    p.set_defaults(func=_grade)


def notebooks(paths) -> tuple[list[Path], list[Path]]:
    """(notebooks to grade, solution scripts found under the folders given)."""
    found, wanted = [], []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(
                q
                for q in p.rglob("*.ipynb")
                if not any(part.startswith(".") for part in q.relative_to(p).parts)
            )
            wanted += scripts(p) + sorted(p.glob("solutions/[0-9][0-9]_*.py"))
        elif p.suffix == ".ipynb" and p.is_file():
            found.append(p)
        elif not p.exists():
            raise InputError(
                f"a path to grade must exist, got {str(p)!r} (no such file or folder in "
                f"{Path.cwd()}): run it from the course's root or inside exercises/, or name "
                "the notebooks (minipar grade path/to/NN_name.ipynb)"
            )
        else:
            raise InputError(
                f"a path to grade must be a notebook (.ipynb) or a folder, got {str(p)!r}"
            )
    return list(dict.fromkeys(found)), list(dict.fromkeys(wanted))


def _first_line(source: str) -> str:
    code = [ln.strip() for ln in source.splitlines() if ln.strip() and ln.strip()[0] != "#"]
    line = code[0] if code else ""
    return line if len(line) <= 60 else line[:57] + "..."


def _read_log(path: Path) -> list[dict]:
    records = []
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        with contextlib.suppress(ValueError):
            records.append(json.loads(line))
    return records


def budget_used(cpu: float, check: bool) -> str:
    """The progress line's CPU part: the CPU-seconds the cell's busiest process (the kernel, or
    one rank) used, of the budget at which a runaway is stopped: a check's
    (:data:`~minipar.grading.limits.TIME_LIMIT` in the kernel,
    :data:`~minipar.grading.limits.CPU_LIMIT` per rank) or a cell's own
    (:data:`~minipar.grading.limits.CELL_LIMIT`). Wall time on a busy machine is longer; the
    budget is not."""
    budget = max(TIME_LIMIT, CPU_LIMIT) if check else CELL_LIMIT
    return f"{cpu:.0f} of its {budget:g} CPU-s budget used"


def _is_check(learner, i) -> bool:
    return i is not None and bool(cell_tasks(learner[i].get("source") or ""))


def _cell_name(learner, i) -> str:
    if i is None:
        return "the grader's set-up cell"
    return f"cell {i + 1} ({_first_line(learner[i].get('source') or '')})"


def _check_cells(learner) -> dict:
    """Task -> index of the learner's cell that calls ``check`` for it (the first one)."""
    check_cell = {}
    for i, c in enumerate(learner):
        if c.get("cell_type") == "code":
            for t in cell_tasks(c.get("source") or ""):
                check_cell.setdefault(t, i)
    return check_cell


def _cell_errors(records, copy, origin) -> list[tuple]:
    """(learner cell index, error text) of every cell the side log says raised."""
    source_to_copy = {c.source: k for k, c in enumerate(copy.cells)}
    raised = [(source_to_copy.get(r.get("cell")), r["error"]) for r in records if "error" in r]
    return [(origin[k], e) for k, e in raised if k is not None and origin[k] is not None]


def _cut_checks(run, origin, errors, checks_at) -> dict:
    """Check cell -> (stopped cell, why) for the first check after each cell stopped for time
    (by the runner, or by the in-kernel CPU limit): that check fails with the reason even if it
    passes, since its answer ran under a cut cell."""
    timed = {}  # learner cell -> why it was stopped
    for k, c in run.cells.items():
        if c.status == "stopped" and origin[k] is not None:
            timed[origin[k]] = c.reason
    for i, e in errors:
        if "CheckTimeLimit" in e and i not in checks_at:
            timed.setdefault(i, e)
    cut = {}
    for i, why in sorted(timed.items()):
        nxt = next((c for c in checks_at if c > i), None)
        if nxt is not None and i not in checks_at:
            cut.setdefault(nxt, (i, why))
    return cut


@dataclass
class _Graded:
    """One graded notebook: its run, the side log's records, the cells that raised (learner
    index, error), the checks cut by a stopped cell, the learner's cells, where it died."""

    run: object
    records: list
    errors: list
    cut: dict
    learner: list
    died_in: int | None


def _task_verdict(t, at, k, g: _Graded) -> tuple[bool, str]:
    """(passed, reason) of task ``t`` whose check is learner cell ``at`` (copy cell ``k``). The
    side log is the one channel for the check's own verdict; the run says whether it ran."""
    run, learner = g.run, g.learner
    cell = run.cells.get(k)
    if run.start_error:
        return False, f"not run: {run.start_error}"
    if run.died is not None and k >= run.died[0]:
        how = f"the kernel died in {_cell_name(learner, g.died_in)} ({run.died[1]})"
        return False, how if k == run.died[0] else f"not run: {how}"
    if at in g.cut:
        i, why = g.cut[at]
        return False, (
            f"{_cell_name(learner, i)} was stopped for time ({why}): the check ran after a cut cell"
        )
    if cell is not None and cell.status == "stopped":
        return False, cell.reason
    outcome = [r for r in g.records if r.get("task") == t]
    if outcome and all(r["passed"] for r in outcome):
        if cell is not None and cell.status == "ok":
            return True, ""
        return False, f"the check passed but its cell then raised {cell.error if cell else ''}"
    if outcome:
        return False, next(r["reason"] for r in outcome if not r["passed"])
    before = [(i, e) for i, e in g.errors if i <= at]
    if before:
        i, e = before[0]
        return False, f"the check did not run: {_cell_name(learner, i)} raised {e}"
    if cell is not None and cell.status == "error":
        return False, f"the check did not run: its cell raised {cell.error}"
    return False, "the check cell did not run to completion"


@dataclass
class _Notebook:
    """A notebook to grade: its place in the call's list, path, cells and solution script."""

    index: int
    path: Path
    nb: object
    script: Path | None


@dataclass
class _Tally:
    """The call's results so far: rows (notebook, task, passed, reason), the tasks whose check
    cell or notebook is missing, the notebooks with no task, the solution scripts seen."""

    rows: list = field(default_factory=list)
    missing: list = field(default_factory=list)
    empty: list = field(default_factory=list)
    covered: set = field(default_factory=set)

    def add(self, notebook: str, task: str, passed: bool, reason: str, missing: bool = False):
        self.rows.append((notebook, task, passed, reason))
        if missing:
            self.missing.append({"notebook": notebook, "task": task})

    def result(self) -> dict:
        tasks = [dict(notebook=n, task=t, passed=ok, reason=why) for n, t, ok, why in self.rows]
        return {
            "tasks": tasks,
            "passed": sum(t["passed"] for t in tasks),
            "total": len(tasks),
            "missing": self.missing,
            "empty": self.empty,
            "memory_limit_bytes": KERNEL_MEMORY_BYTES,  # per kernel and per rank; 0: none
        }


def _score_notebook(item: _Notebook, copy, origin, run, log: Path, tally: _Tally) -> None:
    """Add the rows of one notebook: ``run`` is its :class:`minipar.grading.runner.NotebookRun`,
    ``log`` its side log."""
    name, learner, records = str(item.path.resolve()), item.nb.cells, _read_log(log)
    check_cell = _check_cells(learner)
    expected = expected_tasks(item.script) if item.script else []
    errors = _cell_errors(records, copy, origin)
    cut = _cut_checks(run, origin, errors, sorted(set(check_cell.values())))
    died_in = None if run.died is None else origin[run.died[0]]
    g = _Graded(run, records, errors, cut, learner, died_in)
    for t in expected + [t for t in check_cell if t not in expected]:
        if t not in check_cell:
            why = (
                f"check cell for {t} is missing: restore the cell "
                f'check("{t}", ...) from the starter notebook'
            )
            tally.add(name, t, False, why, missing=True)
            continue
        at = check_cell[t]
        tally.add(name, t, *_task_verdict(t, at, origin.index(at), g))


# ----------------------------------------------------------------------------- grading
def _unreadable(nb_path: Path, error: Exception, tally: _Tally) -> None:
    """Rows for a notebook file that is not a readable notebook (corrupt JSON, a truncated
    save): each task of its script fails saying so (it exists, so ``make exercises``, which
    writes only missing notebooks, would not replace it)."""
    what = f"{type(error).__name__}: {error}".splitlines()[0]
    if len(what) > 120:
        what = what[:117] + "..."
    why = (
        "unreadable: restore it from git or delete it (`make exercises` then writes a fresh "
        f"starter): {what}"
    )
    script = find_script(nb_path)
    if script is not None:
        tally.covered.add(script.resolve())
    for t in expected_tasks(script) if script is not None else ["(notebook)"]:
        tally.add(str(nb_path.resolve()), t, False, why)


def _shown(path) -> str:
    shown = Path(path).resolve()
    with contextlib.suppress(ValueError):
        shown = shown.relative_to(Path.cwd().resolve())
    return str(shown)


def _to_grade(nbs: list[Path], tally: _Tally) -> list[_Notebook]:
    """The notebooks that hold a task; an unreadable one fails, one with no task is empty."""
    nbformat = import_nbformat()

    todo = []
    for j, nb_path in enumerate(nbs):
        try:
            nb = nbformat.read(nb_path, as_version=4)
        except Exception as e:  # a broken file is a failed notebook, never a missing one
            _unreadable(nb_path, e, tally)
            continue
        script = find_script(nb_path, nb)
        if script is not None:
            tally.covered.add(script.resolve())
        if script is None and not any(
            cell_tasks(c.get("source") or "") for c in nb.cells if c.get("cell_type") == "code"
        ):
            tally.empty.append(str(nb_path.resolve()))
            continue
        todo.append(_Notebook(j, nb_path, nb, script))
    return todo


def _grade_one(item: _Notebook, tmp: Path, tag: str, timeout, say, tally: _Tally) -> None:
    """Run one notebook's graded copy in a fresh kernel and score it; progress lines to ``say``."""
    say(f"{tag} ...")
    t0 = time.monotonic()
    folder = tmp / f"nb{item.index:04d}"
    folder.mkdir()
    log = folder / "grade.log"
    cwd = str(item.path.resolve().parent)
    copy, origin = graded_copy(item.nb, cwd, str(log))

    def beat(k, seconds, cpu):
        i = origin[k]
        where = _cell_name(item.nb.cells, i)
        say(
            f"{tag}: {where} still running after {seconds:.0f} s: "
            + budget_used(cpu, _is_check(item.nb.cells, i))
        )

    run = run_notebook([c.source for c in copy.cells], folder, cwd, timeout=timeout, heartbeat=beat)
    before = len(tally.rows)
    _score_notebook(item, copy, origin, run, log, tally)
    rows = tally.rows[before:]
    ok = sum(x[2] for x in rows)
    verdict = "PASS" if rows and ok == len(rows) else f"FAIL ({ok}/{len(rows)} passed)"
    say(f"{tag} {verdict} {time.monotonic() - t0:.0f} s")


def _missing_notebooks(wanted: list[Path], tally: _Tally) -> None:
    """Every task of a solution script under the folders graded whose notebook is gone fails."""
    for script in wanted:
        if script.resolve() in tally.covered:
            continue
        why = (
            f"notebook {starter_path(script).name} is missing: its check cells are gone "
            "(restore your copy, or write a fresh starter with `make exercises`, which "
            "writes only missing notebooks)"
        )
        for t in expected_tasks(script):
            tally.add(str(starter_path(script).resolve()), t, False, why, missing=True)


def grade(paths, timeout: float | None = None, progress=None) -> dict:
    """Grade; return ``{"tasks": [...], "passed", "total", "missing", "empty"}`` (see module
    doc; ``empty`` lists the notebooks with no task). ``progress(line)``, if given, receives
    the progress lines."""
    say = progress or (lambda line: None)
    nbs, wanted = notebooks(paths)  # a bad path fails here, before nbformat is imported
    from minipar.runtime.pool import host_token, remove_stale_folders  # noqa: PLC0415 (lazy: launcher)

    tally = _Tally()
    with shielded():  # a grader killed with SIGKILL left its folder (its kernel exits by itself)
        remove_stale_folders(tempfile.gettempdir(), _FOLDER)
        tmp_dir = tempfile.TemporaryDirectory(prefix=f"minipar-grade-{host_token()}-{os.getpid()}-")
    try:
        todo = _to_grade(nbs, tally)
        for n, item in enumerate(todo, 1):
            tag = f"[{n}/{len(todo)}] {_shown(item.path)}"
            _grade_one(item, Path(tmp_dir.name), tag, timeout, say, tally)
    finally:
        with shielded():
            tmp_dir.cleanup()
    _missing_notebooks(wanted, tally)
    return tally.result()


def _needs_extra() -> None:
    """``minipar grade`` without the [grade] extra: one line saying what to install."""
    for module in ("nbformat", "jupyter_client", "ipykernel", "psutil"):
        found = False
        with contextlib.suppress(ImportError, ValueError):
            found = importlib.util.find_spec(module) is not None
        if not found:
            raise InputError(
                f"needs the [grade] extra ({module} is not installed): pip install -e '.[grade]'"
            )


def default_paths(cwd: Path | None = None) -> list[str]:
    """What ``minipar grade`` grades when given no path: ``./exercises`` at the course's root;
    inside an ``exercises`` folder (or a chapter's folder under it), that folder."""
    cwd = Path.cwd() if cwd is None else cwd
    if (cwd / "exercises").is_dir():
        return ["exercises"]
    for up in [cwd, *cwd.parents]:
        if up.name == "exercises":
            return ["."]
    return ["exercises"]  # refused by name: run from the course's root, or give the notebooks


def _grade(args) -> int:
    args.paths = args.paths or default_paths()
    _needs_extra()
    progress = lambda line: print(line, file=sys.stderr, flush=True)
    try:
        with signals_unwind(after_stop=signal.SIG_IGN):  # a second signal changes nothing
            result = grade(args.paths, args.timeout, progress=progress)
    except Interrupted as e:
        signum = first_signal() or e.signum
        print(
            f"minipar grade: stopped by {signal.Signals(signum).name}; the kernels and "
            "their files are gone",
            file=sys.stderr,
            flush=True,
        )
        return 128 + signum
    empty = result["total"] == 0
    if empty:
        where = ", ".join(result["empty"]) or ", ".join(map(str, args.paths))
        print(
            f"minipar grade: No tasks found in {where} (is it an exercise notebook?)",
            file=sys.stderr,
        )
    if args.json:
        print_json(result, indent=1)
    if empty or args.json:
        return 3 if empty else 0
    rows = result["tasks"]
    width = max([len(r["task"]) for r in rows] + [4])
    for nb in dict.fromkeys(r["notebook"] for r in rows):
        mine = [r for r in rows if r["notebook"] == nb]
        print(f"\n{_shown(nb)}: {sum(r['passed'] for r in mine)}/{len(mine)} passed")
        for r in mine:
            print(f"  {'PASS' if r['passed'] else 'FAIL'}  {r['task']:<{width}}  {r['reason']}")
    for nb in result["empty"]:
        print(f"\n{_shown(nb)}: No tasks found (is it an exercise notebook?)")
    print(f"\nscore: {result['passed']}/{result['total']} tasks passed")
    print(f"({memory_limit_text()}: MINIPAR_GRADE_KERNEL_MEMORY_GIB changes it)")
    return 0
