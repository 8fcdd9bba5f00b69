"""The zygote cleans up after itself and never wedges later calls.

A kernel restart kills the kernel's process group; the zygote runs in its own session, so it
survives that long enough to remove its socket folder. SIGTERM makes it clean up too; after a
hard kill the caller removes the folder. Any failure of the connection to the zygote (not only
EOF) retires it, and the next call starts a fresh one.
"""

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from minipar.runtime import launch
from minipar.runtime import pool as _pool
from minipar.runtime.launch import StartError, run

ROOT = Path(__file__).resolve().parents[1]


def _gone(pid: int, folder: str, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            zombie = "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
        except OSError:
            zombie = True
        if zombie and not os.path.exists(folder):
            return True
        time.sleep(0.1)
    return False


def test_pack_keeps_file_names_without_private_apis():
    def outer(x):
        def inner(y):
            return y + 1

        return inner(x)

    data, _ = _pool.pack(outer, (41,))
    fn, args = pickle.loads(data)
    assert fn(*args) == 42
    assert fn.__code__.co_filename == __file__  # cloudpickle: <dynamic-code>
    inner = next(c for c in fn.__code__.co_consts if hasattr(c, "co_filename"))
    assert inner.co_filename == __file__
    for src in ("pool.py", "_rank.py"):
        text = (ROOT / "src" / "minipar" / "runtime" / src).read_text()
        for private in ("._listener", "_authkey", "_code_reduce"):
            assert private not in text, (src, private)


@pytest.mark.slow
def test_a_kernel_restart_leaves_no_folder():
    """The caller runs in its own process group, as Jupyter starts a kernel; a restart kills
    the whole group with SIGKILL. The zygote (own session) survives it and cleans up."""
    script = textwrap.dedent("""
        from minipar.runtime import launch
        launch.run(lambda r, w: r, 2, backend="gloo")
        print(launch._zygote.proc.pid, launch._zygote.folder, flush=True)
        import time; time.sleep(600)
    """)
    p = subprocess.Popen(
        [sys.executable, "-u", "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        zpid, folder = p.stdout.readline().split()
        assert os.path.isdir(folder) and os.getpgid(int(zpid)) != p.pid
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    assert _gone(int(zpid), folder), f"zygote {zpid} or {folder} survived the kernel"


@pytest.mark.slow
def test_sigterm_and_a_hard_kill_leave_no_folder_and_the_next_call_works():
    for sig in (signal.SIGTERM, signal.SIGKILL):
        run(lambda r, w: r, 1, backend="gloo")
        z = launch._zygote
        os.kill(z.proc.pid, sig)
        z.proc.wait()
        if sig == signal.SIGTERM:  # the zygote removed its folder itself
            assert not os.path.exists(z.folder)
        assert run(lambda r, w: r, 3, backend="gloo") == [0, 1, 2]
        assert launch._zygote is not z and not os.path.exists(z.folder), sig


@pytest.mark.slow
def test_any_connection_error_retires_the_zygote():
    """A garbled message (not EOF, not OSError) is a dead zygote: reported, killed, replaced."""
    run(lambda r, w: r, 1, backend="gloo")
    z = launch._zygote

    class Garbled:
        def __init__(self, conn):
            self.conn = conn

        def send(self, obj):
            self.conn.send(obj)

        def poll(self, timeout=0.0):
            return self.conn.poll(timeout)

        def recv(self):
            raise pickle.UnpicklingError("invalid load key, 'x'")

    z.conn = Garbled(z.conn)
    with pytest.raises(StartError, match=r"connection failed: UnpicklingError: invalid load key"):
        run(lambda r, w: r, 2, backend="gloo", timeout=30)
    assert z.proc.poll() is not None and not z.alive()
    assert run(lambda r, w: r, 2, backend="gloo") == [0, 1]  # not wedged
    assert launch._zygote is not z and not os.path.exists(z.folder)
