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


def test_a_body_is_needed_past_a_trivial_change_and_wraps_at_100():
    subject_only = "Fix a typo in the TP chapter\n"
    assert check_commits.problems(subject_only, changed=2) == []  # trivial: no body needed
    bad = check_commits.problems(subject_only, changed=3)
    assert bad == [
        "no body: a commit changing 3 lines (more than 2) says below the subject why, "
        "and what was measured"
    ]
    wrapped = "Price SwiGLU's bytes\n\n" + "x" * 100 + "\n" + "y" * 40 + "\n"
    assert check_commits.problems(wrapped, changed=50) == []
    long = "Price SwiGLU's bytes\n\nfirst line\n" + "y" * 101 + "\n"
    assert check_commits.problems(long, changed=50) == ["line 4 has 101 characters (at most 100)"]
    # before the body rule (changed=None): the subject rule only
    assert check_commits.problems(subject_only) == [] and check_commits.problems(long) == []


def test_changed_lines_counts_added_removed_and_binary_files():
    numstat = "3\t1\tsrc/a.py\n-\t-\tbook/fig.png\n0\t12\tREADME.md\n"
    assert check_commits.changed_lines(numstat) == 3 + 1 + 1 + 12
    assert check_commits.changed_lines("") == 0


@pytest.mark.slow
def test_history_checks_bodies_only_after_the_body_rule(tmp_path, monkeypatch, capsys):
    """In a repository: a body-less commit up to BODY_SINCE passes, one after it fails."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]

    def commit(name, message):
        (tmp_path / name).write_text("a\nb\nc\nd\n")  # 4 lines: not trivial
        for args in (["add", name], ["commit", "-q", "-m", message]):
            subprocess.run([*git, *args], cwd=tmp_path, check=True, capture_output=True)
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=tmp_path, check=True, capture_output=True, text=True
        ).stdout.strip()

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    first = commit("a.txt", "Start")
    before = commit("b.txt", "Add b without a body")
    after = commit("c.txt", "Add c without a body")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(check_commits, "BODY_SINCE", before)
    assert check_commits.main(["--since", first]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{after[:10]}: no body") and before[:10] not in out, out
    monkeypatch.setattr(check_commits, "BODY_SINCE", after)
    assert check_commits.main(["--since", first]) == 0, capsys.readouterr().out


@pytest.mark.slow
def test_a_waived_commit_is_skipped_and_only_it(tmp_path, monkeypatch, capsys):
    """WAIVED names one commit by hash; the same message on any other commit still fails."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    shas = []
    for name in ("a", "b", "c"):
        (tmp_path / name).write_text("x\n")
        subject = "Start" if name == "a" else "S" * 73
        for args in (["add", name], ["commit", "-q", "-m", subject + "\n\nWhy."]):
            subprocess.run([*git, *args], cwd=tmp_path, check=True, capture_output=True)
        shas.append(
            subprocess.run(
                ["git", "rev-parse", "HEAD"],
                cwd=tmp_path,
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(check_commits, "WAIVED", {shas[1]: "a test"})
    assert check_commits.main(["--since", shas[0]]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{shas[2][:10]}: the subject has 73") and shas[1][:10] not in out, out
