"""Faults: the grader's kernel watch (heartbeats, a stall stopped, a loop that ignores SIGINT
killed), a kernel that cannot start, a signal held out of jupyter_client's event loop, and
Ctrl-C in any command.
"""

from __future__ import annotations

import os
import signal

import pytest
from fault_support import _wait_for


@pytest.mark.slow
def test_the_kernel_watch_beats_stops_a_stall_and_kills_what_ignores_sigint(tmp_path, monkeypatch):
    """One kernel per case, no grader set-up cell (so no in-kernel limit): a 1.2-s computation
    gets heartbeats (every 0.5 s) and passes; a sleep makes no progress and is interrupted after the stall
    window; a loop that ignores SIGINT is stopped by the kernel's CPU limit and the kernel
    killed, ending the notebook."""
    from minipar.grading import runner

    monkeypatch.setattr(runner, "HEARTBEAT_S", 0.5)
    monkeypatch.setattr(runner, "INTERRUPT_GRACE_S", 2.0)
    monkeypatch.setenv("MINIPAR_GRADE_KERNEL_STALL_S", "2")
    monkeypatch.setenv("MINIPAR_GRADE_KERNEL_CPU_LIMIT", "2")
    beats = []
    # 1.2 CPU-s: past the first heartbeat (0.5 s; the watch looks every POLL_S, 0.5 s), under
    # the kernel's CPU limit (2)
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.2:\n    pass"
    cells = [
        busy,
        "import time\ntime.sleep(60)",
        "print('after the stall')",
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
        "print('never')",
    ]
    (tmp_path / "k").mkdir()
    run = runner.run_notebook(
        cells, tmp_path / "k", str(tmp_path), heartbeat=lambda k, s, cpu: beats.append((k, s, cpu))
    )
    assert run.cells[0].status == "ok" and any(k == 0 for k, _, _ in beats), beats
    assert run.cells[1].status == "stopped", run.cells[1]
    assert "for 2 s the kernel and its processes made no progress" in run.cells[1].reason
    assert run.cells[2].status == "ok" and run.cells[2].stdout == "after the stall\n"
    assert run.cells[3].status == "stopped", run.cells[3]
    assert "stopped after 2 CPU-seconds of the kernel" in run.cells[3].reason
    assert 4 not in run.cells  # the kernel was killed: nothing ran after
    assert run.died is None  # stopped by the grader, not a crash


def test_ctrl_c_in_any_command_is_one_line_and_status_130(capsys, monkeypatch):
    from minipar import cli
    from minipar.bench import launch as bench_launch

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_launch, "measure", interrupted)
    assert cli.main(["bench", "launch", "--ranks", "2", "--backend", "gloo"]) == 130
    assert capsys.readouterr().err == "minipar bench: stopped by SIGINT\n"


@pytest.mark.slow
def test_a_kernel_that_cannot_start_is_named_with_its_last_words(tmp_path):
    """A kernel that cannot start (here a broken `traitlets` first on its PYTHONPATH, which
    ipykernel imports first) ends that notebook at once with the kernel's own last line."""
    from minipar.grading import runner

    env = dict(os.environ)
    (tmp_path / "k").mkdir()
    (tmp_path / "cwd").mkdir()
    env["PYTHONPATH"] = str(tmp_path / "shadow")
    (tmp_path / "shadow").mkdir()
    (tmp_path / "shadow" / "traitlets.py").write_text("raise ImportError('traitlets is broken')\n")
    run = runner.run_notebook(["1"], tmp_path / "k", str(tmp_path / "cwd"), env=env)
    assert run.cells == {}
    assert run.start_error.startswith("the kernel exited while starting (exit code 1)"), run
    assert "traitlets is broken" in run.start_error, run


@pytest.mark.slow
def test_a_kernel_whose_port_was_taken_is_started_again_with_new_ports(tmp_path, monkeypatch):
    """jupyter_client picks a free port, closes it, and the kernel binds it later: here another
    socket holds the first port it picks. That kernel exits ("Address already in use"), and the
    grader starts one with new ports and runs the cell. Control: allowed one start only, the
    same collision ends the notebook with the kernel's last line."""
    import socket

    from jupyter_client.connect import LocalPortCache

    from minipar.grading import runner

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    port = held.getsockname()[1]
    real = LocalPortCache.find_available_port
    picks = []

    def first_taken(self, ip):
        picks.append(port if not picks else real(self, ip))
        return picks[-1]

    monkeypatch.setattr(LocalPortCache, "find_available_port", first_taken)
    try:
        (tmp_path / "k").mkdir()
        run = runner.run_notebook(["print(6 * 7)"], tmp_path / "k", str(tmp_path))
        assert run.start_error == "" and run.cells[0].stdout == "42\n", run
        log = (tmp_path / "k" / "kernel.log").read_text()
        assert log.count(f"Address already in use (addr='tcp://127.0.0.1:{port}')") == 1, log

        picks.clear()
        monkeypatch.setattr(runner, "KERNEL_START_TRIES", 1)
        (tmp_path / "control").mkdir()
        run = runner.run_notebook(["print(6 * 7)"], tmp_path / "control", str(tmp_path))
    finally:
        held.close()
    assert run.cells == {}, run
    assert run.start_error.startswith("the kernel exited while starting (exit code 1)"), run
    assert run.start_error.endswith(f"Address already in use (addr='tcp://127.0.0.1:{port}')")


def test_a_signal_never_lands_inside_jupyter_clients_event_loop(monkeypatch):
    """A signal that arrives while jupyter_client waits for a message is held until the call
    returns, then raised from the watch loop: raised inside the library's event loop, it
    orphaned one of its tasks, whose traceback was printed when collected (seen once in CI
    as 'Task exception was never retrieved' after SIGHUP)."""
    import queue

    from minipar.grading import runner

    # the signal is remembered in the runner's module state (first_signal() reads it after
    # the unwind): a copy of that state, so no later grade() in this process sees a SIGHUP
    monkeypatch.setattr(runner, "_shield", dict(runner._shield))
    calls = []

    class Client:
        def execute(self, *a, **k):
            return "m"

        def get_iopub_msg(self, timeout):
            os.kill(os.getpid(), signal.SIGHUP)
            # the runner's signal thread takes it and the handler runs here, held
            _wait_for(lambda: runner._shield["pending"], 60, "the signal handler")
            calls.append("returned")
            raise queue.Empty

    kernel = object.__new__(runner.Kernel)
    kernel.kc = Client()
    kernel.cpu = lambda: (0.0, 0.0)
    kernel._cpu_seen = {}  # pid -> CPU-seconds at the last sample (none taken here)
    kernel.alive = lambda: True
    with pytest.raises(runner.Interrupted) as caught, runner.signals_unwind():
        kernel.run_cell("x = 1", None, 60.0, 60.0)
    assert caught.value.signum == signal.SIGHUP
    assert calls == ["returned"], "the signal was raised inside the library call"
