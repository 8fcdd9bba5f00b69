"""The chapter pages' figures (book/figures/, the {minipar-figure} directive): each renders in both
themes as SVG, each is computed by the library functions it names, and each chapter page shows
at least three of them.

The figures are listed from their modules' source (every function under ``@figure(...)``), not by
importing them: collection imports no figure module, hence neither matplotlib nor torch (2.6
CPU-s of every worker's collection); the one figure a test draws is imported then, and
``test_the_listed_figures_are_the_registered_ones`` imports them all to check the listing."""

from __future__ import annotations

import ast
import importlib
import inspect
import io
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
sys.path.insert(0, str(BOOK))

from figures import kit  # noqa: E402 (book/ joins sys.path above)

from minipar import chapters  # noqa: E402 (after the path set-up, with the book's imports)

CHAPTERS = chapters.SLUGS
DIRECTIVE = re.compile(r"^[`:]{3,}\{minipar-figure\}\s+(\S+)", re.M)
MODULES = sorted(p for p in (BOOK / "figures").glob("*.py") if p.stem not in ("__init__", "kit"))


def _is_figure_decorator(node: ast.expr) -> bool:
    """``@figure(...)`` or ``@kit.figure(...)``."""
    func = node.func if isinstance(node, ast.Call) else node
    return (isinstance(func, ast.Name) and func.id == "figure") or (
        isinstance(func, ast.Attribute) and func.attr == "figure"
    )


def _listed_figures() -> list[str]:
    """``<module>.<function>`` of every top-level function a figure module decorates with
    ``@figure``: the names :func:`kit.figure` registers, read without importing."""
    return sorted(
        f"{path.stem}.{node.name}"
        for path in MODULES
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.FunctionDef) and any(map(_is_figure_decorator, node.decorator_list))
    )


FIGURES = _listed_figures()


def _resolve(dotted: str):
    """A function or a method (``minipar.grid.Grid.group_of``): the longest importable module
    prefix, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return inspect.unwrap(obj)
    raise ModuleNotFoundError(dotted)


def test_the_chapters_are_found():
    assert len(CHAPTERS) == 8, CHAPTERS


def test_the_listed_figures_are_the_registered_ones():
    """The source listing misses no figure (one registered some other way) and invents none."""
    for path in MODULES:
        importlib.import_module(f"figures.{path.stem}")
    registered = sorted(n for n in kit.REGISTRY if not n.startswith("test_book_figures."))
    assert registered == FIGURES


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
@pytest.mark.parametrize("name", FIGURES)
def test_figure_renders_in_both_themes_from_the_code_it_names(name):
    fig = kit.load(name)
    assert fig.draws, f"{name} names no library function it is drawn from"
    wanted = {_resolve(d).__code__: d for d in fig.draws}
    called = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in wanted:
            called.add(frame.f_code)

    light = fig.svg(kit.LIGHT, profile=profile)  # watched while it draws
    missing = [wanted[c] for c in wanted if c not in called]
    assert not missing, f"{name} no longer calls {missing}"
    dark = fig.svg(kit.DARK)
    for svg in (light, dark):
        root = ET.fromstring(svg)
        assert root.tag.endswith("svg") and root.get("viewBox")
        width_in = float(root.get("width").removesuffix("pt")) / 72
        assert width_in <= 7.5, (
            f"{name} is {width_in:.1f} in wide: at 390 px its text is unreadable"
        )
    assert light != dark


def test_the_profiler_check_can_fail():
    """Negative control: a figure that draws nothing from the library is caught."""

    @kit.figure(draws=["minipar.pipeline_parallel.schedules.schedule"])
    def not_from_the_code(pal):
        fig, ax = pal.subplots(2, 1)
        ax.plot([0, 1], [0, 1])
        return fig

    try:
        with pytest.raises(AssertionError, match="no longer calls"):
            test_figure_renders_in_both_themes_from_the_code_it_names(
                "test_book_figures.not_from_the_code"
            )
    finally:
        kit.REGISTRY.pop("test_book_figures.not_from_the_code")


def test_a_figure_drawn_again_is_the_same_file():
    """No date and fixed ids (the theme's svg.hashsalt): two builds of the site differ only
    where a figure does. Negative control: matplotlib's default metadata dates each file."""

    @kit.figure(draws=[])
    def two_lines(pal):
        fig, ax = pal.subplots(1, 1)
        ax.plot([0, 1], [0, 1], clip_on=True)
        ax.set_title("x")
        return fig

    try:
        fig = kit.load("test_book_figures.two_lines")
        first = fig.svg(kit.LIGHT)
        assert "<dc:date>" not in first and fig.svg(kit.LIGHT) == first
        import matplotlib
        import matplotlib.pyplot as plt

        with matplotlib.rc_context(kit.LIGHT.rc()):  # the control: savefig's defaults
            drawn, buf = two_lines(kit.LIGHT), io.StringIO()
            drawn.savefig(buf, format="svg")
            plt.close(drawn)
        assert "<dc:date>" in buf.getvalue()
    finally:
        kit.REGISTRY.pop("test_book_figures.two_lines")


@pytest.mark.parametrize("slug", CHAPTERS)
def test_chapter_page_shows_three_figures_that_exist(slug):
    names = DIRECTIVE.findall((BOOK / f"{slug}.md").read_text(encoding="utf-8"))
    unknown = [n for n in names if n not in FIGURES]
    assert not unknown, f"book/{slug}.md shows figures nobody draws: {unknown}"
    assert len(set(names)) >= 3, (
        f"book/{slug}.md shows {len(set(names))} figures drawn by the code (want ≥ 3)"
    )
