"""What the book's code-drawn directives share (``{minipar-figure}``, ``{minipar-animation}``):
the book's own packages on ``sys.path``, loading a registered entry by name (an unknown name is
the directive's error), and the figure node with its anchor and caption. Loaded as an extension
of its own, it also lets Sphinx read pages in parallel (:data:`PARALLEL_READ_SAFE`)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

BOOK = Path(__file__).resolve().parents[1]


class CodeDrawn(SphinxDirective):
    """A directive whose one argument names an entry of ``book/<PACKAGE>/``'s kit; the content
    is the caption, ``:alt:`` the text alternative, ``:name:`` the anchor."""

    PACKAGE = ""  # "figures" or "animations"
    ID_PREFIX = ""  # the default anchor's prefix
    required_arguments = 1
    has_content = True
    option_spec = {"alt": directives.unchanged, "name": directives.unchanged}

    def kit(self):
        """``book/<PACKAGE>/kit.py``, with ``book/`` on ``sys.path`` first."""
        if str(BOOK) not in sys.path:
            sys.path.insert(0, str(BOOK))
        return importlib.import_module(f"{self.PACKAGE}.kit")

    def entry(self, kit):
        """The registered entry the argument names."""
        try:
            return kit.load(self.arguments[0])
        except (KeyError, ModuleNotFoundError) as exc:
            raise self.error(f"{self.name}: {exc}") from exc

    def figure(self, classes: list[str]) -> nodes.figure:
        """An empty figure node with its anchor."""
        container = nodes.figure(classes=classes)
        default = f"{self.ID_PREFIX}-{self.arguments[0]}"
        container["ids"] = [nodes.make_id(self.options.get("name", default))]
        return container

    def add_caption(self, container: nodes.figure) -> nodes.figure:
        """The content, parsed inline, as the figure's caption."""
        if self.content:
            text = "\n".join(self.content)
            inodes, messages = self.state.inline_text(text, self.lineno)
            container += nodes.caption(text, "", *inodes)
            container += messages
        return container


# jupyter-book's extensions that do not say whether Sphinx may read pages in parallel, so that
# Sphinx read one page at a time (and, under -W, failed on its warning about it). Both are
# safe: what they do while a page is read touches that page's doctree only.
PARALLEL_READ_SAFE = {
    "sphinx_multitoc_numbering": "numbers sections once the readers' environments are merged",
    "sphinx_jupyterbook_latex": "transforms one document's toctree and sections, for LaTeX",
}


def declare_parallel_read_safe(app) -> None:
    for name in PARALLEL_READ_SAFE:
        ext = app.extensions.get(name)
        if ext is not None:
            ext.parallel_read_safe = True


def setup(app):
    app.connect("builder-inited", declare_parallel_read_safe)  # all extensions loaded by then
    return {"parallel_read_safe": True, "parallel_write_safe": True}
