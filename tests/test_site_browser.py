"""The built site as a reader without a kernel or a network sees it, in headless Chromium.

Serves _build/html on 127.0.0.1, opens every page with every request that would leave the
machine blocked (:func:`offline`), and asserts: no external request, every formula typeset (none left raw, no
MathJax error box), no JavaScript error, every explorer redraws when any control changes, no
element of an article wider than its column at 1280 px or at 390 px (unless it scrolls sideways),
nothing cut off by a box that hides its overflow (an equation, an explorer's input, select or
slider value, a code name) at either width, no picture (figure, chart, animation, equation,
table) scrolling sideways without a visible scroll cue at either width, no cue beside its box
or under a formula that fits, nothing left of a scrolling box's edge, every preset menu of
every explorer switched between each pair of its options without an error message, no
unformatted number (7 or more bare digits) in an explorer's output, and, on a 390 px phone
screen, every explorer fits the screen with charts at least 320 px wide (they scroll sideways
rather than shrink). That no legend covers data is checked where the figures
are made (tests/test_pipeline_parallel_figures.py).
A page without an explorer is checked at 390 px by narrowing it where it was loaded (its scroll
cues and animations redraw on a resize); a page with one is loaded afresh at 390 px, since an
explorer sizes its charts when it first draws.
A second test loads each explorer's ES module the way anywidget does in JupyterLab.

Runs from `make site-test` (part of `make test`, after the book build), which sets
MINIPAR_BROWSER_TEST=1; a plain `pytest tests` skips it, since the site may be stale or absent.
Needs Debian's `chromium` (/usr/bin/chromium; `.ci/run` installs it) driven by Playwright for
Python; no browser is ever downloaded.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import socket
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(os.environ.get("MINIPAR_SITE", ROOT / "_build" / "html"))
CHROMIUM = os.environ.get("MINIPAR_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


_HELD: list[socket.socket] = []


def offline() -> list[str]:
    """:data:`FLAGS`, and every request that would leave the machine sent to a proxy on a local
    port that refuses connections (bound, never listening), so it fails there; 127.0.0.1 is
    reached directly (Chromium never proxies loopback). Playwright's request interception
    (``route``) would block them too, but it turns the browser's HTTP cache off: every page then
    fetched and compiled MathJax (2 MB) and the theme's scripts again. The page check, one run
    after the other on an idle 2-core machine: 52.8-68.6 s and 77-105 machine CPU-s with
    ``route``, 37.7-37.9 s and 50 CPU-s with the proxy."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    _HELD.append(closed)  # the port stays ours, and closed, while the tests run
    return [*FLAGS, f"--proxy-server=http://127.0.0.1:{closed.getsockname()[1]}"]


def leaves(url: str, local: str = "") -> bool:
    """Whether a request for ``url`` would leave the machine: not data:, blob: or about:, and
    not the site's own server (``local``, its host:port)."""
    u = urlparse(url)
    return not (u.scheme in ("data", "blob", "about") or (local and u.netloc == local))


def _skip_reason() -> str | None:
    if os.environ.get("MINIPAR_BROWSER_TEST") != "1":
        return "browser test runs in `make site-test` after the book build (MINIPAR_BROWSER_TEST=1)"
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        return (
            f"chromium not found at {CHROMIUM}: install Debian's package with "
            "`apt-get install -y chromium` (.ci/run does this)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright for Python is not installed (it is in requirements.txt)"
    return None


pytestmark = [  # slow: Chromium is another process (CONTRIBUTING.md, Tests)
    pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason())),
    pytest.mark.slow,
]

# Runs in the page: count formulas, raw TeX left in the text, MathJax errors, explorers.
_COUNT_MATH = r"""
() => {
  const formulas = document.querySelectorAll("mjx-container").length;
  const errors = document.querySelectorAll("mjx-merror, [data-mjx-error]").length;
  const raw = [];
  for (const el of document.querySelectorAll(".math")) {
    if (!el.querySelector("mjx-container")) raw.push(el.textContent.slice(0, 80));
  }
  if (!document.body) return {formulas, errors, raw, explorers: 0, redirect: true};  // index.html
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const p = n.parentElement;
    if (p.closest("script, style, pre, code, textarea, mjx-container, .math")) continue;
    if (/\\\(|\\\[|\$\$/.test(n.textContent)) raw.push(n.textContent.trim().slice(0, 80));
  }
  return {formulas, errors, raw, explorers: document.querySelectorAll(".minipar-explorer").length};
}
"""

# Runs in the page: change every control of every explorer, one at a time; report redraws.
_POKE_EXPLORERS = r"""
() => {
  const report = [];
  for (const root of document.querySelectorAll(".minipar-explorer")) {
    const out = root.querySelector(".minipar-explorer-output");
    const r = {name: root.dataset.explorer, controls: 0, redrawn: 0, empty: [], inert: [],
               initial: out ? out.innerHTML.length : 0, svg: !!(out && out.querySelector("svg"))};
    for (const input of root.querySelectorAll(".minipar-explorer-controls input, .minipar-explorer-controls select")) {
      if (input.disabled) continue;  // a control that does not apply to this setting
      r.controls += 1;
      const before = Number(root.dataset.redraws);
      const html = out.innerHTML;
      let ev = "change";
      if (input.tagName === "SELECT") {
        input.selectedIndex = (input.selectedIndex + 1) % input.options.length;
      } else if (input.type === "checkbox") {
        input.checked = !input.checked;
      } else if (input.type === "range") {
        input.value = String(Number(input.value) > Number(input.min) ? Number(input.value) - 1 : Number(input.value) + 1);
        input.dispatchEvent(new Event("input", {bubbles: true}));  // dragging, then the release
      } else {
        input.value = String(Number(input.value) * 2 || 1);
      }
      input.dispatchEvent(new Event(ev, {bubbles: true}));
      const after = Number(root.dataset.redraws);
      if (after > before && out.innerHTML.trim() !== "") r.redrawn += 1;
      if (out.innerHTML.trim() === "") r.empty.push(input.outerHTML.slice(0, 60));
      if (!input.disabled && out.innerHTML === html) r.inert.push(input.outerHTML.slice(0, 80));
    }
    report.push(r);
  }
  return report;
}
"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # the browser drops connections when it moves on to the next page


@pytest.fixture(scope="module")
def server():
    if not (SITE / "index.html").exists():
        pytest.fail(f"no built site at {SITE}: run `make book` first")
    httpd = _Server(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(SITE)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


# Runs in the page: elements of the article wider than its column (not inside something that
# scrolls sideways), e.g. a display equation clipped at the right edge.
_TOO_WIDE = r"""
() => {
  const col = document.querySelector("article.bd-article") || document.querySelector("main");
  if (!col) return [];
  const right = col.getBoundingClientRect().right + 1, out = [];
  const scrolls = (el) => {
    for (let a = el.parentElement; a && a !== col.parentElement; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if (o === "auto" || o === "scroll") return true;
    }
    return false;
  };
  for (const el of col.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0 || r.right <= right || scrolls(el)) continue;
    if (getComputedStyle(el).visibility === "hidden") continue;
    out.push(`<${el.tagName.toLowerCase()} class="${String(el.className).slice(0, 40)}"> ` +
             `${Math.round(r.right - right)} px past the column`);
    if (out.length >= 5) break;
  }
  return out;
}
"""

# Runs in the page: boxes of the article that scroll sideways because a picture in them (an
# image, a chart, an animation, an equation, a table) is wider than the column, with no visible
# cue (_static/minipar-scroll-cue.js puts a line ".minipar-scroll-cue" right after such a box):
# a reader on a phone would not know a quarter of the figure is off to the right. Code and
# text outputs that scroll are left alone. After two frames, so the cues are up to date.
_NO_SCROLL_CUE = r"""
async () => {
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const col = document.querySelector("article.bd-article") || document.querySelector("main");
  if (!col) return [];
  const out = [], pictures = "img, svg, table, mjx-container, canvas, .mpa-pipe";
  for (const box of col.querySelectorAll("*")) {
    const o = getComputedStyle(box).overflowX;
    if ((o !== "auto" && o !== "scroll") || box.clientWidth === 0) continue;
    if (box.scrollWidth <= box.clientWidth + 3 || box.closest("pre")) continue;  // 3 px: rounding
    if (!box.matches(pictures) && !box.querySelector(pictures)) continue;
    const cue = box.nextElementSibling;
    const seen = cue && cue.classList.contains("minipar-scroll-cue") && !cue.hidden
      && cue.getBoundingClientRect().height > 0 && getComputedStyle(cue).visibility !== "hidden";
    if (seen) continue;
    const what = box.closest(".minipar-animation, .minipar-explorer, figure, table, .math, mjx-container") || box;
    out.push(`<${box.tagName.toLowerCase()} class="${String(box.className).slice(0, 40)}"> in ` +
             `<${what.tagName.toLowerCase()} class="${String(what.className).slice(0, 30)}"> shows ` +
             `${box.clientWidth} of ${box.scrollWidth} px with no scroll cue`);
    if (out.length >= 5) break;
  }
  return out;
}
"""

# Runs in the page: scroll cues that mislead. A cue sits under its box, on a line of its own: one
# beside it (a flex row, as the theme's inline math is) takes the formula's room and squeezes it
# into a scrolling sliver. And a formula whose drawing fits its box has no cue: MathJax's hidden
# MathML copy for screen readers, wider than the drawing, once put a faded formula and a
# "scroll sideways" line after every short inline formula with a subscript ($c_p$, $t_b$).
_MISLEADING_CUES = r"""
async () => {
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  const out = [];
  for (const cue of document.querySelectorAll(".minipar-scroll-cue")) {
    if (cue.hidden || cue.getBoundingClientRect().height === 0) continue;
    const box = cue.previousElementSibling;
    if (!box) continue;
    const b = box.getBoundingClientRect(), c = cue.getBoundingClientRect();
    const name = `<${box.tagName.toLowerCase()}> "${box.textContent.trim().slice(0, 30)}"`;
    if (c.top < b.bottom - 1) out.push(`${name}: its scroll cue sits beside it, not under it`);
    const drawing = box.matches("mjx-container") && box.querySelector(":scope > svg, :scope > mjx-math");
    if (drawing && drawing.getBoundingClientRect().width <= box.clientWidth + 3) {
      out.push(`${name}: a scroll cue though its drawing (${Math.round(drawing.getBoundingClientRect().width)} px) ` +
               `fits its box (${box.clientWidth} px)`);
    }
    if (out.length >= 5) break;
  }
  return out;
}
"""

# Runs in the page: content cut off by a box that hides its overflow instead of scrolling: an
# equation, a control of an explorer (input, select, slider value) or a code name whose right
# part a reader cannot reach. Checked at 1280 px and at 390 px.
_CLIPPED = r"""
() => {
  const out = [];
  const hides = (el) => {
    const o = getComputedStyle(el).overflowX;
    return o === "hidden" || o === "clip";
  };
  const col = document.querySelector("article.bd-article") || document.querySelector("main");
  if (!col) return out;
  const watched = "mjx-container, input, select, output, label, code, .minipar-explorer-output, " +
                  ".minipar-explorer-title, .minipar-explorer-output p";
  for (const el of col.querySelectorAll(watched)) {
    const b = el.getBoundingClientRect();
    // text that does not wrap spills out of its own box: count where it really ends
    const spill = getComputedStyle(el).overflowX === "visible" ? el.scrollWidth - el.clientWidth : 0;
    const r = {left: b.left, width: b.width, height: b.height, right: b.right + Math.max(0, spill)};
    if (r.width === 0 || r.height === 0) continue;
    if (getComputedStyle(el).visibility === "hidden") continue;
    for (let a = el.parentElement; a && a !== col.parentElement; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX;
      if (o === "auto" || o === "scroll") break;          // a reader can scroll to it
      if (!hides(a)) continue;
      const box = a.getBoundingClientRect();
      if (r.right > box.right + 1 || r.left < box.left - 1) {
        out.push(`<${el.tagName.toLowerCase()}> "${(el.textContent || el.outerHTML).trim().slice(0, 40)}" ` +
                 `cut ${Math.round(Math.max(r.right - box.right, box.left - r.left))} px by ` +
                 `<${a.tagName.toLowerCase()} class="${String(a.className).slice(0, 30)}">`);
      }
      break;
    }
    if (out.length >= 5) break;
  }
  return out;
}
"""

# Runs in the page: what a box that scrolls sideways holds left of its own left edge, where no
# scrolling reaches (a chart row with Bootstrap's negative margins cut its first 12 px off).
_CUT_AT_LEFT = r"""
() => {
  const col = document.querySelector("article.bd-article") || document.querySelector("main");
  if (!col) return [];
  const out = [];
  for (const box of col.querySelectorAll("*")) {
    const o = getComputedStyle(box).overflowX;
    if ((o !== "auto" && o !== "scroll") || box.clientWidth === 0 || box.scrollLeft > 0) continue;
    const left = box.getBoundingClientRect().left + box.clientLeft;
    for (const el of box.children) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 || r.height === 0 || r.left >= left - 1) continue;
      out.push(`<${el.tagName.toLowerCase()} class="${String(el.className).slice(0, 30)}"> starts ` +
               `${Math.round(left - r.left)} px left of its scrolling box, out of reach`);
    }
    if (out.length >= 5) break;
  }
  return out;
}
"""

# Runs in the page on a narrow screen: every explorer fits the screen, and its charts keep a
# legible width (they scroll sideways inside the explorer instead of shrinking their text).
_NARROW_EXPLORERS = r"""
(minWidth) => Array.from(document.querySelectorAll(".minipar-explorer")).map((root) => {
  const vw = document.documentElement.clientWidth;
  const box = root.getBoundingClientRect();
  const svgs = Array.from(root.querySelectorAll(".minipar-explorer-output svg"));
  return {name: root.dataset.explorer, fits: box.left >= -1 && box.right <= vw + 1,
          narrowest: svgs.length ? Math.min(...svgs.map((g) => g.getBoundingClientRect().width)) : 0,
          legible: svgs.every((g) => g.getBoundingClientRect().width >= minWidth)};
})
"""


# Runs in the page: images shown with another aspect ratio than their own (an inline pixel
# height that overrides height:auto stretched every notebook figure on a phone), and a page
# that scrolls sideways as a whole.
_STRETCHED = r"""
() => {
  const out = [];
  for (const img of document.querySelectorAll("article img")) {
    const b = img.getBoundingClientRect();
    if (!img.naturalWidth || !img.naturalHeight || b.width === 0 || b.height === 0) continue;
    const shown = b.width / b.height, own = img.naturalWidth / img.naturalHeight;
    if (Math.abs(shown / own - 1) > 0.02) {
      out.push(`${img.getAttribute("src").slice(-50)} shown at ${shown.toFixed(3)}, drawn at ${own.toFixed(3)}`);
    }
  }
  const doc = document.documentElement;
  if (doc.scrollWidth > doc.clientWidth + 1) out.push(`the page scrolls sideways by ${doc.scrollWidth - doc.clientWidth} px`);
  return out;
}
"""

# Runs in the page: every numeric box and slider of every explorer declares an upper bound, and
# typing that largest accepted value key by key (an input event per key, then change) updates
# the explorer in at most `limit` ms; the value is put back afterwards.
_LARGEST_VALUES = r"""
(limit) => {
  const out = [];
  for (const root of document.querySelectorAll(".minipar-explorer")) {
    for (const input of root.querySelectorAll(".minipar-explorer-controls input")) {
      if (input.disabled || (input.type !== "number" && input.type !== "range")) continue;
      const label = (input.closest("label") || input).textContent.trim().slice(0, 30) || input.name;
      if (input.max === "" || !isFinite(Number(input.max))) {
        out.push(`${root.dataset.explorer}: "${label}" has no upper bound`);
        continue;
      }
      const before = input.value, typed = String(input.max);
      const t0 = performance.now();
      for (let k = 1; k <= typed.length; k++) {
        input.value = typed.slice(0, k);
        input.dispatchEvent(new Event("input", {bubbles: true}));
      }
      input.dispatchEvent(new Event("change", {bubbles: true}));
      const ms = performance.now() - t0;
      if (ms > limit) out.push(`${root.dataset.explorer}: "${label}" = ${typed} took ${Math.round(ms)} ms`);
      input.value = before;
      input.dispatchEvent(new Event("change", {bubbles: true}));
    }
  }
  return out;
}
"""
#: the slowest an explorer may take to update, with the largest value of any one input
UPDATE_LIMIT_MS = 200

# Runs in the page: numbers a reader cannot read at a glance in an explorer's output (chart,
# text and message): a run of 7 or more digits with no thousands separator, with a decimal
# point ("2281750592.4", "12345.678") or without ("1048576"). A function the
# other snippets declare first (`unformatted(root)`).
_UNFORMATTED_FN = r"""
const unformatted = (root) => {
  const out = root.querySelector(".minipar-explorer-output");
  if (!out) return [];
  const text = Array.from(out.querySelectorAll("p, text, li, td, th, span, b, div"))
    .filter((e) => !e.children.length || e.tagName === "P" || e.tagName === "text")
    .map((e) => e.textContent).join(" ");
  const bad = [];
  for (const m of text.matchAll(/(?<![\w.\-])\d+(?:[,\u2009\u202f]\d{3})*(?:\.\d+)?(?![\w])/g)) {
    const s = m[0], digits = s.replace(/\D/g, "").length;
    const grouped = /[,\u2009\u202f]/.test(s);
    if (digits >= 7 && !grouped) bad.push(s);
  }
  return Array.from(new Set(bad));
};
"""

# Runs in the page: every number box of every explorer at its largest and its smallest value
# (a change event each), then back, then all of them at their largest together; the
# unformatted numbers its output showed meanwhile.
_NUMBERS_AT_EXTREMES = (
    "() => {"
    + _UNFORMATTED_FN
    + r"""
  const out = [];
  for (const root of document.querySelectorAll(".minipar-explorer")) {
    const seen = (what) => {
      for (const s of unformatted(root)) out.push(`${root.dataset.explorer} ${what}: ${s}`);
    };
    seen("as it opens");
    for (const input of root.querySelectorAll(".minipar-explorer-controls input")) {
      if (input.disabled || (input.type !== "number" && input.type !== "range")) continue;
      const label = (input.closest("label") || input).textContent.trim().slice(0, 30) || input.name;
      const before = input.value;
      for (const end of [input.max, input.min]) {
        if (end === "" || !isFinite(Number(end))) continue;
        input.value = String(end);
        input.dispatchEvent(new Event("change", {bubbles: true}));
        seen(`"${label}" = ${end}`);
      }
      input.value = before;
      input.dispatchEvent(new Event("change", {bubbles: true}));
    }
    // then every box at its largest value at once, box after box (a setting that becomes
    // impossible on the way shows its message over the last drawable chart), and back
    const boxes = Array.from(root.querySelectorAll(".minipar-explorer-controls input"))
      .filter((i) => !i.disabled && (i.type === "number" || i.type === "range") && isFinite(Number(i.max)) && i.max !== "");
    const saved = boxes.map((i) => i.value);
    for (const input of boxes) {
      input.value = String(input.max);
      input.dispatchEvent(new Event("change", {bubbles: true}));
      seen(`every box up to "${(input.closest("label") || input).textContent.trim().slice(0, 30)}" at its largest`);
    }
    boxes.forEach((input, k) => {
      input.value = saved[k];
      input.dispatchEvent(new Event("change", {bubbles: true}));
    });
  }
  return out;
}
"""
)

# Runs in the page: every menu that sets other controls when it changes (a model preset) is
# switched between every ordered pair of its options, along one walk that takes each pair once
# (an Euler circuit of the complete graph on the options), with a change event each. Reports
# each switch that shows an error message (the explorer's data-error) and the unformatted
# numbers the output showed.
_PRESET_SWITCHES = (
    "() => {"
    + _UNFORMATTED_FN
    + r"""
  const report = [];
  const controlsOf = (root) => Array.from(root.querySelectorAll(".minipar-explorer-controls input, .minipar-explorer-controls select"));
  const state = (root, skip) => controlsOf(root).filter((c) => c !== skip)
    .map((c) => (c.type === "checkbox" ? String(c.checked) : c.value)).join("|");
  const pick = (sel, i) => { sel.selectedIndex = i; sel.dispatchEvent(new Event("change", {bubbles: true})); };
  const label = (sel) => (sel.closest("label") || sel).firstChild.textContent.trim();
  for (const root of document.querySelectorAll(".minipar-explorer")) {
    for (const sel of root.querySelectorAll(".minipar-explorer-controls select")) {
      if (sel.disabled || sel.options.length < 2) continue;
      const start = sel.selectedIndex, before = state(root, sel);
      pick(sel, (start + 1) % sel.options.length);
      const moves = state(root, sel) !== before;   // a preset: it set other controls
      pick(sel, start);
      if (!moves) continue;
      const n = sel.options.length, used = new Set(), walk = [];
      const visit = (u) => {                        // Hierholzer on the complete digraph
        for (let v = 0; v < n; v++) {
          if (v === u || used.has(`${u}>${v}`)) continue;
          used.add(`${u}>${v}`);
          visit(v);
        }
        walk.push(u);
      };
      visit(start);
      walk.reverse();
      const r = {name: root.dataset.explorer, control: label(sel), switches: 0, errors: [], unformatted: []};
      for (let k = 1; k < walk.length; k++) {
        const from = sel.options[walk[k - 1]].text, to = sel.options[walk[k]].text;
        pick(sel, walk[k]);
        r.switches += 1;
        if (root.dataset.error === "1") {
          const msg = root.querySelector(".minipar-explorer-message");
          r.errors.push(`${from} -> ${to}: ${msg ? msg.textContent.trim().slice(0, 160) : "?"}`);
        }
        for (const s of unformatted(root)) r.unformatted.push(`${to}: ${s}`);
      }
      pick(sel, start);
      report.push(r);
    }
  }
  return report;
}
"""
)


_PAGE_TEXT = "() => (document.querySelector('main') || document.body).innerText"


def build_paths(text: str) -> list[str]:
    """Paths of the machine that built the site, shown to readers (a rank's warning with the
    virtual environment's path, a traceback): the repository root, site-packages, .venv."""
    marks = (str(ROOT), "site-packages/", "/.venv/")
    return [line.strip()[:100] for line in text.splitlines() if any(m in line for m in marks)]


def _pages() -> list[str]:
    return sorted(
        p.relative_to(SITE).as_posix()
        for p in SITE.rglob("*.html")
        if not p.relative_to(SITE).parts[0].startswith("_")
    )


DESKTOP, PHONE = {"width": 1280, "height": 900}, {"width": 390, "height": 844}
_TWO_FRAMES = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))"


def test_every_page_offline(server):
    from playwright.sync_api import sync_playwright

    pages = _pages()
    assert pages, f"no pages under {SITE}"
    external, failed, page_errors, raw, math_errors = [], [], [], [], []
    formulas = redirects = 0
    explorer_reports, wide, narrow, clipped, phone_wide, paths = [], [], [], [], [], []
    stretched, slow, no_cue, preset_errors, unformatted = [], [], [], [], []
    local = urlparse(server).netloc

    def watch(request):  # noted where it would leave the machine (it fails at the proxy)
        if leaves(request.url, local):
            external.append(request.url)

    def phone_checks(pg, name):
        """The checks at 390 px: nothing wider than the column, cut off, stretched or
        scrolling without a cue."""
        phone_wide.extend(f"{name}: {w}" for w in pg.evaluate(_TOO_WIDE))
        for check, found in (
            (_NO_SCROLL_CUE, no_cue),
            (_MISLEADING_CUES, no_cue),
            (_CLIPPED, clipped),
            (_CUT_AT_LEFT, clipped),
            (_STRETCHED, stretched),
        ):
            found.extend(f"{name} at 390 px: {w}" for w in pg.evaluate(check))

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=offline())
        context = browser.new_context(viewport=DESKTOP)
        context.on("request", watch)
        page = context.new_page()
        page.on("pageerror", lambda e: page_errors.append(f"{page.url}: {e}"))
        page.on(
            "requestfailed",
            lambda r: (
                failed.append(f"{r.url} ({r.failure})")  # aborted:
                if urlparse(r.url).netloc == local and "ABORTED" not in str(r.failure)  # we left
                else None
            ),
        )
        page.on(
            "response",
            lambda r: failed.append(f"{r.url} (HTTP {r.status})") if r.status >= 400 else None,
        )
        for name in pages:
            if (
                (SITE / name)
                .read_text(errors="replace")
                .lstrip()
                .lower()
                .startswith('<meta http-equiv="refresh"')
            ):
                redirects += 1  # index.html: the browser moves on to the root page, which is
                continue  # checked under its own name (typesetting it here would race)
            page.goto(f"{server}/{name}", wait_until="load")
            page.wait_for_function(
                "() => !window.MathJax || !MathJax.startup || MathJax.startup.promise",
                timeout=30_000,
            )
            page.evaluate(
                "() => window.MathJax && MathJax.startup && MathJax.startup.promise"
                " ? MathJax.startup.promise.then(() => true) : true"
            )
            counts = page.evaluate(_COUNT_MATH)
            if counts.get("redirect"):
                redirects += 1
                continue
            formulas += counts["formulas"]
            math_errors += [name] * counts["errors"]
            raw += [f"{name}: {t}" for t in counts["raw"]]
            wide += [f"{name}: {w}" for w in page.evaluate(_TOO_WIDE)]
            clipped += [f"{name} at 1280 px: {w}" for w in page.evaluate(_CLIPPED)]
            clipped += [f"{name} at 1280 px: {w}" for w in page.evaluate(_CUT_AT_LEFT)]
            stretched += [f"{name} at 1280 px: {w}" for w in page.evaluate(_STRETCHED)]
            slow += [f"{name}: {w}" for w in page.evaluate(_LARGEST_VALUES, UPDATE_LIMIT_MS)]
            paths += [f"{name}: {x}" for x in build_paths(page.evaluate(_PAGE_TEXT))]
            no_cue += [f"{name} at 1280 px: {w}" for w in page.evaluate(_NO_SCROLL_CUE)]
            no_cue += [f"{name} at 1280 px: {w}" for w in page.evaluate(_MISLEADING_CUES)]
            if counts["explorers"]:
                for r in page.evaluate(_PRESET_SWITCHES):
                    preset_errors += [
                        f"{name} {r['name']} {r['control']}: {e}" for e in r["errors"]
                    ]
                    unformatted += [f"{name} {r['name']} {u}" for u in r["unformatted"]]
                unformatted += [f"{name}: {u}" for u in page.evaluate(_NUMBERS_AT_EXTREMES)]
            for rep in page.evaluate(_POKE_EXPLORERS):
                explorer_reports.append({"page": name, **rep})
            if not counts["explorers"]:  # the same page, narrowed to a phone's width
                page.set_viewport_size(PHONE)
                page.evaluate(_TWO_FRAMES)  # what redraws on a resize (cues, animations) has
                phone_checks(page, name)
                page.set_viewport_size(DESKTOP)
        # a page with an explorer is loaded afresh at 390 px: an explorer sizes its charts
        # when it first draws, as a phone that opens the page draws them
        phone = browser.new_context(viewport=PHONE)
        phone.on("request", watch)
        small = phone.new_page()
        with_explorers = sorted({r["page"] for r in explorer_reports})
        for name in with_explorers:
            small.goto(f"{server}/{name}", wait_until="load")
            small.evaluate(
                "() => window.MathJax && MathJax.startup && MathJax.startup.promise"
                " ? MathJax.startup.promise.then(() => true) : true"
            )
            phone_checks(small, name)
            narrow += [{"page": name, **r} for r in small.evaluate(_NARROW_EXPLORERS, 320)]
        browser.close()

    summary = {
        "pages": len(pages) - redirects,
        "formulas": formulas,
        "explorers": len(explorer_reports),
        "too_wide": len(wide),
        "too_wide_at_390px": len(phone_wide),
        "clipped": len(clipped),
        "scrolling_without_cue": len(no_cue),
        "preset_switch_errors": len(preset_errors),
        "unformatted_numbers": len(unformatted),
        "build_paths": len(paths),
        "explorers_at_390px": len(narrow),
        "controls": sum(r["controls"] for r in explorer_reports),
        "external_requests": len(external),
        "raw_formulas": len(raw),
        "math_errors": len(math_errors),
        "page_errors": len(page_errors),
        "stretched_or_sideways": len(stretched),
        "slow_or_unbounded_inputs": len(slow),
        "inert_controls": sum(len(r["inert"]) for r in explorer_reports),
    }
    print("\nsite test:", json.dumps(summary))
    assert not external, f"requests leaving the machine: {external[:10]}"
    assert not page_errors, f"JavaScript errors: {page_errors[:10]}"
    assert not raw, f"formulas left raw: {raw[:10]}"
    assert not math_errors, f"MathJax error boxes on: {sorted(set(math_errors))}"
    assert not failed, f"failed local requests: {failed[:10]}"
    assert formulas > 0
    assert explorer_reports, "no explorer on any page"
    assert not wide, f"wider than the article column at 1280 px: {wide[:10]}"
    assert not phone_wide, f"wider than the article column at 390 px: {phone_wide[:10]}"
    assert not clipped, f"cut off with no way to scroll to it: {clipped[:10]}"
    assert not no_cue, f"pictures scrolling with no cue, or a misleading cue: {no_cue[:10]}"
    assert not preset_errors, f"preset switches that show an error: {preset_errors[:10]}"
    assert not unformatted, f"unformatted numbers in explorers: {unformatted[:10]}"
    assert not paths, f"paths of the build machine shown on a page: {paths[:10]}"
    assert not stretched, f"figures stretched or pages scrolling sideways: {stretched[:10]}"
    assert not slow, f"explorer inputs unbounded or slower than {UPDATE_LIMIT_MS} ms: {slow[:10]}"
    inert = [f"{r['page']} {r['name']}: {c}" for r in explorer_reports for c in r["inert"]]
    assert not inert, f"enabled controls that change nothing (disable them): {inert[:10]}"
    assert narrow and all(r["fits"] and r["legible"] for r in narrow), (
        f"explorers at 390 px (must fit the screen, charts >= 320 px wide): "
        f"{[r for r in narrow if not (r['fits'] and r['legible'])][:5]}"
    )
    for r in explorer_reports:
        assert r["svg"] and r["initial"] > 0, f"{r}: default view draws no figure"
        assert r["controls"] > 0 and r["redrawn"] == r["controls"] and not r["empty"], (
            f"{r}: not every control change redrew the output"
        )


_ANYWIDGET_RENDER = r"""
async ([src, name, config]) => {
  const url = URL.createObjectURL(new Blob([src], {type: "text/javascript"}));
  const mod = await import(url);
  const state = {explorer: name, values: {}, config}, saved = [], handlers = {};
  const model = {get: (k) => state[k], set: (k, v) => { state[k] = v; },
                 save_changes: () => saved.push(JSON.stringify(state.values)),
                 on: (ev, fn) => { handlers[ev] = fn; }};
  const el = document.createElement("div");
  document.body.append(el);
  mod.default.render({model, el});
  const root = el.querySelector(".minipar-explorer");
  const input = root.querySelector(".minipar-explorer-controls select");
  input.selectedIndex = (input.selectedIndex + 1) % input.options.length;
  input.dispatchEvent(new Event("change", {bubbles: true}));
  return {svg: !!root.querySelector(".minipar-explorer-output svg"), saved,
          redraws: Number(root.dataset.redraws), listens: Object.keys(handlers)};
}
"""


@pytest.mark.parametrize(
    "slug,name,config",
    [
        ("collectives", "collectives", "collectives_config"),
        ("memory_time", "memory", "memory_config"),
        ("data_parallel", "dp-step", "dp_config"),
    ],
)
def test_anywidget_entry_point_in_chromium(slug, name, config):
    """What JupyterLab does with a kernel: import the ES module, call render({model, el});
    a control change redraws and writes the values back to the model."""
    import importlib

    from playwright.sync_api import sync_playwright

    from minipar.widgets import bundle

    cfg = getattr(importlib.import_module(f"minipar.widgets.{slug}"), config)()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page()
        page.route("**/*", lambda r: r.abort())  # nothing may be fetched
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.set_content("<html><body></body></html>")
        out = page.evaluate(_ANYWIDGET_RENDER, [bundle(slug), name, cfg])
        browser.close()
    assert not errors
    assert out["svg"] and out["redraws"] == 2 and len(out["saved"]) == 1
    assert "change:config" in out["listens"]


def test_site_opened_from_disk():
    """README: "Open _build/html/index.html": from file:// (no server) math and explorers work."""
    from playwright.sync_api import sync_playwright

    if not (SITE / "index.html").exists():
        pytest.fail(f"no built site at {SITE}: run `make book` first")
    pages = [p for p in _pages() if p.startswith("notebooks/")] + ["book/memory_time.html"]
    errors, seen = [], {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page()
        page.route(
            "**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort()
        )
        page.on("pageerror", lambda e: errors.append(f"{page.url}: {e}"))
        for name in pages:
            page.goto((SITE / name).resolve().as_uri(), wait_until="load")
            page.evaluate(
                "() => window.MathJax && MathJax.startup && MathJax.startup.promise"
                " ? MathJax.startup.promise.then(() => true) : true"
            )
            seen[name] = page.evaluate(
                "() => [document.querySelectorAll('mjx-container').length,"
                " document.querySelectorAll('.minipar-explorer').length,"
                " document.querySelectorAll('.minipar-explorer-output svg').length]"
            )
        browser.close()
    assert not errors, errors[:5]
    assert seen["book/memory_time.html"][0] > 0, seen
    assert sum(v[1] for v in seen.values()) > 0 and all(v[2] >= v[1] for v in seen.values()), seen


def test_the_checks_catch_what_a_reader_saw():
    """Negative control: a page like the old site (a CDN script, raw TeX, a MathJax error box,
    a script error, a dead explorer control, a rank's warning that printed the build machine's
    paths, a figure scrolling with no cue, a preset switch that dead-ends, an unformatted
    number) fails every check above."""
    from playwright.sync_api import sync_playwright

    bad = r"""<html><body><p class="math">\(x^2\)</p><p>raw \(\Psi\) text</p>
      <mjx-container><mjx-merror>maximum macro substitution count exceeded</mjx-merror>
      </mjx-container><script src="https://cdn.example.org/mathjax.js"></script>
      <script>const THEBE_JS_URL = 1;</script><script>const THEBE_JS_URL = 2;</script>
      <div class="minipar-explorer" data-redraws="0"><div class="minipar-explorer-controls">
      <input type="number" value="1"></div><div class="minipar-explorer-output"><svg></svg>
      </div></div><main><div style="overflow:hidden"><div style="width:3000px;height:10px">
      </div></div><div style="width:200px;overflow:hidden"><label style="white-space:nowrap">
      a label far too long for its box <input type="number" value="8"></label></div>
      <div style="width:100px;overflow:hidden"><mjx-container style="display:inline-block;
      width:400px">T ≥ 1900 tokens</mjx-container></div>
      <pre>[rank 0] ROOT/.venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py:83: FutureWarning</pre><p>step: 1 MiB
      buckets 46 ms</p></main></body></html>""".replace("ROOT", str(ROOT))
    external, blocked, errors = [], [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=offline())
        page = browser.new_page()
        page.on("request", lambda r: external.append(r.url) if leaves(r.url) else None)
        page.on("requestfailed", lambda r: blocked.append(r.url) if leaves(r.url) else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.set_content(bad)
        counts = page.evaluate(_COUNT_MATH)
        report = page.evaluate(_POKE_EXPLORERS)
        too_wide = page.evaluate(_TOO_WIDE)
        cut = page.evaluate(_CLIPPED)
        paths = build_paths(page.evaluate(_PAGE_TEXT))
        page.set_viewport_size({"width": 390, "height": 844})
        shrunk = page.evaluate(_NARROW_EXPLORERS, 320)
        page.set_content(
            '<html><body><article><img style="width:200px;height:300px" src="data:image/svg+xml,'
            "%3Csvg xmlns='http://www.w3.org/2000/svg' width='400' height='200'%3E%3C/svg%3E\">"
            '<div style="width:900px">wide</div></article>'
            '<div class="minipar-explorer" data-explorer="x"><div class="minipar-explorer-controls">'
            '<input type="number" value="1"><input type="number" max="9" value="1"></div></div>'
            "<script>document.querySelectorAll('input')[1].addEventListener('input', () => {"
            " const t = performance.now(); while (performance.now() - t < 300) {} });</script>"
            "</body></html>"
        )
        stretched = page.evaluate(_STRETCHED)
        slow = page.evaluate(_LARGEST_VALUES, UPDATE_LIMIT_MS)
        # a figure held at 480 px in a 300 px column that scrolls with no cue; an explorer whose
        # model menu keeps the last model's p (8 layers do not split over p = 3) and prints
        # an unformatted number
        page.set_content(
            '<html><body><article class="bd-article" style="width:300px">'
            '<div style="overflow-x:auto"><img style="min-width:480px" src="data:image/svg+xml,'
            "%3Csvg xmlns='http://www.w3.org/2000/svg' width='480' height='100'%3E%3C/svg%3E\">"
            '</div><div class="minipar-explorer" data-explorer="x" data-error="0">'
            '<div class="minipar-explorer-controls"><label>model <select><option>a</option>'
            "<option>b</option><option>c</option></select></label><label>p "
            '<input type="number" value="4"></label><label>L <input type="number" value="12" '
            'max="12"></label></div><div class="minipar-explorer-output"><p>2281750592.4 GiB</p>'
            "</div></div></article><script>"
            "const [sel, p, L] = document.querySelectorAll('select, input'), root ="
            " document.querySelector('.minipar-explorer');"
            "sel.addEventListener('change', () => { L.value = [12, 8, 9][sel.selectedIndex];"
            " if (sel.selectedIndex === 2) p.value = 3;"
            " root.dataset.error = L.value % p.value ? '1' : '0'; });"
            "</script></body></html>"
        )
        no_cue = page.evaluate(_NO_SCROLL_CUE)
        presets = page.evaluate(_PRESET_SWITCHES)
        numbers = page.evaluate(_NUMBERS_AT_EXTREMES)
        # an inline formula in the theme's inline-flex math span, 20 px drawn, whose hidden
        # MathML copy is 40 px wide, so the box scrolls: its cue beside it, with nothing to see
        page.set_content(
            '<html><body><article class="bd-article" style="width:300px"><p>the '
            '<span class="math" style="display:inline-flex;overflow-x:auto;max-width:100%">'
            '<mjx-container style="display:inline-block;overflow-x:auto;max-width:100%;'
            'position:relative"><svg width="20" height="10"></svg><mjx-assistive-mml '
            'style="position:absolute;left:0;top:0;display:block;overflow:hidden;'
            'clip:rect(1px,1px,1px,1px)"><span style="display:inline-block;width:40px">c</span>'
            '</mjx-assistive-mml></mjx-container><span class="minipar-scroll-cue" '
            'style="display:block">more</span></span> term</p></article></body></html>'
        )
        misleading = page.evaluate(_MISLEADING_CUES)
        page.set_content(
            '<html><body><article class="bd-article" style="width:300px">'
            '<div style="overflow-x:auto"><div style="display:flex;margin:0 -12px">'
            '<svg width="480" height="50"></svg></div></div></article></body></html>'
        )
        cut_left = page.evaluate(_CUT_AT_LEFT)
        browser.close()
    assert no_cue and "no scroll cue" in no_cue[0], no_cue
    assert any("beside it" in m for m in misleading), misleading
    assert any("fits its box (20 px)" in m for m in misleading), misleading
    assert cut_left and "12 px left of its scrolling box" in cut_left[0], cut_left
    assert presets[0]["switches"] == 6 and presets[0]["errors"], presets  # c -> b: L = 8, p = 3
    assert "2281750592.4" in presets[0]["unformatted"][0], presets
    assert any("2281750592.4" in x for x in numbers), numbers
    assert external == blocked == ["https://cdn.example.org/mathjax.js"]  # seen, and it failed
    assert any("THEBE_JS_URL" in e for e in errors)
    assert len(counts["raw"]) == 2 and counts["errors"] == 1
    assert report[0]["controls"] == 1 and report[0]["redrawn"] == 0 and report[0]["inert"]
    assert too_wide and "px past the column" in too_wide[0]
    assert shrunk and not shrunk[0]["legible"]  # an svg without the course's CSS
    assert len(paths) == 1 and "c10d_logger" in paths[0], paths  # the warning, not the timing
    assert any(c.startswith("<input>") for c in cut), cut  # a control cut off
    assert any(c.startswith("<mjx-container>") and "1900" in c for c in cut), cut  # an equation
    assert any("shown at 0.667, drawn at 2.000" in x for x in stretched), stretched
    assert any("scrolls sideways" in x for x in stretched), stretched
    assert any("no upper bound" in x for x in slow) and any("took" in x for x in slow), slow
