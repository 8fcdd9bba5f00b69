"""Start ``world_size`` ranks on this machine and run one function on each.

``run(fn, world_size, *args)`` is the one way notebooks, exercises, benchmarks and tests start
ranks: ``fn(rank, world_size, *args)`` runs on every rank inside an initialised default process
group, and ``run`` returns the per-rank return values in rank order.

1. ``fn`` and ``args`` are pickled **by value** (cloudpickle) in the caller, so a function
   defined in a notebook cell runs on the ranks (``multiprocessing``'s spawn can only import
   functions from modules), and an argument that cannot be pickled fails before anything starts.
2. A warm **zygote**, started on the first call, has imported torch (seconds, paid once; it never
   touches CUDA) and forks **one fresh process per rank** for each call, so torch's default
   dtype, RNG, environment and modules of the previous call are gone. A rank takes the caller's
   *current* environment, working directory and ``sys.path`` and imports the caller's modules
   afresh (an edited and reloaded module runs its new code); the zygote imports no minipar or
   user module, so none can be stale.
3. Ranks meet at a ``FileStore`` in the zygote's socket folder (mode 0700: only this user) and
   talk over the loopback interface, so nothing listens beyond this machine; every rank's
   ``print`` comes back prefixed ``[rank r]``. (A ``TCPStore`` the caller served listened on
   every interface, ``::``, whatever host it was given, and made about one call in ten wait
   5.0 s: torch names each connection's peer, ``::ffff:127.0.0.1``, which ``/etc/hosts`` does
   not list, so the name is asked of DNS, and a lost answer costs glibc's 5 s timeout. 40
   small calls took 23.6 s that way and 3.9 s at the file, for the same 4.3-4.7 CPU-s.)
4. A rank that raises makes ``run`` raise :class:`RankError` with its traceback (true file and
   line of every frame, notebook cells included); one that dies (a crash, ``abort``), with its
   exit status and the end of its stderr; ranks still running are killed. A call that does not
   finish within ``timeout`` seconds raises :class:`TimeoutError`.

Settings torch reads once at import (``OMP_NUM_THREADS``) keep the zygote's values; the thread
count is set per call. The machinery lives in :mod:`minipar.runtime.pool` (caller side) and
:mod:`minipar.runtime._rank` (zygote and rank side); :mod:`minipar.runtime.run` runs the same
worker functions under ``torchrun``.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import socket
import threading
import time

import cloudpickle

from minipar.runtime import pool
from minipar.runtime.device import gpu_count, resolve_backend

MAX_WORLD_SIZE = 64
DEFAULT_TIMEOUT = 300.0
# The first call imports torch in the zygote: no fixed budget (minutes on a loaded machine);
# it fails when the zygote made no CPU progress for this long (pool._Progress), or exited.
START_STALL_S = 60.0


class RankError(RuntimeError):
    """A rank raised or died: ``rank``, the first rank that failed; ``summary``, ``"ValueError:
    ..."`` or how it died; ``remote_traceback``, its Python traceback; ``stderr_tail``, the last
    lines its process wrote to its file descriptor 2 (C++ messages, a ``faulthandler`` stack)."""

    def __init__(self, rank, summary: str, remote_traceback: str, stderr_tail: str = ""):
        self.rank, self.summary = rank, summary
        self.remote_traceback, self.stderr_tail = remote_traceback, stderr_tail
        said = summary if summary.startswith("died") else f"raised {summary}"
        text = f"rank {rank} {said}"
        if remote_traceback:
            text += f"\n\n--- traceback of rank {rank} ---\n{remote_traceback}"
        if stderr_tail.strip():
            text += f"\n--- end of rank {rank}'s stderr ---\n{stderr_tail}"
        super().__init__(text)


class StartError(RankError):
    """The ranks could not start (no rank ran): ``stderr_tail`` is the starter's own error
    output and ``cause`` the likely reason."""

    def __init__(self, message: str, stderr_tail: str, cause: str):
        self.cause = cause
        RuntimeError.__init__(
            self, f"{message}\nlikely cause: {cause}\n--- end of its stderr ---\n{stderr_tail}"
        )
        self.rank, self.summary, self.remote_traceback = None, message, ""
        self.stderr_tail = stderr_tail


# ----------------------------------------------------------------------------- the core idea
_lock = threading.Lock()
_zygote: pool.Zygote | None = None
_ranks_wall_s = 0.0  # wall time this process has spent in run() (waiting on its ranks)


def ranks_wall_seconds() -> float:
    """Wall seconds this process has spent in :func:`run` so far: time that is the ranks'
    (their own limits apply), which a limit on this process's waiting leaves out."""
    return _ranks_wall_s


def run(
    fn,
    world_size: int,
    *args,
    backend: str = "auto",
    timeout: float = DEFAULT_TIMEOUT,
    threads: int | None = None,
    on_start=None,
) -> list:
    """Run ``fn(rank, world_size, *args)`` on ``world_size`` ranks; return results in rank order.

    backend: ``"auto"`` (NCCL with one GPU per rank if there are enough GPUs, else gloo on the
    CPU), ``"gloo"`` or ``"nccl"``. timeout: seconds for the whole call, and for each collective.
    threads: torch intra-op threads per rank (default: usable CPUs // world_size, at least 1).
    on_start: called as ``on_start(pids, logs)`` once the ranks exist (process ids and the paths
    of their stderr logs, in rank order), e.g. by a grader that watches their progress
    (:mod:`minipar.grading.limits`); it must return at once.
    """
    global _ranks_wall_s
    t0 = time.monotonic()
    try:
        return _run(fn, world_size, args, backend, timeout, threads, on_start)
    finally:
        _ranks_wall_s += time.monotonic() - t0


def _run(fn, world_size: int, args, backend: str, timeout: float, threads, on_start) -> list:
    _check(fn, world_size, timeout, threads)
    backend = choose_backend(backend, world_size)
    threads = threads or max(1, pool.usable_cpus() // world_size)
    task, cell_sources = pool.pack(fn, args)  # a bad argument fails here, alone
    with _lock:
        zygote = _warm_zygote()
        state = pool.caller_state(backend, zygote.folder, timeout, threads, cell_sources)
        deadline = time.monotonic() + max(timeout, 60.0)
        try:
            pids = zygote.fork(world_size, state, task)  # one fresh process per rank
            if on_start is not None:
                on_start(
                    list(pids),
                    [os.path.join(zygote.folder, f"rank-{r}.log") for r in range(world_size)],
                )
            ranks = pool.Ranks(zygote, pids, deadline)
        except pool.StartFailed as e:
            raise StartError(str(e), e.log, e.cause) from None
        try:
            replies = ranks.collect(timeout, on_output=_print_prefixed)
        finally:
            ranks.close()  # kills ranks that did not reply
            with contextlib.suppress(OSError):  # the last rank to close it removes it too
                os.remove(state["store"])
    failed = {r: p for r, (kind, p) in replies.items() if kind != "ok"}
    died = {r: p for r, (kind, p) in replies.items() if kind == "died"}
    if failed:  # a rank that died is the cause; else the earliest error that is not an echo
        culprits = died or failed
        first = min(culprits, key=lambda r: (_is_echo(culprits[r][0]), culprits[r][2]))
        summary, tb, _ = failed[first]
        err = RankError(first, summary, tb, pool.tail(ranks.log(first)))
        err.other_failures = {r: p[0] for r, p in sorted(failed.items()) if r != first}
        raise err
    silent = [r for r in range(world_size) if r not in replies]
    if silent:
        raise TimeoutError(
            f"ranks {silent} did not finish within timeout={timeout:g} s "
            "(a collective that not every rank called?); ranks stopped"
        )
    return [cloudpickle.loads(replies[r][1]) for r in range(world_size)]


# ----------------------------------------------------------------------------- helpers
_ECHOES = ("Connection closed by peer", "Connection reset by peer", "remote worker crashing")


def _is_echo(summary: str) -> bool:
    """A peer's error that only reports another rank leaving (gloo's "Connection closed by
    peer" after that rank timed out or raised): never the cause when a real error exists."""
    return any(e in summary for e in _ECHOES)


def _warm_zygote() -> pool.Zygote:
    """The running zygote, or a new one (first call, or the old one died or was edited)."""
    global _zygote
    if _zygote is not None and _zygote.owner != os.getpid():
        _zygote = None  # this process is a fork of the one that started it: leave it alone
    if _zygote is not None and not _zygote.alive():
        _zygote.close()
        _zygote = None
    if _zygote is None:
        try:
            _zygote = pool.Zygote(START_STALL_S)
        except pool.StartFailed as e:
            raise StartError(str(e), e.log, e.cause) from None
    return _zygote


def _print_prefixed(rank: int, text: str) -> None:
    for line in text.splitlines():
        print(f"[rank {rank}] {line}")


def _check(fn, world_size, timeout, threads=None) -> None:
    if not isinstance(world_size, int) or isinstance(world_size, bool):
        raise ValueError(f"world_size must be an int, got {world_size!r}")
    if world_size < 1 or world_size > MAX_WORLD_SIZE:
        raise ValueError(f"world_size must be between 1 and {MAX_WORLD_SIZE}, got {world_size}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
    if threads is not None and (
        isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
    ):
        raise ValueError(
            f"threads must be an int >= 1 (or None for usable CPUs // world_size), got {threads!r}"
        )


def zygote() -> pool.Zygote | None:
    """This process's running zygote (None before the first call and after :func:`shutdown`):
    a caller that stops only a zygote it started compares it before and after."""
    return _zygote if _zygote is not None and _zygote.owner == os.getpid() else None


def shutdown() -> None:
    """Stop the zygote (and any rank) and remove the socket folder; the next call starts anew.
    Called automatically when the caller exits."""
    global _zygote
    with _lock:
        if _zygote is not None and _zygote.owner == os.getpid():
            _zygote.close()
            _zygote = None


atexit.register(shutdown)

# ----------------------------------------------------------------------------- backend choice
_announced: set[tuple[str, int]] = set()


def choose_backend(backend: str, world_size: int) -> str:
    """Resolve ``"auto"`` to NCCL (one GPU per rank) or gloo (CPU), check explicit choices, and
    say once per (backend, ranks) why "auto" chose what it did."""
    chosen = resolve_backend(backend, world_size)
    if backend != "auto":
        return chosen
    gpus = gpu_count()
    if (chosen, world_size) not in _announced:
        _announced.add((chosen, world_size))
        why = (
            f"{gpus} GPUs >= {world_size} ranks, one GPU per rank"
            if chosen == "nccl"
            else f"{gpus} GPUs < {world_size} ranks, so ranks run on the CPU"
        )
        print(f"minipar.runtime.launch: backend={chosen} ({why})")  # stdout: a notebook's record
    return chosen


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (for code that must pick one itself)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


__all__ = [
    "run",
    "RankError",
    "StartError",
    "shutdown",
    "zygote",
    "choose_backend",
    "free_port",
    "DEFAULT_TIMEOUT",
    "MAX_WORLD_SIZE",
]
