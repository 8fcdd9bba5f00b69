"""``minipar grade [PATH ...]``: run nbval (the grader) on exercise notebooks, print a score table."""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat

from minipar.grading.notebooks import CHECK_MARK, _TASK

_LINE = re.compile(r"(PASS|FAIL) ([\w.]+): ([^\n'\"\\]*)")


def add_parser(sub) -> None:
    p = sub.add_parser("grade", help="grade exercise notebooks (pytest --nbval-lax) and "
                                     "print a score table")
    p.add_argument("paths", nargs="*", default=["exercises"],
                   help="notebooks or folders (default: exercises)")
    p.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    p.set_defaults(func=_grade)


def notebooks(paths) -> list[Path]:
    from minipar.cli import CliError

    found = []
    for p in map(Path, paths):
        if p.is_dir():
            found += sorted(q for q in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in q.parts)
        elif p.suffix == ".ipynb" and p.exists():
            found.append(p)
        else:
            raise CliError(f"a path to grade must be a notebook or a folder, got {str(p)!r}")
    return found


def _check_cells(nb_path: Path) -> dict[int, list[str]]:
    """Code-cell index (nbval's ``Cell N``) -> task ids checked there."""
    nb = nbformat.read(nb_path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    return {i: _TASK.findall(c.source) for i, c in enumerate(code) if CHECK_MARK in c.source}


def grade(paths, timeout: int = 600) -> list[tuple[str, str, bool, str]]:
    """Run the grader; return rows (notebook, task, passed, reason)."""
    nbs = notebooks(paths)
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env",
                        f"--nbval-cell-timeout={timeout}", "-p", "no:cacheprovider", "-q",
                        f"--junitxml={xml}", "-o", "junit_family=xunit1",
                        *map(str, nbs)], capture_output=True, text=True)
        results = {}
        if xml.exists():
            for case in ET.parse(xml).iter("testcase"):
                bad = case.find("failure")
                if bad is None:
                    bad = case.find("error")
                text = None if bad is None else (bad.get("message", "") + "\n" + (bad.text or ""))
                results[(case.get("file") or case.get("classname", ""), case.get("name"))] = text
    rows = []
    for nb in nbs:
        for cell, tasks in _check_cells(nb).items():
            failure = next((v for (f, name), v in results.items()
                            if name == f"Cell {cell}" and Path(f).name == nb.name), "missing")
            for t in tasks:
                if failure is None:
                    rows.append((str(nb), t, True, ""))
                    continue
                reasons = [m.group(3).strip() for m in _LINE.finditer(failure or "")
                           if m.group(1) == "FAIL" and m.group(2) == t]
                reason = reasons[0] if reasons else "the check cell did not run to completion"
                rows.append((str(nb), t, False, reason))
    return rows


def _grade(args) -> int:
    rows = grade(args.paths, args.timeout)
    width = max([len(t) for _, t, _, _ in rows] + [4])
    for nb in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == nb]
        print(f"\n{nb}: {sum(r[2] for r in mine)}/{len(mine)} passed")
        for _, t, ok, reason in mine:
            print(f"  {'PASS' if ok else 'FAIL'}  {t:<{width}}  {reason}")
    total = sum(r[2] for r in rows)
    print(f"\nscore: {total}/{len(rows)} tasks passed")
    return 0 if rows and total == len(rows) else 1
