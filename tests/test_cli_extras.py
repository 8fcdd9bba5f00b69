"""`minipar` on a base install (no extras): bench and plan work, `grade` says what to install."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from minipar.errors import InputError
from minipar.jsonio import dumps

ROOT = Path(__file__).resolve().parents[1]

BLOCK_NBFORMAT = (
    "import sys; sys.modules['nbformat'] = None; "
    "from minipar.cli import main; raise SystemExit(main(sys.argv[1:]))"
)


def _minipar(*argv):
    return subprocess.run(
        [sys.executable, "-c", BLOCK_NBFORMAT, *argv], capture_output=True, text=True, timeout=120
    )


def test_grade_without_its_extra_exits_2_naming_the_extra():
    r = _minipar("grade", "exercises")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (
        "minipar grade: error: needs the [grade] extra (nbformat is not "
        "installed): pip install -e '.[grade]'"
    ), r.stderr


def test_other_commands_still_run_without_the_grade_extra():
    r = _minipar("params", "--layers", "2", "--hidden", "64", "--vocab", "100", "--seq", "16")
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------ the one JSON writer
def test_json_writer_refuses_a_non_finite_number_naming_where_it_sits():
    assert json.loads(dumps({"a": [1, 2.5, {"b": None}]})) == {"a": [1, 2.5, {"b": None}]}
    for bad, where in [
        ({"memory": {"total_bytes": float("inf")}}, "memory.total_bytes (inf)"),
        ({"steps": [1.0, {"time_s": float("nan")}]}, "steps[1].time_s (nan)"),
        (float("-inf"), "value (-inf)"),
    ]:
        with pytest.raises(InputError) as e:
            dumps(bad)
        assert str(e.value) == f"{where} is not a finite number: no JSON for it"


# ------------------------------------------------------------------ the console script itself
def test_minipar_alone_lists_its_commands():
    r = subprocess.run(
        [sys.executable, "-m", "minipar.cli"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2, r.stderr
    for command in ("plan", "bench", "calibrate", "grade", "params"):
        assert f"    {command} " in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_a_closed_pipe_ends_a_command_quietly():
    """``minipar plan ... | head``: the reader went away before the table was written (its end
    of the pipe closed before the command starts), as a ``head`` that has all it wants."""
    p = subprocess.Popen(
        [sys.executable, "-m", "minipar.cli", "plan", "--model", "gpt3-175b", "--gpus", "1024"]
        + ["--global-batch", "1536"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    p.stdout.close()
    err = p.stderr.read()
    p.wait(timeout=120)
    assert (p.returncode, err) == (141, ""), (p.returncode, err[-2000:])


def test_an_unknown_chapter_is_refused_naming_the_chapters(capsys, monkeypatch):
    from minipar.grading import notebooks

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert notebooks.main(["nosuchchapter"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("unknown chapter 'nosuchchapter': the chapters are collectives, "), err
    assert "memory_time" in err and "three_d" in err
    assert notebooks.main(["--check", "memory_time"]) == 0  # a known one still works


# ------------------------------------------------------------------ make book's progress
FAKE_BUILD = r"""
import sys
print("Running Jupyter-Book v1.0.4")
print("\x1b[01mreading sources... \x1b[39;49;00m[ 67%] \x1b[35mnotebooks/collectives\x1b[39;49;00m")
print("/abs/notebooks/collectives.ipynb: Executing notebook using local CWD [mystnb]", flush=True)
print("[IPKernelApp] WARNING | Kernel is running over TCP without encryption. ...", file=sys.stderr)
print("/abs/notebooks/collectives.ipynb: Executed notebook in 41.27 seconds [mystnb]")
print("/abs/notebooks/collectives.ipynb: Cached executed notebook: ID=3 [mystnb]")
print("/abs/notebooks/memory_time.ipynb: Using cached notebook: ID=1 [mystnb]")
print("/abs/book/x.md:2: WARNING: undefined label: 'nowhere'", file=sys.stderr)
print("The HTML pages are in _build/html.")
raise SystemExit(1)
"""


@pytest.mark.slow
def test_the_book_build_shows_one_line_per_notebook_and_keeps_warnings(tmp_path):
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "book_progress.py"), sys.executable, "-c"]
        + [FAKE_BUILD],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1  # the build's own status (-W fails on a warning)
    assert r.stdout.splitlines() == [
        "book: running abs/notebooks/collectives.ipynb ...",
        "book: abs/notebooks/collectives.ipynb ran in 41 s",
        "book: abs/notebooks/memory_time.ipynb unchanged since its last run (cached)",
        "book: the site is in _build/html (open _build/html/index.html)",
    ], r.stdout
    assert r.stderr == "/abs/book/x.md:2: WARNING: undefined label: 'nowhere'\n", r.stderr


def test_make_book_runs_under_the_progress_wrapper():
    makefile = (ROOT / "Makefile").read_text()
    assert "PROGRESS := $(PY) scripts/book_progress.py" in makefile
    recipes = re.findall(r"^(book(?:-strict)?):.*\n((?:\t.*\n)+)", makefile, re.M)
    assert {name for name, _ in recipes} == {"book", "book-strict"}
    for name, body in recipes:
        assert "@$(PROGRESS) --jobs $(BOOK_JOBS) $(JB) build ." in body, (name, body)
        assert "--quiet" not in body, (name, body)


def test_a_jupyter_book_build_reads_pages_in_parallel(monkeypatch):
    """``--jobs N``: the jupyter-book command runs as Sphinx's N-process build; any other
    command, or one job, runs as given. Sphinx reads in parallel only if every extension says it
    may: the book's own extension says so for the two of jupyter-book's that do not."""
    monkeypatch.syspath_prepend(ROOT / "scripts")
    monkeypatch.syspath_prepend(ROOT / "book" / "_ext")
    import book_progress
    import minipar_book

    build = [".venv/bin/jupyter-book", "build", ".", "-W"]
    assert book_progress.parallel_build(build, 2) == [
        sys.executable,
        book_progress.__file__,
        "--jupyter-book",
        "2",
        "build",
        ".",
        "-W",
    ]
    assert book_progress.parallel_build(build, 1) == build
    assert book_progress.parallel_build(["python", "-c", "pass"], 2) == ["python", "-c", "pass"]

    class App:  # what the handler reads: Sphinx's loaded extensions, by name
        extensions = {
            name: type("Extension", (), {"parallel_read_safe": None})()
            for name in [*minipar_book.PARALLEL_READ_SAFE, "other"]
        }

    minipar_book.declare_parallel_read_safe(App)
    safe = {name for name, ext in App.extensions.items() if ext.parallel_read_safe}
    assert safe == set(minipar_book.PARALLEL_READ_SAFE)  # and no extension it does not name
    config = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]
    assert "minipar_book" in config["config"]["extensions"]  # the list Sphinx loads
    assert "minipar_book" in config["local_extensions"]  # its folder on sys.path


@pytest.mark.slow
def test_notebooks_run_beforehand_are_what_the_build_finds_cached(tmp_path):
    """``--jobs``: a notebook run ahead lands in the cache under the key myst-nb looks up; one
    whose cell fails is named and left uncached, for the build to run and report."""
    nbformat = pytest.importorskip("nbformat")
    jupyter_cache = pytest.importorskip("jupyter_cache")
    cells = {"good": "print(6 * 7)", "bad": "raise ValueError('cell fails')"}
    for name, source in cells.items():
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
        nbformat.write(nb, tmp_path / f"{name}.ipynb")
    (tmp_path / "_toc.yml").write_text("root: intro\nchapters:\n- file: good\n- file: bad\n")
    build = [sys.executable, "-c", "print('The HTML pages are in _build/html.')"]
    script = str(ROOT / "scripts" / "book_progress.py")
    r = subprocess.run(
        [sys.executable, script, "--jobs", "2", *build],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert any(re.fullmatch(r"book: good\.ipynb ran in \d+ s", line) for line in lines), r.stdout
    assert "book: bad.ipynb failed; the build runs it again to report it" in lines, r.stdout
    assert "ValueError: cell fails" in r.stderr
    cache = jupyter_cache.get_cache(str(tmp_path / "_build" / ".jupyter_cache"))
    _, merged = cache.merge_match_into_notebook(nbformat.read(tmp_path / "good.ipynb", 4))
    assert merged.cells[0].outputs[0]["text"] == "42\n"
    with pytest.raises(KeyError):
        cache.match_cache_notebook(nbformat.read(tmp_path / "bad.ipynb", 4))


# one argument that breaks a rule, per bench; each is refused by its precheck
BAD_BENCH_ARGS = {
    "launch": (["--ranks", "0"], "--ranks (0) must be >= 1"),
    "collectives": (["--ops", "gossip"], "--ops ('gossip') must be among"),
    "data_parallel": (["--ranks", "1"], "--ranks (1) must be >= 2"),
    "tensor_parallel": (["--ranks", "3", "--hidden", "5"], "must be divisible by t (3)"),
    "pipeline_parallel": (["--steps", "0"], "--steps (0) must be >= 1"),
    "context_parallel": (["--ranks", "3", "--heads", "4"], "must divide --heads (4)"),
    "expert_parallel": (["--top-k", "9", "--experts", "8"], "--top-k (9) must be <= --experts"),
    "three_d": (["--ranks", "1"], "--ranks (1) must be >= 2"),
}


@pytest.mark.slow
def test_a_bad_bench_argument_is_refused_before_torch_is_imported():
    """Every bench checks its arguments before the CLI imports torch (2 CPU-s, as many seconds
    for a typo): one process refuses one bad argument per bench, in turn, and has not imported
    torch. Control, last: a rule checked only after the import (NCCL for 64 ranks needs 64
    GPUs) shows that the probe sees an import."""
    from minipar.bench.cli import BENCH_MODULES

    names = [m.rsplit(".", 1)[1] for m in BENCH_MODULES]
    assert sorted(names) == sorted(BAD_BENCH_ARGS), "a bench without a bad-argument case here"
    calls = [[name, *argv] for name, (argv, _) in BAD_BENCH_ARGS.items()]
    calls.append(["launch", "--backend", "nccl", "--ranks", "64"])
    code = (
        "import io, json, sys, contextlib\nfrom minipar.cli import main\nout = []\n"
        "for argv in json.loads(sys.argv[1]):\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err):\n"
        "        status = main(['bench', *argv])\n"
        "    out.append([status, err.getvalue(), 'torch' in sys.modules])\n"
        "print(json.dumps(out))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, json.dumps(calls)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-3000:]
    *got, control = json.loads(r.stdout)
    for (name, (_, rule)), (status, err, torch_imported) in zip(BAD_BENCH_ARGS.items(), got):
        assert status == 2 and rule in err and len(err.strip().splitlines()) == 1, (name, err)
        assert not torch_imported, f"bench {name} imported torch before refusing its argument"
    assert control[0] == 2 and "nccl" in control[1].lower() and control[2], control
