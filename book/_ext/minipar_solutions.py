"""``{solution-code} ../exercises/<chapter>/solutions/NN_name.py``: a solution script as a reader
should see it in a solution dropdown.

The scripts carry the markers the starter generator and the grader need (``# %% [markdown]``
cells with the task text, ``# %% [check]`` cells, ``# BEGIN SOLUTION`` / ``# END SOLUTION``,
``from minipar.grading import check``). This directive drops them and shows the code that
remains, highlighted as Python; the page states the task above it, so the markdown cells would
only repeat it.
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

MARKERS = re.compile(r"^\s*# (BEGIN|END) SOLUTION\s*$")


def clean_solution(text: str) -> str:
    """The script without markdown cells, check cells, cell and solution markers."""
    out, skip = [], False
    for line in text.splitlines():
        if line.startswith("# %%"):
            skip = "[markdown]" in line or "[check]" in line
            continue
        if skip or MARKERS.match(line) or line.strip() == "from minipar.grading import check":
            continue
        out.append(line)
    code = re.sub(r"\n{3,}", "\n\n\n", "\n".join(out)).strip("\n")
    return code + "\n"


class SolutionCode(SphinxDirective):
    required_arguments = 1
    has_content = False

    def run(self):
        rel, path = self.env.relfn2path(self.arguments[0])
        self.env.note_dependency(rel)
        code = clean_solution(Path(path).read_text(encoding="utf-8"))
        block = nodes.literal_block(code, code, language="python")
        return [block]


def setup(app):
    app.add_directive("solution-code", SolutionCode)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
