"""Exercise notebooks from one source of truth, and the registry of what each must check.

Each exercise is written once, as a solved percent-format script
``exercises/<chapter>/solutions/NN_name.py``::

    # %% [markdown]
    # ## Task 1: ring all-reduce
    # %%
    def ring_all_reduce(rank, world_size, x):
        # BEGIN SOLUTION
        ...
        # END SOLUTION
    # %% [check]
    check("collectives.ring_all_reduce", ring_all_reduce)

From it :func:`build` makes the learner's notebook ``exercises/<chapter>/NN_name.ipynb`` and, for
tests, the solved one; :func:`expected_tasks` reads the tasks its notebook must pass, and
:func:`find_script` finds the script of a learner's notebook, so a deleted check cell is a
failed task, never a vanished one. :func:`graded_copy` turns a learner's notebook into what
``minipar grade`` runs: nothing the learner's file has saved reaches it.

``python -m minipar.grading.notebooks [CHAPTER...]`` writes the missing starters (:func:`main`);
``--force`` overwrites changed ones only after naming them and a typed ``yes``, keeping backups.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from minipar.grading import learner_line
from minipar.grading.limits import CELL_LIMIT, KERNEL_MEMORY_BYTES, busy_factor, cpu_time_limit

if TYPE_CHECKING:  # imported by the functions that need it (import_nbformat)
    import nbformat

_CELL = re.compile(r"^# %%(?: \[(markdown|check)\])?[^\n]*$", re.M)
_TASK = re.compile(r"""check\(\s*["']([\w.]+)["']""")
_NBVAL = re.compile(r"^[ \t]*# *NBVAL_\w*[^\n]*\n?", re.M)
_BLOCK = re.compile(
    r"^([ \t]*)# BEGIN SOLUTION[^\n]*\n.*?^[ \t]*# END SOLUTION[^\n]*\n", re.M | re.S
)
_HINT = 'raise NotImplementedError("your code here")'
GIT_WAIT_S = 30.0  # `git show` of one starter, idle machine (times busy_factor())
COURSE_EXERCISES = Path(__file__).resolve().parents[3] / "exercises"  # a source checkout


def import_nbformat():
    """``nbformat``, imported without jsonschema's checker of the "iri" string format.

    jsonschema (which nbformat validates with) imports ``rfc3987_syntax`` when it is installed
    (jupyter-events pulls it in) and builds its grammars at import: 2.3 of the 2.7 s
    ``import nbformat`` took on an idle 2-core machine, in every ``minipar grade``. No notebook
    format uses "iri". The module is hidden only while nbformat imports: a later ``import
    rfc3987_syntax`` elsewhere in the process works as usual."""
    if "nbformat" in sys.modules:
        return sys.modules["nbformat"]
    hidden = "rfc3987_syntax" not in sys.modules
    if hidden:
        sys.modules["rfc3987_syntax"] = None  # an ImportError, which jsonschema expects
    try:
        import nbformat  # noqa: PLC0415 (lazy: grade extra)
    finally:
        if hidden and sys.modules.get("rfc3987_syntax", 0) is None:
            del sys.modules["rfc3987_syntax"]
    return nbformat


def _cells(source: str):
    """Yield (kind, text) for each ``# %%`` cell of a percent-format script."""
    marks = list(_CELL.finditer(source))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(source)
        yield (m.group(1) or "code"), source[m.end() : end].strip("\n")


def _markdown(text: str) -> str:
    return "\n".join(
        line[2:] if line.startswith("# ") else line.lstrip("#") for line in text.splitlines()
    )


def build(script: Path, solved: bool) -> "nbformat.NotebookNode":
    """The learner's notebook (``solved=False``: each solution block becomes ``raise
    NotImplementedError``) or the reference notebook (``solved=True``), without outputs (the
    grader reads each check's outcome from its side log); its metadata
    ``minipar.exercise = "<chapter>/NN_name"`` names its script."""
    nbformat = import_nbformat()

    script, nb = Path(script), nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
        "minipar": {"exercise": f"{script.parent.parent.name}/{script.stem}"},
    }
    for kind, text in _cells(script.read_text()):
        if kind == "markdown":
            nb.cells.append(nbformat.v4.new_markdown_cell(_markdown(text)))
            continue
        if solved:
            text = re.sub(r"^[ \t]*# (BEGIN|END) SOLUTION[^\n]*\n", "", text + "\n", flags=re.M)
        else:
            text = _BLOCK.sub(lambda m: f"{m.group(1)}{_HINT}\n", text + "\n")
        cell = nbformat.v4.new_code_cell(text.rstrip("\n"))
        if kind == "check":
            cell.metadata = {"tags": ["check"]}
        nb.cells.append(cell)
    for i, cell in enumerate(nb.cells):  # stable ids keep committed notebooks diff-free
        cell.id = f"{script.stem}-{i}"
    return nb


# ----------------------------------------------------------------------------- registry
def cell_tasks(source: str) -> list[str]:
    """Task ids that a code cell checks (its ``check("<task>", ...)`` calls), in order."""
    return _TASK.findall(source)


def expected_tasks(script: Path) -> list[str]:
    """Every task a notebook built from ``script`` must pass: its code cells' check calls."""
    found = []
    for kind, text in _cells(Path(script).read_text()):
        if kind != "markdown":
            found += [t for t in cell_tasks(text) if t not in found]
    return found


def find_script(nb_path: Path, nb=None) -> Path | None:
    """The solution script a learner's notebook was built from (its metadata first, then
    ``solutions/<stem>.py`` beside it, then the course's ``exercises/<chapter>/solutions/``), or
    None if there is none."""
    nb_path = Path(nb_path).resolve()
    meta = ((nb or {}).get("metadata", {}) or {}).get("minipar", {}) or {}
    ident = meta.get("exercise") if isinstance(meta, dict) else None
    chapter, stem = (
        ident.split("/", 1)
        if isinstance(ident, str) and "/" in ident
        else (nb_path.parent.name, nb_path.stem)
    )
    roots = [p / "exercises" for p in [*nb_path.parents, Path.cwd()]] + [COURSE_EXERCISES]
    candidates = [nb_path.parent / "solutions" / f"{stem}.py"]
    candidates += [root / chapter / "solutions" / f"{stem}.py" for root in roots]
    return next((c for c in candidates if c.is_file()), None)


# ----------------------------------------------------------------------------- graded copy
SETUP = (
    "# minipar grade: set-up (not part of the learner's notebook)\n"
    "from minipar.grading.notebooks import grading_setup as _minipar_setup\n"
    "_minipar_setup({folder!r}, {log!r})\n"
    "del _minipar_setup"
)


def graded_copy(nb, folder: str, log: str) -> tuple["nbformat.NotebookNode", list[int | None]]:
    """The notebook ``minipar grade`` runs: the learner's code cells without outputs, execution
    counts, tags and ``NBVAL_*`` markers, after the set-up cell (:func:`grading_setup`); and for
    each of its code cells the index of the learner's cell it came from (None for the set-up)."""
    nbformat = import_nbformat()

    copy = nbformat.v4.new_notebook()
    copy.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
    }
    origin: list[int | None] = [None]
    copy.cells.append(nbformat.v4.new_code_cell(SETUP.format(folder=folder, log=log)))
    for i, cell in enumerate(nb.cells):
        if cell.get("cell_type") == "code":
            copy.cells.append(nbformat.v4.new_code_cell(_NBVAL.sub("", cell.get("source") or "")))
            origin.append(i)
    return copy, origin


_MEMORY_WORDS = ("can't allocate memory", "cannot allocate memory", "out of memory")


def error_text(err: BaseException, where: str = "") -> str:
    """``"ValueError: bad (line 3: x = f())"``; a failed allocation also names the grader's
    memory limit per kernel (:data:`minipar.grading.limits.KERNEL_MEMORY_BYTES`)."""
    text = f"{type(err).__name__}: {err}".rstrip(": ") + (f" ({where})" if where else "")
    low = str(err).lower()
    if isinstance(err, MemoryError) or any(w in low for w in _MEMORY_WORDS):
        text += f" ({memory_limit_text()}: an allocation past it fails)"
    return text


def memory_limit_text() -> str:
    """``"the grader's memory limit is 8 GiB per kernel and per rank"`` (or that there is
    none)."""
    if not KERNEL_MEMORY_BYTES:
        return "the grader sets no memory limit"
    return (
        f"the grader's memory limit is {KERNEL_MEMORY_BYTES / 2**30:g} GiB per kernel and per rank"
    )


def grading_setup(folder: str, log: str) -> None:
    """First cell of a graded copy: run in the learner's folder, log checks and cell errors.

    A cell that breaks what the grader itself needs is named in the log as that cell's error,
    and the grader's part is put back so the checks still run and log: ``os.environ`` cleared
    or the log variable removed (``MINIPAR_GRADE_LOG`` is set again), ``sys.stdout`` or
    ``sys.stderr`` set to ``None`` or closed (the kernel's streams are put back). A cell that
    defines its own ``check`` is named too (the check cells would call it and grade nothing)."""
    from IPython import get_ipython  # noqa: PLC0415 (lazy: grade extra)

    os.chdir(folder)
    os.environ["MINIPAR_GRADE_LOG"] = log
    streams = {"stdout": sys.stdout, "stderr": sys.stderr}

    def write(cell: str, text: str) -> None:
        with open(log, "a", encoding="utf-8") as f:
            f.write(json.dumps({"cell": cell, "error": text}) + "\n")

    def repair(cell: str) -> None:
        """Name and undo what the cell broke of the grader's own (see the docstring)."""
        if os.environ.get("MINIPAR_GRADE_LOG") != log:
            what = "cleared os.environ" if not os.environ else "removed MINIPAR_GRADE_LOG"
            os.environ["MINIPAR_GRADE_LOG"] = log
            write(
                cell,
                f"nothing but {what} (the grader's log variable and what a launch needs; put "
                "back for the checks: leave the environment as it is)",
            )
        for name, stream in streams.items():
            now = getattr(sys, name, None)
            if now is None or getattr(now, "closed", False):
                did = f"set sys.{name} to None" if now is None else f"closed sys.{name}"
                setattr(sys, name, stream)
                write(
                    cell,
                    f"nothing but {did} (nothing printed would reach the notebook; the "
                    "kernel's stream was put back for the checks)",
                )

    bound = {"check": None}  # what the learner's ``check`` was after the last cell

    def own_check(cell: str) -> None:
        """Name the cell that binds ``check`` to something not the grader's: the check cells
        would call it, and nothing would be graded."""
        now = get_ipython().user_ns.get("check")
        if now is bound["check"]:
            return
        bound["check"] = now
        if now is not None and not getattr(now, "__module__", "").startswith("minipar.grading"):
            write(
                cell,
                f"nothing, but defined its own `check` (a {type(now).__name__}), which hides "
                "the grader's check(): the check cells call yours and nothing is graded; give "
                "yours another name",
            )

    # every learner cell runs under the grader's progress limit (minipar.grading.limits): CPU
    # time of this kernel, and waiting outside the ranks; a check inside sets its own, nested
    limit = contextlib.ExitStack()

    def arm(info):
        limit.enter_context(cpu_time_limit(CELL_LIMIT))

    def disarm(result):
        limit.close()
        repair(result.info.raw_cell)
        own_check(result.info.raw_cell)
        if (err := result.error_before_exec or result.error_in_exec) is not None:
            write(result.info.raw_cell, error_text(err, learner_line(err)))

    get_ipython().events.register("pre_run_cell", arm)
    get_ipython().events.register("post_run_cell", disarm)


# ----------------------------------------------------------------------------- helpers
def exercise_namespace(script: Path, solved: bool) -> dict:
    """Run the code cells (not the check cells) of the solved or starter notebook of ``script``
    and return their namespace: how tests get a reference solution or an untouched starter.
    Its ``__name__`` is not an importable module, so cloudpickle ships its functions by value."""
    ns = {"__name__": "exercise"}
    for cell in build(Path(script), solved=solved).cells:
        if cell.cell_type == "code" and not cell_tasks(cell.source):
            exec(compile(cell.source, f"<{Path(script).stem}>", "exec"), ns)
    return ns


def scripts(root: Path = Path("exercises")) -> list[Path]:
    return sorted(Path(root).glob("*/solutions/[0-9][0-9]_*.py"))


def starter_path(script: Path) -> Path:
    return script.parent.parent / (script.stem + ".ipynb")


def render(nb) -> str:
    nbformat = import_nbformat()

    return nbformat.writes(nb) + "\n"


def _committed(target: Path) -> str | None:
    """``target`` as the repository has it (git's index: what was committed or staged), or
    None outside a git checkout or for an untracked file. A learner's edits to the working
    copy are not the repository's starter."""
    try:
        out = subprocess.run(
            ["git", "show", f":./{target.name}"],
            cwd=target.parent,
            capture_output=True,
            text=True,
            timeout=GIT_WAIT_S * busy_factor(),
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


USAGE = """\
usage: python -m minipar.grading.notebooks [--check | --force] [CHAPTER ...]

Write the exercise notebooks that are missing from their solution scripts
(exercises/<chapter>/solutions/NN_name.py); a notebook that exists, your answers in it, is kept.
  --check   fail if a starter in the repository is not what its script builds
  --force   for course authors: also rewrite the notebooks that differ from their starter. It
            lists them and asks first (a terminal is needed), erasing the answers and outputs
            in them; each is kept beside it as NN_name.ipynb.bak-<time>
  CHAPTER   only these chapters (e.g. memory_time)"""


def _confirm(targets: list[Path]) -> bool:
    """Name the notebooks ``--force`` would overwrite and ask for ``yes`` at a terminal; refuse
    (False) when stdin is not one: erasing a learner's answers is never done unasked."""
    print(
        f"--force overwrites {len(targets)} notebook(s) that differ from their starter, erasing "
        "the answers and outputs in them: " + ", ".join(str(t) for t in targets) + " (each is "
        "kept beside it as <name>.ipynb.bak-<time>)"
    )
    if sys.stdin is None or not sys.stdin.isatty():
        print(
            "refused: --force asks before it erases answers, and stdin is not a terminal; run "
            "it in a terminal to confirm (nothing was written)",
            file=sys.stderr,
        )
        return False
    try:
        answer = input("type yes to overwrite them: ")
    except EOFError:
        answer = ""
    if answer.strip().lower() != "yes":
        print("nothing was written", file=sys.stderr)
        return False
    return True


def _overwrite(pending: list[tuple[Path, str]]) -> None:
    """Back up each notebook as ``<name>.bak-<time>`` beside it, then write its starter."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for target, text in pending:
        backup = target.with_name(f"{target.name}.bak-{stamp}")
        backup.write_bytes(target.read_bytes())
        target.write_text(text)
        print(f"wrote {target} (the version it replaced: {backup.name})")


def _sort_starters(chapters: list[str], check: bool, force: bool):
    """Write the missing starters of ``chapters`` (all if empty); return (stale: differ from
    git's copy, under ``check``; kept: existing notebooks left alone; pending: (notebook, its
    starter's text) that ``force`` would overwrite, those that differ from it)."""
    stale, kept, pending = [], [], []
    for script in scripts():
        if chapters and script.parent.parent.name not in chapters:
            continue
        text, target = render(build(script, solved=False)), starter_path(script)
        if check:
            committed = _committed(target)
            if committed is None and target.exists():
                committed = target.read_text()
            if committed != text:
                stale.append(str(target))
        elif not target.exists():
            target.write_text(text)
            print(f"wrote {target}")
        elif not force:
            kept.append(str(target))
        elif target.read_text(errors="replace") != text:
            pending.append((target, text))
    return stale, kept, pending


def main(argv: list[str] | None = None) -> int:
    """Write the starter notebooks that are **missing** (a learner's notebook is never
    overwritten unasked); ``--force`` also rewrites those that differ from their starter, after
    naming them and a ``yes`` typed at a terminal, keeping a backup of each (for course authors:
    it erases answers); ``--check`` fails if a starter in the repository (git's index; the file
    outside git) is not what its script builds. ``CHAPTER`` arguments limit it to those
    chapters."""
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        print(USAGE)
        return 0
    unknown = [a for a in argv if a.startswith("-") and a not in ("--check", "--force")]
    if unknown:
        print(f"unknown option {unknown[0]!r}: use --check, --force or --help", file=sys.stderr)
        return 2
    chapters = [a for a in argv if not a.startswith("-")]  # optional: only these chapters
    known = sorted({script.parent.parent.name for script in scripts()})
    bad = [c for c in chapters if c not in known]
    if bad:
        print(
            f"unknown chapter {bad[0]!r}: the chapters are {', '.join(known) or '(none here)'}"
            f" (in {Path('exercises').resolve()})",
            file=sys.stderr,
        )
        return 2
    stale, kept, pending = _sort_starters(chapters, "--check" in argv, "--force" in argv)
    if pending:
        if not _confirm([t for t, _ in pending]):
            return 1
        _overwrite(pending)
    if kept:
        print(
            f"kept {len(kept)} existing notebook(s), your work included (only missing starters "
            "are written)"
        )
    if stale:
        print(
            "stale starter notebooks in the repository: " + ", ".join(stale) + " (a course "
            "author rebuilds them with `python -m minipar.grading.notebooks --force`, which "
            "asks, then overwrites the notebooks and any answers in them, keeping a backup of "
            "each; then commits them)"
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
