"""The caller side of :mod:`minipar.runtime.launch`: the robustness machinery behind ``run``.

* :func:`pack` pickles a task by value, keeping the true file name of every function
  (cloudpickle writes ``<dynamic-code>``; code objects travel as :mod:`marshal` bytes) and the
  source of notebook cells, so a rank's traceback points at the right cell and line;
  :func:`caller_state` is what a fresh rank takes from the caller.
* :class:`Zygote` runs the warm zygote (:mod:`minipar.runtime._rank`) in its own session, so a
  kernel restart that kills the caller's process group leaves it alive long enough to clean
  up; one that cannot start is reported at once with the end of its log and a likely cause,
  one whose connection fails in any way is killed, so the next call starts a new one.
  :class:`Ranks` gathers one call's ranks: their output, replies and exit codes.
* Socket folders (``minipar-<host>-<caller pid>-<random>``, mode 0700: only this user can
  connect, no authentication key needed) are removed by the zygote when the caller dies or on
  SIGTERM/SIGHUP, and by the next caller when both died at once. ``<host>``
  (:func:`host_token`) names this boot and PID namespace: containers sharing ``/tmp`` number
  their processes independently, and a caller never removes a neighbour's live folder.
* Every blocking read has a deadline: the zygote's "ready" (none while it keeps computing,
  i.e. importing torch: :func:`cpu_seconds` must grow), its answer to a fork request, each
  rank's "hello".
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import linecache
import marshal
import multiprocessing.connection as mpc
import os
import pickle
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
import tomllib
import types
from collections import ChainMap
from pathlib import Path

import cloudpickle

from minipar.runtime._rank import _kill_group as _kill_pid  # a rank and its process group

RANK_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_rank.py")


# ----------------------------------------------------------------------------- what ranks get
_seen = threading.local()  # .filenames: source files of the code objects pickled by value


def _code_by_marshal(code):
    """Send a code object as :mod:`marshal` bytes (what a ``.pyc`` holds; the ranks run this
    same interpreter), which keeps ``co_filename`` and nested functions' code."""
    stack = [code]
    while stack:
        c = stack.pop()
        _seen.filenames.add(c.co_filename)
        stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return marshal.loads, (marshal.dumps(code),)


class _Pickler(cloudpickle.Pickler):
    dispatch_table = ChainMap(
        {types.CodeType: _code_by_marshal}, cloudpickle.Pickler.dispatch_table
    )


def pack(fn, args) -> tuple[bytes, dict]:
    """``(fn, args)`` pickled by value, and the cell sources its functions come from; a
    ``TypeError`` naming the argument that cannot be sent (nothing has started yet)."""
    _seen.filenames = set()
    buf = io.BytesIO()
    try:
        _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump((fn, args))
    except Exception as e:
        what = "fn"
        for i, a in enumerate(args):
            try:
                cloudpickle.dumps(a)
            except Exception:
                what = f"argument {i + 1} after world_size ({type(a).__name__})"
                break
        raise TypeError(
            f"{what} cannot be sent to the ranks (it must be picklable by "
            f"cloudpickle): {type(e).__name__}: {e}"
        ) from e
    # IPython keeps each cell's source in linecache with mtime None (no file on disk)
    lines = {
        f: linecache.cache[f]
        for f in _seen.filenames
        if f in linecache.cache and linecache.cache[f][1] is None
    }
    return buf.getvalue(), lines


def _affinity() -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS has no affinity masks
        return None


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask), not all the machine's."""
    cpus = _affinity()
    return len(cpus) if cpus else os.cpu_count() or 1


def loopback_interface() -> str:
    """The loopback interface's name: ``lo`` on Linux, ``lo0`` on macOS and the BSDs."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except (AttributeError, OSError):
        names = []
    default = "lo" if sys.platform.startswith("linux") else "lo0"
    return next((name for name in ("lo", "lo0") if name in names), default)


def caller_state(backend: str, folder: str, timeout: float, threads: int, lines: dict) -> dict:
    """What a rank takes from the caller; ``store`` is this call's ``FileStore``, a new file in
    the zygote's socket ``folder``."""
    prefix = f"minipar-{secrets.token_hex(8)}"
    return dict(
        env=dict(os.environ),
        cwd=os.getcwd(),
        sys_path=list(sys.path),
        lines=lines,
        prefix=prefix,
        store=os.path.join(folder, f"store-{prefix}"),
        cpus=_affinity(),
        loopback=loopback_interface(),
        backend=backend,
        timeout=timeout,
        threads=threads,
    )


# ----------------------------------------------------------------------------- socket folders
def _base_dir() -> str:
    # A Unix socket path must stay under ~100 bytes: fall back to /tmp if TMPDIR is deep.
    base = tempfile.gettempdir()
    return "/tmp" if len(base) >= 64 and os.path.isdir("/tmp") else base


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def host_token() -> str:
    """8 hex digits naming this boot and PID namespace (``/proc``'s boot id and the namespace's
    inode; on a system without them, the host name)."""
    parts = []
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        parts.append(f.read().strip())
    with contextlib.suppress(OSError):
        parts.append(os.readlink("/proc/self/ns/pid"))
    return hashlib.sha1("|".join(parts or [socket.gethostname()]).encode()).hexdigest()[:8]


_FOLDER = re.compile(r"minipar-([0-9a-f]{8})-(\d+)-\w+$")


def remove_stale_folders(base: str | None = None, folder: re.Pattern = _FOLDER) -> list[str]:
    """Remove socket folders ``minipar-<host>-<pid>-*`` (or the ``folder`` pattern's) of this host
    whose caller ``pid`` is gone (left when the caller and its zygote were killed at once, e.g. by
    the out-of-memory killer). Folders of another host token (another container sharing ``/tmp``)
    are never touched, nor folders of another user (their mode is 0700: ``listdir`` fails,
    skipped)."""
    base = base or _base_dir()
    removed, host = [], host_token()
    try:
        names = os.listdir(base)
    except OSError:
        return removed
    for name in names:
        m = folder.match(name)
        if not m or m.group(1) != host:
            continue
        pid = int(m.group(2))
        path = os.path.join(base, name)
        try:
            mine = os.stat(path).st_uid == os.getuid()
        except OSError:
            continue
        if mine and pid != os.getpid() and not _pid_alive(pid):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(name)
    return removed


def cpu_seconds(pid: int) -> float | None:
    """CPU-seconds used so far by process ``pid`` (``/proc``, else ``ps``); None if unknown."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        pass
    try:
        out = subprocess.run(
            ["ps", "-o", "time=", "-p", str(pid)], capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)", out)
    if m is None:
        return None
    d, h, mi, se = m.groups()
    return ((int(d or 0) * 24 + int(h or 0)) * 60 + int(mi)) * 60 + float(se)


# ----------------------------------------------------------------------------- start failures
_CAUSES = tomllib.loads(Path(__file__).with_name("start_causes.toml").read_text("utf-8"))["cause"]


def likely_cause(log: str) -> str:
    """Why a zygote whose log is ``log`` could not start (``start_causes.toml``)."""
    for cause in _CAUSES:
        if re.search(cause["pattern"], log):
            return cause["text"].format(
                exe=sys.executable,
                PYTHONHOME=os.environ.get("PYTHONHOME"),
                PYTHONPATH=os.environ.get("PYTHONPATH"),
            )
    return "no error text: the process was killed (out of memory?) or exited on its own"


def tail(path: str, lines: int = 25) -> str:
    """The last lines of a log, without faulthandler's list of extension modules."""
    try:
        with open(path, errors="replace") as f:
            kept = [x for x in f if not x.startswith("Extension modules:")]
    except OSError:
        return ""
    return "".join(kept[-lines:])


def signal_name(code) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"killed by signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


# ----------------------------------------------------------------------------- the zygote
class StartFailed(Exception):
    """The zygote could not start: ``log`` is the end of its output, ``cause`` a likely why."""

    def __init__(self, message: str, log: str, cause: str):
        super().__init__(message)
        self.log, self.cause = log, cause


FORK_STALL_S = 60.0  # a zygote that neither answers a fork request nor computes: broken
HELLO_S = 60.0  # a rank that connected but sent no "hello": broken


class _Progress:
    """``check()`` is False once process ``pid`` gained no CPU time for ``stall_s`` seconds
    (None where its CPU time cannot be read: then a fixed ``stall_s`` deadline applies)."""

    def __init__(self, pid: int, stall_s: float):
        self.pid, self.stall_s = pid, stall_s
        self.cpu, self.t = cpu_seconds(pid), time.monotonic()

    def check(self):
        now, cpu = time.monotonic(), cpu_seconds(self.pid)
        if cpu is not None and (self.cpu is None or cpu > self.cpu + 0.01):
            self.cpu, self.t = cpu, now
        return False if now - self.t > self.stall_s else None


def _recv(conn, check, fail, alive) -> object:
    """``conn.recv()`` that gives up (``fail(why)``) when ``check()`` is False or the peer
    process is gone (``alive()`` False) before a message arrives."""
    while not conn.poll(0.25):
        if not alive():
            fail("the peer exited before it answered")
        if check() is False:
            fail("no answer and no progress")
    return conn.recv()


class Zygote:
    """A warm process that has imported torch and forks fresh ranks (:mod:`minipar.runtime._rank`)."""

    def __init__(self, start_stall_s: float):
        remove_stale_folders()
        self.folder = tempfile.mkdtemp(
            prefix=f"minipar-{host_token()}-{os.getpid()}-", dir=_base_dir()
        )  # 0700
        self.address = os.path.join(self.folder, "s")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.address)
        self.sock.listen(128)
        self.sock.settimeout(0.25)  # accept() wakes up to check the zygote and the deadline
        self.proc = None
        self.source_mtime = _mtime(RANK_SOURCE)
        self.owner = os.getpid()  # a forked copy of the caller must start its own zygote
        self.exits: dict[int, int] = {}  # pid -> exit code, as the zygote reports them
        self.calls = 0
        self.broken = False  # the connection failed once: never use this zygote again
        self.log = os.path.join(self.folder, "zygote.log")
        with open(self.log, "wb") as f:
            # its own session: a kernel restart kills the kernel's process group, not the
            # zygote, which then sees its caller gone and removes the folder (see _rank.py)
            self.proc = subprocess.Popen(
                [sys.executable, RANK_SOURCE, self.address, str(os.getpid()), self.folder],
                cwd=self.folder,
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=f,
                start_new_session=True,
            )
        try:
            # no fixed deadline while the zygote keeps computing (importing torch takes 2 s
            # on an idle machine and minutes on a loaded one): it fails when it made no CPU
            # progress for start_stall_s seconds, or exited
            progress = _Progress(self.proc.pid, start_stall_s)
            self.conn = self.accept(
                float("inf"),
                progress.check,
                f"the minipar zygote made no progress for "
                f"{start_stall_s:g} s while importing torch",
            )
            _recv(self.conn, progress.check, self._failed, lambda: self.proc.poll() is None)
        except BaseException:
            self.close()
            raise

    def accept(self, deadline: float, check, late: str) -> mpc.Connection:
        """The next connection to our socket; ``check()`` runs while waiting and may raise;
        ``late`` says what did not happen by the deadline."""
        while True:
            try:
                s, _ = self.sock.accept()
            except TimeoutError:
                pass
            else:
                s.setblocking(True)
                return mpc.Connection(s.detach())
            if self.proc.poll() is not None:
                self._failed(
                    f"the minipar zygote exited ({signal_name(self.proc.returncode)}) "
                    "before the ranks started"
                )
            if check() is False or time.monotonic() > deadline:
                self._failed(late)

    def _died(self, error: BaseException):
        """The connection to the zygote failed (it died, or the stream broke): kill it, so
        :meth:`alive` is False and the next call starts a new one, and report why."""
        self.broken = True
        try:
            self.proc.wait(timeout=0.5 if isinstance(error, (EOFError, OSError)) else 0)
        except subprocess.TimeoutExpired:
            pass
        how = (
            signal_name(self.proc.poll())
            if self.proc.poll() is not None
            else f"its connection failed: {type(error).__name__}: {error}"
        )
        self.proc.kill()
        self.proc.wait()
        self._failed(f"the minipar zygote died ({how}); the next call starts a new one")

    def _failed(self, what: str):
        log = tail(self.log)
        raise StartFailed(what, log, likely_cause(log))

    def alive(self) -> bool:
        return (
            not self.broken
            and self.proc.poll() is None
            and _mtime(RANK_SOURCE) == self.source_mtime
        )

    def fork(self, world_size: int, state: dict, task: bytes) -> list[int]:
        self.calls += 1
        state["call"] = self.calls
        try:
            self.conn.send(("fork", self.calls, world_size, state, task))
        except Exception as e:  # any failure: a dead or unusable zygote
            self._died(e)
        progress = _Progress(self.proc.pid, FORK_STALL_S)
        while True:
            try:
                if not self.conn.poll(0.25):
                    if self.proc.poll() is not None:
                        raise EOFError("the zygote exited")
                    if progress.check() is False:
                        raise TimeoutError(
                            f"no answer to a fork request and no progress for {FORK_STALL_S:g} s"
                        )
                    continue
                msg = self.conn.recv()
                kind = msg[0]
            except Exception as e:  # EOF, a reset, a garbled message, ...
                self._died(e)
            if kind == "forked" and msg[1] == self.calls:
                # exits reported from now on are of this call's ranks or of older ones that
                # were still unreaped (so their pids differ from ours): forget the rest
                self.exits.clear()
                return msg[2]
            self.note(msg)

    def note(self, msg) -> None:
        if msg[0] == "exit":
            self.exits[msg[1]] = msg[2]

    def drain(self) -> None:
        try:
            while self.conn.poll(0):
                self.note(self.conn.recv())
        except Exception as e:
            self._died(e)

    def close(self) -> None:
        try:
            self.conn.send(None)
            self.proc.wait(timeout=2)
        except Exception:  # no connection yet, or a broken one: kill it
            pass
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.sock.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


# ----------------------------------------------------------------------------- one call's ranks
class Ranks:
    """The ranks of one call: connect them, stream their output, gather their replies."""

    def __init__(self, zygote: Zygote, pids: list[int], deadline: float):
        self.zygote, self.pids = zygote, pids
        self.conns: dict[int, mpc.Connection] = {}
        self.replies: dict[int, tuple] = {}
        self.started = False
        try:
            while len(self.conns) < len(pids):
                conn = zygote.accept(
                    deadline, self._check_started, "the ranks did not dial back in time"
                )
                if not conn.poll(HELLO_S):  # a connection that says nothing: not a rank
                    conn.close()
                    continue
                _, call, rank, pid = conn.recv()  # ("hello", call, rank, pid)
                if call != zygote.calls or pid != pids[rank]:  # left over from an interrupt
                    conn.close()
                    _kill_pid(pid)
                    continue
                self.conns[rank] = conn
            self.started = True
        except _EarlyDeath:  # collect() returns the dead rank's reply at once
            self.kill(range(len(pids)))
        except BaseException:
            self.kill(range(len(pids)))
            raise

    def _check_started(self) -> None:
        """A rank that died before it dialled back: its reply is its exit code and log."""
        self.zygote.drain()
        for r, pid in enumerate(self.pids):
            if r not in self.conns and pid in self.zygote.exits:
                self._died(r)
                raise _EarlyDeath()

    def log(self, rank: int) -> str:
        return os.path.join(self.zygote.folder, f"rank-{rank}.log")

    def _died(self, r: int) -> None:
        pid = self.pids[r]
        deadline = time.monotonic() + 2.0  # the connection closes a moment before the reap
        while pid not in self.zygote.exits and time.monotonic() < deadline:
            try:
                if self.zygote.conn.poll(0.05):
                    self.zygote.note(self.zygote.conn.recv())
            except Exception:  # the zygote is gone too: the next call sees it
                self.zygote.broken = True
                break
        how = signal_name(self.zygote.exits.get(pid))
        self.replies[r] = ("died", (f"died ({how}) without a Python exception", "", time.time()))

    def collect(self, timeout: float, on_output) -> dict[int, tuple]:
        """Every rank's reply: ("ok", bytes), ("err", (summary, tb, t)) or ("died", ...)."""
        n = len(self.pids) if self.started else 0
        # Ranks time out of a hung collective after ``timeout`` and report where; this
        # deadline is the backstop for a rank stuck outside a collective.
        deadline = time.monotonic() + timeout + 3.0
        while len(self.replies) < n:
            if any(kind != "ok" for kind, _ in self.replies.values()):
                # a failure usually makes the others fail fast (their peer left)
                deadline = min(deadline, time.monotonic() + 3.0)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            waiting = {c: r for r, c in self.conns.items() if r not in self.replies}
            for conn in mpc.wait(list(waiting), timeout=min(left, 1.0)):
                r = waiting[conn]
                try:
                    kind, payload = conn.recv()
                except (EOFError, OSError):
                    self._died(r)
                    continue
                if kind == "out":
                    on_output(r, payload)
                else:
                    self.replies[r] = (kind, payload)
        return self.replies

    def kill(self, ranks) -> None:
        for r in ranks:
            _kill_pid(self.pids[r])

    def close(self) -> None:
        """Kill the ranks that did not reply (a hang, an interrupt); close the connections."""
        self.kill([r for r in range(len(self.pids)) if r not in self.replies])
        for c in self.conns.values():
            c.close()


class _EarlyDeath(Exception):
    """A rank died before it connected; its reply is already recorded."""
