"""Cost-model explorers that work with a kernel (anywidget) and on the static site (no kernel,
no network). One small JavaScript file per chapter evaluates the chapter's cost model in the
browser and draws SVG; the Python ``minipar.cost`` functions stay the source of truth, and a test
runs the JavaScript under Node.js and compares it with them.

How a chapter adds an explorer (slug ``<slug>``, e.g. ``tensor_parallel``)
--------------------------------------------------------------------------
1. ``src/minipar/widgets/<slug>.js``: no ``import`` statements. First line may name the chapter
   files it builds on, ``// minipar-requires: collectives, memory_time``. Port the cost-model
   functions you need as ``export function camelCaseName(...)``, taking the Python function's
   parameters positionally in the same order, returning what Python returns (a NamedTuple or
   dict as an object with the same field names, a tuple as an array) and throwing
   ``Error(message)`` where Python raises ``ValueError``. Then register the explorer::

       registerExplorer("<name>", {
         title: "…",
         controls: [{name: "t", label: "t", type: "number", min: 1, max: 64, step: 1, value: 8,
                     why: "t divides the heads"},   // max is required (explorer.js)
                    {name: "sched", type: "select", options: ["gpipe", "1f1b"], value: "1f1b"},
                    {name: "size", type: "range", values: [...], labels: [...], value: ...},
                    {name: "sp", type: "checkbox", value: true}],
         draw(values, config) { /* throw Error("heads (12) must be divisible by t (5)") */
                                return lineChart({...}) + "<p>…</p>"; },
       });

   ``draw`` returns an HTML string (the chart helpers ``lineChart``, ``stackedBars``,
   ``timeline`` of ``explorer.js`` return SVG with units in the axis labels). Put data that lives
   in Python (link and GPU presets, fitted numbers) in ``config``, not in the JavaScript.
2. ``src/minipar/widgets/<slug>.py``: a function that returns
   ``Explorer("<slug>", "<name>", config=..., values=...)``. In the notebook, make it the last
   expression of a cell: JupyterLab shows the live widget; the executed notebook also stores a
   self-contained ``text/html`` copy (the JavaScript inlined), which is what the book shows.
3. ``tests/test_explorer_parity.py``: call ``assert_parity`` (from the test support module
   ``tests/explorer_parity_support.py``) with your JavaScript function, the Python twin and a
   grid of inputs that includes non-powers of two and impossible settings; and ``js_call`` on
   ``drawExplorer`` to check the default view draws and an impossible setting gives a message.

DOM contract used by the browser test (tests/test_site_browser.py): root element class
``minipar-explorer``, figure in ``minipar-explorer-output``, impossible settings as a
``minipar-explorer-message`` inside the output, every control change redraws.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

JS_DIR = Path(__file__).resolve().parent
_REQUIRES = re.compile(r"^//\s*minipar-requires:\s*(.+)$", re.M)


def js_source(slug: str) -> str:
    path = JS_DIR / f"{slug}.js"
    if not path.is_file():
        raise ValueError(f"explorer slug ({slug!r}) has no file {path.name} in {JS_DIR}")
    return path.read_text(encoding="utf-8")


def chapter_files(slug: str) -> list[str]:
    """``slug`` and the chapters it requires (transitively), dependencies first."""
    order: list[str] = []

    def visit(s: str, stack: tuple = ()) -> None:
        if s in stack:
            raise ValueError(
                f"explorer files require each other in a cycle: {' -> '.join(stack + (s,))}"
            )
        if s in order:
            return
        m = _REQUIRES.search(js_source(s))
        for dep in [d.strip() for d in m.group(1).split(",")] if m else []:
            visit(dep, stack + (s,))
        order.append(s)

    visit(slug)
    return order


def bundle(slug: str) -> str:
    """One ES module: the framework (explorer.js), the required chapters, then ``slug``."""
    parts = [js_source("explorer")] + [js_source(s) for s in chapter_files(slug)]
    return "\n".join(parts)


def classic_script(slug: str) -> str:
    """:func:`bundle` as a classic script body (``export`` stripped) for an inline <script>."""
    src = bundle(slug)
    src = re.sub(r"^export default ", "const __miniparDefault = ", src, flags=re.M)
    src = re.sub(r"^export \{[^}]*\};?\s*$", "", src, flags=re.M)
    src = re.sub(r"^export (function|const|let|class|async function) ", r"\1 ", src, flags=re.M)
    if re.search(r"^\s*(import|export)\b", src, flags=re.M):
        raise ValueError(
            f"{slug}.js: only top-level `export function|const|default` are "
            "supported (no import, no export lists)"
        )
    return src


def _script_safe(text: str) -> str:
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def static_html(
    slug: str, name: str, values: dict | None = None, config: dict | None = None
) -> str:
    """A self-contained HTML mount: a <div> and an inline script that draws the explorer.

    No request leaves the page, so it works on the static site, offline, and from file://.
    """
    mount = f"minipar-{name}-{uuid.uuid4().hex[:10]}"
    args = ", ".join(_script_safe(json.dumps(x)) for x in (name, values or {}, config or {}))
    return (
        f'<div id="{mount}" class="minipar-explorer-mount">'
        f"<p><i>This explorer needs JavaScript enabled.</i></p></div>\n"
        f"<script>\n(function () {{\n{_script_safe(classic_script(slug))}\n"
        f"mountExplorer(document.getElementById({json.dumps(mount)}), {args});\n}})();\n"
        "</script>"
    )


def _widget_class():
    import anywidget  # noqa: PLC0415 (lazy: book extra)
    import traitlets  # noqa: PLC0415 (lazy: book extra)

    class Explorer(anywidget.AnyWidget):
        """A live explorer: anywidget with a kernel, the inline HTML copy everywhere else."""

        _esm = traitlets.Unicode("").tag(sync=True)
        explorer = traitlets.Unicode("").tag(sync=True)
        values = traitlets.Dict().tag(sync=True)
        config = traitlets.Dict().tag(sync=True)

        def __init__(
            self, slug: str, explorer: str, config: dict | None = None, values: dict | None = None
        ):
            super().__init__(
                _esm=bundle(slug), explorer=explorer, config=config or {}, values=values or {}
            )
            self.slug = slug

        def static_html(self) -> str:
            return static_html(self.slug, self.explorer, self.values, self.config)

        def _repr_mimebundle_(self, **kwargs):
            out = super()._repr_mimebundle_(**kwargs)
            data, meta = out if isinstance(out, tuple) else (out, {})
            data = {**data, "text/html": self.static_html()}
            return data, meta

    return Explorer


_EXPLORER_CLASS = None


def Explorer(slug: str, explorer: str, config: dict | None = None, values: dict | None = None):
    """The explorer ``explorer`` registered in ``widgets/<slug>.js``, as a widget.

    ``config``: data the JavaScript needs (JSON-serialisable); ``values``: control values that
    override the defaults.
    """
    global _EXPLORER_CLASS
    if _EXPLORER_CLASS is None:
        _EXPLORER_CLASS = _widget_class()
    return _EXPLORER_CLASS(slug, explorer, config=config, values=values)
