"""``{minipar-animation} <name>``: a step-through animation driven by data the course's code exports.

The directive imports ``book/animations/<name>.py``, calls its function (``animations.kit``) for
the data (the ring's step plan, a schedule's simulated timeline, the ring attention's blocks and
softmax statistics), and inlines that JSON next to an empty ``<div class="minipar-animation">``
with the shared player (``book/animations/player.js``: no library, no network), which draws the
steps with Back / Step / Play buttons. The content is the caption; ``:alt:`` the text
alternative. The box scrolls inside itself on a narrow screen (``_static/minipar.css``,
``.minipar-animation``). ``tests/test_book_animations.py`` checks the player's steps against
Python's.
"""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util.docutils import SphinxDirective

BOOK = Path(__file__).resolve().parents[1]


def _kit():
    if str(BOOK) not in sys.path:
        sys.path.insert(0, str(BOOK))
    from animations import kit  # noqa: PLC0415 (book/ joins sys.path first, above)

    return kit


def _inline_json(data: dict) -> str:
    """JSON safe inside a <script> element (no "</" can close it early)."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


class MiniparAnimation(SphinxDirective):
    required_arguments = 1
    has_content = True
    option_spec = {"alt": directives.unchanged, "name": directives.unchanged}

    def run(self):
        kit = _kit()
        name = self.arguments[0]
        try:
            anim = kit.load(name)
        except (KeyError, ModuleNotFoundError) as exc:
            raise self.error(f"minipar-animation: {exc}") from exc
        self.env.note_dependency(str(BOOK / "animations" / f"{name}.py"))
        self.env.note_dependency(str(kit.PLAYER))
        data, _ = anim.build()
        alt = html.escape(self.options.get("alt", ""))
        ident = nodes.make_id(self.options.get("name", f"anim-{name}"))
        container = nodes.figure(classes=["minipar-animation-figure"])
        container["ids"] = [ident]
        markup = (
            f'<div class="minipar-animation" data-animation="{html.escape(name)}">'
            f'<script type="application/json" class="minipar-animation-data">'
            f"{_inline_json(data)}</script>"
            f'<noscript><p class="minipar-animation-alt">{alt}</p></noscript></div>'
            f"<script>{kit.player()}</script>"
        )
        container += nodes.raw("", markup, format="html")
        if self.content:
            text = "\n".join(self.content)
            inodes, messages = self.state.inline_text(text, self.lineno)
            container += nodes.caption(text, "", *inodes)
            container += messages
        return [container]


def setup(app):
    app.add_directive("minipar-animation", MiniparAnimation)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
