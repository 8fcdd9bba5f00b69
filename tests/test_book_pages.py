"""The shape of every chapter page (book/<slug>.md): a picture in the opening, a worked problem
with its answer in a dropdown before the first display formula, a main path of at most 3,500
words, and an appendix (book/<slug>_appendix.md) that holds the calibration and validation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHAPTERS = sorted(p.stem.removesuffix("_appendix") for p in BOOK.glob("*_appendix.md"))
MAIN_PATH_WORDS = 3500
FENCE = re.compile(r"^(```+|:::+)\{(?P<name>[\w-]+)\}(?P<arg>.*)$", re.M)


def _words(text: str) -> int:
    """Words a reader reads: prose, headings, captions; not directive option lines or code."""
    out, in_code = [], False
    for line in text.splitlines():
        if re.match(r"^\s*(```+|~~~)", line) and not FENCE.match(line.strip()):
            in_code = not in_code
            continue
        if in_code or re.match(r"^\s*:[\w-]+:", line) or FENCE.match(line.strip()):
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
    text = "# T\n\nOne two three.\n\n```python\nx = 1\n```\n\n```{minipar-figure} a.b\n:alt: skip me\nCaption here.\n```\n"
    assert _words(text) == 2 + 3 + 2 - 0  # "# T" (2), "One two three." (3), "Caption here." (2)
