"""``minipar grade [--json] PATH...``: grade exercise notebooks from the learner's code alone.

For every notebook under PATH the grader

1. finds the notebook's solution script (:func:`minipar.grading.notebooks.find_script`) and with
   it the **expected tasks** (every ``check`` call in the script);
2. writes a **graded copy** (:func:`minipar.grading.notebooks.graded_copy`): outputs, execution
   counts and ``NBVAL`` markers stripped, each check cell expecting the PASS lines of its tasks;
3. runs all copies under ``pytest --nbval-lax`` (one fresh kernel per notebook, cells top to
   bottom, as "Restart and Run All" would), while :func:`minipar.grading.check` and the copy's
   set-up cell log each task's outcome, full reason and every cell error to a side file;
4. scores each expected task: PASS only if its check ran, printed PASS and nbval accepted the
   cell. A task whose check cell is gone fails ("check cell for X is missing"); a check that did
   not run gets the first error of the learner's cells (with the learner's line).

Results are keyed by the notebook's full path. The exit status is 0 whatever the score (the
score is the result) and 2 for bad input (a path that does not exist).
"""
from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat

from minipar.grading.notebooks import (cell_tasks, expected_tasks, find_script, graded_copy,
                                       scripts, starter_path)

# nbval's per-cell wall-clock timeout, set out of reach: every cell of a graded copy runs under
# the grader's progress limits (grading_setup: CPU time of the kernel, waiting outside the ranks;
# the ranks' own watch), which scale with the machine. --timeout SECONDS sets a wall limit.
NO_CELL_TIMEOUT = 10 ** 6     # s (12 days; zmq polls in int32 milliseconds)


def add_parser(sub) -> None:
    p = sub.add_parser("grade", help="grade exercise notebooks from a fresh kernel and print "
                                     "a score table (or --json)")
    p.add_argument("paths", nargs="*", default=["exercises"],
                   help="notebooks or folders (default: exercises)")
    p.add_argument("--json", action="store_true",
                   help='print one JSON object {"tasks": [...], "passed", "total", "missing"}')
    p.add_argument("--timeout", type=int, default=NO_CELL_TIMEOUT,
                   help="wall-clock seconds per cell (default: none; every cell and every check "
                        "stops deadlocks and endless loops by progress, however busy the "
                        "machine)")
    p.set_defaults(func=_grade)


def notebooks(paths) -> tuple[list[Path], list[Path]]:
    """(notebooks to grade, solution scripts found under the folders given)."""
    from minipar.errors import InputError

    found, wanted = [], []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(q for q in p.rglob("*.ipynb")
                            if not any(part.startswith(".") for part in q.relative_to(p).parts))
            wanted += scripts(p) + sorted(p.glob("solutions/[0-9][0-9]_*.py"))
        elif p.suffix == ".ipynb" and p.is_file():
            found.append(p)
        else:
            raise InputError(f"a path to grade must be a notebook or a folder, got {str(p)!r}")
    return list(dict.fromkeys(found)), list(dict.fromkeys(wanted))


def _first_line(source: str) -> str:
    line = next((ln.strip() for ln in source.splitlines()
                 if ln.strip() and not ln.lstrip().startswith("#")), "")
    return line if len(line) <= 60 else line[:57] + "..."


def _junit(xml: Path) -> dict[tuple[str, int], str | None]:
    """(graded copy's stem, code-cell number) -> None if nbval passed it, else its message."""
    out: dict[tuple[str, int], str | None] = {}
    if not xml.exists():
        return out
    for case in ET.parse(xml).iter("testcase"):
        m = re.fullmatch(r"Cell (\d+)", case.get("name") or "")
        where = (case.get("file") or "") + " " + (case.get("classname") or "")
        stem = re.search(r"(nb\d{4})", where)
        if not m or not stem:
            continue
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        skipped = case.find("skipped") is not None
        out[(stem.group(1), int(m.group(1)))] = (
            "skipped" if skipped else None if bad is None
            else (bad.get("message", "") + "\n" + (bad.text or "")))
    return out


def _read_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def _score_notebook(nb_path, nb, script, copy, origin, records, cells, timeout):
    """Rows (notebook, task, passed, reason) and missing task ids for one notebook."""
    name = str(Path(nb_path).resolve())
    expected = expected_tasks(script) if script else []
    learner = nb.cells
    check_cell = {}                                     # task -> learner cell index
    for i, c in enumerate(learner):
        if c.get("cell_type") == "code":
            for t in cell_tasks(c.get("source") or ""):
                check_cell.setdefault(t, i)
    tasks = expected + [t for t in check_cell if t not in expected]
    source_to_copy = {c.source: k for k, c in enumerate(copy.cells)}
    errors = []                                         # (learner cell index, text)
    for r in records:
        if "error" in r:
            k = source_to_copy.get(r.get("cell"))
            if k is not None and origin[k] is not None:
                errors.append((origin[k], r["error"]))
    rows, missing = [], []
    for t in tasks:
        if t not in check_cell:
            missing.append(t)
            rows.append((name, t, False, f"check cell for {t} is missing: restore the cell "
                                          f"check(\"{t}\", ...) from the starter notebook"))
            continue
        outcome = [r for r in records if r.get("task") == t]
        k = origin.index(check_cell[t])
        nbval = cells.get(k, "not run")
        if outcome and all(r["passed"] for r in outcome):
            if nbval is None:
                rows.append((name, t, True, ""))
            else:
                rows.append((name, t, False, "the check printed PASS but its cell's output is "
                                             "not only the PASS line (keep the check cell as the "
                                             "starter has it)"))
            continue
        if outcome:
            rows.append((name, t, False, next(r["reason"] for r in outcome if not r["passed"])))
            continue
        before = [(i, e) for i, e in errors if i <= check_cell[t]]
        if before:
            i, e = before[0]
            why = (f"the check did not run: cell {i + 1} "
                   f"({_first_line(learner[i].get('source') or '')}) raised {e}")
        elif nbval == "skipped":
            why = "the check cell was skipped (remove its NBVAL_SKIP mark or tag)"
        elif isinstance(nbval, str) and re.search(r"time(d)? ?out", nbval, re.I):
            why = f"the check cell did not finish within {timeout} s"
        elif isinstance(nbval, str) and "dead" in nbval.lower():
            why = "the kernel died while running the check cell"
        else:
            why = "the check cell did not run to completion"
        rows.append((name, t, False, why))
    return rows, missing


def grade(paths, timeout: int = NO_CELL_TIMEOUT) -> dict:
    """Grade; return ``{"tasks": [...], "passed", "total", "missing"}`` (see module doc)."""
    nbs, wanted = notebooks(paths)
    rows, missing, jobs = [], [], []
    covered = set()
    with tempfile.TemporaryDirectory(prefix="minipar-grade-") as tmp:
        tmp = Path(tmp)
        for j, nb_path in enumerate(nbs):
            try:
                nb = nbformat.read(nb_path, as_version=4)
            except Exception as e:  # noqa: BLE001  (a broken file is a failed notebook)
                rows.append((str(nb_path.resolve()), "(notebook)", False,
                             f"not a readable notebook: {type(e).__name__}: {e}"))
                continue
            script = find_script(nb_path, nb)
            if script is not None:
                covered.add(script.resolve())
            log = tmp / f"nb{j:04d}.log"
            copy, origin = graded_copy(nb, str(nb_path.resolve().parent), str(log))
            nbformat.write(copy, tmp / f"nb{j:04d}.ipynb")
            jobs.append((f"nb{j:04d}", nb_path, nb, script, copy, origin, log))
        if jobs:
            xml = tmp / "junit.xml"
            (tmp / "none.ini").write_text("[pytest]\n")    # not the course's pytest settings
            subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env",
                            f"--nbval-cell-timeout={timeout}", "-p", "no:cacheprovider", "-q",
                            "--rootdir", str(tmp), "-c", str(tmp / "none.ini"),
                            f"--junitxml={xml}", "-o", "junit_family=xunit1",
                            *[str(tmp / f"{stem}.ipynb") for stem, *_ in jobs]],
                           capture_output=True, text=True, cwd=tmp)
            cells = _junit(xml)
            for stem, nb_path, nb, script, copy, origin, log in jobs:
                mine = {k: v for (s, k), v in cells.items() if s == stem}
                r, m = _score_notebook(nb_path, nb, script, copy, origin, _read_log(log), mine,
                                       timeout)
                rows += r
                missing += [{"notebook": str(Path(nb_path).resolve()), "task": t} for t in m]
    for script in wanted:
        if script.resolve() in covered:
            continue
        nb_name = str(starter_path(script).resolve())
        for t in expected_tasks(script):
            rows.append((nb_name, t, False, f"notebook {starter_path(script).name} is missing: "
                                            "its check cells are gone (rebuild it with "
                                            "`make exercises` or restore it)"))
            missing.append({"notebook": nb_name, "task": t})
    tasks = [dict(notebook=n, task=t, passed=ok, reason=why) for n, t, ok, why in rows]
    return {"tasks": tasks, "passed": sum(t["passed"] for t in tasks), "total": len(tasks),
            "missing": missing}


def _grade(args) -> int:
    result = grade(args.paths, args.timeout)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    rows = result["tasks"]
    width = max([len(r["task"]) for r in rows] + [4])
    for nb in dict.fromkeys(r["notebook"] for r in rows):
        mine = [r for r in rows if r["notebook"] == nb]
        shown = Path(nb)
        with contextlib.suppress(ValueError):
            shown = shown.relative_to(Path.cwd().resolve())
        print(f"\n{shown}: {sum(r['passed'] for r in mine)}/{len(mine)} passed")
        for r in mine:
            print(f"  {'PASS' if r['passed'] else 'FAIL'}  {r['task']:<{width}}  {r['reason']}")
    print(f"\nscore: {result['passed']}/{result['total']} tasks passed")
    return 0
