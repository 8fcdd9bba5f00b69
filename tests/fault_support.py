"""Helpers of the fault tests (tests/test_faults*.py): a tagged sandbox and waits on it.

Every process a faulted call starts inherits ``MINIPAR_FAULT_TAG`` from the sandbox's
environment, so the tests can find what is left by its tag and ``TMPDIR``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import pytest


def _tagged(tag: str) -> list[int]:
    """Processes whose environment holds ``MINIPAR_FAULT_TAG=tag`` (zombies excluded)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            env = Path(f"/proc/{name}/environ").read_bytes()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"MINIPAR_FAULT_TAG={tag}".encode() in env.split(b"\0") and state != "Z":
            found.append(int(name))
    return found


def _settled(tag: str, folder: Path, seconds: float = 10.0, ignore: str | None = None):
    """(processes left, files left) once both are empty or ``seconds`` passed; files whose
    path starts with ``ignore`` do not count."""
    deadline = time.monotonic() + seconds
    while True:
        procs = _tagged(tag)
        try:
            files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
        except FileNotFoundError:  # a folder removed while it was walked: not settled yet
            files = ["(a folder being removed)"]
        files = [f for f in files if not (ignore and f.startswith(ignore))]
        if (not procs and not files) or time.monotonic() > deadline:
            return procs, files
        time.sleep(0.2)


@pytest.fixture
def sandbox():
    """A short TMPDIR (a Unix socket path must stay under ~100 bytes), a tag, a marker path."""
    folder = Path(tempfile.mkdtemp(prefix="mf", dir="/tmp"))
    tmp, side = folder / "t", folder / "side"
    tmp.mkdir()
    side.mkdir()
    tag = uuid.uuid4().hex
    env = dict(
        os.environ,
        TMPDIR=str(tmp),
        MINIPAR_FAULT_TAG=tag,
        MINIPAR_FAULT_MARKER=str(side / "rank"),
        JUPYTER_RUNTIME_DIR=str(side / "rt"),
        PYTHONUNBUFFERED="1",
    )
    yield env, tmp, side, tag
    for pid in _tagged(tag):  # never leave a failed test's processes
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(folder, ignore_errors=True)


def _wait_for(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


# ----------------------------------------------------------------------------- minipar grade
# (shared by tests/test_faults*.py, which signal or kill a `minipar grade` subprocess)
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "exercises" / "memory_time" / "solutions" / "01_params.py"

# cell 1 of the mid-check notebook: two ranks, each starting a child that would sleep on, and
# writing a marker once both exist; then they wait for a long time
RANKS_CELL = textwrap.dedent("""
    import os, subprocess, time
    from minipar.runtime.launch import run

    def sleeper(rank, world_size, marker):
        child = subprocess.Popen(["sleep", "600"])
        open(f"{marker}.{rank}", "w").write(str(child.pid))
        time.sleep(600)

    run(sleeper, 2, os.environ["MINIPAR_FAULT_MARKER"], backend="gloo", timeout=900)
""")


def exercise_notebook(folder: Path, first_cell: str, where: str = "before") -> Path:
    """The params exercise (solved) with ``first_cell`` inserted before its first code cell
    (``where="before"``; nothing when the cell is empty), after it (``"after"``: after the
    grader's import), or at the top of that cell (``"inside"``: before the answer's definition)."""
    import nbformat

    from minipar.grading.notebooks import build

    nb = build(SCRIPT, solved=True)
    k = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    if where == "inside":
        nb.cells[k].source = first_cell + "\n" + nb.cells[k].source
    elif where == "after":
        nb.cells.insert(k + 1, nbformat.v4.new_code_cell(first_cell))
    elif first_cell:
        nb.cells.insert(k, nbformat.v4.new_code_cell(first_cell))
    for i, c in enumerate(nb.cells):
        c.id = f"c{i}"
    path = folder / "memory_time" / "01_params.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def grade_process(env, *args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "minipar.cli", "grade", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )


def assert_clean_exit(p, sig, tag, tmp, side):
    out, err = p.communicate(timeout=120)
    assert p.returncode == 128 + sig, (p.returncode, err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    stops = [ln for ln in err.splitlines() if ln.startswith("minipar grade: stopped by")]
    assert stops == [
        f"minipar grade: stopped by {signal.Signals(sig).name}; the kernels and "
        "their files are gone"
    ], err[-3000:]
    procs, files = _settled(tag, tmp)
    assert procs == [], f"processes left: {procs}"
    assert files == [], f"files left in TMPDIR: {files}"
    runtime = side / "rt"
    assert not runtime.exists() or list(runtime.iterdir()) == [], "a kernel connection file"


SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


def wait_for_both_ranks(p, side: Path) -> None:
    """Until the mid-check notebook's two ranks and their children exist (or grade ended)."""
    markers = [side / "rank.0", side / "rank.1"]
    _wait_for(
        lambda: all(m.exists() and m.read_text() for m in markers) or p.poll() is not None,
        240,
        "both ranks and their children",
    )
