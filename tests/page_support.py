"""What the chapter-page tests share: a worked problem's text and a check that an answer still
states every number recomputed from ``minipar.cost``."""

from __future__ import annotations


def worked_problem(page: str, title: str) -> str:
    """The text of the worked problem on ``page`` whose title starts with ``title``, question
    and answer (up to the dropdown's closing fence)."""
    start = page.index(f"Worked problem: {title}")
    return page[start : page.index("\n:::\n", start)]


def has(text: str, *parts: str) -> None:
    """Every one of ``parts`` stands in ``text``; the assertion names the ones that do not."""
    missing = [p for p in parts if p not in text]
    assert not missing, f"the answer no longer says {missing}"
