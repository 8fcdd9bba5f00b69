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

from docutils import nodes
from minipar_book import BOOK, CodeDrawn


def _inline_json(data: dict) -> str:
    """JSON safe inside a <script> element (no "</" can close it early)."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


class MiniparAnimation(CodeDrawn):
    PACKAGE, ID_PREFIX = "animations", "anim"

    def run(self):
        kit = self.kit()
        anim = self.entry(kit)
        name = self.arguments[0]
        self.env.note_dependency(str(BOOK / "animations" / f"{name}.py"))
        self.env.note_dependency(str(kit.PLAYER))
        data, _ = anim.build()
        alt = html.escape(self.options.get("alt", ""))
        container = self.figure(["minipar-animation-figure"])
        markup = (
            f'<div class="minipar-animation" data-animation="{html.escape(name)}">'
            f'<script type="application/json" class="minipar-animation-data">'
            f"{_inline_json(data)}</script>"
            f'<noscript><p class="minipar-animation-alt">{alt}</p></noscript></div>'
            f"<script>{kit.player()}</script>"
        )
        container += nodes.raw("", markup, format="html")
        return [self.add_caption(container)]


def setup(app):
    app.add_directive("minipar-animation", MiniparAnimation)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
