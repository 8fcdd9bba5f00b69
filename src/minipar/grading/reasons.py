"""From an exception raised while checking to the learner's one-line reason.

The reason names the learner's own line (the innermost frame outside the course package, the
standard library and torch): in this process from the traceback, on a rank from its formatted
traceback, in a rank that died from the ``faulthandler`` stack in its stderr.
"""

from __future__ import annotations

import io
import linecache
import re
import tokenize
import traceback
from pathlib import Path

from minipar.grading.errors import CheckTimeLimit, GradeFailure

NOT_IMPLEMENTED = "not implemented yet (the starter code still raises NotImplementedError)"
_PACKAGE = str(Path(__file__).resolve().parents[1])  # .../minipar
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)\s*\n(?:(\s+)(\S[^\n]*)\n)?', re.M)
_DUMP_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')  # faulthandler's format
HINT = (
    "does every rank make the same collective calls, in the same order, and does every "
    "send have a matching recv?"
)
LEARNER_TEXT_LIMIT = 400  # characters of a learner's own exception message


def one_line(text: str, limit: int | None = None) -> str:
    """``text`` on one line. With ``limit``, cut at a word boundary and say how much is left
    out (a learner's exception can carry a whole tensor); a checker's reason is never cut."""
    line = " ".join(str(text).split())
    if limit is None or len(line) <= limit:
        return line
    cut = line.rfind(" ", 0, limit)
    cut = cut if cut > limit // 2 else limit
    return f"{line[:cut]} … ({len(line) - cut} more characters)"


def is_library(filename: str) -> bool:
    """A frame of the course package, the standard library, torch or another installed
    package: never the learner's line."""
    f = filename.replace("\\", "/")
    return (
        f.startswith(_PACKAGE)
        or "/site-packages/" in f
        or "/lib/python" in f
        or "/torch/" in f
        or f.startswith("<frozen")
    )


def _code_only(code: str) -> str:
    """A source line without its trailing comment (tokenized, so a ``#`` in a string stays)."""
    code = code.strip()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                return code[: tok.start[1]].rstrip() or code
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return code


def _where(line: int, func: str, code: str | None) -> str:
    where = f"line {line}" + (f" of {func}" if func not in ("<module>", "") else "")
    return f"{where}: {_code_only(code)}" if code and code.strip() else where


def learner_line(exc: BaseException) -> str | None:
    """'line 7 of ring_all_reduce: chunks = x.chunk(n)' for the learner's innermost frame."""
    found = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        co = frame.f_code
        if not is_library(co.co_filename):
            found = _where(line, co.co_name, linecache.getline(co.co_filename, line))
    if isinstance(exc, SyntaxError) and exc.lineno:
        return _where(exc.lineno, "", exc.text)
    return found


def remote_learner_line(remote_traceback: str) -> str | None:
    """The same for a rank's formatted traceback (a string)."""
    found = None
    for m in _FRAME.finditer(remote_traceback or ""):
        if not is_library(m.group(1)):
            found = _where(int(m.group(2)), m.group(3), m.group(5))
    return found


def dump_frames(dump: str) -> list[tuple[str, str, str]]:
    """The (file, line, function) frames, innermost first, of the thread in a ``faulthandler``
    stack that runs learner code ([] if none does): the thread that handled the signal, listed
    first, may be a library thread with no Python frame."""
    for block in re.split(r"most recent call first\):", dump or "")[1:]:
        frames = _DUMP_FRAME.findall(block)
        if any(not is_library(f) for f, _, _ in frames):
            return frames
    return []


def dump_learner_line(dump: str) -> str | None:
    """The learner's innermost frame in a ``faulthandler`` stack (:func:`dump_frames`), with its
    source line from this process's ``linecache`` (notebook cells included)."""
    for f, line, func in dump_frames(dump):
        if not is_library(f):
            return _where(int(line), func, linecache.getline(f, int(line)))
    return None


def stderr_tail(text: str, lines: int = 4) -> str:
    """The last lines a dead rank wrote to its stderr, without faulthandler's stack and list of
    extension modules; ``" | "``-joined."""
    text = (text or "").split("Extension modules:", 1)[0]
    head = re.split(
        r"\n(?:Stack|Current thread [^\n]*|Thread [^\n]*) \(most recent call "
        r"first\):",
        "\n" + text,
        maxsplit=1,
    )[0]
    kept = [ln.strip() for ln in head.splitlines() if ln.strip()]
    return " | ".join(kept[-lines:])


def reason_for(exc: BaseException) -> str:
    """A learner-facing one-line reason for an exception raised while checking."""
    from minipar.runtime.launch import RankError, StartError  # noqa: PLC0415 (lazy: launcher)

    if isinstance(exc, (GradeFailure, CheckTimeLimit)):
        return one_line(exc)
    if isinstance(exc, StartError):
        return one_line(f"the ranks could not start: {exc.summary}; likely cause: {exc.cause}")
    if isinstance(exc, RankError):
        summary = exc.summary or ""
        if summary.startswith("NotImplementedError"):
            return NOT_IMPLEMENTED
        if "timed out" in summary.lower():  # gloo's own timeout (a plain launch.run)
            return one_line(f"rank {exc.rank} timed out waiting in a collective or recv -- {HINT}")
        if summary.startswith("died"):  # "died (killed by signal 6 (SIGABRT)) without..."
            where, tail = dump_learner_line(exc.stderr_tail), exc.stderr_tail or ""
            return one_line(
                f"rank {exc.rank} {summary}"
                + (f" at {where}" if where else "")
                + f"; the last lines of its stderr: {stderr_tail(tail) or '(empty)'}",
                2 * LEARNER_TEXT_LIMIT,
            )
        where = remote_learner_line(exc.remote_traceback)
        return one_line(
            f"your code raised on rank {exc.rank}: "
            f"{one_line(summary, LEARNER_TEXT_LIMIT)}" + (f" ({where})" if where else "")
        )
    if isinstance(exc, NotImplementedError):
        return NOT_IMPLEMENTED
    if isinstance(exc, TimeoutError):  # launch.run's own timeout
        return one_line(f"timed out: {exc} -- {HINT}")
    where = learner_line(exc)
    return one_line(
        f"your code raised {type(exc).__name__}: "
        f"{one_line(exc, LEARNER_TEXT_LIMIT)}" + (f" ({where})" if where else "")
    )
