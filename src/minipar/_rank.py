"""The rank side of :mod:`minipar.launch`: a warm zygote that forks one fresh rank per call.

The caller starts this file **by path** (``python _rank.py ADDRESS CALLER_PID FOLDER``), so the
zygote imports the standard library, cloudpickle and torch, and not one minipar or user module:
nothing a learner edits can be stale here. It never touches ``torch.cuda`` (a process that has
initialised CUDA cannot fork usable children). Then it waits for the caller's requests:

* ``("fork", call, world_size, state, task)``: fork ``world_size`` children, one per rank, and
  answer ``("forked", call, pids)``. Each child (:func:`rank_main`) takes the caller's
  environment, working directory, ``sys.path`` and notebook-cell sources from ``state``, dials
  the caller back, unpickles ``task`` (the function and its arguments), runs it in a fresh
  process group, replies, and leaves. The zygote never unpickles a task, so a bad argument can
  only break its own call.
* ``None``: leave. The zygote also leaves, killing its children and removing the socket folder,
  when the caller disappears (its connection closes, or it stops being our parent).

Every child's exit is reported as ``("exit", pid, code)`` (a negative code is a signal), so the
caller can name how a rank died. A child writes its file descriptors 1 and 2 (C++ messages,
``faulthandler`` stacks) to ``FOLDER/rank-<r>.log``; its Python ``print`` goes to the caller.
"""
import sys

if __name__ == "__main__":
    del sys.path[0]  # this file's folder (src/minipar) holds trace.py, which shadows the stdlib

import faulthandler  # noqa: E402
import multiprocessing.connection as mpc  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

POLL_S = 0.2  # how often the zygote reaps children and checks that the caller is alive
# torch modules that take seconds to import and that ranks often need (minipar.trace enters a
# dispatch mode, which imports dynamo): imported when the zygote is idle with no rank alive, so
# the first call does not wait for them, a rank's exit is still reported at once, and later
# ranks inherit them. torch only: nothing a learner edits.
WARM_UP = ["torch._dynamo", "torch.distributed.pipelining"]


# ----------------------------------------------------------------------------- the zygote
def zygote_main(address: str, caller_pid: int, folder: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is the caller's to handle
    authkey = bytes.fromhex(os.environ.pop("MINIPAR_AUTHKEY"))
    import cloudpickle  # noqa: F401  (the point of the zygote: every rank inherits these)
    import torch  # noqa: F401
    import torch.distributed  # noqa: F401

    conn = mpc.Client(address, family="AF_UNIX", authkey=authkey)
    conn.send(("ready", os.getpid()))
    children: dict[int, int] = {}  # pid -> rank
    while True:
        if os.getppid() != caller_pid:
            _leave(children, folder)
        try:
            msg = conn.recv() if conn.poll(POLL_S) else "idle"
        except (EOFError, OSError):  # the caller is gone
            _leave(children, folder)
        if msg is None:  # a clean shutdown: the caller removes the folder itself
            _leave(children, None)
        if msg == "idle" and WARM_UP and not children:
            try:
                __import__(WARM_UP.pop(0))
            except Exception:  # noqa: BLE001  (an optional speed-up; ranks import it anyway)
                pass
        elif msg != "idle":
            _, call, world, state, task = msg
            pids = []
            for rank in range(world):
                pid = os.fork()
                if pid == 0:
                    conn.close()
                    rank_main(rank, world, state, task, address, authkey, folder)
                children[pid] = rank
                pids.append(pid)
            conn.send(("forked", call, pids))
        _reap(children, conn)


def _reap(children: dict, conn) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        children.pop(pid, None)
        try:
            conn.send(("exit", pid, os.waitstatus_to_exitcode(status)))
        except OSError:
            return


def _leave(children: dict, folder) -> None:
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
    os._exit(0)


# ----------------------------------------------------------------------------- one rank
class _RankStream:
    """A text stream that forwards complete lines to the caller as ("out", text) messages."""

    def __init__(self, conn, lock):
        self._conn, self._lock, self._buf = conn, lock, ""

    def write(self, s: str) -> int:
        self._buf += s
        if "\n" in self._buf:
            head, self._buf = self._buf.rsplit("\n", 1)
            self._send(head + "\n")
        return len(s)

    def flush(self) -> None:
        if self._buf:
            text, self._buf = self._buf, ""
            self._send(text)

    def _send(self, text: str) -> None:
        with self._lock:
            try:
                self._conn.send(("out", text))
            except OSError:
                pass

    def isatty(self) -> bool:
        return False


def _die_with_parent(parent: int) -> None:
    """Leave when the zygote dies (Linux: at once, via prctl; elsewhere: within a second)."""
    try:
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL) == 0:  # PDEATHSIG
            if os.getppid() != parent:  # it died before prctl took effect
                os._exit(1)
            return
    except (OSError, AttributeError):
        pass

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def _become_fresh(state: dict) -> None:
    """Take the caller's environment, working directory, ``sys.path`` and cell sources."""
    import linecache

    os.environ.clear()
    os.environ.update(state["env"])
    os.environ.setdefault("GLOO_SOCKET_IFNAME", state["loopback"])
    os.environ.setdefault("NCCL_SOCKET_IFNAME", state["loopback"])
    os.chdir(state["cwd"])
    sys.path[:] = state["sys_path"]
    linecache.cache.update(state["lines"])  # notebook cells: not files, but tracebacks need them
    for name in ("random", "numpy.random"):  # forks share a seed; a fresh process would not
        if name in sys.modules:
            sys.modules[name].seed()


def rank_main(rank, world, state, task, address, authkey, folder) -> None:
    """One rank, in a child forked for this call only; never returns."""
    log = os.open(os.path.join(folder, f"rank-{rank}.log"),
                  os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    # a crash in C++ leaves this thread's Python stack in the log
    faulthandler.enable(file=sys.__stderr__, all_threads=False)
    _die_with_parent(os.getppid())
    conn = mpc.Client(address, family="AF_UNIX", authkey=authkey)
    lock = threading.Lock()
    conn.send(("hello", state["call"], rank, os.getpid()))
    out = _RankStream(conn, lock)
    sys.stdout = sys.stderr = out
    reply = _run(rank, world, state, task)
    out.flush()
    with lock:
        try:
            conn.send(reply)
        except OSError:
            pass
    os._exit(0)  # no interpreter teardown: torch's C++ threads can abort in it


def _run(rank, world, state, task) -> tuple:
    """Run the task; ``("ok", pickled result)`` or ``("err", (summary, traceback, time))``.

    The time stamp, taken when the exception was caught, lets the caller tell the first
    failure from its echoes on other ranks (whose peers vanished).
    """
    import datetime
    import traceback

    import cloudpickle
    import torch.distributed as dist

    try:
        _become_fresh(state)
        import torch

        torch.set_num_threads(state["threads"])
        try:
            from minipar import device  # imported afresh, from the caller's sys.path
        except ImportError as e:
            raise ImportError(f"minipar is not importable on the ranks from the caller's "
                              f"sys.path {sys.path}: {e}") from e

        device.set_backend(state["backend"], local_rank=rank)
        fn, args = cloudpickle.loads(task)
        limit = datetime.timedelta(seconds=state["timeout"])
        store = dist.TCPStore("127.0.0.1", state["port"], world, is_master=False, timeout=limit)
        dist.init_process_group(state["backend"], store=store, rank=rank, world_size=world,
                                timeout=limit)
        result = fn(rank, world, *args)
        reply = ("ok", cloudpickle.dumps(result))
    except BaseException as e:  # noqa: BLE001  (report everything, including SystemExit)
        reply = ("err", (f"{type(e).__name__}: {e}", traceback.format_exc(), time.time()))
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001  (the reply matters more than a clean teardown)
        pass
    return reply


if __name__ == "__main__":
    zygote_main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
