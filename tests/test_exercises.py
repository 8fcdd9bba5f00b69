"""End to end, as a learner runs it: ``minipar grade`` on every reference solution scores every
task, on every untouched starter scores none with a reason per task, and starters ship clean.

(Each chapter's ``test_grading_<chapter>.py`` shows realistic wrong answers rejected with a named
reason; ``test_grading_workflows.py`` the learner's Jupyter habits.)
"""
from pathlib import Path

import nbformat
import pytest

from minipar.grading.cli import grade
from minipar.grading.notebooks import build, expected_tasks, scripts, starter_path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = scripts(ROOT / "exercises")


@pytest.mark.slow
@pytest.mark.skipif(not SCRIPTS, reason="no exercises yet")
def test_grade_scores_every_solution_and_no_starter(tmp_path):
    for script in SCRIPTS:
        for kind, solved in (("solved", True), ("starter", False)):
            target = tmp_path / kind / script.parent.parent.name / starter_path(script).name
            target.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(build(script, solved=solved), target)
            # the kernel runs where the learner's notebook lives
            for extra in script.parent.parent.glob("*"):
                if extra.is_file() and extra.suffix != ".ipynb":
                    (target.parent / extra.name).write_bytes(extra.read_bytes())
    result = grade([tmp_path])
    want = sum(len(expected_tasks(s)) for s in SCRIPTS)
    assert result["total"] == 2 * want and not result["missing"]
    solved = [t for t in result["tasks"] if "/solved/" in t["notebook"]]
    starters = [t for t in result["tasks"] if "/starter/" in t["notebook"]]
    assert len(solved) == len(starters) == want
    failed = [(t["task"], t["reason"]) for t in solved if not t["passed"]]
    assert not failed, failed
    for t in starters:
        assert not t["passed"], t
        assert "not implemented yet" in t["reason"], t


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_starter_is_clean(script):
    nb = nbformat.read(starter_path(script), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert any("check(" in c.source for c in code), "every exercise notebook needs a check cell"
    assert expected_tasks(script), "its solution script must call check()"
    assert not any("BEGIN SOLUTION" in c.source for c in code)
    assert any("NotImplementedError" in c.source for c in code)
    assert all(not c.outputs and c.execution_count is None for c in code), \
        "starters ship with no stored outputs (they would give answers away)"
