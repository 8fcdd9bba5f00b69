"""Destinations are checked before the work: ``bench collectives --out``/``--plot`` and
``calibrate gpu --out`` that cannot be written fail at once with one line naming the flag, in a
read-only checkout too (``make book`` there says one line, not Sphinx's traceback);
``calibrate gpu`` writes under the git-ignored ``bench-results/`` by default, never at the
repository's root; ``plan --calibrate`` refuses ``--gpus`` and ``--global-batch`` it would
ignore."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from minipar.bench import collectives as bench_collectives
from minipar.bench import gpu as calib
from minipar.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *argv):
    try:
        status = main(list(argv))
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def no_measuring(monkeypatch):
    """Fail the test if a benchmark or a calibration starts measuring."""

    def started(*a, **k):
        raise AssertionError("the run started before its destination was checked")

    monkeypatch.setattr(bench_collectives, "run_benchmark", started)
    monkeypatch.setattr(calib, "calibrate", started)


@pytest.mark.parametrize(
    "argv, words",
    [
        (
            ("bench", "collectives", "--quick", "--out", "/nonexistent/x.json"),
            "--out /nonexistent/x.json: folder /nonexistent does not exist",
        ),
        (
            ("calibrate", "gpu", "--device", "cpu", "--out", "/nonexistent/p.json"),
            "--out /nonexistent/p.json: folder /nonexistent does not exist",
        ),
        (("bench", "collectives", "--quick", "--out", "/tmp"), "--out /tmp: is a folder"),
    ],
)
def test_a_destination_that_cannot_be_written_fails_before_the_run(
    capsys, no_measuring, argv, words
):
    status, out, err = run(capsys, *argv)
    assert status == 2 and words in err and err.count("\n") == 1, err


def test_a_read_only_folder_is_refused_naming_it(capsys, no_measuring, monkeypatch, tmp_path):
    """``os.access`` says what the process may write (root included, on a read-only mount)."""
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, m: False if str(p) == str(tmp_path) else real(p, m))
    out = tmp_path / "x.json"
    status, _, err = run(capsys, "bench", "collectives", "--quick", "--out", str(out))
    assert status == 2 and f"folder {tmp_path} is not writable" in err, err
    assert "nothing was measured" in err


def test_calibrate_writes_under_a_git_ignored_folder_by_default(capsys, monkeypatch, tmp_path):
    """Run in a checkout's root, `calibrate gpu --device cpu` leaves no untracked file there."""
    assert calib.DEFAULT_OUT == os.path.join("bench-results", "gpu_profile.json")
    ignored = subprocess.run(["git", "check-ignore", "-q", calib.DEFAULT_OUT], cwd=ROOT, timeout=60)
    assert ignored.returncode == 0, "bench-results/ must be git-ignored"
    monkeypatch.chdir(tmp_path)
    from minipar.cost.kernels.hardware import GPUS, gpu_profile

    monkeypatch.setattr(calib, "calibrate", lambda **kw: gpu_profile(GPUS["H200"]))
    status, _, err = run(capsys, "calibrate", "gpu", "--device", "cpu")
    assert status == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench-results"]
    assert (tmp_path / calib.DEFAULT_OUT).exists()


@pytest.mark.parametrize("given", [("--gpus", "8"), ("--global-batch", "16")])
def test_plan_calibrate_refuses_what_it_would_ignore(capsys, no_measuring, given):
    status, out, err = run(capsys, "plan", "--calibrate", *given)
    assert status == 2 and out == "", err
    assert f"--calibrate measures this machine's --ranks (4) gloo ranks, so {given[0]}" in err


# ------------------------------------------------------------------ a read-only checkout
def _read_only(cmd: list[str], folder: Path) -> subprocess.CompletedProcess:
    """``cmd`` run in ``folder`` made read-only: a read-only bind mount in a user namespace for
    root (who writes through any mode bits), the mode bits otherwise."""
    if os.geteuid() != 0:
        subprocess.run(["chmod", "-R", "a-w", str(folder)], check=True, timeout=60)
        try:
            return subprocess.run(cmd, cwd=folder, capture_output=True, text=True, timeout=300)
        finally:
            subprocess.run(["chmod", "-R", "u+w", str(folder)], timeout=60)
    script = 'mount --bind -o ro "$0" "$0" && cd "$0" && exec "$@"'
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, str(folder), *cmd],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def checkout(tmp_path):
    """A copy of the course's Makefile and inputs with the real .venv beside it (its stamp
    newer than them, so make installs nothing)."""
    course = tmp_path / "course"
    course.mkdir()
    for name in ("Makefile", "requirements.txt", "pyproject.toml"):
        shutil.copy2(ROOT / name, course / name)
    (course / ".venv").symlink_to(ROOT / ".venv")
    return course


@pytest.mark.slow
def test_in_a_read_only_checkout_book_and_calibrate_say_one_line(checkout):
    made = _read_only(["make", "--no-print-directory", "book"], checkout)
    assert made.returncode != 0
    lines = (made.stdout + made.stderr).strip().splitlines()
    assert lines[0].startswith("make book: cannot write _build/ in "), lines
    assert "Traceback" not in made.stdout + made.stderr
    minipar = str(ROOT / ".venv" / "bin" / "minipar")
    for argv in (
        ["calibrate", "gpu", "--device", "cpu"],
        ["bench", "collectives", "--quick", "--out", "r.json"],
    ):
        r = _read_only([minipar, *argv], checkout)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert (
            "--out" in r.stderr
            and "nothing was measured" in r.stderr
            or "cannot make folder" in r.stderr
        )
