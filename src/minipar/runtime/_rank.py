"""The rank side of :mod:`minipar.runtime.launch`: a warm zygote that forks one fresh rank per call.

The caller starts this file **by path** (``python _rank.py ADDRESS CALLER_PID FOLDER``), so the
zygote imports the standard library, cloudpickle and torch, not one minipar or user module
(nothing a learner edits can be stale here), and never touches ``torch.cuda`` (a process that
has initialised CUDA cannot fork usable children). Then it serves the caller's requests:

* ``("fork", call, world_size, state, task)``: start one child per rank (a spare, see
  :class:`_Children`, or a fresh fork) and answer ``("forked", call, pids)``. Each child
  (:func:`rank_main`) takes the caller's environment, working directory, ``sys.path`` and cell
  sources from ``state``, dials the caller back, unpickles ``task`` (never the zygote: a bad
  argument only breaks its own call), runs it in its own process group, replies and leaves.
* ``None``: leave. The zygote also leaves, killing its children and removing the socket
  folder, when the caller disappears and on SIGTERM or SIGHUP; in its own session, a kernel
  restart (which kills the kernel's process group) does not kill it before it has cleaned up.

When a rank ends, or the zygote leaves, the rank's whole process group is killed: no process a
rank started outlives its call. Every child's exit is reported as ``("exit", pid, code)`` (a
negative code is a signal). A child writes its file descriptors 1 and 2 (C++ messages,
``faulthandler`` stacks) to ``FOLDER/rank-<r>.log``; its Python ``print`` goes to the caller.
"""

import sys

if __name__ == "__main__":
    # run as a script, its folder (src/minipar) would come first on sys.path and its modules
    # (run.py, launch.py, ...) would shadow top-level names: resolve from the caller's sys.path
    del sys.path[0]

import contextlib
import ctypes
import datetime
import faulthandler
import gc
import linecache
import multiprocessing.connection as mpc
import os
import pickle
import shutil
import signal
import threading
import time
import traceback
import warnings

import cloudpickle

POLL_S = 0.2  # how often the zygote reaps children and checks that the caller is alive
# torch modules (nothing a learner edits) that take seconds to import and that ranks often need
# (the tracer's dispatch mode imports dynamo), so that ranks inherit them: imported when the zygote
# is idle with no rank alive (a rank's exit is still reported at once), or, at the latest, before
# the ranks of a second call are started, since each of them would import them again. Back-to-back
# calls (a grader's world sizes, a test file) leave the zygote no idle moment: the 9 ranks of one
# collectives check then paid 2.2 CPU-s each, 0.1 with the imports inherited. The first call does
# not wait for them: a process that launches once (a CLI run) may not need them at all (1.4 CPU-s).
WARM_UP = ["torch._dynamo", "torch.distributed.pipelining"]


# ----------------------------------------------------------------------------- the zygote
def zygote_main(address: str, caller_pid: int, folder: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # an interrupt is the caller's to handle
    _on_term(lambda *_: _leave_early(folder))  # until the children exist
    # A forked child cannot use CUDA if its parent initialised the driver: any check made
    # here asks NVML instead, and a CUDA build skips the warm-up imports (they may probe it).
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch  # noqa: PLC0415 (lazy: torch)
    import torch.distributed  # noqa: PLC0415 (lazy: torch)

    if torch.version.cuda or torch.version.hip:
        WARM_UP.clear()

    if os.getppid() != caller_pid:  # the caller died while torch was being imported
        _leave_early(folder)
    try:
        conn = mpc.Client(address, family="AF_UNIX")  # the folder is 0700: only this user
        conn.send(("ready", os.getpid()))  # connects
    except OSError:  # the caller is gone (its socket closed): no folder left
        _leave_early(folder)
    z = _Children(conn, (address, folder))
    _on_term(lambda *_: z.leave(folder))
    while True:
        if os.getppid() != caller_pid:
            z.leave(folder)
        try:
            msg = conn.recv() if conn.poll(POLL_S) else "idle"
        except (EOFError, OSError):  # the caller is gone
            z.leave(folder)
        if msg is None:  # a clean shutdown: the caller removes the folder itself
            z.leave(None)
        if msg == "idle" and WARM_UP and not z.running:
            try:
                __import__(WARM_UP.pop(0))
            except Exception:  # an optional speed-up; ranks import it anyway
                pass
            z.drop_spares()  # forked before the import: without it
        elif msg != "idle":
            _, call, world, state, task = msg
            while WARM_UP and z.calls:  # a later call: once here, not in each of its ranks
                with contextlib.suppress(Exception):
                    __import__(WARM_UP.pop(0))
                z.drop_spares()
            conn.send(("forked", call, [z.start_rank(r, world, state, task) for r in range(world)]))
            z.spares_wanted = world
            z.calls += 1
        z.reap()
        z.add_spares()


def _on_term(handler) -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


def _leave_early(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    os._exit(0)


class _Children:
    """The zygote's children: ranks running a call, and spares forked ahead of the next call,
    waiting on a pipe for their task, so a call need not wait for ``fork()`` (tens of
    milliseconds for a process holding torch). A spare is exactly as fresh as a child forked on
    demand: the zygote's state does not change in between (spares forked before a warm-up
    import are dropped)."""

    def __init__(self, conn, where):
        self.conn, self.where = conn, where
        self.running: dict[int, int] = {}  # pid -> rank
        self.spares: list[tuple[int, int]] = []  # (pid, write end of its task pipe)
        self.spares_wanted = 0
        self.calls = 0  # fork requests served

    def start_rank(self, rank, world, state, task) -> int:
        while self.spares:
            pid, w = self.spares.pop(0)
            try:
                with os.fdopen(w, "wb") as f:
                    f.write(pickle.dumps((rank, world, state, task), pickle.HIGHEST_PROTOCOL))
            except OSError:  # the spare died: its exit is reported, try the next one
                continue
            self.running[pid] = rank
            return pid
        pid = self._fork(lambda: rank_main(rank, world, state, task, *self.where))
        self.running[pid] = rank
        return pid

    def add_spares(self) -> None:
        while len(self.spares) < self.spares_wanted:
            r, w = os.pipe()
            pid = self._fork(lambda: _spare_main(r, w, self.where))
            os.close(r)
            self.spares.append((pid, w))

    def _fork(self, body) -> int:
        gc.freeze()  # the child's garbage collector then never writes to (and so copies) the
        pid = os.fork()  # pages of the zygote's objects: torch's modules stay shared
        if pid == 0:
            _on_term(signal.SIG_DFL)  # a rank's SIGTERM must not clean up the zygote's folder
            self.conn.close()
            for _, w in self.spares:
                os.close(w)
            body()  # never returns
        return pid

    def drop_spares(self) -> None:
        for _pid, w in self.spares:
            os.close(w)  # the spare reads an empty task and leaves
        self.spares = []

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.running.pop(pid, None) is not None:
                _kill_group(pid, reaped=True)  # the rank's children (its group) go with it
            self.spares = [(p, w) for p, w in self.spares if p != pid]
            try:
                self.conn.send(("exit", pid, os.waitstatus_to_exitcode(status)))
            except OSError:
                return

    def leave(self, folder) -> None:
        for pid in list(self.running) + [p for p, _ in self.spares]:
            _kill_group(pid)
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
        os._exit(0)


def _kill_group(pid: int, reaped: bool = False) -> None:
    """SIGKILL a rank and every process of its group (a rank leads its own group). Once the
    rank is reaped its pid may be reused: only the group (whose id Linux never reuses while a
    member lives) is signalled."""
    for kill in (os.killpg,) if reaped else (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _spare_main(r: int, w: int, where) -> None:
    """A spare: wait for a task on the pipe, then become that rank (or leave on an empty one)."""
    os.close(w)
    _die_with_parent(os.getppid())
    with os.fdopen(r, "rb") as f:
        data = f.read()
    if not data:
        os._exit(0)
    rank, world, state, task = pickle.loads(data)
    rank_main(rank, world, state, task, *where)


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
    """Take the caller's environment, working directory, CPU affinity, ``sys.path`` and cell
    sources."""
    os.environ.clear()
    os.environ.update(state["env"])
    os.environ.setdefault("GLOO_SOCKET_IFNAME", state["loopback"])
    os.environ.setdefault("NCCL_SOCKET_IFNAME", state["loopback"])
    os.chdir(state["cwd"])
    if state["cpus"]:  # the caller's affinity now, not the zygote's when it started
        os.sched_setaffinity(0, state["cpus"])
    sys.path[:] = state["sys_path"]
    linecache.cache.update(state["lines"])  # notebook cells: not files, but tracebacks need them
    for name in ("random", "numpy.random"):  # forks share a seed; a fresh process would not
        if name in sys.modules:
            sys.modules[name].seed()


def _quiet_torch_deprecations() -> None:
    """Ignore the FutureWarning the pinned torch's modules give, once per rank, for a collective
    it renamed (``all_gather_into_tensor`` -> ``all_gather_single``): the same line from every
    rank of every call buries the output. Every other warning is kept."""
    warnings.filterwarnings(
        "ignore",
        category=FutureWarning,
        module=r"torch(\.|$)",
        message=r"`torch\.distributed\.[\w.]+` is deprecated",
    )


def rank_main(rank, world, state, task, address, folder) -> None:
    """One rank, in a child forked for this call only; never returns."""
    try:  # its own process group: the processes it starts are killed with it when it ends
        os.setpgid(0, 0)
    except OSError:
        pass
    log = os.open(
        os.path.join(folder, f"rank-{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600
    )
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    # a crash in C++ leaves the Python stacks in the log. Every thread's: a signal sent to the
    # process may be handled on a gloo thread with no Python frame. SIGUSR1 writes them and the
    # rank goes on (the grader's watch asks for them before it stops the ranks)
    faulthandler.enable(file=sys.__stderr__, all_threads=True)
    faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    _die_with_parent(os.getppid())
    conn = mpc.Client(address, family="AF_UNIX")
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
    """Run the task; ``("ok", pickled result)`` or ``("err", (summary, traceback, time))``: the
    time the exception was caught tells the caller the first failure from its echoes."""
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    store = None
    try:
        _become_fresh(state)
        _quiet_torch_deprecations()
        import torch  # noqa: PLC0415 (lazy: torch)

        torch.set_num_threads(state["threads"])
        try:
            from minipar.runtime import device  # noqa: PLC0415 (imported afresh in the rank, from the caller's sys.path: the zygote imports no minipar module)
        except ImportError as e:
            raise ImportError(
                f"minipar is not importable on the ranks from the caller's sys.path {sys.path}: {e}"
            ) from e

        device.set_backend(state["backend"], local_rank=rank)
        fn, args = cloudpickle.loads(task)
        limit = datetime.timedelta(seconds=state["timeout"])
        store = dist.FileStore(state["store"], world)
        store.set_timeout(limit)
        store = dist.PrefixStore(state["prefix"], store)  # this call's keys only
        # NCCL: bind the group to this rank's GPU (else its first barrier guesses the device
        # and warns); gloo takes no device
        bound = {"device_id": device.get_device()} if state["backend"] == "nccl" else {}
        dist.init_process_group(
            state["backend"], store=store, rank=rank, world_size=world, timeout=limit, **bound
        )
        result = fn(rank, world, *args)
        try:
            reply = ("ok", cloudpickle.dumps(result))
        except Exception as e:
            raise TypeError(
                f"rank {rank}'s return value (a {type(result).__name__}) cannot be "
                f"sent back to the caller: it must be picklable by cloudpickle "
                f"({type(e).__name__}: {e})"
            ) from None
    except BaseException as e:  # report everything, including SystemExit
        reply = ("err", (f"{type(e).__name__}: {e}", traceback.format_exc(), time.time()))
    _wait_for_peers(store, world, wait=reply[0] == "ok")
    try:
        if dist.is_initialized():
            _hold_groups(dist)
            dist.destroy_process_group()
    except Exception:  # the reply matters more than a clean teardown
        pass
    return reply


_HELD: list = []  # every process group of the rank, held until its os._exit


def _hold_groups(dist) -> None:
    """Keep a reference to every process group past ``destroy_process_group``, so that none is
    destroyed before the rank's ``os._exit``. A callback that still runs on one of gloo's
    threads when the task returns (a DDP communication hook's future: the data-parallel
    chapter's PowerSGD run) may otherwise drop the group's last reference there; the group's
    destructor then joins the thread it runs on and the rank aborts ("terminate called after
    throwing an instance of 'std::system_error' / Resource deadlock avoided"): 3 of 160 runs
    of that task under load."""
    groups = getattr(getattr(dist.distributed_c10d, "_world", None), "pg_map", None)  # private
    _HELD.extend(groups or [dist.group.WORLD])


def _wait_for_peers(store, world: int, wait: bool) -> None:
    """Leave only when every rank is done: a rank that closes its sockets while a slow peer
    is still connecting to it makes that peer's ``init_process_group`` fail ("connection
    closed by peer"). A failed rank counts itself done without waiting (its exit is what wakes
    peers blocked in a collective with it)."""
    if store is None:
        return
    try:
        if store.add("finished", 1) == world:
            store.set("all finished", "1")
        if wait:
            store.wait(["all finished"])
    except Exception:  # a peer died and never came (the store's timeout): leave anyway
        pass


if __name__ == "__main__":
    zygote_main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
