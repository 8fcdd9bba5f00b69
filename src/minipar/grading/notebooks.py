"""Exercise notebooks from one source of truth.

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

From it we build the learner's notebook ``exercises/<chapter>/NN_name.ipynb`` (each solution block
becomes ``raise NotImplementedError``) and, for tests, the solved notebook. A ``[check]`` cell gets
``# NBVAL_CHECK_OUTPUT`` and, as stored output, the PASS line of every task it checks, so
``pytest --nbval-lax`` on a learner's notebook passes exactly when every check passes.

``python -m minipar.grading.notebooks`` rebuilds every starter; ``--check`` fails if one is stale.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

CHECK_MARK = "# NBVAL_CHECK_OUTPUT"
_CELL = re.compile(r"^# %%(?: \[(markdown|check)\])?[^\n]*$", re.M)
_TASK = re.compile(r"""check\(\s*["']([\w.]+)["']""")
_BLOCK = re.compile(r"^([ \t]*)# BEGIN SOLUTION[^\n]*\n.*?^[ \t]*# END SOLUTION[^\n]*\n", re.M | re.S)
_HINT = "raise NotImplementedError(\"your code here\")"


def _cells(source: str):
    """Yield (kind, text) for each ``# %%`` cell of a percent-format script."""
    marks = list(_CELL.finditer(source))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(source)
        yield (m.group(1) or "code"), source[m.end():end].strip("\n")


def _markdown(text: str) -> str:
    return "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                     for line in text.splitlines())


def build(script: Path, solved: bool) -> nbformat.NotebookNode:
    """The learner's notebook (``solved=False``) or the reference notebook (``solved=True``)."""
    from minipar.grading import pass_line

    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                  "language": "python"},
                   "language_info": {"name": "python"}}
    for kind, text in _cells(script.read_text()):
        if kind == "markdown":
            nb.cells.append(nbformat.v4.new_markdown_cell(_markdown(text)))
            continue
        if solved:
            text = re.sub(r"^[ \t]*# (BEGIN|END) SOLUTION[^\n]*\n", "", text + "\n", flags=re.M)
        else:
            text = _BLOCK.sub(lambda m: f"{m.group(1)}{_HINT}\n", text + "\n")
        text = text.rstrip("\n")
        if kind == "check":
            lines = "".join(pass_line(t) + "\n" for t in _TASK.findall(text))
            cell = nbformat.v4.new_code_cell(f"{CHECK_MARK}\n{text}")
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=lines)]
            cell.metadata = {"tags": ["check"]}
            cell.execution_count = 1  # nbval compares only cells marked as run
        else:
            cell = nbformat.v4.new_code_cell(text)
        nb.cells.append(cell)
    for i, cell in enumerate(nb.cells):  # stable ids keep committed notebooks diff-free
        cell.id = f"{script.stem}-{i}"
    return nb


def exercise_namespace(script: Path, solved: bool) -> dict:
    """Run the code cells (not the check cells) of the solved or starter notebook of ``script``
    and return their namespace: how tests get a reference solution or an untouched starter.
    Its ``__name__`` is not an importable module, so cloudpickle ships its functions by value."""
    ns = {"__name__": "exercise"}
    for cell in build(Path(script), solved=solved).cells:
        if cell.cell_type == "code" and CHECK_MARK not in cell.source:
            exec(compile(cell.source, f"<{Path(script).stem}>", "exec"), ns)  # noqa: S102
    return ns


def scripts(root: Path = Path("exercises")) -> list[Path]:
    return sorted(root.glob("*/solutions/[0-9][0-9]_*.py"))


def starter_path(script: Path) -> Path:
    return script.parent.parent / (script.stem + ".ipynb")


def render(nb) -> str:
    return nbformat.writes(nb) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    stale = []
    for script in scripts():
        text, target = render(build(script, solved=False)), starter_path(script)
        if "--check" in argv:
            if not target.exists() or target.read_text() != text:
                stale.append(str(target))
        else:
            target.write_text(text)
            print(f"wrote {target}")
    if stale:
        print("stale starter notebooks (run `make exercises`): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
