"""``minipar grade`` with no path finds the exercises from the course's root and from inside
``exercises/`` (it said "must exist, got 'exercises'" there); a path that does not exist says
where it looked and what to type."""

from __future__ import annotations

import pytest

from minipar.errors import InputError
from minipar.grading import cli


def test_no_path_means_the_exercises_folder_found_from_here(tmp_path):
    chapter = tmp_path / "course" / "exercises" / "memory_time"
    chapter.mkdir(parents=True)
    assert cli.default_paths(tmp_path / "course") == ["exercises"]
    assert cli.default_paths(tmp_path / "course" / "exercises") == ["."]
    assert cli.default_paths(chapter) == ["."]
    assert cli.default_paths(tmp_path) == ["exercises"]  # elsewhere: refused by name


def test_a_missing_path_says_what_to_type(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as e:
        cli.notebooks(["exercises"])
    said = str(e.value)
    assert f"got 'exercises' (no such file or folder in {tmp_path})" in said
    assert "run it from the course's root or inside exercises/" in said
