"""``python -m minipar.grading.notebooks``: writes only missing starters; ``--force`` names the
notebooks it would overwrite, asks for ``yes`` at a terminal (refuses without one), and keeps a
backup of each notebook it overwrites."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from minipar.grading import notebooks

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "exercises" / "memory_time" / "solutions" / "01_params.py"
ANSWER = "# the learner's answer, saved\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def course(tmp_path, monkeypatch):
    """A course with one exercise, its starter written, then a learner's answer saved in it."""
    solutions = tmp_path / "exercises" / "memory_time" / "solutions"
    solutions.mkdir(parents=True)
    shutil.copy(SCRIPT, solutions / SCRIPT.name)
    monkeypatch.chdir(tmp_path)
    assert notebooks.main([]) == 0
    nb = tmp_path / "exercises" / "memory_time" / "01_params.ipynb"
    nb.write_text(nb.read_text() + ANSWER)
    return nb


def _backups(nb: Path) -> list[Path]:
    return sorted(nb.parent.glob(nb.name + ".bak-*"))


def test_force_without_a_terminal_refuses_naming_what_it_would_erase(course, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("yes\n"))  # piped: not a terminal
    assert notebooks.main(["--force"]) == 1
    out, err = capsys.readouterr()
    assert "overwrites 1 notebook(s)" in out and "01_params.ipynb" in out, out
    assert "erasing the answers" in out
    assert err.startswith("refused: --force asks before it erases answers"), err
    assert course.read_text().endswith(ANSWER), "the learner's answer was erased"
    assert _backups(course) == []


def test_force_answered_no_writes_nothing(course, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", _Terminal("no\n"))
    assert notebooks.main(["--force", "memory_time"]) == 1
    assert "nothing was written" in capsys.readouterr().err
    assert course.read_text().endswith(ANSWER)


def test_force_answered_yes_overwrites_and_keeps_a_backup(course, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", _Terminal("yes\n"))
    assert notebooks.main(["--force"]) == 0
    out = capsys.readouterr().out
    (backup,) = _backups(course)
    assert backup.read_text().endswith(ANSWER), "the backup is the learner's version"
    assert not course.read_text().endswith(ANSWER)
    assert f"the version it replaced: {backup.name}" in out, out
    # a notebook already equal to its starter is neither asked about nor backed up
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert notebooks.main(["--force"]) == 0
    assert _backups(course) == [backup]


def test_help_describes_force_and_its_backup(capsys):
    assert notebooks.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m minipar.grading.notebooks")
    assert "asks first" in out and ".bak-<time>" in out
