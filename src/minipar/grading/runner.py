"""Run one graded copy in a fresh kernel, cell by cell, watching the kernel the whole time.

A fixed wall-clock timeout per cell (``pytest --nbval-lax``, which ``minipar grade`` used
before) left the grader waiting it out after a cell killed the kernel (``os._exit(0)``, a
segfault). This module talks to the kernel itself (``jupyter_client``) and samples it every
:data:`POLL_S` seconds while a cell runs:

* **a dead kernel** ends the notebook at once: the cell it died in and how (exit code or
  signal) are recorded, and the later cells are not run;
* **no progress**: for :data:`STALL_S` seconds (120) the kernel and every process under it (the
  ranks of a launch included) gained less than :data:`IDLE_CPU_SHARE` of a core (summed per
  process, so a rank that exits hides nothing) and sent no message. A busy machine slows a
  working cell but does not stop its CPU clock, so it never looks stalled;
* **computing past any limit**: the kernel process itself used 2 × CELL_LIMIT + 60 CPU-seconds
  (300 by default) in one cell, far past the in-kernel limit that normally stops it first
  (:data:`minipar.grading.limits.CELL_LIMIT`): code that ignores or blocks SIGINT;
* ``--timeout SECONDS`` (optional) is a wall-clock limit per cell, named as such when it fires.

A cell past a limit is interrupted (``SIGINT``) and, if that does not end it within
:data:`INTERRUPT_GRACE_S`, its kernel is killed. Start-up is watched the same way: the kernel may
take as long as it keeps computing (importing). ``MINIPAR_GRADE_KERNEL_STALL_S`` and
``MINIPAR_GRADE_KERNEL_CPU_LIMIT`` override the numbers. Every file the kernel makes (its
connection file, ``IPYTHONDIR``, ``TMPDIR``: the launcher's socket folders too) lives in the
caller's folder; :meth:`Kernel.stop` kills every process it started; :func:`limit_memory` bounds
its memory.

**Signals.** Under :func:`signals_unwind`, SIGINT, SIGTERM and SIGHUP are blocked in every
thread of the grader and taken by one thread (``sigtimedwait``), which tells who sent them: one
that a kernel's process sent (``os.kill(os.getppid(), SIGTERM)`` in a cell) stops that kernel,
its notebook fails naming it, and the other notebooks are graded; any other sender's stops the
whole run.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import queue
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from minipar.grading.limits import (
    CELL_LIMIT,
    KERNEL_MEMORY_BYTES,
    _proc_fields,
    _signal,
    busy_factor,
)

POLL_S = 0.5
STALL_S = 120.0  # MINIPAR_GRADE_KERNEL_STALL_S, read when a notebook starts
READY_POLL_S = 2.0  # a poll while the kernel starts, not a budget: only `stall_s` without
# progress ends the wait (:meth:`Kernel.wait_ready`)
IDLE_CPU_SHARE = 0.02
INTERRUPT_GRACE_S = 5.0
HEARTBEAT_S = 10.0
KERNEL_EXIT_WAIT_S = 5.0  # a killed kernel to exit, idle machine (times busy_factor())
EXIT_WAIT_S = 2.0  # the processes under it to exit, likewise
# jupyter_client picks free ports, closes them, and the kernel binds them a moment later: another
# process can take one in between. The kernel then exits with "Address already in use" and is
# started again with new ports, this many times in all.
KERNEL_START_TRIES = 3
MARKER = "MINIPAR_GRADE_KERNEL"  # in the environment of every process a kernel starts
# The kernel's interpreter makes itself a child subreaper (Linux's PR_SET_CHILD_SUBREAPER, 36:
# no privilege needed, kept across exec), then execs the kernel: a process under it whose parent
# exits (a shell's `setsid cmd &`, a double fork) is re-parented to the kernel, not to init, so
# it stays in the tree Kernel.stop walks from the kernel's pid, whatever its session or
# environment. Where prctl is missing (not Linux) the kernel starts as before.
SUBREAPER = (
    "import ctypes, os, sys\n"
    "try:\n    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)\n"
    "except (OSError, AttributeError):\n    pass\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP reached ``minipar grade``: unwind, cleaning up on the way."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


_SIGNALS = [s for s in (getattr(signal, n, None) for n in ("SIGINT", "SIGTERM", "SIGHUP")) if s]
_shield = {"depth": 0, "pending": None, "first": None, "blocked": False}
_kernels: list = []  # every Kernel started under signals_unwind: who may have sent a signal


def first_signal():
    """The first signal received under :func:`signals_unwind` (None if none)."""
    return _shield["first"]


def _check_signal() -> None:
    """Raise :class:`Interrupted` if a signal came and was swallowed on its way (an exception
    raised inside a library's event loop can be lost)."""
    if _shield["first"] and not _shield["depth"]:
        raise Interrupted(_shield["first"])


def _route(info, interrupt: bool = True) -> None:
    """A signal taken by ``sigtimedwait``: one a kernel's process sent is charged to that kernel
    (:attr:`Kernel.signalled`); any other is the run's (the first one is kept) and, with
    ``interrupt``, raised in the main thread as if it had arrived there (:func:`_on_signal`)."""
    kernel = next((k for k in list(_kernels) if k.sent(info.si_pid)), None)
    if kernel is not None:
        kernel.signalled = kernel.signalled or info.si_signo
        return
    _shield["first"] = _shield["first"] or info.si_signo
    if interrupt:
        _thread.interrupt_main(info.si_signo)


def _watch_signals(done: threading.Event) -> None:
    """Thread: take SIGINT, SIGTERM and SIGHUP as they arrive (blocked in every thread) and
    route each (:func:`_route`), until ``done``."""
    while not done.is_set():
        try:
            info = signal.sigtimedwait(_SIGNALS, 0.1)
        except InterruptedError:
            continue
        except OSError:
            return
        if info is not None:
            _route(info)


def _on_signal(signum, frame):
    _shield["first"] = _shield["first"] or signum
    if _shield["depth"]:
        _shield["pending"] = _shield["pending"] or signum  # raised once the shield is down
        return
    raise Interrupted(signum)


@contextlib.contextmanager
def shielded():
    """Defer SIGINT/SIGTERM/SIGHUP while a kernel starts, while jupyter_client's event loop
    runs, or while the call cleans up, so no kernel is left half-started, no library task is
    orphaned and no cleanup is cut short; a deferred signal is raised after."""
    _shield["depth"] += 1
    failing = False
    try:
        yield
    except BaseException:
        failing = True
        raise
    finally:
        _shield["depth"] -= 1
        if not _shield["depth"] and _shield["pending"]:
            signum, _shield["pending"] = _shield["pending"], None
            if not failing:  # already unwinding (from the first signal): one is enough
                raise Interrupted(signum)


@contextlib.contextmanager
def signals_unwind(after_stop=None):
    """Turn SIGINT, SIGTERM and SIGHUP from outside the kernels into :class:`Interrupted` in the
    main thread (see the module doc: blocked, taken by a thread that knows the sender). Leaving
    after a stop, the handlers are ``after_stop`` (e.g. ``SIG_IGN``: a second signal then finds
    no handler before the caller has reported the first), else the ones there were before."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _shield.update(first=None, pending=None)
    _kernels.clear()
    old = {s: signal.signal(s, _on_signal) for s in _SIGNALS}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    _shield["blocked"] = True
    done = threading.Event()
    watcher = threading.Thread(target=_watch_signals, args=(done,), daemon=True)
    watcher.start()
    try:
        yield
    finally:
        try:
            done.set()
            watcher.join()  # its loop looks at `done` every 0.1 s: no budget to run out
            while True:  # what came since: before unblocking, so a kernel's signal stays its own
                try:
                    info = signal.sigtimedwait(_SIGNALS, 0)
                except (OSError, InterruptedError):
                    break
                if info is None:
                    break
                _route(info, interrupt=False)
        finally:
            _shield["blocked"] = False
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
            stopped = _shield["first"] and after_stop is not None
            for s, h in old.items():
                signal.signal(s, after_stop if stopped else h)
            _kernels.clear()
    if _shield["first"]:  # came from outside after the last look: the run still stops
        raise Interrupted(_shield["first"])


@contextlib.contextmanager
def _unblocked():
    """Signals unblocked inside (a child started here inherits the mask of this thread: the
    kernel must get SIGINT); one arriving meanwhile goes to :func:`_on_signal`."""
    if not _shield["blocked"] or threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)


def signal_text(code) -> str:
    """``exit code 0`` or ``signal 11 (SIGSEGV)`` for a Popen return code."""
    from minipar.runtime.pool import signal_name  # noqa: PLC0415 (lazy: launcher)

    return signal_name(code).removeprefix("killed by ")


@dataclass
class CellRun:
    """What happened to one cell: ``status`` is ``"ok"``, ``"error"``, ``"stopped"`` (by a
    limit: ``reason`` says which) or ``"died"`` (the kernel died in it: ``reason`` says how)."""

    status: str
    stdout: str = ""
    error: str = ""
    reason: str = ""
    seconds: float = 0.0


@dataclass
class NotebookRun:
    cells: dict[int, CellRun] = field(default_factory=dict)  # copy's cell index -> its run
    died: tuple[int, str] | None = None  # (cell, how) if the kernel died
    start_error: str = ""  # the kernel never became ready


class KernelStartError(RuntimeError):
    pass


@dataclass
class _Cell:
    """One running cell: its limits, what it printed and raised, and the watch's state."""

    timeout: float | None
    stall_s: float
    cpu_limit: float
    heartbeat: object
    t0: float
    own0: float  # the kernel process's CPU-seconds when the cell started
    last_t: float  # the last sign of progress
    next_beat: float
    gained: float = 0.0  # CPU-seconds since last_t
    total_cpu: float = 0.0
    base: dict = field(default_factory=dict)  # pid -> its CPU-seconds when the cell started
    busiest: float = 0.0  # the most CPU-seconds one process used in the cell
    stdout: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    stop_reason: str = ""
    interrupted_at: float | None = None

    def take(self, msg) -> bool:
        """Record one of the cell's messages; True once the kernel is idle (the cell ended)."""
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream" and content.get("name") == "stdout":
            self.stdout.append(content.get("text", ""))
        elif kind == "error":
            self.errors.append(f"{content.get('ename')}: {content.get('evalue')}")
        return kind == "status" and content.get("execution_state") == "idle"

    def over_limit(self, now: float, own: float) -> str:
        """Why the cell must stop now ("" while it may go on)."""
        if self.timeout is not None and now - self.t0 > self.timeout:
            return f"stopped by --timeout: the cell ran {self.timeout:g} s of wall-clock time"
        if now - self.last_t > self.stall_s:
            return (
                f"stopped: for {self.stall_s:g} s the kernel and its processes made no "
                "progress (no CPU time, no output): a wait that never ends?"
            )
        if own - self.own0 > self.cpu_limit:
            return (
                f"stopped after {self.cpu_limit:g} CPU-seconds of the kernel: your "
                "code was still computing and did not answer the grader's "
                "limit (an endless loop in compiled code?)"
            )
        return ""

    def end(self, status: str, now: float, **how) -> CellRun:
        return CellRun(status, "".join(self.stdout), seconds=now - self.t0, **how)


class Kernel:
    """One IPython kernel of this interpreter, with its files under ``folder``."""

    def __init__(self, folder: Path, cwd: str, env: dict | None = None):
        import ipykernel.kernelspec  # noqa: PLC0415 (lazy: grade extra)
        from jupyter_client import KernelManager  # noqa: PLC0415 (lazy: grade extra)
        from jupyter_client.kernelspec import KernelSpec, KernelSpecManager  # noqa: PLC0415 (lazy: grade extra)

        class _ThisPython(KernelSpecManager):
            def get_kernel_spec(self, kernel_name):
                spec = ipykernel.kernelspec.get_kernel_dict()
                argv = [*spec["argv"], "--HistoryManager.enabled=False"]
                spec["argv"] = [argv[0], "-c", SUBREAPER, *argv[1:]]
                return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES, **spec)

        self.folder = Path(folder)
        (self.folder / "ipython").mkdir(exist_ok=True)
        (self.folder / "tmp").mkdir(exist_ok=True)
        self.km = KernelManager(
            kernel_name="minipar-grade",
            kernel_spec_manager=_ThisPython(),
            connection_file=str(self.folder / "kernel.json"),
        )
        self.kc = None
        self.pid: int | None = None
        self.stopped = False
        self.signalled: int | None = None  # a signal the kernel's processes sent the grader
        self.marker = uuid.uuid4().hex
        self._tree: dict[int, object] = {}  # pid -> psutil.Process seen under the kernel
        self._cpu_seen: dict[int, float] = {}  # pid -> its CPU-seconds, last sample
        kenv = dict(os.environ if env is None else env)
        kenv.update(
            IPYTHONDIR=str(self.folder / "ipython"),
            TMPDIR=str(self.folder / "tmp"),
            PYDEVD_DISABLE_FILE_VALIDATION="1",
            **{MARKER: self.marker},
        )
        # the kernel's own stdout/stderr (ipykernel's start-up warnings, C-level output) go to
        # a log in the folder, not into the grader's progress lines
        with open(self.folder / "kernel.log", "ab") as log, _unblocked():
            self.km.start_kernel(cwd=cwd, env=kenv, stdout=log, stderr=log)
        self.pid = self.km.provisioner.process.pid
        if _shield["blocked"]:  # under signals_unwind: a signal may come from it
            _kernels.append(self)
        limit_memory(self.pid)
        self.kc = self.km.client()
        self.kc.start_channels()

    def sent(self, pid: int) -> bool:
        """Whether process ``pid`` is (or was) this kernel or one it started."""
        if self.pid is None or pid <= 0:
            return False
        return pid == self.pid or pid in self._tree or _owned(pid, self.pid, self.marker)

    # ------------------------------------------------------------------------- watching
    def exit_code(self):
        proc = getattr(self.km.provisioner, "process", None) if self.km.provisioner else None
        return None if proc is None else proc.poll()

    def alive(self) -> bool:
        return not self.stopped and self.exit_code() is None

    def _processes(self):
        import psutil  # noqa: PLC0415 (lazy: grade extra)

        found = []
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.pid)
            found = [root] + root.children(recursive=True)
        for p in found:
            self._tree.setdefault(p.pid, p)
        return found

    def cpu(self) -> tuple[float, float]:
        """(CPU-seconds of the kernel process, CPU-seconds the kernel and every process under
        it gained since the last call). Gains are counted per process, so a rank that exits
        (taking its CPU time with it) never hides the others' progress."""
        import psutil  # noqa: PLC0415 (lazy: grade extra)

        now = {}
        for p in self._processes():
            with contextlib.suppress(psutil.Error):
                t = p.cpu_times()
                now[p.pid] = t.user + t.system
        gained = sum(max(0.0, used - self._cpu_seen.get(pid, 0.0)) for pid, used in now.items())
        self._cpu_seen = now
        return now.get(self.pid, 0.0), gained

    def wait_ready(self, stall_s: float) -> None:
        """Wait while the kernel is starting and making progress."""
        last_t, gained = time.monotonic(), 0.0
        while True:
            _check_signal()
            if not self.alive():
                raise KernelStartError(
                    f"the kernel exited while starting ({signal_text(self.exit_code())})"
                )
            with contextlib.suppress(RuntimeError), shielded():  # no raise in jupyter_client's loop
                self.kc.wait_for_ready(timeout=READY_POLL_S)
                return
            now = time.monotonic()
            gained += self.cpu()[1]
            if gained > IDLE_CPU_SHARE * (now - last_t):
                last_t, gained = now, 0.0
            elif now - last_t > stall_s:
                raise KernelStartError(
                    f"the kernel made no progress for {stall_s:g} s while starting"
                )

    # ------------------------------------------------------------------------- one cell
    def run_cell(
        self, source: str, timeout: float | None, stall_s: float, cpu_limit: float, heartbeat=None
    ) -> CellRun:
        with shielded():
            msg_id = self.kc.execute(source, store_history=True, allow_stdin=False)
        t0 = time.monotonic()
        c = _Cell(timeout, stall_s, cpu_limit, heartbeat, t0, self.cpu()[0], t0, t0 + HEARTBEAT_S)
        c.base = dict(self._cpu_seen)
        while True:
            _check_signal()
            if getattr(self, "signalled", None):
                name = signal.Signals(self.signalled).name
                self.stop()
                return c.end(
                    "died",
                    time.monotonic(),
                    reason=f"stopped by the grader: the cell sent {name} to the grader, "
                    "its parent process (os.kill(os.getppid(), ...)); the other notebooks "
                    "are graded",
                )
            msg = None
            # A signal raised inside jupyter_client's event loop would orphan one of its tasks,
            # which prints a traceback when collected: defer it to the loop's top.
            with contextlib.suppress(queue.Empty), shielded():
                msg = self.kc.get_iopub_msg(timeout=POLL_S)
            now = time.monotonic()
            if msg is not None and msg.get("parent_header", {}).get("msg_id") == msg_id:
                c.last_t = now  # a message is progress
                if c.take(msg):
                    break
                continue
            if (ended := self._watch_cell(c, now)) is not None:
                return ended
        if c.stop_reason:
            return c.end("stopped", now, reason=c.stop_reason)
        if c.errors:
            return c.end("error", now, error=c.errors[0])
        return c.end("ok", now)

    def _watch_cell(self, c: _Cell, now: float) -> CellRun | None:
        """Between the cell's messages: its end if the kernel died or did not answer the
        interrupt in time; else interrupt it past a limit, or beat the heartbeat."""
        if not self.alive():
            return c.end("died", now, reason=signal_text(self.exit_code()))
        if c.interrupted_at is not None:
            if now - c.interrupted_at <= INTERRUPT_GRACE_S:
                return None
            self.stop()  # it did not answer SIGINT: the kernel goes
            return c.end("stopped", now, reason=c.stop_reason)
        own, more = self.cpu()
        c.gained += more
        c.total_cpu += more
        used = (t - c.base.get(pid, 0.0) for pid, t in self._cpu_seen.items())
        c.busiest = max(c.busiest, *used, 0.0)
        if c.gained > IDLE_CPU_SHARE * max(now - c.last_t, POLL_S):
            c.last_t, c.gained = now, 0.0
        c.stop_reason = c.over_limit(now, own)
        if c.stop_reason:
            c.interrupted_at = now
            _signal(self.pid, signal.SIGINT)
        elif c.heartbeat is not None and now >= c.next_beat:
            c.heartbeat(now - c.t0, c.busiest)
            c.next_beat += HEARTBEAT_S
        return None

    # ------------------------------------------------------------------------- the end
    def stop(self) -> None:
        """Kill the kernel and every process it started: those seen under it (an orphan among
        them: the kernel is a child subreaper, see :data:`SUBREAPER`), every process of
        its session (the kernel leads its own) and every one whose environment carries its
        :data:`MARKER` (a double-forked daemon that left the session keeps it), swept until none
        is left; a launcher's zygote (which cleans up its socket folder when its caller dies)
        goes first. Idempotent."""
        import psutil  # noqa: PLC0415 (lazy: grade extra)

        if self.pid is None or self.stopped:
            return
        self._processes()
        for pid in _swept(self.pid, self.marker):  # left the tree: double-forked, setsid
            with contextlib.suppress(psutil.Error):
                self._tree.setdefault(pid, psutil.Process(pid))
        tree = [p for pid, p in self._tree.items() if pid != self.pid]
        if self.kc is not None:
            with contextlib.suppress(Exception):  # channels half-started: nothing to stop
                self.kc.stop_channels()
        _signal(self.pid, signal.SIGKILL)
        busy = busy_factor()  # the waits only say how long before killing what is left
        with contextlib.suppress(Exception):
            self.km.provisioner.process.wait(timeout=KERNEL_EXIT_WAIT_S * busy)
        wait = EXIT_WAIT_S * busy
        alive = _wait_exited(tree, wait)  # zygotes see their caller gone
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        _wait_exited(alive, wait)
        for _ in range(10):  # what forked meanwhile (a fork loop ends when its parents die)
            late = []
            for pid in _swept(self.pid, self.marker):
                with contextlib.suppress(psutil.Error):
                    late.append(psutil.Process(pid))
                _signal(pid, signal.SIGKILL)
            if not late:
                break
            _wait_exited(late, wait)
        with contextlib.suppress(Exception):
            self.km.cleanup_resources()
        self.stopped = True


def _wait_exited(procs: list, timeout: float) -> list:
    """The processes of ``procs`` still running after at most ``timeout`` seconds. One that has
    exited is gone even while its zombie waits to be reaped: the processes under the kernel are
    not the grader's children, and an orphan's zombie lasts until init reaps it (up to 2 s with
    some container inits), which ``psutil.wait_procs`` would wait out for every kernel."""
    import psutil  # noqa: PLC0415 (lazy: grade extra)

    def running(p) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False
        except psutil.Error:  # not ours to read: wait for it as for any other
            return True

    deadline, delay = time.monotonic() + timeout, 0.0001
    alive = list(procs)
    while True:
        alive = [p for p in alive if running(p)]
        left = deadline - time.monotonic()
        if not alive or left <= 0:
            return alive
        time.sleep(min(delay, left))
        delay = min(2 * delay, 0.04)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, session id) of process ``pid`` from /proc, or None if it is gone."""
    fields = _proc_fields(f"/proc/{pid}/stat")
    return None if fields is None else (fields[0], int(fields[3]))


def _owned(pid: int, session: int, marker: str) -> bool:
    """Process ``pid`` runs in ``session`` or carries ``MARKER=marker`` in its environment."""
    st = _stat(pid)
    if st is None:
        return False
    if st[1] == session:
        return True
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{MARKER}={marker}".encode() in env.split(b"\0")


def _swept(session: int, marker: str) -> list[int]:
    """Live processes (zombies excluded) of ``session`` or carrying the kernel's marker."""
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) != os.getpid()]
    except OSError:
        return []
    live = [pid for pid in pids if (st := _stat(pid)) is not None and st[0] != "Z"]
    return [pid for pid in live if _owned(pid, session, marker)]


def limit_memory(pid: int, limit: int | None = None) -> None:
    """Set ``RLIMIT_DATA`` (private writable memory: heap and anonymous mappings) of process
    ``pid`` to ``limit`` bytes (default :data:`KERNEL_MEMORY_BYTES`; 0: none); its children
    inherit it. Address-space reservations that are not writable (CUDA's) do not count."""
    import resource  # noqa: PLC0415 (POSIX only: absent on Windows)

    limit = KERNEL_MEMORY_BYTES if limit is None else limit
    if not limit or not hasattr(resource, "prlimit"):
        return
    with contextlib.suppress(OSError, ValueError):
        resource.prlimit(pid, resource.RLIMIT_DATA, (limit, limit))


def _log_lines(log: Path, start: int) -> list[str]:
    """The non-empty lines of the kernel's log from byte ``start`` on (none if unreadable)."""
    try:
        with open(log, "rb") as f:
            f.seek(start)
            said = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line.strip() for line in said.splitlines() if line.strip()]


def _start_kernel(folder: Path, cwd: str, env: dict | None, stall_s: float) -> Kernel:
    """A ready kernel, started again with new ports (up to :data:`KERNEL_START_TRIES` starts
    in all) while one exits because a port it was given was taken before it bound it."""
    log = folder / "kernel.log"
    attempt = 0
    while True:
        attempt += 1
        start = log.stat().st_size if log.exists() else 0
        kernel = None
        try:
            with shielded():  # a signal now would leave it half-started
                kernel = Kernel(folder, cwd, env)
            kernel.wait_ready(stall_s)
            return kernel
        except BaseException as e:
            if kernel is not None:
                with shielded():  # a second signal must not cut the cleanup
                    kernel.stop()
            said = _log_lines(log, start)
            taken = bool(said) and "Address already in use" in said[-1]
            if not isinstance(e, KernelStartError) or not taken or attempt == KERNEL_START_TRIES:
                raise


def run_notebook(
    cells: list[str],
    folder: Path,
    cwd: str,
    *,
    timeout: float | None = None,
    heartbeat=None,
    env: dict | None = None,
) -> NotebookRun:
    """Run the code ``cells`` in order in a fresh kernel whose files live in ``folder``."""
    result = NotebookRun()
    stall_s = float(os.environ.get("MINIPAR_GRADE_KERNEL_STALL_S", STALL_S))
    cpu_limit = float(os.environ.get("MINIPAR_GRADE_KERNEL_CPU_LIMIT", 2 * CELL_LIMIT + 60))
    kernel = None
    try:
        try:
            kernel = _start_kernel(Path(folder), cwd, env, stall_s)
        except KernelStartError as e:
            last = _log_lines(Path(folder) / "kernel.log", 0)[-1:]
            result.start_error = str(e) + (f": {last[0]}" if last else "")
            return result
        for k, source in enumerate(cells):
            beat = None if heartbeat is None else (lambda s, cpu, k=k: heartbeat(k, s, cpu))
            run = kernel.run_cell(source, timeout, stall_s, cpu_limit, beat)
            result.cells[k] = run
            if run.status == "died":
                result.died = (k, run.reason)
                break
            if run.status == "stopped" and not kernel.alive():
                break
    finally:
        if kernel is not None:
            with shielded():  # a second signal must not cut the cleanup
                kernel.stop()
    return result


__all__ = ["run_notebook", "NotebookRun", "CellRun", "Kernel", "signal_text"]
