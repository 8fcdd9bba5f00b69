"""The shape of every chapter page (book/<slug>.md): a picture in the opening, a worked problem
with its answer in a dropdown before the first display formula, a main path of at most 3,500
words, and an appendix (book/<slug>_appendix.md) that holds the calibration and validation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from minipar import chapters

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHAPTERS = chapters.SLUGS
MAIN_PATH_WORDS = 3500
FENCE = re.compile(r"^(```+|:::+)\{(?P<name>[\w-]+)\}(?P<arg>.*)$", re.M)


def _words(text: str) -> int:
    """Words a reader reads: prose, headings, captions; not directive option lines or code.

    Fences nest: a directive's fence (```{figure} or :::{dropdown}) holds prose, a plain or
    language fence (```python) holds code; a bare fence closes the innermost open one."""
    out, stack = [], []  # stack of (fence characters, is code)
    for line in text.splitlines():
        stripped = line.strip()
        fence = re.match(r"^(`{3,}|:{3,}|~{3,})(.*)$", stripped)
        if fence:
            marks, rest = fence.groups()
            if (
                not rest.strip()
                and stack
                and stack[-1][0][0] == marks[0]
                and len(marks) >= len(stack[-1][0])
            ):
                stack.pop()
                continue
            if rest.strip() or not stack or stack[-1][0][0] != marks[0]:
                stack.append((marks, not rest.strip().startswith("{")))
                continue
        if any(code for _, code in stack) or re.match(r"^\s*:[\w-]+:", line):
            continue
        out.append(line)
    return len(" ".join(out).split())


def test_every_chapter_has_an_appendix():
    assert len(CHAPTERS) == 8, CHAPTERS
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    for slug in CHAPTERS:
        assert f"file: book/{slug}_appendix" in toc


@pytest.mark.parametrize("slug", CHAPTERS)
def test_main_path_is_at_most_3500_words(slug):
    n = _words((BOOK / f"{slug}.md").read_text(encoding="utf-8"))
    assert n <= MAIN_PATH_WORDS, (
        f"book/{slug}.md: {n} words on the main path (at most {MAIN_PATH_WORDS})"
    )


@pytest.mark.parametrize("slug", CHAPTERS)
def test_opening_shows_a_picture_and_a_worked_problem_precedes_the_formulas(slug):
    text = (BOOK / f"{slug}.md").read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.M)
    opening = sections[0] + (sections[1] if len(sections) > 1 else "")
    assert "{minipar-figure}" in opening, f"book/{slug}.md: no figure in its first two sections"
    problem = re.search(r"\{admonition\}\s*Worked problem", text)
    assert problem, f"book/{slug}.md: no ':::{{admonition}} Worked problem: ...'"
    assert "{dropdown}" in text[problem.start() :], (
        f"book/{slug}.md: the worked problem's answer is not in a dropdown"
    )
    first_formula = text.find("$$")
    assert first_formula == -1 or problem.start() < first_formula, (
        f"book/{slug}.md: the first display formula comes before the worked problem"
    )


@pytest.mark.parametrize("slug", CHAPTERS)
def test_appendix_holds_the_checking_and_no_page_tells_an_earlier_version(slug):
    appendix = (BOOK / f"{slug}_appendix.md").read_text(encoding="utf-8")
    assert _words(appendix) >= 150, f"book/{slug}_appendix.md is nearly empty"
    for page in (BOOK / f"{slug}.md", BOOK / f"{slug}_appendix.md"):
        text = page.read_text(encoding="utf-8")
        for phrase in (
            "shipped before",
            "an earlier version of this",
            "which is how the",
            "this chapter used to",
        ):
            assert phrase not in text, (
                f"{page.name} tells the story of an earlier version: {phrase!r}"
            )


def test_word_count_ignores_code_and_options():
    text = (
        "# T\n\nOne two three.\n\n```python\nx = 1\n```\n\n```{minipar-figure} a.b\n:alt: skip me\n"
        "Caption here.\n```\n\nAfter the figure.\n\n:::{admonition} Worked problem: a\nAsk.\n"
        "::::{dropdown} Answer\nSay.\n::::\n:::\nLast.\n```\nplain code\n```\n"
    )
    # "# T" 2, "One two three." 3, caption 2, "After the figure." 3, admonition 0 (title on the
    # fence line), "Ask." 1, "Say." 1, "Last." 1; code and options not counted
    assert _words(text) == 2 + 3 + 2 + 3 + 1 + 1 + 1
