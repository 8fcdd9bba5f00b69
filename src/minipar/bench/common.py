"""What every ``minipar bench`` command shares: the same flag names, one range check, one
``--json`` contract. ``--json`` prints exactly one JSON object on stdout and everything else
(the launcher's notes, ranks' prints, progress, tables) on stderr, so ``minipar bench X --json |
jq`` always parses; a broken rule, a rank's error or a failed allocation is one
:class:`minipar.errors.InputError` line (``"--ranks (1) must be >= 2"``), exit status 2.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time

from minipar.errors import InputError
from minipar.jsonio import print_json
from minipar.runtime.device import resolve_backend

MAX_RANKS = 16  # ranks of one machine that a benchmark starts (each is a process)
PROGRESS_S = 10.0  # seconds between "still measuring" lines


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def gpu_check_command(module: str, *options: str) -> list[str]:
    """The ``minipar`` arguments of a bench module's GPU-check run (``gpu_check_args``, see
    :mod:`minipar.bench.cli`): ``bench <name> OPTIONS --backend nccl --json``, the name read from
    ``module`` (the module's ``__name__``, e.g. ``minipar.bench.launch``)."""
    return ["bench", module.rsplit(".", 1)[1], *options, "--backend", "nccl", "--json"]


def largest_at_most(choices, n: int) -> int:
    """The largest of ``choices`` that is at most ``n``, else the smallest of them (a rank
    count for ``gpu_check_args``, see :mod:`minipar.bench.cli`)."""
    return max([c for c in choices if c <= n] or [min(choices)])


def add_common(p, ranks: int, ranks_help: str = "ranks", *, also: str | None = None):
    """``--ranks N`` (default ``ranks``; ``also``: a second spelling such as ``--pp``) and
    ``--json``."""
    names = ["--ranks"] + ([also] if also else [])
    p.add_argument(
        *names, dest="ranks", type=int, default=ranks, help=f"{ranks_help} (default {ranks})"
    )
    add_json(p)


def add_options(p, *rows) -> None:
    """``(flag, default, help)`` rows: ``--flag`` of the default's type (int or float)."""
    for name, default, text in rows:
        p.add_argument(name, type=type(default), default=default, help=text)


def add_json(p) -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object on stdout (everything else on stderr)",
    )


def add_backend(p, default: str, why: str) -> None:
    """``--backend {auto,gloo,nccl}``; ``why`` says why ``default`` is the default."""
    p.add_argument(
        "--backend",
        choices=["auto", "gloo", "nccl"],
        default=default,
        help=f"auto: NCCL with one GPU per rank if there are enough GPUs, else gloo "
        f"(default {default}: {why})",
    )


def backend(args, ranks: int) -> str:
    """``args.backend`` resolved for ``ranks`` ranks; NCCL without a GPU per rank is an
    :class:`InputError` naming both numbers."""
    try:
        return resolve_backend(args.backend, ranks)
    except ValueError as e:
        raise InputError(f"--backend {args.backend}: {e}") from None


def check(
    args, *, at_least: dict | None = None, at_most: dict | None = None, positive: tuple = ()
) -> None:
    """``at_least={"steps": 1}``: ``args.steps >= 1``; ``at_most``: ``<=``; ``positive``: ``> 0``
    and finite. The first rule broken raises :class:`InputError`."""
    for name, lo in (at_least or {}).items():
        v = getattr(args, name)
        if v < lo:
            raise InputError(f"{flag(name)} ({v}) must be >= {lo}")
    for name, hi in (at_most or {}).items():
        v = getattr(args, name)
        if v > hi:
            raise InputError(f"{flag(name)} ({v}) must be <= {hi} on one machine")
    for name in positive:
        v = getattr(args, name)
        if not (v > 0 and math.isfinite(v)):
            raise InputError(f"{flag(name)} ({v}) must be > 0")


def check_writable(path: str | None, flag_name: str, *, make_folder: bool = False) -> None:
    """Refuse now, before minutes of measuring, a destination the run could not write at its end:
    a folder missing (``make_folder``: made, for a default path), not writable (a read-only
    checkout), or ``path`` itself a folder or a read-only file. ``InputError`` names the flag."""
    if not path:
        return
    target = os.path.abspath(path)
    folder = os.path.dirname(target)
    said = f"{flag_name} {path}"
    if os.path.isdir(target):
        raise InputError(f"{said}: is a folder; give a file's path (nothing was measured)")
    if make_folder and not os.path.exists(folder):
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as e:
            raise InputError(f"{said}: cannot make folder {folder} ({e.strerror})") from None
    if not os.path.isdir(folder):
        raise InputError(f"{said}: folder {folder} does not exist (nothing was measured)")
    if os.path.exists(target) and not os.access(target, os.W_OK):
        raise InputError(f"{said}: the file is read-only (nothing was measured)")
    if not os.path.exists(target) and not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(
            f"{said}: folder {folder} is not writable (a read-only checkout?); give --out "
            "a path you can write (nothing was measured)"
        )


def emit(args, measure, show) -> int:
    """Run ``measure()`` (its prints go to stderr under ``--json``), then print the result: one
    JSON object under ``--json``, else ``show(result)``; errors as :func:`_one_line_errors`."""
    name = f"minipar bench {getattr(args, 'bench', '') or ''}".rstrip()
    with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout), progress(name):
        result = _one_line_errors(measure)
    if args.json:
        print_json(result)
    else:
        show(result)
    return 0


@contextlib.contextmanager
def progress(name: str, every: float | None = None):
    """``<name>: still measuring after N s`` on stderr every ``every`` seconds (default
    :data:`PROGRESS_S`) until the block ends."""
    every = PROGRESS_S if every is None else every
    done, t0 = threading.Event(), time.monotonic()

    def beat():
        while not done.wait(every):
            print(
                f"{name}: still measuring after {time.monotonic() - t0:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    thread = threading.Thread(target=beat, name="bench-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)


def fit_text(fit: dict) -> str:
    """An α-β fit for people: α and bandwidth, or why the fit failed."""
    if not fit["bandwidth"]:
        return fit["error"]
    return f"α {fit['alpha'] * 1e6:.0f} µs, {fit['bandwidth'] / 1e9:.2f} GB/s per direction"


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")


def _one_line_errors(measure):
    """``measure()``, with a rank's error (:class:`minipar.runtime.launch.RankError`, whose
    message carries the rank's whole traceback) and an allocation that failed here raised as
    one :class:`InputError` line: the rank, the error's first line, what to try."""
    from minipar.runtime.launch import RankError  # noqa: PLC0415 (lazy: launcher)

    try:
        return measure()
    except RankError as e:
        if e.rank is None:  # the ranks never started: its cause, not a traceback
            why = f"the ranks could not start: {_first_line(e.summary)}"
            cause = getattr(e, "cause", "")
            raise InputError(why + (f" (likely cause: {cause})" if cause else "")) from None
        said = e.summary if e.summary.startswith("died") else f"raised {_first_line(e.summary)}"
        hint = _memory_hint(e.summary)
        raise InputError(f"rank {e.rank} {said}{hint}") from None
    except MemoryError as e:
        raise InputError(f"out of memory: MemoryError {_first_line(e)}{_memory_hint('')}") from None
    except RuntimeError as e:  # torch's allocators raise RuntimeError subclasses
        if not _memory_hint(str(e)):
            raise
        raise InputError(f"{_first_line(e)}{_memory_hint(str(e))}") from None


def _memory_hint(text: str) -> str:
    low = text.lower()
    words = ("out of memory", "can't allocate memory", "cannot allocate memory", "memoryerror")
    if text and not any(w in low for w in words):
        return ""
    return " (an allocation failed: try smaller sizes, fewer ranks or a smaller model)"
