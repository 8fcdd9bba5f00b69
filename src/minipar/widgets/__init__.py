"""Cost-model explorers that work with a kernel (anywidget) and on the static site (no kernel,
no network): one JavaScript file per chapter, ``widgets/<slug>.js``, evaluates the chapter's
cost model in the browser and draws SVG; ``widgets/<slug>.py`` returns its :func:`Explorer`.
The Python ``minipar.cost`` functions stay the source of truth (a test runs the JavaScript under
Node.js and compares). How a chapter adds one, and the DOM contract: ``widgets/README.md``.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from pathlib import Path

from minipar.cost.kernels.hardware import GPUS, LINKS

JS_DIR = Path(__file__).resolve().parent
_REQUIRES = re.compile(r"^//\s*minipar-requires:\s*(.+)$", re.M)


def links_config(*extra: str) -> dict:
    """Every link preset of :data:`minipar.cost.kernels.hardware.LINKS` as the JavaScript takes
    it: α (s), per-direction bandwidth (bytes/s) and the attributes named in ``extra``."""
    return {k: {f: getattr(L, f) for f in ("alpha", "bandwidth", *extra)} for k, L in LINKS.items()}


def links_and_peaks() -> dict:
    """Link presets (:func:`links_config`) and GPUs' dense bf16 peaks (FLOP/s)."""
    return {
        "links": links_config(),
        "gpus": {name: g.peak_flops["bf16"] for name, g in GPUS.items()},
    }


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
    """A self-contained HTML mount: a <div> and an inline script that draws the explorer (no
    request leaves the page: it works on the static site, offline, and from file://)."""
    mount = f"minipar-{name}-{uuid.uuid4().hex[:10]}"
    args = ", ".join(_script_safe(json.dumps(x)) for x in (name, values or {}, config or {}))
    return (
        f'<div id="{mount}" class="minipar-explorer-mount">'
        f"<p><i>This explorer needs JavaScript enabled.</i></p></div>\n"
        f"<script>\n(function () {{\n{_script_safe(classic_script(slug))}\n"
        f"mountExplorer(document.getElementById({json.dumps(mount)}), {args});\n}})();\n"
        "</script>"
    )


@functools.cache
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


def Explorer(slug: str, explorer: str, config: dict | None = None, values: dict | None = None):
    """The explorer ``explorer`` registered in ``widgets/<slug>.js``, as a widget; ``config``:
    data the JavaScript needs (JSON); ``values``: control values that override the defaults."""
    return _widget_class()(slug, explorer, config=config, values=values)
