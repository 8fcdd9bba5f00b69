"""The ``minipar`` console script.

Each subcommand lives beside the code it drives and registers itself through the
``add_parser(subparsers)`` of a module imported below. Bad input exits with status 2 and
one line naming the rule and the value (:class:`minipar.errors.InputError`), never a traceback.
SIGINT, SIGTERM and SIGHUP stop any command with one line (``minipar bench: stopped by
SIGTERM``) and status 128 + N, the ranks and the launcher's socket folder gone first (a signal
during that cleanup is held until it ends); a closed pipe (``minipar plan ... | head``) ends it
quietly with status 141, as ``yes | head`` does. ``minipar`` alone lists the commands. The top
layer: it imports the library, never the other way round.
"""

from __future__ import annotations

import os
import signal
import sys
import threading


def _stopped_early(signum, frame):
    """A stop signal while the commands are imported or parsed (nothing started yet): one line
    and 128 + N, not the import's 20-line traceback."""
    os.write(2, f"minipar: stopped by {signal.Signals(signum).name}\n".encode())
    os._exit(128 + signum)


def _early_handlers() -> dict:
    """:func:`_stopped_early` for the stop signals that still have their default handling (a
    test runner's own handler is left alone); the handlers before, to put back."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    before = {}
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        s = getattr(signal, name, None)
        if s is not None and signal.getsignal(s) in (signal.default_int_handler, signal.SIG_DFL):
            before[s] = signal.signal(s, _stopped_early)
    return before


_BEFORE_IMPORTS = _early_handlers()

import argparse  # noqa: E402 (after the early signal handlers: imports take ~0.3 s)
import codecs  # noqa: E402
import contextlib  # noqa: E402
import importlib  # noqa: E402

from minipar.bench import cli as bench_cli  # noqa: E402  # bench collectives, bench dp, ...
from minipar.bench import gpu as calibrate_cli  # noqa: E402 (calibrate gpu)
from minipar.cost import cli as cost_cli  # noqa: E402 (params, flops, memory, ..., plan)
from minipar.errors import InputError  # noqa: E402

try:  # grade's third-party imports come from the [grade] extra, absent from a base install
    from minipar.grading import cli as grade_cli
except ModuleNotFoundError as e:
    if (e.name or "").startswith("minipar"):
        raise
    grade_cli, _GRADE_MISSING = None, e.name


for _s, _h in _BEFORE_IMPORTS.items():  # imported: a caller's own handling is back
    signal.signal(_s, _h)

# An ASCII terminal (PYTHONIOENCODING=ascii, LANG=C on an old Python): the symbols the tables and
# help use are written out ("eta", "x", "us"), any other character as "?", never an error.
_ASCII = {"η": "eta", "×": "x", "µ": "u", "·": "*", "≥": ">=", "≤": "<=", "±": "+-", "→": "->"}
_ASCII |= {"α": "alpha", "β": "beta", "λ": "lambda", "τ": "tau", "Ψ": "Psi", "−": "-", "–": "-"}
_ASCII |= {"—": "-", "…": "...", "²": "^2", "³": "^3", "⁹": "^9", "≈": "~", "Σ": "sum", "’": "'"}


def _spell_out(err: UnicodeEncodeError):
    return "".join(_ASCII.get(c, "?") for c in err.object[err.start : err.end]), err.end


codecs.register_error("minipar-ascii", _spell_out)


def _plain_streams() -> None:
    """stdout and stderr spell out what their encoding cannot write (:data:`_ASCII`)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="minipar-ascii")


DESCRIPTION = (
    "minipar: the course's cost model (params, flops, memory, activations, bubble, collective, "
    "plan), its benchmarks and calibration on this machine, and the exercises' grader. "
    "`minipar COMMAND --help` describes each."
)
"""What ``minipar --help`` says first: plain words (the module docstring is reStructuredText)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, no usage dump
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="minipar", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in (cost_cli, bench_cli, calibrate_cli):
        module.add_parser(sub)
    if grade_cli is None:  # a missing extra is said, never a silently absent command
        _needs_extra(sub, "grade", "grade", _GRADE_MISSING)
    else:
        grade_cli.add_parser(sub)
    return parser


def _needs_extra(sub, command: str, extra: str, missing: str) -> None:
    """``command`` without its extra installed: it exits 2 saying what to install (so `minipar
    bench` and `minipar plan` work on a GPU node that installed the base package only)."""

    def run(args):
        raise InputError(
            f"needs the [{extra}] extra ({missing} is not installed): pip install -e '.[{extra}]'"
        )

    p = sub.add_parser(command, help=f"(needs the [{extra}] extra)")
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)


class Stopped(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP reached a command: unwind as Ctrl-C does (every cleanup that
    stops ranks on KeyboardInterrupt runs), then exit with status 128 + ``signum``."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


# Commands that import torch: imported first with signals held. A signal inside torch's import
# leaves a half-loaded C extension behind (numpy's), and the cleanup's next import then fails
# ("cannot load module more than once per process", or an abort) instead of stopping cleanly.
_IMPORT_FIRST = {"bench": "torch.distributed", "calibrate": "torch"}
_STOP_SIGNALS = [getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n)]
_held: list[int] = []  # signals that came while the cleanup held them


def _install(handler) -> dict:
    """``handler`` for SIGINT, SIGTERM and SIGHUP (main thread only); the handlers before."""
    return {s: signal.signal(s, handler) for s in _STOP_SIGNALS}


def _raise_stopped(signum, frame):
    # the first stop raises; one more while the exception unwinds (it may land in a weakref's
    # or a __del__'s callback, where Python prints an exception and drops it) is held
    _install(_hold_signal)
    raise Stopped(signum)


def _hold_signal(signum, frame):
    """Keep the stop signal in :data:`_held` instead of acting on it now."""
    _held.append(signum)


@contextlib.contextmanager
def _signals(handler, after=None):
    """``handler`` for SIGINT, SIGTERM and SIGHUP inside the block (main thread only); then
    ``after``, or the handlers there were before."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = _install(handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h if after is None else after)


def _zygote() -> object | None:
    """The launcher's running zygote, if this process has one."""
    launch = sys.modules.get("minipar.runtime.launch")
    return None if launch is None else launch.zygote()


def _stop_ranks(before: object | None) -> None:
    """Stop the launcher's zygote and ranks and remove its socket folder now, not in ``atexit``
    (where a Ctrl-C printed a traceback and left the folder); only a zygote this run started,
    not the one ``before`` it (a notebook's or a test's, which its next call reuses)."""
    now = _zygote()
    if now is not None and now is not before:
        sys.modules["minipar.runtime.launch"].shutdown()


def _quiet_stdout() -> None:
    """The reader of stdout went away: point stdout at /dev/null so the interpreter's final
    flush has nowhere to fail."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def main(argv: list[str] | None = None) -> int:
    """The console script (``argv`` None: ``sys.argv``, and the signal handlers stay holding
    until the interpreter exits); tests pass ``argv`` and get their handlers back."""
    if argv is None:  # the program: a stop while the parser is built is one line too
        _early_handlers()
    _plain_streams()
    try:
        return _main(argv)
    except BrokenPipeError:  # `minipar ... | head`: the reader has all it wanted
        _quiet_stdout()
        return 128 + signal.SIGPIPE
    finally:
        if argv is None:
            _ignore_from_now_on()


def _ignore_from_now_on() -> None:
    """Ignore the stop signals once the status is decided: a holding handler would not last (the
    interpreter's finalisation resets Python handlers to the default, so a second Ctrl-C there
    killed the process: status -2, not the 128+N chosen); an ignored one stays ignored."""
    if threading.current_thread() is threading.main_thread():
        _install(signal.SIG_IGN)


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    program, argv = argv is None, sys.argv[1:] if argv is None else argv
    if not argv:  # the commands, not just "required: command"
        parser.print_help(sys.stderr)
        return 2
    args = parser.parse_args(argv)
    status, stopped, before = 0, None, _zygote()
    try:
        if getattr(args, "precheck", None) is not None:  # bad input: one line, no torch import
            args.precheck(args)
        if args.command in _IMPORT_FIRST:
            with _signals(_hold_signal):
                importlib.import_module(_IMPORT_FIRST[args.command])
        # the program itself: a signal after the command (in the interpreter's exit) is held,
        # never a traceback or a second line
        with _signals(_raise_stopped, after=_hold_signal if program else None):
            try:
                if _held:  # came while torch was imported: stop before starting anything
                    raise Stopped(_held.pop(0))
                status = int(args.func(args) or 0)
                sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit
            finally:
                with _signals(_hold_signal):  # a signal now waits for the ranks to be gone
                    _stop_ranks(before)
    except InputError as e:
        print(f"minipar {args.command}: error: {e}", file=sys.stderr)
        status = 2
    except KeyboardInterrupt as e:  # Ctrl-C or Stopped: one line, not a traceback
        stopped = getattr(e, "signum", signal.SIGINT)
    if _held and stopped is None and status < 128:  # not already reported by the command
        stopped = _held[0]
    _held.clear()
    if stopped is not None:
        print(f"minipar {args.command}: stopped by {signal.Signals(stopped).name}", file=sys.stderr)
        return 128 + stopped
    return status


if __name__ == "__main__":  # python -m minipar.cli
    raise SystemExit(main())
