"""Install, start-up and documentation that cannot drift.

* ``make help`` lists every target of the Makefile, each with its ``##`` comment, and README.md's
  table of targets is exactly that list; every ``minipar`` command and ``minipar bench``
  benchmark is named in README.md.
* ``minipar --help`` and ``minipar plan`` import no grading, plotting or torch library (they
  start in a fraction of a second; the grader's nbformat alone took 1.1 s to import).
* pyproject.toml declares the package data a non-editable install needs, Python >= 3.11, and no
  dependency that nothing uses; ``pip install .`` (not editable) into a fresh folder gives a
  working ``minipar plan``, ``minipar bench launch`` and an explorer whose HTML holds its
  JavaScript (slow).
* ``make exercises`` writes only the missing starters (``--force`` overwrites), and
  ``--check`` compares the repository's starters (git's index), not the learner's edits.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "exercises" / "memory_time" / "solutions" / "01_params.py"


# ----------------------------------------------------------------------------- make help
def _make_help() -> list[tuple[str, str]]:
    out = subprocess.run(
        ["make", "--no-print-directory", "-s", "help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    rows = [re.match(r"make (\S+)\s+(.*)$", ln) for ln in out.stdout.splitlines()]
    assert all(rows), out.stdout
    return [(m.group(1), m.group(2)) for m in rows]


def _targets() -> set[str]:
    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    phony = set(re.search(r"^\.PHONY:(.*)$", text, re.M).group(1).split())
    rules = {m.group(1) for m in re.finditer(r"^([a-z][a-z-]*):", text, re.M)}
    return phony | rules


def test_make_help_lists_every_target_with_its_description():
    listed = dict(_make_help())
    missing = _targets() - set(listed)
    assert not missing, f"targets without a ## comment (make help omits them): {missing}"
    assert all(listed.values())


def test_readme_table_is_make_help():
    text = (ROOT / "README.md").read_text()
    table = text.split("<!-- make help: begin -->")[1].split("<!-- make help: end -->")[0]
    rows = re.findall(r"^\| `make ([a-z-]+)` \| (.*) \|$", table, re.M)
    assert rows == _make_help(), "README.md's table of targets differs from `make help`"


def test_readme_quick_start_installs_the_cpu_build_first():
    quick = (ROOT / "README.md").read_text().split("## Quick start")[1].split("##")[0]
    commands = re.findall(r"^make (\S+)", quick, re.M)
    assert commands[:3] == ["install", "book", "test"], commands
    make = (ROOT / "Makefile").read_text()
    assert "CPU_INDEX := --extra-index-url https://download.pytorch.org/whl/cpu" in make
    recipe = make.split("$(STAMP):")[1].split("\n\n")[0]
    assert "$(TORCH_INDEX)" in recipe and "$(CPU_INDEX)" in recipe  # given, else CPU unless local
    assert 'TORCH_INDEX="${TORCH_INDEX-}"' in (ROOT / ".ci" / "run").read_text()


def test_the_drift_check_sees_a_target_missing_from_the_readme():
    """Negative control: a README table without `make clean` is not `make help`."""
    rows = _make_help()
    assert [r for r in rows if r[0] != "clean"] != rows


def _subcommands(argv) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "minipar.cli", *argv, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    choices = re.search(r"\{([a-z_0-9,]+)\}", out.stdout)
    return choices.group(1).split(",")


def test_every_command_and_bench_is_named_in_the_readme():
    text = (ROOT / "README.md").read_text()
    for name in _subcommands([]) + _subcommands(["bench"]):
        assert (
            f"`{name}`" in text or f"`minipar {name}" in text or f"minipar bench\n<{name}" in text
        ), f"README.md never names {name!r}"


@pytest.mark.slow
def test_make_bench_takes_its_chapters_from_the_registry():
    """`make bench` runs the launcher's bench, then every chapter's that has one
    (``minipar.chapters``), in reading order, and names no chapter in its recipe."""
    from minipar.chapters import CHAPTERS

    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    ran = re.findall(r"minipar bench (\w+)", out.stdout)
    assert ran == ["launch"] + [c.slug for c in CHAPTERS if c.bench], out.stdout
    text = (ROOT / "Makefile").read_text()
    recipe = text[text.index("\nbench:") :].split("\n\n")[0]
    assert [c.slug for c in CHAPTERS if c.slug in recipe] == []


@pytest.mark.slow
def test_every_bench_with_backend_is_the_one_the_readme_names():
    text = " ".join((ROOT / "README.md").read_text().split())
    said = re.search(r"`minipar bench launch`, (.*?) take `--backend`", text).group(1)
    with_flag = {"launch"} | set(re.findall(r"`(\w+)`", said))
    for name in _subcommands(["bench"]):
        if name in ("dp", "tp", "pp", "cp", "ep", "3d"):
            continue
        out = subprocess.run(
            [sys.executable, "-m", "minipar.cli", "bench", name, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        ).stdout
        assert ("--backend" in out) == (name in with_flag), name


# ----------------------------------------------------------------------------- start-up
HEAVY = [
    "nbformat",
    "jupyter_client",
    "nbval",
    "matplotlib",
    "torch",
    "numpy",
    "IPython",
    "anywidget",
    "psutil",
]


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["plan", "--model", "gpt3-175b", "--gpus", "1024", "--global-batch", "1536"],
        ["grade", "--help"],
        ["bench", "--help"],
    ],
    ids=lambda a: " ".join(a[:1]),
)
@pytest.mark.slow
def test_light_commands_import_no_heavy_library(argv):
    code = (
        "import sys, contextlib, io\n"
        "from minipar.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        main({argv!r})\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


@pytest.mark.slow
def test_the_import_check_sees_a_heavy_import():
    """Negative control: the same probe reports nbformat once the grader's work imports it."""
    code = (
        "import sys\nimport minipar.grading.notebooks as n\n"
        f"n.render(n.build({str(SCRIPT)!r}, solved=False))\n"
        "print('nbformat' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.stdout.strip() == "True", out.stderr


# ----------------------------------------------------------------------------- packaging
def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_pyproject_declares_package_data_python_and_only_used_dependencies():
    data = _project()
    project = data["project"]
    assert project["requires-python"] == ">=3.11"
    package_data = data["tool"]["setuptools"]["package-data"]
    assert "*.js" in package_data["minipar.widgets"]
    assert "measurements/*.json" in package_data["minipar.cost.validation"]
    assert "*.json" in package_data["minipar.cost.planner"]
    assert "clauses/*.toml" in package_data["minipar.grading"]
    assert list((ROOT / "src/minipar/widgets").glob("*.js"))
    assert list((ROOT / "src/minipar/cost/validation/measurements").glob("*.json"))
    names = [re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower() for r in project["dependencies"]]
    assert "numpy" not in names and "pytest-timeout" not in " ".join(
        sum(project["optional-dependencies"].values(), [])
    )
    used = " ".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    assert not re.search(r"^\s*(import|from) numpy", used, re.M), (
        "numpy is imported again: declare it"
    )
    assert "nbclient" in project["optional-dependencies"]["dev"]
    assert "nbclient" not in project["optional-dependencies"]["grade"]


@pytest.mark.slow
def test_a_non_editable_install_plans_launches_and_draws(tmp_path):
    """``pip install .`` from a copy of the sources (no build in the repository) into a fresh
    folder, without downloads (--no-deps --no-build-isolation; the other packages come from
    .venv): the installed copy, not src/, must serve plan, bench launch and an explorer."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    target = tmp_path / "site"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    env = dict(os.environ, PYTHONPATH=str(target))
    where = subprocess.run(
        [sys.executable, "-c", "import minipar; print(minipar.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=tmp_path,
    )
    assert where.stdout.strip().startswith(str(target)), where
    minipar = [sys.executable, "-m", "minipar.cli"]
    plan = subprocess.run(
        minipar
        + ["plan", "--model", "gpt3-175b", "--gpus", "64", "--global-batch", "64", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert json.loads(plan.stdout)
    bench = subprocess.run(
        minipar
        + ["bench", "launch", "--ranks", "2", "--repeats", "1", "--backend", "gloo", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert bench.returncode == 0, bench.stderr[-2000:]
    assert json.loads(bench.stdout)["backend"] == "gloo"
    code = (
        "from minipar.widgets import static_html, js_source\n"
        "html = static_html('memory_time', 'memory')\n"
        "print(len(js_source('memory_time')) > 1000 and 'mountExplorer' in html)\n"
        "from minipar.cost.validation import published as validation\n"
        "print(validation._MEASUREMENTS.is_dir() and any(validation._MEASUREMENTS.glob('*.json')))\n"
        "from minipar.widgets.three_d import PRESET_LAYOUTS\n"
        "print('gpt3-175b' in PRESET_LAYOUTS)\n"
        "from minipar.runtime.pool import likely_cause\n"
        "print(likely_cause(\"No module named 'cloudpickle'\").startswith('cloudpickle'))\n"
        "from minipar.runtime import tracer\n"
        "print(tracer._C10D_OPS['allreduce_'] == ('all_reduce', 0))\n"
        "from minipar.widgets.memory_time import PRESETS\n"
        "print(PRESETS['GPT-3 175B'] == (96, 12288, 96, 51200))\n"
        "from minipar.bench.collectives import OPS\n"
        "print('broadcast' in OPS)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.stdout.split() == ["True"] * 7, out.stderr[-2000:]


# ----------------------------------------------------------------------------- exercises


def _exercise_course(tmp_path: Path) -> Path:
    course = tmp_path / "course"
    (course / "exercises" / "memory_time" / "solutions").mkdir(parents=True)
    shutil.copy(SCRIPT, course / "exercises" / "memory_time" / "solutions" / SCRIPT.name)
    return course


def test_make_exercises_writes_only_missing_starters(tmp_path, monkeypatch):
    from minipar.grading.notebooks import main

    course = _exercise_course(tmp_path)
    monkeypatch.chdir(course)
    starter = course / "exercises" / "memory_time" / "01_params.ipynb"
    assert main([]) == 0 and starter.exists()  # missing: written
    mine = starter.read_text().replace("your code here", "my answer")
    starter.write_text(mine)
    assert main([]) == 0 and starter.read_text() == mine  # the learner's work is kept
    assert main(["--force"]) == 1 and starter.read_text() == mine  # no terminal: refused
    monkeypatch.setattr("minipar.grading.notebooks._confirm", lambda targets: True)
    assert main(["--force"]) == 0 and starter.read_text() != mine  # an author's overwrite
    assert [b.read_text() for b in starter.parent.glob("01_params.ipynb.bak-*")] == [mine]
    assert main(["--bogus"]) == 2


def test_exercises_check_reads_the_repository_not_the_learners_copy(tmp_path, monkeypatch):
    from minipar.grading.notebooks import main

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    course = _exercise_course(tmp_path)
    monkeypatch.chdir(course)
    git = lambda *a: subprocess.run(
        ["git", *a],
        cwd=course,
        capture_output=True,
        text=True,
        check=True,
    )
    git("init", "-q")
    assert main([]) == 0
    starter = course / "exercises" / "memory_time" / "01_params.ipynb"
    git("add", str(starter))
    assert main(["--check"]) == 0
    starter.write_text(starter.read_text().replace("your code here", "my answer"))
    assert main(["--check"]) == 0, "a learner's edit is not a stale starter"
    git("add", str(starter))  # negative control: committed
    assert main(["--check"]) == 1


# ----------------------------------------------------------------------------- notebook cache
def _src_hash(folder: Path) -> str:
    out = subprocess.run(
        [
            "make",
            "-s",
            "--no-print-directory",
            "-C",
            str(folder),
            "-f",
            str(ROOT / "Makefile"),
            "--eval",
            "print-src-hash: ; @echo $(SRC_HASH)",
            "print-src-hash",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_book_cache_is_dropped_when_src_changes(tmp_path):
    """jupyter-cache keys outputs on cells only; `make book` drops it when src/ changes and
    `make book-strict` (make test) never uses it."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text("A = 1\n")
    first = _src_hash(tmp_path)
    (tmp_path / "notes.txt").write_text("not the package\n")
    assert _src_hash(tmp_path) == first  # negative control
    (tmp_path / "src" / "m.py").write_text("A = 2\n")
    assert _src_hash(tmp_path) != first
    make = (ROOT / "Makefile").read_text()
    book = make.split("\nbook:")[1].split("\n\n")[0]
    strict = make.split("\nbook-strict:")[1].split("\n\n")[0]
    assert "$(fresh_cache)" in book and "rm -rf _build/.jupyter_cache" in make
    assert strict.index("rm -rf _build/.jupyter_cache") < strict.index("$(JB) build")


# ----------------------------------------------------------------------------- make install, lab
FAKE_PIP = """#!/bin/bash
# a stand-in for .venv/bin/python: pip's lines, no network
case "$*" in
  *"pip install"*"--dry-run"*) exit 1 ;;
  *"pip install"*) echo "Collecting fakepkg==1.0"; echo "  Downloading fakepkg-1.0.whl";
                   echo "Installing collected packages: fakepkg";
                   echo "Successfully installed fakepkg-1.0" ;;
  *) exec "$REAL_PYTHON" "$@" ;;
esac
"""


def _course(tmp_path: Path, venv_python: str | None) -> Path:
    """The Makefile, requirements.txt and pyproject.toml in a folder; ``venv_python``: the
    text of a stand-in ``.venv/bin/python`` (None: no .venv)."""
    course = tmp_path / "course"
    course.mkdir()
    for name in ("Makefile", "requirements.txt", "pyproject.toml"):
        shutil.copy(ROOT / name, course / name)
    if venv_python is not None:
        py = course / ".venv" / "bin" / "python"
        py.parent.mkdir(parents=True)
        py.write_text(venv_python)
        py.chmod(0o755)
    return course


def _make(course: Path, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *argv],
        cwd=course,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, REAL_PYTHON=sys.executable) | (env or {}),
    )


@pytest.mark.slow
def test_make_install_shows_pips_progress_and_logs_all(tmp_path):
    """`make install` printed one line, then minutes of silence: pip's Collecting, Downloading
    and Installing lines now show as they come, and the log keeps everything."""
    course = _course(tmp_path, FAKE_PIP)
    r = _make(course, "install", "TORCH_INDEX=")
    assert r.returncode == 0, r.stdout + r.stderr
    for line in ("Collecting fakepkg==1.0", "Installing collected packages: fakepkg"):
        assert line in r.stdout, r.stdout
    assert "Successfully installed fakepkg-1.0" in (course / ".venv" / "pip.log").read_text()
    assert (course / ".venv" / ".installed").exists()


@pytest.mark.slow
def test_make_install_refuses_a_python_older_than_3_11_first(tmp_path):
    """With python3 3.10 it ran over 5 minutes before failing: the version is checked first,
    and nothing is made."""
    old = tmp_path / "python3.10"
    old.write_text(
        '#!/bin/bash\n[ "$1" = -V ] && { echo "Python 3.10.12"; exit 0; }\n'
        '[ "$1" = -c ] && exit 1\necho "made a venv" >&2; exit 0\n'
    )
    old.chmod(0o755)
    course = _course(tmp_path, None)
    r = _make(course, "install", f"PYTHON={old}")
    assert r.returncode != 0
    said = r.stdout + r.stderr
    assert "make install: minipar needs Python >= 3.11;" in said and "Python 3.10.12" in said
    assert "made a venv" not in said and not (course / ".venv").exists()


@pytest.mark.slow
def test_make_lab_allows_root_only_as_root(tmp_path):
    """Jupyter refuses to run as root without --allow-root (a container's usual user)."""
    course = _course(tmp_path, "#!/bin/bash\n")
    (course / ".venv" / ".installed").touch()
    jupyter = course / ".venv" / "bin" / "jupyter"
    jupyter.write_text('#!/bin/bash\necho "jupyter $*"\n')
    jupyter.chmod(0o755)
    r = _make(course, "lab")
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("jupyter lab"))
    assert ("--allow-root" in line) == (os.geteuid() == 0), line
