"""Failures a learner meets, reported honestly and fast, without leftovers.

Before the zygote: workers that could not start made ``run`` wait the whole timeout and then
say only "did not start in time"; an unpicklable argument killed the warm pool; a killed caller
left its socket folder behind.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from minipar.runtime import launch, pool
from minipar.runtime.launch import RankError, StartError, run

pytestmark = pytest.mark.slow


def _wait_gone(pids, seconds=15.0) -> list:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [
            p
            for p in pids
            if os.path.exists(f"/proc/{p}")
            and "zombie" not in open(f"/proc/{p}/status").read().lower()
        ]
        if not alive:
            return []
        time.sleep(0.2)
    return alive


def _start_failure(monkeypatch, **env) -> tuple[StartError, float]:
    launch.shutdown()  # the next call must start a zygote with this environment
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    t0 = time.monotonic()
    try:
        with pytest.raises(StartError) as info:
            run(lambda r, w: r, 2, backend="gloo", timeout=600)
    finally:
        for k in env:
            monkeypatch.delenv(k)
    return info.value, time.monotonic() - t0


def test_broken_pythonhome_is_reported_in_seconds_with_the_workers_error(monkeypatch):
    err, seconds = _start_failure(monkeypatch, PYTHONHOME="/nonexistent/python-home")
    assert seconds < 60  # the old launcher waited the whole timeout (600 s here)
    assert "encodings" in err.stderr_tail  # the interpreter's own complaint
    assert "PYTHONHOME" in err.cause and "/nonexistent/python-home" in str(err)
    assert isinstance(err, RankError)  # graders that catch RankError show it too
    assert run(lambda r, w: r, 2, backend="gloo") == [0, 1]  # environment fixed: it starts


def test_a_torch_that_cannot_be_imported_is_named(monkeypatch, tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "raise ImportError('simulated broken torch install')\n"
    )
    err, seconds = _start_failure(monkeypatch, PYTHONPATH=str(tmp_path))
    assert seconds < 60
    assert "simulated broken torch install" in err.stderr_tail
    assert "torch" in err.cause
    assert run(lambda r, w: r, 2, backend="gloo") == [0, 1]


def test_minipar_not_importable_on_the_ranks_is_named(monkeypatch):
    src = os.path.dirname(os.path.dirname(os.path.dirname(launch.__file__)))  # .../src
    assert os.path.isdir(os.path.join(src, "minipar")), src
    monkeypatch.setattr(sys, "path", [p for p in sys.path if os.path.abspath(p) != src])
    with pytest.raises(RankError) as info:
        run(lambda r, w: r, 2, backend="gloo", timeout=60)
    assert "minipar is not importable" in str(info.value)
    assert "No module named 'minipar'" in str(info.value)


def test_an_aborting_rank_carries_its_stderr():
    def abort(rank, world_size):
        import os

        if rank == 1:
            os.write(2, b"native message before the abort\n")
            os.abort()
        return rank

    with pytest.raises(RankError) as info:
        run(abort, 2, backend="gloo", timeout=60)
    err = info.value
    assert err.rank == 1 and "SIGABRT" in err.summary
    assert "native message before the abort" in err.stderr_tail
    assert "Fatal Python error: Aborted" in err.stderr_tail  # faulthandler's stack
    assert "native message before the abort" in str(err)  # what a grader shows the learner
    assert run(lambda r, w: r, 2, backend="gloo") == [0, 1]


def _group_held_by_a_late_callback(rank, world_size):
    """A callback on gloo's thread holds the last reference to a group until the rank has
    destroyed its groups (as a DDP comm hook's future can, rarely, when the task returns)."""
    import threading
    import time

    import torch
    import torch.distributed as dist

    group = dist.new_group(list(range(world_size)))
    if rank == 1:
        time.sleep(0.3)  # rank 0 registers its callback before its all-reduce completes
    fut = dist.all_reduce(torch.ones(1), group=group, async_op=True).get_future()

    def hold(f, group=group):
        if threading.current_thread() is threading.main_thread():
            return  # the all-reduce had completed: `then` ran it here, where nothing would end it
        while dist.is_initialized():  # until the rank's teardown destroyed every group
            pass

    fut.then(hold)
    del group
    return rank


def test_a_group_released_on_its_own_thread_does_not_abort_the_rank():
    """A group whose last reference goes on one of its own threads is destroyed there, joins
    that thread and aborts the rank ("Resource deadlock avoided"); the rank holds every group
    until it exits. Without the hold (_rank._hold_groups) 10 of 10 such calls aborted; the
    data-parallel chapter's PowerSGD run aborted in 3 of 160 calls under load."""
    for _ in range(3):
        assert run(_group_held_by_a_late_callback, 2, backend="gloo", timeout=60) == [0, 1]


class _FailsToUnpickle:
    def __reduce__(self):
        return (_raise_on_load, ())


def _raise_on_load():
    raise RuntimeError("this argument cannot be rebuilt on a rank")


def test_a_bad_argument_fails_that_call_only():
    run(lambda r, w: r, 2, backend="gloo")
    zygote = launch._zygote.proc.pid
    with pytest.raises(TypeError, match=r"argument 2 after world_size \(generator\)"):
        run(lambda r, w, a, g: r, 2, 1, (i for i in range(3)), backend="gloo")
    with pytest.raises(RankError, match="cannot be rebuilt on a rank"):
        run(lambda r, w, x: r, 2, _FailsToUnpickle(), backend="gloo", timeout=60)
    assert run(lambda r, w: r, 2, backend="gloo") == [0, 1]
    assert launch._zygote.proc.pid == zygote  # the warm zygote survived both


def test_nothing_is_left_after_the_caller_is_killed(request):
    """SIGKILL the caller while its ranks run: ranks, zygote and socket folder go away; a folder
    left by an earlier killed caller is removed when the next caller starts."""
    tmp = tempfile.mkdtemp(prefix="mpk", dir="/tmp")  # short: a Unix socket path is limited
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = os.path.join(tmp, f"minipar-{pool.host_token()}-{dead.pid}-stale")
    neighbour = os.path.join(tmp, f"minipar-0000beef-{dead.pid}-live")  # another container's
    for folder in (stale, neighbour):
        os.makedirs(folder)
        open(os.path.join(folder, "s"), "w").close()
    script = textwrap.dedent("""
        import os, time
        from minipar.runtime import launch
        def sleeper(rank, world_size):
            print(os.getpid(), flush=True)
            time.sleep(600)
        launch.run(lambda r, w: None, 1, backend="gloo")
        print("zygote", launch._zygote.proc.pid, launch._zygote.folder, flush=True)
        launch.run(sleeper, 2, backend="gloo", timeout=600)
    """)
    p = subprocess.Popen(
        [sys.executable, "-u", "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, TMPDIR=tmp),
    )
    try:
        _, zpid, folder = p.stdout.readline().split()
        ranks = [int(p.stdout.readline().split()[-1]) for _ in range(2)]
        assert not os.path.exists(stale)  # cleaned when this caller started
        assert os.path.exists(neighbour)  # another PID namespace's pid: never touched
        shutil.rmtree(neighbour)
        assert os.path.isdir(folder)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert _wait_gone([int(zpid)] + ranks) == []
    deadline = time.monotonic() + 10
    while os.path.exists(folder) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [n for n in os.listdir(tmp) if n.startswith("minipar-")] == []  # (torch's caches stay)


def test_a_killed_zygote_is_replaced_and_takes_its_ranks_along():
    run(lambda r, w: r, 1, backend="gloo")
    zygote = launch._zygote.proc
    os.kill(zygote.pid, signal.SIGKILL)
    zygote.wait()
    assert run(lambda r, w: r, 2, backend="gloo") == [0, 1]  # a new zygote, started at once
    assert launch._zygote.proc.pid != zygote.pid


def test_an_interrupt_stops_the_ranks_of_that_call_only():
    """A notebook interrupt (SIGINT in the caller) while ranks run: their processes go, the
    zygote stays, and the next call works."""
    import threading

    def sleeper(rank, world_size):
        import os
        import time

        print(os.getpid(), flush=True)
        time.sleep(600)

    run(lambda r, w: r, 1, backend="gloo")
    zygote = launch._zygote.proc.pid
    pids = []
    stop = threading.Event()

    def interrupt_once_both_run():
        while len(pids) < 2 and not stop.wait(0.1):
            pass
        if not stop.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Thread(target=interrupt_once_both_run)
    timer.start()
    real_print = launch._print_prefixed
    try:
        launch._print_prefixed = lambda r, text: pids.append(int(text.split()[0]))
        with pytest.raises(KeyboardInterrupt):
            run(sleeper, 2, backend="gloo", timeout=600)
    finally:
        launch._print_prefixed = real_print
        stop.set()
        timer.join()
    assert len(pids) == 2 and _wait_gone(pids) == []
    assert launch._zygote.proc.pid == zygote
    assert run(lambda r, w: r, 2, backend="gloo") == [0, 1]
