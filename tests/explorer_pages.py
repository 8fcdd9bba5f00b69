"""Every explorer of the course as a small self-contained HTML page, without the book build.

Each page holds one explorer as the book shows it (``minipar.widgets.static_html`` with the
config its chapter's Python side passes) and links the site's stylesheet and scroll-cue script;
the fast browser test
(tests/test_explorers_in_browser.py) opens them in Chromium. Run as a script to write the pages
to a folder: ``python tests/explorer_pages.py /tmp/explorers``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSS = ROOT / "_static" / "minipar.css"
#: the site's script that marks a box scrolling sideways with a visible cue
CUE = ROOT / "_static" / "minipar-scroll-cue.js"


def explorers() -> list[tuple[str, str, dict]]:
    """(slug, explorer name, config) of every explorer the book shows."""
    from minipar.widgets.collectives import collectives_config
    from minipar.widgets.context_parallel import cp_config
    from minipar.widgets.data_parallel import dp_config
    from minipar.widgets.expert_parallel import ep_config
    from minipar.widgets.memory_time import memory_config
    from minipar.widgets.tensor_parallel import tp_config
    from minipar.widgets.three_d import plan_config

    return [
        ("collectives", "collectives", collectives_config()),
        ("memory_time", "memory", memory_config()),
        ("data_parallel", "dp-step", dp_config()),
        ("data_parallel", "zero-memory", {}),
        ("tensor_parallel", "tp-layer", tp_config()),
        ("pipeline_parallel", "pp-schedule", {}),
        ("context_parallel", "cp-layer", cp_config()),
        ("expert_parallel", "ep-layer", ep_config()),
        ("three_d", "plan", plan_config()),
    ]


def page(slug: str, name: str, config: dict, values: dict | None = None) -> str:
    from minipar.widgets import static_html

    return (
        '<!doctype html><html><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="stylesheet" href="{CSS.as_uri()}"><title>{name}</title>'
        f'<script src="{CUE.as_uri()}"></script></head>'
        f'<body><article class="bd-article">{static_html(slug, name, values, config)}'
        "</article></body></html>"
    )


def write_pages(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for slug, name, config in explorers():
        path = folder / f"{name}.html"
        path.write_text(page(slug, name, config), encoding="utf-8")
        out.append(path)
    return out


if __name__ == "__main__":
    for p in write_pages(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/explorers")):
        print(p)
