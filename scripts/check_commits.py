"""Commit messages a newcomer can skim: a subject of at most 72 characters, then a blank line and
a body with the measurements and the why.

    python scripts/check_commits.py                 # every commit after RULE_SINCE (make lint)
    python scripts/check_commits.py --message FILE  # one message (the commit-msg hook)

Commits before ``RULE_SINCE`` predate the rule and are not checked. Install the hook with
``git config core.hooksPath scripts/git-hooks``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

#: the last commit made before the rule; everything after it is checked
RULE_SINCE = "9240e59c86eb051528c7115944d9f34591968dbc"
MAX_SUBJECT = 72


def problems(message: str) -> list[str]:
    """What is wrong with one commit message (empty when nothing is)."""
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
    return out


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--message", type=Path, help="check one message file (commit-msg hook)")
    ap.add_argument("--since", default=RULE_SINCE, help="check the commits after this one")
    args = ap.parse_args(argv)
    if args.message:
        bad = problems(args.message.read_text(encoding="utf-8"))
        for b in bad:
            print(f"commit message: {b}", file=sys.stderr)
        return 1 if bad else 0
    try:
        _git("cat-file", "-e", f"{args.since}^{{commit}}")
    except subprocess.CalledProcessError:
        print(f"check_commits: {args.since[:12]} is not in this clone; nothing checked")
        return 0
    failed = 0
    for sha in _git("rev-list", f"{args.since}..HEAD").split():
        for b in problems(_git("log", "-1", "--format=%B", sha)):
            print(f"{sha[:10]}: {b}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
