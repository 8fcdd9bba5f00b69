"""Tracebacks from ranks point at the true cell and line, inside a real Jupyter kernel.

The old launcher rewrote every frame of a by-value function with the file of ``fn``, so a
helper from an earlier cell showed the caller's line (``helper()``) instead of its own
``raise``. This runs the learner's situation through nbclient: a kernel, cells, a rank error.
"""

import json

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow

CELLS = [
    "from minipar.runtime.launch import run, RankError",
    "def helper(x):\n    y = x + 1\n    raise ValueError(f'bad value {y}')",
    "# a later cell\ndef work(rank, world_size):\n    z = rank * 2\n"
    "    return helper(z) if rank == 1 else z",
    "import json\n"
    "try:\n"
    "    run(work, 2, backend='gloo', timeout=120)\n"
    "except RankError as e:\n"
    "    print(json.dumps(dict(tb=e.remote_traceback, rank=e.rank,\n"
    "                          helper=helper.__code__.co_filename,\n"
    "                          work=work.__code__.co_filename)))",
]


def test_traceback_lines_of_cells_in_a_real_kernel():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    out = json.loads(nb.cells[-1].outputs[-1]["text"])
    tb, helper, work = out["tb"], out["helper"], out["work"]
    assert helper != work  # two cells, two file names
    # every frame names its own cell, its own line, and shows that line's source
    assert f'File "{work}", line 4, in work\n    return helper(z) if rank == 1 else z\n' in tb, tb
    raise_line = "    raise ValueError(f'bad value {y}')\n"
    assert f'File "{helper}", line 3, in helper\n{raise_line}' in tb, tb
    assert "ValueError: bad value 3" in tb  # rank 1: z = 2, y = 3
    assert out["rank"] == 1
    # negative control: the old rewrite would have put the helper's line 3 in work's cell
    assert f'File "{work}", line 3, in helper' not in tb
