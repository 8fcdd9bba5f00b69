"""Faults: what ``minipar grade`` says when a notebook goes wrong: a dead kernel ends its notebook
at once and grading goes on, --timeout is named, bad arguments exit 2, a notebook with no task
3; no message tells a learner to overwrite their work.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from fault_support import ROOT, exercise_notebook


@pytest.mark.slow
def test_a_dead_kernel_ends_its_notebook_at_once_and_grading_goes_on(tmp_path):
    """os._exit(0) in a plain cell used to leave nbval waiting 10⁶ s for the next cell."""
    dead = exercise_notebook(tmp_path / "a", "import os\nos._exit(0)")
    fine = exercise_notebook(tmp_path / "b", "x = 1")
    out = subprocess.run(
        [sys.executable, "-m", "minipar.cli", "grade", str(dead), str(fine)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    import re

    assert re.search(
        r"not run: the kernel died in cell \d+ \(import os\) \(exit code 0\)", out.stdout
    ), out.stdout
    assert "b/memory_time/01_params.ipynb: 2/2 passed" in out.stdout, out.stdout
    # a busy machine may add "still running after 10 s" lines: they are not steps
    progress = [
        ln for ln in out.stderr.splitlines() if ln.startswith("[") and "still running" not in ln
    ]
    assert (
        len(progress) == 4
        and progress[0].startswith("[1/2] ")
        and progress[1].endswith(" s")
        and "FAIL (0/2 passed)" in progress[1]
    ), out.stderr
    assert "PASS" in progress[3], out.stderr


@pytest.mark.slow
def test_timeout_expiry_is_named_not_a_keyboard_interrupt(tmp_path):
    from minipar.grading.cli import grade

    nb = exercise_notebook(tmp_path, "import time\nfor _ in range(100):\n    time.sleep(0.1)")
    result = grade([nb], timeout=1.5)
    reasons = {t["task"]: t["reason"] for t in result["tasks"]}
    assert (
        "stopped by --timeout: the cell ran 1.5 s of wall-clock time"
        in reasons["memory_time.params"]
    ), reasons
    assert "KeyboardInterrupt" not in reasons["memory_time.params"]


@pytest.mark.slow
def test_timeout_and_paths_are_validated_exit_2():
    for bad in ("0", "-1", "nan", "inf", "soon"):
        r = subprocess.run(
            [sys.executable, "-m", "minipar.cli", "grade", "--timeout", bad, "x.ipynb"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert r.returncode == 2, (bad, r.stderr)
        assert "--timeout must be a finite number of seconds > 0" in r.stderr and bad in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "minipar.cli", "grade", "README.md"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 2 and "must be a notebook (.ipynb) or a folder" in r.stderr


@pytest.mark.slow
def test_a_notebook_without_tasks_exits_3_and_says_so(tmp_path):
    nb = tmp_path / "notes.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), nb)
    r = subprocess.run(
        [sys.executable, "-m", "minipar.cli", "grade", str(nb)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 3, r.stderr
    assert f"No tasks found in {nb.resolve()} (is it an exercise notebook?)" in r.stderr
    # negative control: an exercise notebook is not "empty" (it is graded, whatever its score)
    from minipar.grading.cli import notebooks
    from minipar.grading.notebooks import cell_tasks

    assert cell_tasks('check("memory_time.params", params)') == ["memory_time.params"]
    assert notebooks([nb]) == ([nb], [])


def _overwriting_advice(text: str) -> list[str]:
    """Lines that tell someone to run a forced rebuild without saying it overwrites work."""
    import re

    return [
        ln
        for ln in text.splitlines()
        if re.search(r"--force`", ln) and not re.search(r"overwrit|author", ln, re.I)
    ]


def test_no_message_tells_a_learner_to_overwrite_their_work():
    """The grader's "notebook missing" reason and make's messages name only commands that
    write missing notebooks (`make exercises`), never a forced rebuild without its warning."""
    from minipar.grading.cli import grade

    for path in [
        ROOT / "src/minipar/grading/cli.py",
        ROOT / "src/minipar/grading/notebooks.py",
        ROOT / "Makefile",
        ROOT / "README.md",
    ]:
        assert _overwriting_advice(path.read_text()) == [], path
    # negative control: the advice the check exists to catch
    assert _overwriting_advice("stale: run `python -m minipar.grading.notebooks --force`")
    # the grader's reason for a deleted notebook
    source = (ROOT / "src/minipar/grading/cli.py").read_text()
    assert "writes only missing notebooks" in source and grade.__module__


def test_the_grader_leaves_its_kernel_files_in_its_own_folder():
    """Negative control for the leak tests' TMPDIR check: the runner's kernel writes its
    connection file, IPYTHONDIR and TMPDIR under the folder it is given."""
    from minipar.grading import runner

    text = "".join(Path(runner.__file__).read_text().split())  # as code, not as formatted
    assert 'connection_file=str(self.folder/"kernel.json")' in text
    assert 'IPYTHONDIR=str(self.folder/"ipython"),TMPDIR=str(self.folder/"tmp")' in text
