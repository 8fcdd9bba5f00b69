"""``{minipar-figure} <slug>.<name>``: a figure drawn at build time by the course's own code.

The directive imports ``book/figures/<slug>.py``, calls the figure's function in the light and
the dark theme (``figures.kit``), writes both SVGs under ``_build/figures/`` and shows the one
that matches the reader's theme. The content is the caption; ``:alt:`` the text alternative.
In HTML the figure sits in its own scrolling box with a minimum width, so it stays legible on a
390 px phone (``_static/minipar.css``, ``.minipar-figure``).
"""

from __future__ import annotations

import sys
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

BOOK = Path(__file__).resolve().parents[1]


def _kit():
    if str(BOOK) not in sys.path:
        sys.path.insert(0, str(BOOK))
    from figures import kit  # noqa: PLC0415 (book/ joins sys.path first, above)

    return kit


class MiniparFigure(SphinxDirective):
    required_arguments = 1
    has_content = True
    option_spec = {"alt": directives.unchanged, "name": directives.unchanged}

    def run(self):
        kit = _kit()
        name = self.arguments[0]
        try:
            fig = kit.load(name)
        except (KeyError, ModuleNotFoundError) as exc:
            raise self.error(f"minipar-figure: {exc}") from exc
        slug = name.split(".", 1)[0]
        self.env.note_dependency(str(BOOK / "figures" / f"{slug}.py"))
        self.env.note_dependency(str(BOOK / "figures" / "kit.py"))
        out = Path(self.env.srcdir) / "_build" / "figures"
        out.mkdir(parents=True, exist_ok=True)
        alt = self.options.get("alt", "")
        container = nodes.figure(classes=["minipar-figure"])
        container["ids"] = [nodes.make_id(self.options.get("name", f"fig-{name}"))]
        box = nodes.container(classes=["minipar-figure-box"])
        for pal in kit.THEMES:
            path = out / f"{name}-{pal.theme}.svg"
            path.write_text(fig.svg(pal), encoding="utf-8")
            rel = "/" + path.relative_to(self.env.srcdir).as_posix()
            image = nodes.image(uri=rel, alt=alt, classes=[f"only-{pal.theme}"])
            box += image
        container += box
        if self.content:
            text = "\n".join(self.content)
            inodes, messages = self.state.inline_text(text, self.lineno)
            container += nodes.caption(text, "", *inodes)
            container += messages
        return [container]


def setup(app):
    app.add_directive("minipar-figure", MiniparFigure)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
