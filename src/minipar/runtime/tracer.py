"""Record every collective and point-to-point call a rank makes: op, bytes, group, time.

    with minipar.runtime.tracer() as tr:
        dist.all_reduce(x)
    tr.summary()   # {"all_reduce": OpStats(calls=1, bytes=..., seconds=...)}

PyTorch's ``CommDebugMode`` counts calls only (no bytes, no time, no ``send``/``recv``); its
profiler records kernels and host ranges, not the bytes of a gloo call. Both rest on the fact
used here: every ``torch.distributed`` call, DDP's C++ reducer's included, goes through a
``c10d::*`` dispatcher op. So **bytes and group** come from a ``TorchDispatchMode`` that sees
every ``c10d`` op on this thread and in autograd's backward (which inherits the mode), DTensor's
functional collectives too; **wall time** comes from wrapping the public ``torch.distributed``
functions while any trace is open (reference-counted; only calls on a thread with a trace open
are timed): a synchronous call until it returns, an ``async_op=True`` one until its
``Work.wait()`` returns through the handle we return, else its launch only (``is_async``), as
for calls that bypass the Python API (DDP's reducer).

``bytes`` is nccl-tests' size S: the whole buffer (all-reduce, broadcast, reduce, send/recv: the
tensor; all-gather: the gathered output; reduce-scatter and all-to-all: the input). What a rank
puts on the wire for an algorithm is the cost model's job
(:func:`minipar.cost.network.collectives.ring_bytes_per_rank`); for send/recv it is ``bytes``.
Each event records its group's global ranks and identity (``group_name``), so traffic is
attributed to the TP, DP or PP group by identity, never guessed from its size (on a (2, 2, 2)
grid TP and DP groups both have two ranks): ``trace(groups={"tp": tp_group, ...})`` names them
and :meth:`trace.by_group` sums calls and bytes per (group, op).

Do not time benchmarks inside ``trace``: the dispatch mode adds Python overhead to every op.
"""

from __future__ import annotations

import functools
import threading
import time
import tomllib
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import torch
import torch._dynamo
import torch.distributed as dist  # not inside the first traced call's wall time
from torch.distributed.distributed_c10d import _resolve_process_group
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

_OPS = tomllib.loads(Path(__file__).with_name("tracer_ops.toml").read_text("utf-8"))
# c10d dispatcher op -> (course name, index of the argument whose bytes we report, or None)
_C10D_OPS = {k: (v[0], v[1] if len(v) > 1 else None) for k, v in _OPS["c10d"].items()}
# DTensor's functional collectives: op -> (course name, bytes = input × group size?)
_FUNCTIONAL = {k: tuple(v) for k, v in _OPS["functional"].items()}
_PUBLIC = _OPS["public"]["wrapped"]  # public torch.distributed functions wrapped for wall time


@dataclass
class CommEvent:
    op: str  # course name: all_reduce, all_gather, reduce_scatter, send, recv, ...
    bytes: int  # nccl-tests "size" of the call (see module docstring)
    group_size: int  # ranks in the process group
    start: float  # seconds since the trace began
    seconds: float = 0.0  # wall time (launch only when is_async and never waited through us)
    is_async: bool = True
    peer: int | None = None  # the other rank of a send/recv (group rank)
    dtype: str = ""
    group: tuple[int, ...] = ()  # global ranks of the call's process group
    group_name: str = ""  # the group's identity (ProcessGroup.group_name)


@dataclass
class OpStats:
    calls: int = 0
    bytes: int = 0
    seconds: float = 0.0


def _nbytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(o) for o in obj)
    return 0


def _dtype(obj) -> str:
    if isinstance(obj, torch.Tensor):
        return str(obj.dtype).replace("torch.", "")
    if isinstance(obj, (list, tuple)) and obj:
        return _dtype(obj[0])
    return ""


def _describe(pg) -> tuple[int, tuple[int, ...], str]:
    """(size, global ranks, name) of a ProcessGroup."""
    try:
        ranks = tuple(dist.get_process_group_ranks(pg))
    except Exception:  # a group this rank is not registered in
        ranks = ()
    return pg.size(), ranks, getattr(pg, "group_name", "")


def _group_of(args) -> tuple[int, tuple[int, ...], str]:
    """(size, global ranks, name) of the ProcessGroup among a c10d op's arguments (the default
    group when none is found)."""
    for a in args:
        if isinstance(a, torch.ScriptObject):
            try:
                pg = dist.ProcessGroup.unbox(a)
            except Exception:  # a ReduceOp or Work, not a group
                continue
            return _describe(pg)
    if dist.is_initialized():
        return _describe(dist.group.WORLD)
    return 1, (), ""


class _WaitTimedWork:
    """Wraps a ``Work`` so that ``wait()`` closes the timing of the events it launched."""

    def __init__(self, work, events, t0):
        self._work, self._events, self._t0 = work, events, t0

    def wait(self, *a, **k):
        out = self._work.wait(*a, **k)
        dt = time.perf_counter() - self._t0
        for e in self._events:
            e.seconds, e.is_async = dt, False
        return out

    def __getattr__(self, name):
        return getattr(self._work, name)


# -- the wall-time wrappers: installed once for all threads, active only where a trace is ----
_install_lock = threading.Lock()
_installs = 0  # traces open in any thread; the wrappers stay while > 0
_originals: dict = {}  # (module, name) -> the function we wrapped
_local = threading.local()  # .pending: the events of the public call in progress, to time


def _tracing_here() -> bool:
    """Is a trace open on this thread? (Its dispatch mode is on this thread's mode stack,
    which autograd's backward threads inherit, so a hook's calls there are timed too.)"""
    return any(isinstance(m, trace) for m in _get_current_dispatch_mode_stack())


def _timed(fn):
    @functools.wraps(fn)
    def timed(*args, **kwargs):
        if not _tracing_here():  # no trace on this thread: the plain call
            return fn(*args, **kwargs)
        outer = getattr(_local, "pending", None)
        _local.pending = mine = []
        t0 = time.perf_counter()
        try:
            out = fn(*args, **kwargs)
        finally:
            _local.pending = outer
        if out is not None and hasattr(out, "wait"):  # async: time it when waited
            return _WaitTimedWork(out, mine, t0)
        dt = time.perf_counter() - t0
        for e in mine:
            e.seconds, e.is_async = dt, False
        return out

    timed.__minipar_traced__ = fn
    return timed


def _install() -> None:
    """Wrap the public functions when the first trace (in any thread) opens."""
    global _installs
    with _install_lock:
        if _installs == 0:
            for name in _PUBLIC:
                for mod in (dist, dist.distributed_c10d):
                    fn = getattr(mod, name, None)
                    if fn is not None:
                        _originals[(mod, name)] = fn
                        setattr(mod, name, _timed(fn))
        _installs += 1


def _uninstall() -> None:
    """Put the original functions back when the last trace (in any thread) closes."""
    global _installs
    with _install_lock:
        _installs -= 1
        if _installs == 0:
            for (mod, name), fn in _originals.items():
                setattr(mod, name, fn)
            _originals.clear()


class trace(TorchDispatchMode):
    """Context manager recording this thread's communication calls in ``self.events``. Traces
    in several threads at once are safe: each sees only its own thread's calls, and
    ``torch.distributed`` is back to its own functions once the last one closes, whatever the
    order. Event ``start`` times and :meth:`elapsed` are seconds since ``start_time`` (a
    ``time.perf_counter()`` value), when the trace began."""

    def __init__(self, groups=None):
        super().__init__()
        self.events: list[CommEvent] = []
        self.start_time = 0.0
        # group identity -> the name given in ``groups``: {"tp": tp_group, ...} or (name, group)
        # pairs (several groups may share a name); None groups skipped
        pairs = groups.items() if isinstance(groups, dict) else (groups or ())
        self.names = {g.group_name: k for k, g in pairs if g is not None}

    def elapsed(self) -> float:
        """Seconds since the trace began (same clock as the events' ``start``)."""
        return time.perf_counter() - self.start_time

    # -- dispatcher side: bytes, group size ------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        c10d, functional = func.namespace == "c10d", func.namespace == "_c10d_functional"
        name = func._schema.name.split("::")[-1] if c10d or functional else ""
        if c10d and name in _C10D_OPS:
            op, idx = _C10D_OPS[name]
            size, ranks, gname = _group_of(args)
            nbytes = _nbytes(args[idx]) if idx is not None else 0
        elif functional and name in _FUNCTIONAL:  # its last argument names its group
            op, gathered = _FUNCTIONAL[name]
            size, ranks, gname = _describe(_resolve_process_group(args[-1]))
            nbytes = _nbytes(args[0]) * (size if gathered else 1)
        else:
            return func(*args, **(kwargs or {}))
        start = time.perf_counter() - self.start_time
        ev = CommEvent(
            op, nbytes, size, start, dtype=_dtype(args[0]), group=ranks, group_name=gname
        )
        if op in ("send", "recv") and len(args) > 2 and isinstance(args[2], int):
            ev.peer = args[2]
        self.events.append(ev)
        pending = getattr(_local, "pending", None)
        if c10d and pending is not None:  # timed by the public call in progress
            pending.append(ev)
        return func(*args, **(kwargs or {}))

    # -- entering and leaving --------------------------------------------------------------
    def __enter__(self):
        self.start_time = time.perf_counter()
        _install()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            _uninstall()

    # -- reports -------------------------------------------------------------------------
    def summary(self) -> "OrderedDict[str, OpStats]":
        """Per op: calls, bytes (sum of nccl-tests sizes) and wall seconds, in first-seen order."""
        out: OrderedDict[str, OpStats] = OrderedDict()
        for e in self.events:
            s = out.setdefault(e.op, OpStats())
            s.calls += 1
            s.bytes += e.bytes
            s.seconds += e.seconds
        return out

    def bytes(self, op: str | None = None) -> int:
        """Total bytes of all events, or of one op."""
        return sum(e.bytes for e in self.events if op is None or e.op == op)

    def count(self, op: str | None = None) -> int:
        return sum(1 for e in self.events if op is None or e.op == op)

    def group_label(self, e: CommEvent) -> str:
        """The name given for the event's group in ``trace(groups=...)``; else ``"world"`` for
        the default group, else its global ranks ("0,2")."""
        if e.group_name in self.names:
            return self.names[e.group_name]
        if dist.is_initialized() and e.group_name == dist.group.WORLD.group_name:
            return "world"
        return ",".join(map(str, e.group))

    def by_group(self) -> dict:
        """{(group label, op): [calls, bytes]} (:meth:`group_label`), attributed by the
        group's identity."""
        out: dict = {}
        for e in self.events:
            c = out.setdefault((self.group_label(e), e.op), [0, 0])
            c[0] += 1
            c[1] += e.bytes
        return out

    def table(self) -> str:
        """The summary as an aligned text table."""
        rows = [f"{'op':<15}{'calls':>7}{'bytes':>14}{'seconds':>11}"]
        for op, s in self.summary().items():
            rows.append(f"{op:<15}{s.calls:>7}{s.bytes:>14,}{s.seconds:>11.6f}")
        return "\n".join(rows)
