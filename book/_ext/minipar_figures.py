"""``{minipar-figure} <slug>.<name>``: a figure drawn at build time by the course's own code.

The directive imports ``book/figures/<slug>.py``, calls the figure's function in the light and
the dark theme (``figures.kit``), writes both SVGs under ``_build/figures/`` and shows the one
that matches the reader's theme. The content is the caption; ``:alt:`` the text alternative.
In HTML the figure sits in its own scrolling box with a minimum width, so it stays legible on a
390 px phone (``_static/minipar.css``, ``.minipar-figure``). A figure with a phone layout
(``@figure(..., phone=True)``) writes two SVGs more, ``<name>-phone-<theme>.svg``, tagged
``minipar-phone`` (its wide images ``minipar-wide``): a narrow page shows them instead, at the
column's width, with nothing to scroll.
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from minipar_book import BOOK, CodeDrawn


def variants(fig) -> list[tuple[object, str, list[str]]]:
    """(palette, SVG file name, image classes) of every image the page shows for ``fig``: one
    per theme (``only-light``, ``only-dark``), and for a figure with a phone layout each also
    tagged ``minipar-wide`` or ``minipar-phone``, which ``_static/minipar.css`` switches at
    540 px. An untagged wide image of such a figure would show on a phone beside its phone
    layout."""
    out = []
    for pal in fig.palettes():
        layout = "phone" if pal.phone else "wide"
        file = f"{fig.name}-{'phone-' if pal.phone else ''}{pal.theme}.svg"
        out.append(
            (pal, file, [f"only-{pal.theme}"] + ([f"minipar-{layout}"] if fig.phone else []))
        )
    return out


class MiniparFigure(CodeDrawn):
    PACKAGE, ID_PREFIX = "figures", "fig"

    def run(self):
        kit = self.kit()
        fig = self.entry(kit)
        name = self.arguments[0]
        slug = name.split(".", 1)[0]
        self.env.note_dependency(str(BOOK / "figures" / f"{slug}.py"))
        self.env.note_dependency(str(BOOK / "figures" / "kit.py"))
        out = Path(self.env.srcdir) / "_build" / "figures"
        out.mkdir(parents=True, exist_ok=True)
        alt = self.options.get("alt", "")
        container = self.figure(["minipar-figure"])
        box = nodes.container(classes=["minipar-figure-box"])
        for pal, file, classes in variants(fig):
            path = out / file
            path.write_text(fig.svg(pal), encoding="utf-8")
            rel = "/" + path.relative_to(self.env.srcdir).as_posix()
            box += nodes.image(uri=rel, alt=alt, classes=classes)
        container += box
        return [self.add_caption(container)]


def setup(app):
    app.add_directive("minipar-figure", MiniparFigure)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
