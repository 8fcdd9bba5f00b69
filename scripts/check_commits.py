"""Commit messages a newcomer can skim: a subject of at most 72 characters, then a blank line and
a body with the measurements and the why, wrapped at 100 characters.

    python scripts/check_commits.py                 # every commit after RULE_SINCE (make lint)
    python scripts/check_commits.py --message FILE  # one message (the commit-msg hook)

Commits before ``RULE_SINCE`` predate the subject rule and are not checked; commits before
``BODY_SINCE`` predate the body rule (a body for every commit that changes more than
``TRIVIAL_LINES`` lines, no line over ``MAX_LINE`` characters) and are checked for the subject
only. Install the hook with ``git config core.hooksPath scripts/git-hooks``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

#: the last commit made before the subject rule; everything after it is checked
RULE_SINCE = "9240e59c86eb051528c7115944d9f34591968dbc"
#: the last commit made before the body rule; the commits after it also have their bodies checked
BODY_SINCE = "7bfc44a02532ccb7aaa839dcd3a1a52d742984b4"
#: commits whose message broke a rule and that later commits name by hash (a freeze, a record), so
#: rewording them would break those references: each with what it broke; it is not checked
WAIVED = {
    "ea78903147a6b8ca149eb7868df964abda6f55c7": "a 73-character subject, made before the hook "
    "was installed; later commits (the experiment 4 freeze among them) are named by hash",
}
MAX_SUBJECT = 72
MAX_LINE = 100  # characters per body line
TRIVIAL_LINES = 2  # a commit changing at most this many lines (added + removed) needs no body


def problems(message: str, changed: int | None = None) -> list[str]:
    """What is wrong with one commit message (empty when nothing is): the subject rule always;
    the body rule when ``changed`` (lines added + removed) is given."""
    lines = [ln for ln in message.splitlines() if not ln.startswith("#")]
    subject = lines[0].rstrip() if lines else ""
    out = []
    if not subject:
        out.append("the subject is empty")
    if len(subject) > MAX_SUBJECT:
        out.append(f"the subject has {len(subject)} characters (at most {MAX_SUBJECT})")
    if subject.endswith("."):
        out.append("the subject ends with a full stop")
    if len(lines) > 1 and lines[1].strip():
        out.append("the second line is not blank (subject, blank line, body)")
    if changed is None:
        return out
    if changed > TRIVIAL_LINES and not any(ln.strip() for ln in lines[1:]):
        out.append(
            f"no body: a commit changing {changed} lines (more than {TRIVIAL_LINES}) says below "
            "the subject why, and what was measured"
        )
    for i, ln in enumerate(lines[1:], 2):
        if len(ln.rstrip()) > MAX_LINE:
            out.append(f"line {i} has {len(ln.rstrip())} characters (at most {MAX_LINE})")
    return out


def changed_lines(numstat: str) -> int:
    """Lines added + removed in ``git diff --numstat`` output (a binary file counts as one)."""
    total = 0
    for row in numstat.splitlines():
        added, removed, *_ = row.split("\t") + ["", ""]
        if added == "-":
            total += 1
        elif added.isdigit() and removed.isdigit():
            total += int(added) + int(removed)
    return total


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def _known(sha: str) -> bool:
    try:
        _git("cat-file", "-e", f"{sha}^{{commit}}")
    except subprocess.CalledProcessError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--message", type=Path, help="check one message file (commit-msg hook)")
    ap.add_argument("--since", default=RULE_SINCE, help="check the commits after this one")
    args = ap.parse_args(argv)
    if args.message:  # the hook: the staged change is the one being committed
        try:
            changed = changed_lines(_git("diff", "--cached", "--numstat"))
        except (OSError, subprocess.CalledProcessError):
            changed = None  # not in a repository: the subject rule only
        bad = problems(args.message.read_text(encoding="utf-8"), changed)
        for b in bad:
            print(f"commit message: {b}", file=sys.stderr)
        return 1 if bad else 0
    if not _known(args.since):
        print(f"check_commits: {args.since[:12]} is not in this clone; nothing checked")
        return 0
    failed = 0
    with_body = (
        set(_git("rev-list", f"{BODY_SINCE}..HEAD").split()) if _known(BODY_SINCE) else set()
    )
    for sha in _git("rev-list", f"{args.since}..HEAD").split():
        if sha in WAIVED:
            continue
        changed = None
        if sha in with_body:
            changed = changed_lines(_git("show", "--numstat", "--format=", sha))
        for b in problems(_git("log", "-1", "--format=%B", sha), changed):
            print(f"{sha[:10]}: {b}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
