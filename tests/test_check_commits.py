"""scripts/check_commits.py: the commit-message rule make lint applies."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import check_commits  # noqa: E402 (scripts/ joins sys.path above)


def test_a_good_message_passes():
    assert (
        check_commits.problems("Price SwiGLU's element-wise bytes\n\nBody: 1.2 -> 0.9 ms.\n") == []
    )


def test_long_subject_full_stop_and_missing_blank_line_are_named():
    long = "Tracer subgroup test reads rank 3's and rank 0's events from one 4-rank launch."
    bad = check_commits.problems(long + "\nbody right below\n")
    assert any("characters (at most 72)" in b for b in bad)
    assert any("full stop" in b for b in bad)
    assert any("second line is not blank" in b for b in bad)


def test_hook_rejects_a_long_subject(tmp_path):
    msg = tmp_path / "MSG"
    msg.write_text("x" * 73 + "\n")
    hook = ROOT / "scripts" / "git-hooks" / "commit-msg"
    r = subprocess.run([str(hook), str(msg)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and "73 characters" in r.stderr


@pytest.mark.slow
def test_every_commit_since_the_rule_passes():
    r = subprocess.run(
        [sys.executable, "scripts/check_commits.py"], capture_output=True, text=True, cwd=ROOT
    )
    assert r.returncode == 0, r.stdout
