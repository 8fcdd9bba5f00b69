"""A worked problem in every major section: each ``## `` section of every chapter page (and its
opening, before the first ``## ``) holds a ``:::{admonition} Worked problem: ...`` whose answer
is a ``{dropdown}``, except sections that only point elsewhere (the code, the exercises)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from minipar.chapters import SLUGS

BOOK = Path(__file__).resolve().parents[1] / "book"

EVERY_SECTION = list(SLUGS)  # the registry's chapters, all of them
#: sections that list files or exercises and teach nothing a problem could test
POINTERS = {"In the code", "Code", "Exercises"}
PROBLEM = re.compile(
    r"^:::+\{admonition\}\s*Worked problem:.*?^`{3,}\{dropdown\}.*?^`{3,}\s*$.*?^:::+\s*$",
    re.M | re.S,
)


def sections_without_a_problem(text: str) -> list[str]:
    """Titles of the sections of ``text`` (the opening counts as "(opening)") with no worked
    problem whose answer is in a dropdown."""
    parts = re.split(r"^## ", text, flags=re.M)
    titled = [("(opening)", parts[0])] + [(p.splitlines()[0].strip(), p) for p in parts[1:]]
    return [t for t, body in titled if t not in POINTERS and not PROBLEM.search(body)]


@pytest.mark.parametrize("slug", EVERY_SECTION)
def test_every_major_section_has_a_worked_problem(slug):
    missing = sections_without_a_problem((BOOK / f"{slug}.md").read_text("utf-8"))
    assert not missing, f"book/{slug}.md: no worked problem in {missing}"


def test_the_check_can_fail():
    """Negative controls: a section without a problem, and one whose answer is not in a
    dropdown, are named; a pointer section is not."""
    problem = ":::{admonition} Worked problem: x\nAsk.\n\n```{dropdown} Answer\nSay.\n```\n:::\n"
    open_answer = ":::{admonition} Worked problem: y\nAsk. The answer is 4.\n:::\n"
    page = (
        f"# T\n\n{problem}\n## A\n\n{problem}\n## B\n\nProse only.\n\n"
        f"## C\n\n{open_answer}\n## Code\n\nFiles.\n"
    )
    assert sections_without_a_problem(page) == ["B", "C"]
