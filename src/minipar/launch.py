"""Start ``world_size`` ranks on this machine and run one function on each.

``run(fn, world_size, *args)`` is the one way notebooks, exercises, benchmarks and tests start
ranks. ``fn(rank, world_size, *args)`` runs on every rank inside an initialised default process
group and ``run`` returns the per-rank return values as a list in rank order.

How it works, and why:

* ``fn`` is serialised **by value** with cloudpickle, so functions and closures defined in a
  notebook cell run on the ranks (the ``spawn`` start method can only import functions that live
  in a module, and a notebook's ``__main__`` is not one).
* Ranks are **kept warm** in a pool of worker processes that have already imported torch. The
  first call pays the interpreter start and the torch import (seconds); a repeat call only
  rendezvouses (a fraction of a second). Each call gets a fresh process group and destroys it.
* The rendezvous is a ``TCPStore`` served by the caller on 127.0.0.1 with a free port; gloo and
  NCCL are told to use the loopback interface, so nothing listens beyond this machine.
* Every rank's ``print`` is sent back and printed by the caller prefixed ``[rank r]``.
* Failure: if a rank raises, the call raises :class:`RankError` at once with that rank's
  traceback, and every worker of the call is killed (the others may be blocked in a collective).
  If the call does not finish within ``timeout`` seconds (a hung collective), it raises
  :class:`TimeoutError` and kills the workers. Killed workers are replaced on the next call.
  Workers exit by themselves when the caller dies, so nothing outlives the caller.

The same worker functions run under ``torchrun``; see :mod:`minipar.run`.
"""
from __future__ import annotations

import atexit
import faulthandler
import multiprocessing.connection as mpc
import itertools
import linecache
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass

import cloudpickle

MAX_WORLD_SIZE = 64
DEFAULT_TIMEOUT = 300.0
_BACKENDS = ("auto", "gloo", "nccl")


class RankError(RuntimeError):
    """A rank raised. ``rank`` is the first rank that failed, ``remote_traceback`` its traceback."""

    def __init__(self, rank: int, summary: str, remote_traceback: str):
        self.rank = rank
        self.summary = summary
        self.remote_traceback = remote_traceback
        super().__init__(f"rank {rank} raised {summary}\n\n--- traceback of rank {rank} ---\n"
                         f"{remote_traceback}")


# ----------------------------------------------------------------------------- backend choice
_announced: set[tuple[str, int]] = set()


def choose_backend(backend: str, world_size: int) -> str:
    """Resolve ``"auto"`` to NCCL (one GPU per rank) or gloo (CPU); check explicit choices."""
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if backend == "nccl" and gpus < world_size:
        raise ValueError(f"backend 'nccl' needs one GPU per rank: world_size ({world_size}) "
                         f"> GPUs visible ({gpus}); use backend='gloo' or fewer ranks")
    if backend != "auto":
        return backend
    chosen = "nccl" if gpus >= world_size else "gloo"
    if (chosen, world_size) not in _announced:
        _announced.add((chosen, world_size))
        why = (f"{gpus} GPUs >= {world_size} ranks, one GPU per rank" if chosen == "nccl"
               else f"{gpus} GPUs < {world_size} ranks, so ranks run on the CPU")
        print(f"minipar.launch: backend={chosen} ({why})")  # stdout: part of a notebook's record
    return chosen


def _check_world_size(world_size) -> None:
    if not isinstance(world_size, int) or isinstance(world_size, bool):
        raise ValueError(f"world_size must be an int, got {world_size!r}")
    if world_size < 1 or world_size > MAX_WORLD_SIZE:
        raise ValueError(f"world_size must be between 1 and {MAX_WORLD_SIZE}, got {world_size}")


# ----------------------------------------------------------------------------- worker side
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
            except (BrokenPipeError, OSError):
                pass

    def isatty(self) -> bool:
        return False


def _exit_when_orphaned(parent_pid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            os._exit(1)


def _worker_main(address: str, parent_pid: int) -> None:
    """Loop of one pooled worker: import torch once, then run tasks until told to stop.

    The worker dials back only once torch is imported, so a task's ``timeout`` never includes
    the import. It ignores SIGINT (a notebook interrupt is the caller's to handle: the caller
    kills the ranks of the interrupted call) and exits when the caller disappears.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.enable()  # a crash in C++ leaves a Python stack in the worker's log
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    import torch  # noqa: F401  (the point of the pool: pay this once)
    import torch.distributed as dist

    import minipar.device  # noqa: F401

    conn = mpc.Client(address, family="AF_UNIX",
                      authkey=bytes.fromhex(os.environ.pop("MINIPAR_AUTHKEY")))
    conn.send(os.getpid())
    lock = threading.Lock()
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            msg = None
        if msg is None:  # leave without running C++ destructors of torch's threads, which
            sys.stdout.flush()  # can abort ("Resource deadlock avoided") at interpreter exit
            os._exit(0)
        sys_path, payload = msg
        sys.path.extend(p for p in sys_path if p not in sys.path)  # so fn's module imports
        out = _RankStream(conn, lock)
        old = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = out
        try:
            _run_task(payload, dist, conn, lock, out)
        finally:
            sys.stdout, sys.stderr = old


def _run_task(payload: bytes, dist, conn, lock, out) -> None:
    """Run one task and send ("ok", result) or ("err", (summary, traceback, time)).

    The reply goes out only after the process group is destroyed, so a worker that replied is
    clean and can be reused. The time stamp, taken when the exception was caught, lets the
    caller tell the first failure from its echoes on other ranks (whose peers vanished).
    """
    import datetime

    import torch

    from minipar import device as _device

    try:
        task = cloudpickle.loads(payload)
        rank, world = task["rank"], task["world_size"]
        torch.set_num_threads(task["threads"])
        _device.set_backend(task["backend"], local_rank=rank)
        limit = datetime.timedelta(seconds=task["timeout"])
        # The default group's store prefix is named after a process-wide counter that a failed
        # init or teardown can leave behind; ranks whose counters differ wait for each other's
        # keys forever. Every task starts from zero.
        dist.distributed_c10d._world.group_count = 0
        store = dist.TCPStore("127.0.0.1", task["port"], world, is_master=False, timeout=limit)
        dist.init_process_group(task["backend"], store=store, rank=rank, world_size=world,
                                timeout=limit)
        result = task["fn"](rank, world, *task["args"])
        out.flush()
        reply = ("ok", cloudpickle.dumps(result))
    except BaseException as e:  # noqa: BLE001  (report everything, including SystemExit)
        out.flush()
        reply = ("err", (f"{type(e).__name__}: {e}", traceback.format_exc(), time.time()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        _device.set_backend(None)
    with lock:
        conn.send(reply)


# ----------------------------------------------------------------------------- caller side
@dataclass
class _Worker:
    proc: subprocess.Popen
    conn: mpc.Connection
    log: str  # the worker's own stdout/stderr (C++ messages, crashes), not its rank output

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""


_pool: list[_Worker] = []
_pool_lock = threading.Lock()
_listener: mpc.Listener | None = None
_serial = itertools.count()


def _get_listener() -> mpc.Listener:
    """A Unix-socket listener the workers dial back to (local to this machine by construction)."""
    global _listener
    if _listener is None:
        # A Unix socket path must stay under ~100 bytes: fall back to /tmp if TMPDIR is deep.
        base = None if len(tempfile.gettempdir()) < 64 or not os.path.isdir("/tmp") else "/tmp"
        path = os.path.join(tempfile.mkdtemp(prefix="minipar-", dir=base), "launcher.sock")
        _listener = mpc.Listener(path, family="AF_UNIX", authkey=secrets.token_bytes(16))
    return _listener


def _start_workers(n: int, deadline: float) -> list[_Worker]:
    """Start ``n`` interpreters running :func:`_worker_main` (a fresh ``python -m``, not
    ``multiprocessing.spawn``, so the caller's ``__main__`` is never re-imported)."""
    if n <= 0:
        return []
    listener = _get_listener()
    env = dict(os.environ, MINIPAR_AUTHKEY=listener._authkey.hex())  # noqa: SLF001
    # A worker's file descriptors 1 and 2 go to a log file, not to the caller's: a notebook
    # kernel forwards what its children write there into whatever cell runs at the time, and
    # torch's C++ teardown messages would land in unrelated cells. Rank output (print) is sent
    # back over the connection; the log is shown when a worker dies.
    logs = [os.path.join(os.path.dirname(listener.address), f"worker-{next(_serial)}.log")
            for _ in range(n)]
    procs = []
    for log in logs:
        with open(log, "wb") as f:
            procs.append(subprocess.Popen([sys.executable, "-m", "minipar.launch",
                                           listener.address, str(os.getpid())], env=env,
                                          stdin=subprocess.DEVNULL, stdout=f, stderr=f))
    workers = []
    listener._listener._socket.settimeout(max(deadline - time.monotonic(), 1.0))  # noqa: SLF001
    try:
        for _ in procs:
            conn = listener.accept()
            pid = conn.recv()
            i = next(i for i, p in enumerate(procs) if p.pid == pid)
            workers.append(_Worker(procs[i], conn, logs[i]))
    except BaseException as e:  # a time-out, or an interrupt while they start: leave none behind
        for p in procs:
            p.kill()
        if not isinstance(e, Exception):
            raise
        raise TimeoutError(f"minipar workers did not start in time: {e}") from e
    return workers


def _take_workers(n: int, deadline: float) -> list[_Worker]:
    dead = [w for w in _pool if not w.alive()]
    if dead:
        _kill(dead)
    _pool.extend(_start_workers(n - len(_pool), deadline))
    return _pool[:n]


def _kill(workers: list[_Worker]) -> None:
    global _pool
    for w in workers:
        if w.alive():
            w.proc.kill()
    for w in workers:
        try:
            w.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        w.conn.close()
    _pool = [w for w in _pool if w not in workers]


def shutdown() -> None:
    """Stop every pooled worker (called automatically when the caller exits)."""
    with _pool_lock:
        for w in list(_pool):
            try:
                w.conn.send(None)
            except OSError:
                pass
        for w in list(_pool):
            try:
                w.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        _kill(list(_pool))


def _remove_socket_dir() -> None:
    if _listener is not None:
        folder = os.path.dirname(_listener.address)
        _listener.close()
        shutil.rmtree(folder, ignore_errors=True)


atexit.register(_remove_socket_dir)  # runs after shutdown (atexit is last in, first out)
atexit.register(shutdown)


def _free_store():
    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)


def run(fn, world_size: int, *args, backend: str = "auto", timeout: float = DEFAULT_TIMEOUT,
        threads: int | None = None) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` ranks; return results in rank order.

    backend: ``"auto"`` (NCCL with one GPU per rank if there are enough GPUs, else gloo on the
    CPU), ``"gloo"`` or ``"nccl"``. timeout: seconds for the whole call, and for each collective.
    threads: torch intra-op threads per rank (default: CPU cores // world_size, at least 1).
    """
    _check_world_size(world_size)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if not timeout or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    backend = choose_backend(backend, world_size)
    threads = threads or max(1, (os.cpu_count() or 1) // world_size)
    with _pool_lock:
        deadline = time.monotonic() + max(timeout, 300.0)  # start-up (torch import) has its own budget
        workers = _take_workers(world_size, deadline)
        store = _free_store()
        try:
            return _run_on(workers, store.port, fn, args, backend, timeout, threads)
        finally:
            del store


def _run_on(workers, port, fn, args, backend, timeout, threads) -> list:
    n = len(workers)
    try:
        for rank, w in enumerate(workers):
            task = dict(fn=fn, args=args, rank=rank, world_size=n, backend=backend, port=port,
                        timeout=timeout, threads=threads)
            w.conn.send((list(sys.path), cloudpickle.dumps(task)))
        return _collect(workers, fn, timeout)
    except (RankError, TimeoutError):
        raise  # _collect already stopped the workers that did not come back clean
    except BaseException:  # an interrupt, a failed send: the ranks' state is unknown
        _kill(workers)
        raise


def _collect(workers, fn, timeout) -> list:
    """Gather every rank's reply; print their output; raise the first failure."""
    n = len(workers)
    replies: dict[int, tuple] = {}
    # Ranks time out of a hung collective after ``timeout`` and report where; this deadline is
    # the backstop for a rank stuck outside a collective.
    deadline = time.monotonic() + timeout + 3.0
    by_conn = {w.conn: r for r, w in enumerate(workers)}
    while len(replies) < n:
        if any(kind == "err" for kind, _ in replies.values()):
            # A failure usually makes the others fail fast (their peer left): give them a
            # moment to reply, so that they stay reusable; stop the ones that do not.
            deadline = min(deadline, time.monotonic() + 3.0)
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for conn in mpc.wait([c for c, r in by_conn.items() if r not in replies],
                             timeout=min(left, 1.0)):
            r = by_conn[conn]
            try:
                kind, payload = conn.recv()
            except (EOFError, OSError):
                try:  # the connection closes a moment before the process is reaped
                    code = workers[r].proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    code = None
                replies[r] = ("err", (f"a process exit (exit code {code})",
                                      "the worker process died without a Python exception; "
                                      f"the end of its log ({workers[r].log}):\n"
                                      + workers[r].log_tail(), time.time()))
                continue
            if kind == "out":
                for line in payload.splitlines():
                    print(f"[rank {r}] {line}")
            else:
                replies[r] = (kind, payload)
    silent = [r for r in range(n) if r not in replies]
    dead = [r for r, (kind, p) in replies.items() if kind == "err" and
            p[0].startswith("a process exit")]
    if silent or dead:
        _kill([workers[r] for r in silent + dead])
    errors = {r: p for r, (kind, p) in replies.items() if kind == "err"}
    if errors:
        first = min(errors, key=lambda k: errors[k][2])
        summary, tb, _ = errors[first]
        raise RankError(first, summary, _with_source(tb, fn))
    if silent:
        raise TimeoutError(f"ranks {silent} did not finish within timeout={timeout:g} s "
                           "(a collective that not every rank called?); workers stopped")
    return [cloudpickle.loads(replies[r][1]) for r in range(n)]


_DYNAMIC = re.compile(r'  File "<dynamic-code>", line (\d+), in (\S+)\n')


def _with_source(tb: str, fn) -> str:
    """Put file names and source lines back into a rank's traceback.

    cloudpickle names the file of every by-value function ``<dynamic-code>``; the caller still
    knows where ``fn`` came from (a module, or a notebook cell that IPython keeps in linecache).
    """
    filename = getattr(getattr(fn, "__code__", None), "co_filename", None)
    if not filename:
        return tb

    def fix(m):
        line = linecache.getline(filename, int(m.group(1))).strip()
        text = f'  File "{filename}", line {m.group(1)}, in {m.group(2)}\n'
        return text + (f"    {line}\n" if line else "")
    return _DYNAMIC.sub(fix, tb)


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for code that must pick one itself)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":  # a pooled worker: python -m minipar.launch ADDRESS PARENT_PID
    _worker_main(sys.argv[1], int(sys.argv[2]))
