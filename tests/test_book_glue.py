"""Cross-page glue in the book always names a format: myst-nb splits ``{glue:text}`` at its last
colon, so ``path::key`` without ``:fmt`` is read as key ``path:`` and the build fails late (after
executing every notebook). This catches it in a second."""

import re
from pathlib import Path

BOOK = Path(__file__).resolve().parents[1] / "book"
ROLE = re.compile(r"\{glue:text\}`([^`]*)`")


def unformatted(text: str) -> list[str]:
    return [m for m in ROLE.findall(text) if "::" in m and m.count(":") < 3]


def test_every_cross_page_glue_names_a_format():
    bad = {p.name: unformatted(p.read_text()) for p in sorted(BOOK.glob("*.md"))}
    assert not {k: v for k, v in bad.items() if v}, bad


def test_the_check_catches_a_missing_format():
    assert unformatted("{glue:text}`../notebooks/x.ipynb::key`") == ["../notebooks/x.ipynb::key"]
    assert not unformatted("{glue:text}`../notebooks/x.ipynb::key:d` {glue:text}`local:.2f`")
