"""Run a book build and show its progress as one line per notebook (``make book``, ``make
book-strict``).

    python scripts/book_progress.py [--jobs N] jupyter-book build . -W -n --keep-going

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

With ``--jobs N`` the chapter notebooks of ``_toc.yml`` that the cache (``_build/.jupyter_cache``)
does not hold are first run N at a time, each from a clean kernel in its own folder, as myst-nb
runs them (the same timeout and error rule), and their outputs stored in that cache; the build
then finds every notebook cached. Sphinx runs notebooks one by one, and a notebook's ranks leave
cores idle while its kernel starts and imports. A notebook that fails here is left uncached: the
build runs it again and reports the failing cell its usual way. A ``jupyter-book`` command is then
run as Sphinx's parallel build with N processes: it reads and writes N pages at a time
(``jupyter-book build`` has no option for it, so this script runs jupyter-book's own command
line with that one default changed). A fresh checkout's build reads every page and draws every
figure in one process: on an idle 2-core machine with the notebooks cached, 48.5 s serially and
29.4 s with N = 2, both 48 CPU-s, and the same pages.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from minipar.grading.notebooks import import_nbformat

# before jupyter_cache, which imports nbformat too: 2.3 CPU-s less in this process and in each
# one that runs a notebook
nbformat = import_nbformat()
from jupyter_cache import get_cache  # noqa: E402 (after import_nbformat)
from jupyter_cache.base import CacheBundleIn  # noqa: E402
from jupyter_cache.executors.utils import single_nb_execution  # noqa: E402

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


CACHE = Path("_build/.jupyter_cache")
TIMEOUT_S = 900  # _config.yml's execute.timeout: a cell's limit on output, as myst-nb applies it


def toc_notebooks(toc: Path = Path("_toc.yml")) -> list[Path]:
    """The notebooks ``_toc.yml`` names, longest code first (the longest run starts first)."""

    names = re.findall(r"file:\s*(\S+)", toc.read_text())
    paths = [Path(n + ".ipynb") for n in names if Path(n + ".ipynb").is_file()]

    def code_length(path: Path) -> int:
        nb = nbformat.read(path, as_version=4)
        return sum(len(c.source) for c in nb.cells if c.cell_type == "code")

    return sorted(paths, key=code_length, reverse=True)


def execute_one(path: str, out: str) -> int:
    """Run one notebook as myst-nb's cache mode does; write it, executed, to ``out``."""
    nb = nbformat.read(path, as_version=4)
    cwd = str(Path(path).resolve().parent)
    result = single_nb_execution(nb, cwd=cwd, timeout=TIMEOUT_S, allow_errors=False)
    if result.err is not None:
        print(ANSI.sub("", result.exc_string), file=sys.stderr)
        return 1
    nb.metadata["minipar_execution_seconds"] = result.time
    nbformat.write(nb, out)
    return 0


def prerun(jobs: int) -> None:
    """Run, ``jobs`` at a time, the notebooks the cache does not hold, and cache them."""
    cache = get_cache(str(CACHE))
    todo = []
    for path in toc_notebooks():
        try:
            cache.match_cache_notebook(nbformat.read(path, as_version=4))
        except KeyError:
            todo.append(path)
    running: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        while todo or running:
            while todo and len(running) < jobs:
                path = todo.pop(0)
                out = Path(tmp) / path.name
                cmd = [sys.executable, __file__, "--execute-one", str(path), str(out)]
                proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, errors="replace")
                threading.Thread(target=_pass_stderr, args=(proc.stderr,), daemon=True).start()
                running[proc] = (path, out, time.monotonic())
                print(f"book: running {path} ...", flush=True)
            done = [p for p in running if p.poll() is not None]
            for proc in done:
                path, out, start = running.pop(proc)
                if proc.returncode != 0:
                    print(f"book: {path} failed; the build runs it again to report it", flush=True)
                    continue
                nb = nbformat.read(out, as_version=4)
                seconds = nb.metadata.pop("minipar_execution_seconds")
                record = cache.add_nb_to_project(str(path.resolve()))
                bundle = CacheBundleIn(nb, record.uri, data={"execution_seconds": seconds})
                cache.cache_notebook_bundle(bundle, check_validity=False, overwrite=True)
                print(f"book: {path} ran in {time.monotonic() - start:.0f} s", flush=True)
            if not done:
                time.sleep(0.2)


def jupyter_book(jobs: int, args: list[str]) -> None:
    """``jupyter-book ARGS`` whose Sphinx build runs ``jobs`` processes (Sphinx's ``-j``)."""
    import jupyter_book.sphinx  # noqa: PLC0415 (the Sphinx process only: not the wrapper's)
    from jupyter_book.cli.main import main as jupyter_book_main  # noqa: PLC0415 (only this process: Sphinx)

    # the command imports build_sphinx from this module when it runs, so it finds this one
    build = functools.partial(jupyter_book.sphinx.build_sphinx, jobs=jobs)
    jupyter_book.sphinx.build_sphinx = build
    sys.argv = ["jupyter-book", *args]
    jupyter_book_main()  # exits with the build's status


def parallel_build(argv: list[str], jobs: int) -> list[str]:
    """``argv``, or where it runs the ``jupyter-book`` command, the same build with ``jobs``
    Sphinx processes (:func:`jupyter_book`)."""
    if jobs > 1 and Path(argv[0]).name == "jupyter-book":
        return [sys.executable, __file__, "--jupyter-book", str(jobs), *argv[1:]]
    return argv


def main(argv: list[str]) -> int:
    if argv[:1] == ["--execute-one"] and len(argv) == 3:
        return execute_one(argv[1], argv[2])
    if argv[:1] == ["--jupyter-book"] and len(argv) > 1 and argv[1].isdigit():
        jupyter_book(int(argv[1]), argv[2:])
        return 0
    if argv[:1] == ["--jobs"] and len(argv) > 2 and argv[1].isdigit():
        try:
            prerun(int(argv[1]))
        except KeyboardInterrupt:  # the notebooks' kernels got SIGINT too and end with them
            print("book: stopped by SIGINT", file=sys.stderr)
            return 130
        argv = parallel_build(argv[2:], int(argv[1]))
    if not argv:
        print("usage: book_progress.py [--jobs N] COMMAND [ARG...]", file=sys.stderr)
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
