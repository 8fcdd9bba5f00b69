"""The chapter registry (minipar.chapters) drives the lists: every chapter has all its parts,
and no package holds a chapter module the registry does not list."""

from __future__ import annotations

from pathlib import Path

import pytest

from minipar import chapters

ROOT = Path(__file__).resolve().parents[1]
#: the packages of src/minipar that are floors or commands, not chapters (CONTRIBUTING.md, Layers)
FLOORS = {"bench", "cost", "grading", "plotting", "runtime", "widgets"}


@pytest.mark.parametrize("chapter", chapters.CHAPTERS, ids=lambda c: c.slug)
def test_every_chapter_has_all_its_parts(chapter):
    missing = [p for p in chapters.parts(chapter) if not (ROOT / p).exists()]
    assert not missing, f"chapter {chapter.slug} lacks {missing}"
    toc = (ROOT / "_toc.yml").read_text(encoding="utf-8")
    for page in (
        f"book/{chapter.slug}",
        f"notebooks/{chapter.slug}",
        f"book/{chapter.slug}_exercises",
    ):
        assert f"file: {page}\n" in toc, f"_toc.yml does not list {page}"


def test_every_chapter_package_is_registered():
    packages = {p.parent.name for p in (ROOT / "src" / "minipar").glob("*/__init__.py")}
    unknown = packages - FLOORS - set(chapters.SLUGS)
    assert not unknown, (
        f"src/minipar has chapter packages the registry does not list: {sorted(unknown)}"
    )
    assert set(chapters.SLUGS) <= packages


def test_removing_a_part_is_caught(tmp_path, monkeypatch):
    """Negative control: a chapter whose grader is missing fails the parts check."""
    monkeypatch.setattr(chapters, "CHAPTERS", (chapters.Chapter("no_such_chapter"),))
    with pytest.raises(AssertionError, match="lacks"):
        test_every_chapter_has_all_its_parts(chapters.Chapter("no_such_chapter"))


def test_every_chapter_forbids_its_answers_and_only_registered_chapters_are_named():
    """The grader's forbidden modules (minipar.grading.imports) cover every registered chapter,
    its own package unless an exception says otherwise, and name no chapter the registry
    lacks."""
    from minipar.grading import imports

    assert list(imports.FORBIDDEN) == list(chapters.SLUGS)
    assert set(imports._ANSWERS) <= set(chapters.SLUGS), sorted(imports._ANSWERS)
    for slug, modules in imports.FORBIDDEN.items():
        assert any(m == f"minipar.{slug}" or m.startswith(f"minipar.{slug}.") for m in modules), (
            slug,
            modules,
        )
