"""Run a book build and show its progress as one line per notebook (``make book``, ``make
book-strict``).

    python scripts/book_progress.py jupyter-book build . -W -n --keep-going

Quiet, ``jupyter-book build`` says nothing while it runs the chapter notebooks (minutes); verbose,
it prints hundreds of lines. This wrapper runs it verbose and keeps, from its standard output,
only myst-nb's lines about each notebook, rewritten as::

    book: running notebooks/collectives.ipynb ...
    book: notebooks/collectives.ipynb ran in 41 s
    book: notebooks/memory_time.ipynb unchanged since its last run (cached)

and a closing line naming the site's folder. Standard error (Sphinx's warnings and errors, a
failed cell) passes through unchanged, except the one line every kernel prints about
unencrypted loopback TCP (jupyter_client provisions no CurveZMQ keys). The exit status is the
build's, so ``-W`` still fails on the first warning.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading

ANSI = re.compile(r"\x1b\[[0-9;]*m")
NOTEBOOK = re.compile(r"^(?P<path>\S+\.ipynb): (?P<what>.*?)(?: \[mystnb\])?$")
RAN = re.compile(r"Executed notebook in (?P<s>[0-9.]+) seconds")
SITE = re.compile(r"^The HTML pages are in (?P<dir>\S+?)\.?$")
PROBLEMS = re.compile(
    r"^(build finished with problems|build succeeded, \d+ warning|There was an error)"
)
KERNEL_TCP = "Kernel is running over TCP without encryption"


def progress_line(line: str) -> str | None:
    """The progress line for one line of the build's standard output, or None to drop it."""
    line = ANSI.sub("", line).rstrip()
    m = NOTEBOOK.match(line)
    if m:
        path = m.group("path")
        path = os.path.relpath(path) if os.path.isabs(path) else path
        what = m.group("what")
        if what.startswith("Executing notebook using"):
            return f"book: running {path} ..."
        ran = RAN.match(what)
        if ran:
            return f"book: {path} ran in {float(ran.group('s')):.0f} s"
        if what.startswith("Using cached notebook"):
            return f"book: {path} unchanged since its last run (cached)"
        return None
    if PROBLEMS.match(line):  # Sphinx's closing count of warnings
        return f"book: {line}"
    m = SITE.match(line)
    if m:
        return f"book: the site is in {m.group('dir')} (open {m.group('dir')}/index.html)"
    return None


def _pass_stderr(stream) -> None:
    for line in stream:
        if KERNEL_TCP not in line:
            sys.stderr.write(line)
            sys.stderr.flush()


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: book_progress.py COMMAND [ARG...]", file=sys.stderr)
        return 2
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace"
    )
    errors = threading.Thread(target=_pass_stderr, args=(proc.stderr,), daemon=True)
    errors.start()
    try:
        for line in proc.stdout:
            shown = progress_line(line)
            if shown:
                print(shown, flush=True)
        code = proc.wait()
    except KeyboardInterrupt:  # Ctrl-C reached the build too (one process group): let it end
        code = proc.wait()
        print("book: stopped by SIGINT", file=sys.stderr)
        return 130
    errors.join(timeout=10)
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
