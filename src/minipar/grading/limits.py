"""Time limits for graded code: one mechanism shared by every checker, measured in progress.

A fixed wall-clock budget cannot tell a slow machine from a hang: on 2 cores at load average 23,
a collectives check whose ranks needed 1.5 CPU-seconds each took 25 s of wall time per launch
(the 20 s budget it used to have failed the reference solution). So the grader never counts wall
time. It watches what the learner's processes do:

* **a deadlock** is a state, not a duration: every rank is blocked (in a collective, a ``recv``,
  a ``wait``) and so uses no CPU. :func:`run_ranks` samples each rank's CPU time and scheduler
  state (``/proc/<pid>/stat``; without ``/proc``, on macOS, ``ps``) every :data:`SAMPLE_S`
  seconds; when for :data:`STALL_S` seconds no rank gained more than :data:`IDLE_CPU_SHARE` of
  that time in CPU and their threads were runnable in at most :data:`BUSY_SHARE` of the samples
  (gloo's socket thread wakes up now and then), each rank writes its Python stacks to its log
  (``SIGUSR1``: ``faulthandler``), all are killed, and the reason names the line every rank was
  waiting on. A busy machine delays a working rank but leaves it runnable: never stalled.
* **an endless loop** does use CPU: it is stopped when one rank has used :data:`CPU_LIMIT`
  CPU-seconds in one call. CPU time hardly grows with the machine's load (the wall time does);
  the heaviest reference launch uses 1.5 CPU-seconds per rank, so the limit of 60 is a 40×
  margin (``tests/test_exercises.py`` measures it under load and asserts at least 10×).
* code that runs in the caller's process (a check that calls the candidate directly) gets
  :func:`cpu_time_limit`: :data:`TIME_LIMIT` CPU-seconds of this process's main thread (torch's
  intra-op threads do not count, so the limit means the same on 2 cores and on 64), and ten
  times that in wall time as a backstop for a wait that never ends. ``minipar grade`` runs every
  learner cell under it with :data:`CELL_LIMIT` CPU-seconds (a check inside sets its own).

``MINIPAR_GRADE_STALL_S``, ``MINIPAR_GRADE_CPU_LIMIT``, ``MINIPAR_CHECK_TIME_LIMIT`` and
``MINIPAR_GRADE_CELL_CPU_LIMIT`` override the numbers; ``MINIPAR_GRADE_STATS=PATH`` appends one
JSON line per call (world size, each rank's CPU-seconds, wall seconds, verdict).

**Memory.** Each kernel ``minipar grade`` starts, and every rank it launches, may hold
:data:`KERNEL_MEMORY_BYTES` (8 GiB) of private writable memory (``RLIMIT_DATA``): an allocation
past it fails at once as a ``MemoryError`` (torch: ``RuntimeError: ... can't allocate memory``)
in the learner's cell, which the report names, instead of swapping the machine or waking the
kernel's OOM killer. Graded on the CPU, eleven reference notebooks (every chapter; sampled every
0.2 s) peaked at 0.42 GiB of it (a kernel; ranks less) and 1.7 GiB of address space, so 8 GiB
is a 19× margin; CUDA's address-space reservations are not writable and do not count.
``MINIPAR_GRADE_KERNEL_MEMORY_GIB`` overrides it (``0``: no limit).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

from minipar.grading.errors import CheckTimeLimit, GradeFailure
from minipar.grading.reasons import _PACKAGE as _COURSE
from minipar.grading.reasons import HINT as _HINT
from minipar.grading.reasons import dump_frames, dump_learner_line, is_library, reason_for

SAMPLE_S = 0.5  # how often the ranks' CPU times are read
STALL_S = float(os.environ.get("MINIPAR_GRADE_STALL_S", "10"))
IDLE_CPU_SHARE = 0.02  # a blocked gloo rank uses ~0.5 % of a core (its socket threads)
BUSY_SHARE = 0.25  # ...and its socket thread is seen runnable in a few samples
CPU_LIMIT = float(os.environ.get("MINIPAR_GRADE_CPU_LIMIT", "60"))
TIME_LIMIT = float(os.environ.get("MINIPAR_CHECK_TIME_LIMIT", "60"))
CELL_LIMIT = float(os.environ.get("MINIPAR_GRADE_CELL_CPU_LIMIT", "120"))  # a graded cell
KERNEL_MEMORY_BYTES = int(float(os.environ.get("MINIPAR_GRADE_KERNEL_MEMORY_GIB", "8")) * 2**30)
DUMP_WAIT_S = 60.0  # for a stopped rank to be scheduled and write its stack
WALL_BACKSTOP = 3600.0  # the launcher's timeout under the watcher: never reached by design
_STATS_ENV = "MINIPAR_GRADE_STATS"


class RankFailure(GradeFailure):
    """A rank raised or died; ``error`` is the launcher's :class:`minipar.runtime.launch.RankError`."""

    def __init__(self, reason: str, error):
        super().__init__(reason)
        self.error = error
        self.rank = getattr(error, "rank", None)
        self.summary = getattr(error, "summary", "") or ""
        self.remote_traceback = getattr(error, "remote_traceback", "") or ""
        self.stderr_tail = getattr(error, "stderr_tail", "") or ""


class LimitExceeded(GradeFailure):
    """The ranks were stopped: ``kind`` is ``"deadlock"``, ``"endless loop"`` or ``"timeout"``
    (a system with neither ``/proc`` nor ``ps``); ``logs``: rank -> the end of its stderr."""

    def __init__(self, reason: str, kind: str, logs: dict | None = None):
        super().__init__(reason)
        self.kind, self.logs = kind, dict(logs or {})


# ----------------------------------------------------------------------------- /proc
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PROC = os.path.exists(f"/proc/{os.getpid()}/stat")
_PS_TIME = re.compile(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)")  # [[d-]h:]m:s[.cs]


def _stat(pid: int):
    """(state letter, CPU-seconds of all its threads, start time) or None if it is gone; from
    ``/proc`` where there is one, else from ``ps`` (:func:`_stat_ps`)."""
    if not _PROC:
        return _stat_ps(pid)
    f = _proc_fields(f"/proc/{pid}/stat")
    return None if f is None else (f[0], (int(f[11]) + int(f[12])) / _TICK, int(f[19]))


PS_WAIT_S = 5.0
"""How long one ``ps`` may take on an idle machine; :func:`busy_factor` stretches it."""
UNKNOWN = ("?", 0.0, None)
""":func:`_stat`'s answer when ``ps`` did not answer in time: alive, state and CPU unknown."""


def busy_factor() -> float:
    """Runnable processes per core (at least 1): a wait that an idle machine meets in ``t``
    seconds gets ``t`` times this, so a busy machine never turns a slow answer into a verdict."""
    try:
        return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    except OSError:
        return 1.0


def _stat_ps(pid: int):
    """:func:`_stat` from ``ps -o stat=,time=,lstart=`` (macOS; Linux prints whole seconds).
    macOS's ``U`` (uninterruptible wait) counts as Linux's ``D``."""
    try:
        out = subprocess.run(
            ["ps", "-o", "stat=,time=,lstart=", "-p", str(pid)],
            capture_output=True,
            text=True,
            timeout=PS_WAIT_S * busy_factor(),
        ).stdout.split(None, 2)
    except subprocess.TimeoutExpired:
        return UNKNOWN  # a slow ``ps`` on a busy machine: no sample, not "exited"
    except (OSError, subprocess.SubprocessError):
        return None
    m = _PS_TIME.fullmatch(out[1]) if len(out) == 3 else None
    if m is None:
        return None
    days, hours, minutes, seconds = m.groups()
    cpu = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes)) * 60 + float(seconds)
    return out[0][0].replace("U", "D"), cpu, out[2].strip()


def _proc_fields(path: str) -> list[str] | None:
    """The fields after the command name of a ``/proc`` stat file, or None if it is gone."""
    try:
        with open(path) as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _any_thread_running(pid: int) -> bool:
    """A thread of ``pid`` is runnable (``R``) or in uninterruptible I/O (``D``): it is making
    progress, or would if the CPU were free. Without ``/proc`` the process's state stands for
    its threads'."""
    if not _PROC:
        return False
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    return any((_proc_fields(f"/proc/{pid}/task/{t}/stat") or ["S"])[0] in "RD" for t in tids)


def can_watch() -> bool:
    """This system reports a process's state and CPU time (``/proc`` or ``ps``)."""
    return _stat(os.getpid()) is not None


# ----------------------------------------------------------------------------- the watcher
class Watcher:
    """Watches one call's ranks from a thread; stops them on a deadlock or an endless loop."""

    def __init__(self):
        self.stall_s, self.cpu_limit = STALL_S, CPU_LIMIT  # read now: tests change them
        self.pids: list[int] = []
        self.logs: list[str] = []
        self.cpu: dict[int, float] = {}  # rank -> CPU-seconds used, last sample
        self.kind: str | None = None  # set when it stopped the ranks
        self.culprits: list[int] = []  # the looping ranks (endless loop)
        self.stacks: dict[int, str] = {}  # rank -> its log after the dump
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, pids, logs) -> None:  # launch.run's on_start: returns at once
        self.pids, self.logs = list(pids), list(logs)
        self._thread = threading.Thread(target=self._watch, name="minipar-grade-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        with contextlib.suppress(Exception):  # the launcher's own timeout remains the backstop
            self._loop()

    def _loop(self) -> None:
        starts: dict[int, int] = {}
        window: list[tuple[float, dict[int, float], bool]] = []  # (time, cpu per rank, busy)
        while not self._stop.wait(SAMPLE_S):
            now, cpu, busy = time.monotonic(), {}, False
            for r, pid in enumerate(self.pids):
                st = _stat(pid)
                if st is UNKNOWN:
                    continue  # no sample this time; the rank is still watched
                if st is None or starts.setdefault(r, st[2]) != st[2] or st[0] in "ZX":
                    continue  # exited (or the pid was reused)
                cpu[r] = st[1]
                busy = busy or st[0] in "RD" or _any_thread_running(pid)
            if not cpu:
                continue  # all gone: the launcher reports
            self.cpu.update(cpu)
            if over := [r for r, c in cpu.items() if c > self.cpu_limit]:
                self._abort("endless loop", over)
                return
            window.append((now, cpu, busy))
            while window and now - window[0][0] > self.stall_s:
                window.pop(0)
            first_t, first_cpu, _ = window[0]
            busy_share = sum(b for _, _, b in window) / len(window)
            if now - first_t < self.stall_s - SAMPLE_S or busy_share > BUSY_SHARE:
                continue
            gained = max(cpu.get(r, 0.0) - first_cpu.get(r, cpu.get(r, 0.0)) for r in cpu)
            if gained <= IDLE_CPU_SHARE * (now - first_t):
                self._abort("deadlock", [])
                return

    def _abort(self, kind: str, culprits: list[int]) -> None:
        self.kind, self.culprits = kind, culprits
        for pid in self.pids:  # faulthandler writes every thread's stack to the log
            _signal(pid, signal.SIGUSR1)  # and the rank goes on: none dies (and so none is
        deadline = time.monotonic() + DUMP_WAIT_S  # killed by the launcher) before all dumped
        while time.monotonic() < deadline and not all(
            not _alive(pid) or _has_dump(path) for pid, path in zip(self.pids, self.logs)
        ):
            time.sleep(0.05)
        time.sleep(0.1)  # the last lines of a dump being written
        for pid in self.pids:
            _signal(pid, signal.SIGKILL)
        self.stacks = {r: _read(path)[-20000:] for r, path in enumerate(self.logs)}

    # ------------------------------------------------------------------------- the reason
    def reason(self, world_size: int) -> str:
        where = {r: waiting_at(self.stacks.get(r, "")) for r in range(world_size)}
        if self.kind == "endless loop":
            loops = ", ".join(
                f"rank {r} ({self.cpu.get(r, 0):.0f} CPU-s, {where[r] or 'outside your code'})"
                for r in self.culprits
            )
            others = _positions({r: w for r, w in where.items() if r not in self.culprits})
            return (
                f"stopped an endless loop on {world_size} ranks: {loops} kept computing past "
                f"the limit of {self.cpu_limit:g} CPU-seconds per rank (the reference needs "
                f"a few); is there a loop whose condition never becomes false?"
                + (f" The other ranks: {others}." if others else "")
            )
        return (
            f"deadlock on {world_size} ranks: for {self.stall_s:g} s no rank made progress "
            f"(all blocked, using no CPU): {_positions(where)} -- {_HINT}"
        )


def _read(path: str) -> str:
    """A rank's log as far as it is written ("" if it cannot be read)."""
    with contextlib.suppress(OSError):
        return Path(path).read_text(errors="replace")
    return ""


def _has_dump(path: str) -> bool:
    text = _read(path)
    return "most recent call first" in text and text.endswith("\n")


def _positions(where: dict) -> str:
    return "; ".join(
        f"rank {r} " + (f"waiting at {w}" if w else "had finished its work")
        for r, w in sorted(where.items())
    )


def _signal(pid: int, sig) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, sig)


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] not in "ZX"


def waiting_at(dump: str) -> str | None:
    """From a ``faulthandler`` stack: the learner's innermost frame, with its source line and
    the library function it called, e.g. ``line 9 of ring: dist.recv(buf, src=left) (in recv)``;
    None if the stack holds no learner frame (the rank had returned and waited for its peers)."""
    where = dump_learner_line(dump)
    if where is None:
        return None
    called = None  # the library function the learner's line called
    for f, _, func in dump_frames(dump):
        if not is_library(f):
            break
        if func not in ("wrapper", "<lambda>") and not f.startswith(_COURSE):  # a checker's
            called = func  # wrapper
    return where + (f" (in {called})" if called else "")


# ----------------------------------------------------------------------------- the entry point
def run_ranks(fn, world_size: int, *args, **kwargs) -> list:
    """``minipar.runtime.launch.run(fn, world_size, *args, backend="gloo")`` under the grader's
    limits: per-rank results in rank order, or a :class:`GradeFailure` with the learner's reason.
    ``kwargs`` go to ``run`` (``threads``, ``backend``); a ``timeout`` is ignored: the limit is
    the grader's business, the same for every chapter."""
    from minipar.runtime.launch import RankError, run  # noqa: PLC0415 (lazy: launcher)

    kwargs.pop("timeout", None)
    kwargs.setdefault("backend", "gloo")
    watcher = Watcher() if can_watch() else None
    t0 = time.monotonic()
    verdict = "ok"
    if watcher is not None:
        kwargs["on_start"] = watcher.start
    try:
        return run(fn, world_size, *args, timeout=WALL_BACKSTOP, **kwargs)
    except RankError as e:
        if watcher is not None:
            watcher.stop()
            if watcher.kind:
                verdict = watcher.kind
                raise LimitExceeded(watcher.reason(world_size), verdict, watcher.stacks) from None
        if "timed out" in (e.summary or "").lower():
            verdict = "deadlock"
            raise LimitExceeded(
                f"deadlock on {world_size} ranks: rank {e.rank} timed out "
                f"waiting in a collective or recv -- {_HINT}",
                "deadlock",
            ) from None
        verdict = "raised"
        raise RankFailure(reason_for(e), e) from None
    except TimeoutError as e:
        verdict = "timeout"
        raise LimitExceeded(
            f"{world_size} ranks never finished ({e}): an endless loop, or a wait that never ends?",
            "timeout",
        ) from None
    finally:
        if watcher is not None:
            watcher.stop()
        _record(world_size, watcher, time.monotonic() - t0, verdict)


def _record(world_size, watcher, wall, verdict) -> None:
    if not (path := os.environ.get(_STATS_ENV)):
        return
    cpu = [round(watcher.cpu.get(r, 0.0), 2) for r in range(world_size)] if watcher else []
    record = {"world_size": world_size, "cpu_s": cpu, "wall_s": round(wall, 2), "verdict": verdict}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


# ----------------------------------------------------------------------------- in this process
def _in_launcher(frame) -> bool:
    while frame is not None:
        if frame.f_globals.get("__name__") in ("minipar.runtime.launch", __name__):
            return True
        frame = frame.f_back
    return False


def _main_thread_clock():
    """The CPU clock of the main thread (Linux and most Unixes), or None where there is none."""
    try:
        return time.pthread_getcpuclockid(threading.main_thread().ident)
    except (AttributeError, OSError):
        return None


_limits: list = []  # the active in-process limits, innermost last


class _MainThreadLimit:
    """Counts the CPU time of the main thread only, from a watcher thread: the learner's
    Python runs there, while torch's intra-op threads run beside it. A process-wide clock
    (``ITIMER_PROF``) counted every one of those threads, so a matrix product on 16 threads
    used a 120-CPU-second budget in 8 s; the main thread's clock advances at most one second
    per second of progress, on any machine. Only the innermost active limit fires; an outer
    one fires once it is innermost again."""

    def __init__(self, seconds: float, clock):
        self.seconds, self.clock = seconds, clock
        self.start = time.clock_gettime(clock)
        self.active, self.retry_at = True, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="minipar-cpu-limit", daemon=True)

    def _watch(self) -> None:
        main = threading.main_thread().ident
        while not self._stop.wait(0.05):
            if (
                _limits
                and _limits[-1] is self
                and time.clock_gettime(self.clock) - self.start > self.seconds
                and time.monotonic() >= self.retry_at
            ):
                self.retry_at = time.monotonic() + 0.5  # the handler decides; retry later
                signal.pthread_kill(main, signal.SIGPROF)

    def __enter__(self):
        _limits.append(self)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.active = False
        self._stop.set()
        self._thread.join()
        _limits.remove(self)


def _cpu_exceeded(seconds: float) -> CheckTimeLimit:
    return CheckTimeLimit(
        f"stopped after {seconds:g} CPU-seconds: your code was still computing (an endless loop?)"
    )


def _on_limit(seconds: float, thread_limit: _MainThreadLimit | None, start: float):
    """The SIGPROF/SIGALRM handler of one :func:`cpu_time_limit` begun at ``start``."""
    from minipar.runtime.launch import ranks_wall_seconds  # noqa: PLC0415 (lazy: launcher)

    wall, ranks_before = 10 * seconds, ranks_wall_seconds()

    def fire(signum, frame):
        if signum == signal.SIGPROF and thread_limit is not None:
            mine = thread_limit.active and _limits and _limits[-1] is thread_limit
            if not mine or _in_launcher(frame):  # late, or an outer limit's: not ours now;
                return  # or in the launcher: the watcher retries in 0.5 s
            raise _cpu_exceeded(seconds)
        timer = signal.ITIMER_PROF if signum == signal.SIGPROF else signal.ITIMER_REAL
        if _in_launcher(frame):
            signal.setitimer(timer, 0.5)  # retry once the launcher returns
            return
        if signum == signal.SIGPROF:
            raise _cpu_exceeded(seconds)
        here = time.monotonic() - start - (ranks_wall_seconds() - ranks_before)  # not the ranks'
        if here < wall:
            signal.setitimer(signal.ITIMER_REAL, wall - here)
            return
        raise CheckTimeLimit(
            f"stopped after {wall:g} s of waiting: your code was still "
            "running (a wait that never ends?)"
        )

    return fire


@contextlib.contextmanager
def cpu_time_limit(seconds: float | None):
    """Raise :class:`CheckTimeLimit` in this (main) thread once it has used ``seconds``
    CPU-seconds outside :func:`run_ranks`/:mod:`minipar.runtime.launch` (whose ranks have
    their own limits and must not be interrupted half-way), or after ten times that in wall
    time outside :func:`minipar.runtime.launch.run` (a wait that never ends). CPU time is the
    main thread's (:class:`_MainThreadLimit`; the whole process's through ``ITIMER_PROF`` where
    threads have no clock of their own). Nested, the inner limit applies inside and the outer
    one goes on after it. A no-op off the main thread, without ``setitimer``, or for
    ``None``/0."""
    on_main = threading.current_thread() is threading.main_thread()
    if not seconds or not on_main or not hasattr(signal, "setitimer"):
        yield
        return
    start, clock = time.monotonic(), _main_thread_clock()
    thread_limit = _MainThreadLimit(seconds, clock) if clock is not None else None
    fire = _on_limit(seconds, thread_limit, start)
    old = {s: signal.signal(s, fire) for s in (signal.SIGPROF, signal.SIGALRM)}
    outer_prof = 0.0
    if thread_limit is None:
        outer_prof = signal.setitimer(signal.ITIMER_PROF, seconds)[0]  # an enclosing limit's
    outer_real = signal.setitimer(signal.ITIMER_REAL, 10 * seconds)[0]  # time left, if any
    cpu0 = time.process_time()
    try:
        with thread_limit if thread_limit is not None else contextlib.nullcontext():
            yield
    finally:
        if thread_limit is None:
            signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, handler in old.items():
            signal.signal(s, handler)
        if outer_prof:  # nested (a check inside a graded cell): the outer limit goes on
            signal.setitimer(
                signal.ITIMER_PROF, max(outer_prof - (time.process_time() - cpu0), 0.01)
            )
        if outer_real:
            signal.setitimer(signal.ITIMER_REAL, max(outer_real - (time.monotonic() - start), 0.01))
