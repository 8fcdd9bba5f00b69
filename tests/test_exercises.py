"""End to end through nbval, as a learner runs it: every reference solution passes its checks.

(Each chapter's ``test_grading_<chapter>.py`` shows that untouched starters and realistic wrong
answers fail; here the solved notebooks go through the same grader a learner's notebook does.)
"""
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from minipar.grading.notebooks import CHECK_MARK, build, scripts, starter_path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = scripts(ROOT / "exercises")


@pytest.mark.slow
@pytest.mark.skipif(not SCRIPTS, reason="no exercises yet")
def test_every_solved_notebook_passes_nbval(tmp_path):
    for script in SCRIPTS:
        target = tmp_path / script.parent.parent.name / starter_path(script).name
        target.parent.mkdir(exist_ok=True)
        nbformat.write(build(script, solved=True), target)
        # the kernel runs where the learner's notebook lives
        for extra in script.parent.parent.glob("*"):
            if extra.is_file() and extra.suffix not in (".ipynb",):
                (target.parent / extra.name).write_bytes(extra.read_bytes())
    out = subprocess.run([sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env",
                          "-p", "no:cacheprovider", "-q", str(tmp_path)],
                         capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-4000:]


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_starter_has_a_check_cell_and_no_solution(script):
    nb = nbformat.read(starter_path(script), as_version=4)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    assert any(CHECK_MARK in c for c in code), "every exercise notebook needs a check cell"
    assert not any("BEGIN SOLUTION" in c for c in code)
    assert any("NotImplementedError" in c for c in code)
