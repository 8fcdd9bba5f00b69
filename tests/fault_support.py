"""Helpers of the fault tests (tests/test_faults*.py): a tagged sandbox and waits on it.

Every process a faulted call starts inherits ``MINIPAR_FAULT_TAG`` from the sandbox's
environment, so the tests can find what is left by its tag and ``TMPDIR``."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
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
        files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))
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
