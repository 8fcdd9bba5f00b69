"""Faults: ``minipar grade`` and a launch, signalled at several moments, leave nothing behind.

Each run tags its environment with a fresh token (every process the call starts inherits it:
the kernel, the launcher's zygote, the ranks, a rank's own child) and gets its own ``TMPDIR``.
After SIGINT, SIGTERM or SIGHUP (while the kernel starts, mid-check while ranks and a rank's
child run, and a second signal during the teardown of the first) the test asserts that no
process carries the token, that ``TMPDIR`` is empty (no ``minipar-grade-*`` folder, no kernel
connection file, no launcher socket folder) and, for ``minipar grade``, that it printed one line
and no traceback and exited with 128 + the signal's number. Also: a dead kernel ends its
notebook at once, and bad arguments exit 2, a notebook with no task 3.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nbformat
import pytest
from fault_support import _settled, _tagged, _wait_for

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "exercises" / "memory_time" / "solutions" / "01_params.py"

# cell 1 of the mid-check notebook: two ranks, each starting a child that would sleep on, and
# writing a marker once both exist; then they wait for a long time
RANKS_CELL = textwrap.dedent("""
    import os, subprocess, time
    from minipar.runtime.launch import run

    def sleeper(rank, world_size, marker):
        child = subprocess.Popen(["sleep", "600"])
        open(f"{marker}.{rank}", "w").write(str(child.pid))
        time.sleep(600)

    run(sleeper, 2, os.environ["MINIPAR_FAULT_MARKER"], backend="gloo", timeout=900)
""")


def _exercise(folder: Path, first_cell: str) -> Path:
    """The params exercise (solved) with ``first_cell`` inserted before its first code cell."""
    from minipar.grading.notebooks import build

    nb = build(SCRIPT, solved=True)
    k = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(k, nbformat.v4.new_code_cell(first_cell))
    for i, c in enumerate(nb.cells):
        c.id = f"c{i}"
    path = folder / "memory_time" / "01_params.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)
    return path


def _grade(env, *args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "minipar.cli", "grade", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        start_new_session=True,
    )


def _assert_clean_exit(p, sig, tag, tmp, side):
    out, err = p.communicate(timeout=120)
    assert p.returncode == 128 + sig, (p.returncode, err[-3000:])
    assert "Traceback" not in err, err[-3000:]
    stops = [ln for ln in err.splitlines() if ln.startswith("minipar grade: stopped by")]
    assert stops == [
        f"minipar grade: stopped by {signal.Signals(sig).name}; the kernels and "
        "their files are gone"
    ], err[-3000:]
    procs, files = _settled(tag, tmp)
    assert procs == [], f"processes left: {procs}"
    assert files == [], f"files left in TMPDIR: {files}"
    runtime = side / "rt"
    assert not runtime.exists() or list(runtime.iterdir()) == [], "a kernel connection file"


SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_grade_signalled_while_the_kernel_starts(sandbox, sig):
    env, tmp, side, tag = sandbox
    nb = _exercise(side / "nbs", "x = 1")
    p = _grade(env, nb)
    # the kernel process exists (it carries the tag) but is still importing
    _wait_for(lambda: any(pid != p.pid for pid in _tagged(tag)), 60, "the kernel to start")
    p.send_signal(sig)
    _assert_clean_exit(p, sig, tag, tmp, side)


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_grade_signalled_mid_check_leaves_no_rank_child_or_file(sandbox, sig):
    env, tmp, side, tag = sandbox
    nb = _exercise(side / "nbs", RANKS_CELL)
    p = _grade(env, nb)
    markers = [side / "rank.0", side / "rank.1"]
    _wait_for(
        lambda: all(m.exists() and m.read_text() for m in markers) or p.poll() is not None,
        240,
        "both ranks and their children",
    )
    assert p.poll() is None, p.communicate()[1][-3000:]
    children = [int(m.read_text()) for m in markers]
    assert all(pid in _tagged(tag) for pid in children)  # the rank children are alive
    p.send_signal(sig)
    _assert_clean_exit(p, sig, tag, tmp, side)


@pytest.mark.slow
def test_grade_signalled_again_during_teardown_still_cleans_up(sandbox):
    env, tmp, side, tag = sandbox
    nb = _exercise(side / "nbs", RANKS_CELL)
    p = _grade(env, nb)
    markers = [side / "rank.0", side / "rank.1"]
    _wait_for(
        lambda: all(m.exists() and m.read_text() for m in markers) or p.poll() is not None,
        240,
        "both ranks and their children",
    )
    p.send_signal(signal.SIGTERM)
    for _ in range(5):  # while the first one tears down
        time.sleep(0.1)
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    _assert_clean_exit(p, signal.SIGTERM, tag, tmp, side)


# ----------------------------------------------------------------------------- verdicts
@pytest.mark.slow
def test_a_dead_kernel_ends_its_notebook_at_once_and_grading_goes_on(tmp_path):
    """os._exit(0) in a plain cell used to leave nbval waiting 10⁶ s for the next cell."""
    dead = _exercise(tmp_path / "a", "import os\nos._exit(0)")
    fine = _exercise(tmp_path / "b", "x = 1")
    out = subprocess.run(
        [sys.executable, "-m", "minipar.cli", "grade", str(dead), str(fine)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    import re

    assert re.search(
        r"not run: the kernel died in cell \d+ \(import os\) \(exit code 0\)", out.stdout
    ), out.stdout
    assert "b/memory_time/01_params.ipynb: 2/2 passed" in out.stdout, out.stdout
    # a busy machine may add "still running after 10 s" lines: they are not steps
    progress = [
        ln for ln in out.stderr.splitlines() if ln.startswith("[") and "still running" not in ln
    ]
    assert (
        len(progress) == 4
        and progress[0].startswith("[1/2] ")
        and progress[1].endswith(" s")
        and "FAIL (0/2 passed)" in progress[1]
    ), out.stderr
    assert "PASS" in progress[3], out.stderr


@pytest.mark.slow
def test_timeout_expiry_is_named_not_a_keyboard_interrupt(tmp_path):
    from minipar.grading.cli import grade

    nb = _exercise(tmp_path, "import time\nfor _ in range(100):\n    time.sleep(0.1)")
    result = grade([nb], timeout=1.5)
    reasons = {t["task"]: t["reason"] for t in result["tasks"]}
    assert (
        "stopped by --timeout: the cell ran 1.5 s of wall-clock time"
        in reasons["memory_time.params"]
    ), reasons
    assert "KeyboardInterrupt" not in reasons["memory_time.params"]


@pytest.mark.slow
def test_timeout_and_paths_are_validated_exit_2():
    for bad in ("0", "-1", "nan", "inf", "soon"):
        r = subprocess.run(
            [sys.executable, "-m", "minipar.cli", "grade", "--timeout", bad, "x.ipynb"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert r.returncode == 2, (bad, r.stderr)
        assert "--timeout must be a finite number of seconds > 0" in r.stderr and bad in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "minipar.cli", "grade", "README.md"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 2 and "must be a notebook (.ipynb) or a folder" in r.stderr


@pytest.mark.slow
def test_a_notebook_without_tasks_exits_3_and_says_so(tmp_path):
    nb = tmp_path / "notes.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1")]), nb)
    r = subprocess.run(
        [sys.executable, "-m", "minipar.cli", "grade", str(nb)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 3, r.stderr
    assert f"No tasks found in {nb.resolve()} (is it an exercise notebook?)" in r.stderr
    # negative control: an exercise notebook is not "empty" (it is graded, whatever its score)
    from minipar.grading.cli import notebooks
    from minipar.grading.notebooks import cell_tasks

    assert cell_tasks('check("memory_time.params", params)') == ["memory_time.params"]
    assert notebooks([nb]) == ([nb], [])


def _overwriting_advice(text: str) -> list[str]:
    """Lines that tell someone to run a forced rebuild without saying it overwrites work."""
    import re

    return [
        ln
        for ln in text.splitlines()
        if re.search(r"--force`", ln) and not re.search(r"overwrit|author", ln, re.I)
    ]


def test_no_message_tells_a_learner_to_overwrite_their_work():
    """The grader's "notebook missing" reason and make's messages name only commands that
    write missing notebooks (`make exercises`), never a forced rebuild without its warning."""
    from minipar.grading.cli import grade

    for path in [
        ROOT / "src/minipar/grading/cli.py",
        ROOT / "src/minipar/grading/notebooks.py",
        ROOT / "Makefile",
        ROOT / "README.md",
    ]:
        assert _overwriting_advice(path.read_text()) == [], path
    # negative control: the advice the check exists to catch
    assert _overwriting_advice("stale: run `python -m minipar.grading.notebooks --force`")
    # the grader's reason for a deleted notebook
    source = (ROOT / "src/minipar/grading/cli.py").read_text()
    assert "writes only missing notebooks" in source and grade.__module__


def test_the_grader_leaves_its_kernel_files_in_its_own_folder():
    """Negative control for the leak tests' TMPDIR check: the runner's kernel writes its
    connection file, IPYTHONDIR and TMPDIR under the folder it is given."""
    from minipar.grading import runner

    text = "".join(Path(runner.__file__).read_text().split())  # as code, not as formatted
    assert 'connection_file=str(self.folder/"kernel.json")' in text
    assert 'IPYTHONDIR=str(self.folder/"ipython"),TMPDIR=str(self.folder/"tmp")' in text


# ----------------------------------------------------------------------------- the launcher
@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(timeout=float("inf")), "timeout must be a finite number of seconds > 0, got inf"),
        (dict(timeout=float("nan")), "timeout must be a finite number of seconds > 0, got nan"),
        (dict(timeout=0), "timeout must be a finite number of seconds > 0, got 0"),
        (dict(timeout="60"), "timeout must be a finite number of seconds > 0, got '60'"),
        (
            dict(threads=0),
            "threads must be an int >= 1 (or None for usable CPUs // world_size), got 0",
        ),
        (dict(threads=1.5), "got 1.5"),
        (dict(threads=True), "got True"),
    ],
)
def test_launch_arguments_are_validated_before_anything_starts(kwargs, words):
    from minipar.runtime import launch

    before = launch._zygote
    with pytest.raises(ValueError) as info:
        launch.run(lambda r, w: r, 2, backend="gloo", **kwargs)
    assert words in str(info.value)
    assert launch._zygote is before  # nothing was started for a bad call


@pytest.mark.slow
def test_an_unpicklable_result_names_its_type_and_rank_and_torch_renames_stay_quiet(capfd):
    import threading

    from minipar.runtime.launch import RankError, run

    def returns_a_lock(rank, world_size):
        return threading.Lock() if rank == 1 else rank

    with pytest.raises(RankError) as info:
        run(returns_a_lock, 2, backend="gloo", timeout=120)
    assert info.value.rank == 1
    assert "rank 1's return value (a lock) cannot be sent back to the caller" in str(info.value)

    def renamed_collective(rank, world_size):
        import warnings

        import torch
        import torch.distributed as dist

        dist.all_gather_into_tensor(torch.empty(2 * world_size), torch.ones(2))
        warnings.warn("a learner's own warning", FutureWarning)  # noqa: B028 (as a learner writes it)  # negative control: kept
        return rank

    capfd.readouterr()
    assert run(renamed_collective, 2, backend="gloo", timeout=120) == [0, 1]
    out = capfd.readouterr()
    text = out.out + out.err
    assert "is deprecated" not in text, text
    assert text.count("FutureWarning: a learner's own warning") == 2, text


# ----------------------------------------------------------------------------- the kernel watch
@pytest.mark.slow
def test_the_kernel_watch_beats_stops_a_stall_and_kills_what_ignores_sigint(tmp_path, monkeypatch):
    """One kernel per case, no grader set-up cell (so no in-kernel limit): a 1.2-s computation
    gets heartbeats (every 0.5 s) and passes; a sleep makes no progress and is interrupted after the stall
    window; a loop that ignores SIGINT is stopped by the kernel's CPU limit and the kernel
    killed, ending the notebook."""
    from minipar.grading import runner

    monkeypatch.setattr(runner, "HEARTBEAT_S", 0.5)
    monkeypatch.setattr(runner, "INTERRUPT_GRACE_S", 2.0)
    monkeypatch.setenv("MINIPAR_GRADE_KERNEL_STALL_S", "2")
    monkeypatch.setenv("MINIPAR_GRADE_KERNEL_CPU_LIMIT", "2")
    beats = []
    # 1.2 CPU-s: past the first heartbeat (0.5 s; the watch looks every POLL_S, 0.5 s), under
    # the kernel's CPU limit (2)
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.2:\n    pass"
    cells = [
        busy,
        "import time\ntime.sleep(60)",
        "print('after the stall')",
        "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass",
        "print('never')",
    ]
    (tmp_path / "k").mkdir()
    run = runner.run_notebook(
        cells, tmp_path / "k", str(tmp_path), heartbeat=lambda k, s, cpu: beats.append((k, s, cpu))
    )
    assert run.cells[0].status == "ok" and any(k == 0 for k, _, _ in beats), beats
    assert run.cells[1].status == "stopped", run.cells[1]
    assert "for 2 s the kernel and its processes made no progress" in run.cells[1].reason
    assert run.cells[2].status == "ok" and run.cells[2].stdout == "after the stall\n"
    assert run.cells[3].status == "stopped", run.cells[3]
    assert "stopped after 2 CPU-seconds of the kernel" in run.cells[3].reason
    assert 4 not in run.cells  # the kernel was killed: nothing ran after
    assert run.died is None  # stopped by the grader, not a crash


@pytest.mark.slow
def test_after_a_sigkill_the_next_grade_removes_the_folder_left(sandbox):
    """SIGKILL cannot be handled: the kernel and everything under it exit by themselves (the
    kernel polls its parent), and the next `minipar grade` removes the folder left behind.
    A folder of another host token (another container's /tmp) stays."""
    env, tmp, side, tag = sandbox
    nb = _exercise(side / "nbs", RANKS_CELL)
    p = _grade(env, nb)
    markers = [side / "rank.0", side / "rank.1"]
    _wait_for(
        lambda: all(m.exists() and m.read_text() for m in markers) or p.poll() is not None,
        240,
        "both ranks and their children",
    )
    p.kill()
    p.wait()
    procs, _ = _settled(tag, tmp, seconds=30, ignore="minipar-grade-")  # the folder stays
    assert procs == []
    left = [f.name for f in tmp.iterdir()]
    assert len(left) == 1 and left[0].startswith("minipar-grade-"), left
    neighbour = tmp / f"minipar-grade-0000beef-{p.pid}-x"
    neighbour.mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "minipar.cli", "grade", "no-such.ipynb"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 2  # a bad path: nothing graded, and yet
    again = _grade(env, _exercise(side / "nbs2", "x = 1"))
    again.communicate(timeout=300)
    assert sorted(f.name for f in tmp.iterdir()) == [neighbour.name]


def test_ctrl_c_in_any_command_is_one_line_and_status_130(capsys, monkeypatch):
    from minipar import cli
    from minipar.bench import launch as bench_launch

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_launch, "measure", interrupted)
    assert cli.main(["bench", "launch", "--ranks", "2", "--backend", "gloo"]) == 130
    assert capsys.readouterr().err == "minipar bench: stopped by SIGINT\n"


@pytest.mark.slow
def test_a_zygote_that_stops_answering_is_retired_not_waited_on(monkeypatch):
    """The fork request's reply has a deadline (no CPU progress for FORK_STALL_S): a stopped
    zygote (SIGSTOP: alive, silent, using no CPU) fails that call in seconds, naming the wait,
    and the next call starts a new zygote."""
    from minipar.runtime import launch, pool
    from minipar.runtime.launch import StartError, run

    assert run(lambda r, w: r, 1, backend="gloo") == [0]
    z = launch._zygote
    monkeypatch.setattr(pool, "FORK_STALL_S", 1.0)
    os.kill(z.proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises(StartError, match="no answer to a fork request and no progress for 1 s"):
            run(lambda r, w: r, 2, backend="gloo", timeout=60)
    finally:
        try:
            os.kill(z.proc.pid, signal.SIGCONT)
        except OSError:
            pass
    assert run(lambda r, w: r, 2, backend="gloo") == [0, 1]
    assert launch._zygote is not z


@pytest.mark.slow
def test_a_kernel_that_cannot_start_is_named_with_its_last_words(tmp_path):
    """A kernel that cannot start (here a broken `traitlets` first on its PYTHONPATH, which
    ipykernel imports first) ends that notebook at once with the kernel's own last line."""
    from minipar.grading import runner

    env = dict(os.environ)
    (tmp_path / "k").mkdir()
    (tmp_path / "cwd").mkdir()
    env["PYTHONPATH"] = str(tmp_path / "shadow")
    (tmp_path / "shadow").mkdir()
    (tmp_path / "shadow" / "traitlets.py").write_text("raise ImportError('traitlets is broken')\n")
    run = runner.run_notebook(["1"], tmp_path / "k", str(tmp_path / "cwd"), env=env)
    assert run.cells == {}
    assert run.start_error.startswith("the kernel exited while starting (exit code 1)"), run
    assert "traitlets is broken" in run.start_error, run


def test_a_signal_never_lands_inside_jupyter_clients_event_loop(monkeypatch):
    """A signal that arrives while jupyter_client waits for a message is held until the call
    returns, then raised from the watch loop: raised inside the library's event loop, it
    orphaned one of its tasks, whose traceback was printed when collected (seen once in CI
    as 'Task exception was never retrieved' after SIGHUP)."""
    import queue

    from minipar.grading import runner

    # the signal is remembered in the runner's module state (first_signal() reads it after
    # the unwind): a copy of that state, so no later grade() in this process sees a SIGHUP
    monkeypatch.setattr(runner, "_shield", dict(runner._shield))
    calls = []

    class Client:
        def execute(self, *a, **k):
            return "m"

        def get_iopub_msg(self, timeout):
            os.kill(os.getpid(), signal.SIGHUP)
            # the runner's signal thread takes it and the handler runs here, held
            _wait_for(lambda: runner._shield["pending"], 60, "the signal handler")
            calls.append("returned")
            raise queue.Empty

    kernel = object.__new__(runner.Kernel)
    kernel.kc = Client()
    kernel.cpu = lambda: (0.0, 0.0)
    kernel.alive = lambda: True
    with pytest.raises(runner.Interrupted) as caught, runner.signals_unwind():
        kernel.run_cell("x = 1", None, 60.0, 60.0)
    assert caught.value.signum == signal.SIGHUP
    assert calls == ["returned"], "the signal was raised inside the library call"


# ------------------------------------------------------------------ a learner's saved work
COURSE_FILES = [
    "pyproject.toml",
    "tests/test_exercises.py",
    "tests/grading_support.py",
    "tests/conftest.py",
    "tests/fault_support.py",
    "exercises",
]
GIT = ["git", "-c", "user.name=learner", "-c", "user.email=l@example.invalid"]


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, timeout=120)


def course_from_git(checkout: Path, dst: Path) -> list[str]:
    """Copy :data:`COURSE_FILES` as git's index of ``checkout`` holds them (``git ls-files``,
    then ``git show :path``) into ``dst``: never the working tree, where a learner's saved
    answers and outputs live. Returns the paths copied."""
    listed = _git(checkout, "ls-files", "-z", "--", *COURSE_FILES).stdout.decode()
    paths = [p for p in listed.split("\0") if p]
    for rel in paths:
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(_git(checkout, "show", f":{rel}").stdout)
    return paths


def _save_answers(exercises: Path) -> int:
    """Every exercise notebook under ``exercises`` as a learner saves it: solved, with stored
    outputs and execution counts. Returns how many."""
    from minipar.grading.notebooks import build, scripts, starter_path

    worked = 0
    for script in scripts(exercises):
        nb = build(script, solved=True)
        for n, c in enumerate(c for c in nb.cells if c.cell_type == "code"):
            c.execution_count = n + 1
            c.outputs = [nbformat.v4.new_output("stream", name="stdout", text="answer\n")]
        nbformat.write(nb, starter_path(script))
        worked += 1
    return worked


@pytest.mark.slow
def test_the_starter_tests_pass_after_a_learner_saved_answers_and_outputs(tmp_path):
    """A learner's checkout of the course whose exercise notebooks hold answers, stored outputs
    and execution counts (saved in its working tree, not committed): the temporary repository
    the starter tests run in is built from git's copies, the learner's work is saved on top, and
    the starter tests (which read git's index) pass. Built from the working tree instead, every
    saved starter would be committed with its answers and fail ``test_starter_is_clean``."""
    checkout = tmp_path / "checkout"  # the learner's clone, answers saved in its working tree
    subprocess.run(
        ["git", "clone", "-q", "--shared", str(ROOT), str(checkout)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert _save_answers(checkout / "exercises") >= 10
    course = tmp_path / "course"
    copied = course_from_git(checkout, course)
    assert "tests/test_exercises.py" in copied and any(p.endswith(".ipynb") for p in copied)
    for cmd in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "course"]):
        _git(course, *cmd)
    worked = _save_answers(course / "exercises")  # and the learner's work on top, again
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0"]
        + ["-k", "starter_is_clean", "tests/test_exercises.py"],
        cwd=course,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert f"{worked} passed" in r.stdout, r.stdout[-2000:]
