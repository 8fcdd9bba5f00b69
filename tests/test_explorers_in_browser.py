"""Every explorer in headless Chromium without the book build: each one's page is written by
tests/explorer_pages.py (the explorer as the book inlines it, the site's stylesheet) and opened
from disk with every request leaving the machine refused. The checks are the built-site test's
(tests/test_site_browser.py), on all nine explorers in a few seconds:

* every number box and slider declares its largest value, and typing that value key by key
  updates the explorer, on the page as it opens and again after every control was changed once
  (which enables boxes a preset had greyed out); the times are printed, and the built-site test
  holds them to its limit;
* every enabled control changes the output when changed in turn (a control that does not apply
  must be disabled), every change redraws, no JavaScript error;
* at 390 px every explorer fits the screen with charts at least 320 px wide, and a chart that
  scrolls sideways inside it has a visible scroll cue;
* switching a preset menu (a model) between every ordered pair of its options never shows an
  error, and no output shows an unformatted number (a run of 7 or more digits with no
  thousands separator), at any box's largest or smallest value or after any preset.
* in the book's light and dark themes, every explorer's panel follows the theme and its text
  (labels, values, notes, messages, links, chart labels) keeps a readable contrast: 4.5:1, and
  3:1 for chart text (WCAG AA for text and for graphics).

Needs Debian's chromium and Playwright for Python; it skips without them, and under CI=true
a skip fails (tests/conftest.py).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from explorer_pages import write_pages
from test_site_browser import (
    _LARGEST_VALUES,
    _NARROW_EXPLORERS,
    _NO_SCROLL_CUE,
    _NUMBERS_AT_EXTREMES,
    _POKE_EXPLORERS,
    _PRESET_SWITCHES,
    CHROMIUM,
    FLAGS,
    leaves,
    offline,
)


def _missing() -> str | None:
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        return (
            f"chromium not found at {CHROMIUM}: `apt-get install -y chromium` (.ci/run does this)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright for Python is not installed (it is in requirements.txt)"
    return None


# The layout explorer's controls by their label, for the scenarios below (each runs on its page):
# ``field(label)`` is the control, ``set(label, value)`` picks an option by its text (a select)
# or types the value, and tells the explorer as a reader's change would.
_CONTROLS = r"""
  const root = document.querySelector(".minipar-explorer");
  const field = (label) => Array.from(root.querySelectorAll("label"))
    .find((l) => l.firstChild.textContent.trim() === label).querySelector("select, input");
  const set = (label, value) => {
    const el = field(label);
    if (el.tagName === "SELECT") el.selectedIndex = Array.from(el.options).findIndex((o) => o.text === value);
    else el.value = value;
    el.dispatchEvent(new Event("change", {bubbles: true}));
  };
"""

# Runs on the layout explorer's page: the reader picks FP8 GEMMs on an H100 model (Llama 3 8B),
# then a model whose published run is on A100s (GPT-3 175B), which have no FP8 tensor cores.
_FP8_THEN_A100 = (
    "() => {"
    + _CONTROLS
    + r"""
  set("model", "llama3-8b");
  set("FP8 GEMMs (scaling)", "current");
  const before = root.dataset.error;
  set("model", "gpt3-175b");
  const note = Array.from(root.querySelectorAll(".minipar-explorer-note")).map((n) => n.textContent);
  return {before, after: root.dataset.error, fp8: field("FP8 GEMMs (scaling)").value,
          gpu: field("GPU").selectedOptions[0].text, note: note.join(" ")};
}
"""
)

# Runs on the layout explorer's page: DeepSeek-V3's preset (its DualPipe schedule on p = 16 over
# 61 layers, on uneven stages), then the "custom" layout, whose even split moves p to 1.
_DEEPSEEK_THEN_CUSTOM = (
    "() => {"
    + _CONTROLS
    + r"""
  set("model", "deepseek-v3");
  set("layout", "custom");
  const note = Array.from(root.querySelectorAll(".minipar-explorer-note")).map((n) => n.textContent);
  return {error: root.dataset.error, p: field("p (custom)").value, ep: field("expert parallel ep (MoE models)").value,
          fp8: field("FP8 GEMMs (scaling)").selectedOptions[0].text,
          dualpipe: field("DualPipe schedule (with the EP overlap; p and m even, v = 1)").checked,
          note: note.join(" ")};
}
"""
)

# Runs on the layout explorer's page: p = 20 over BLOOM's 70 layers is impossible, and ZeRO-2
# (p = 1 only) keeps the chart from being drawn at the last p that worked; then a KV-head
# count (1) that t = 8 does not divide, a value that breaks a rule of its own.
_TWO_IMPOSSIBLE_SETTINGS = (
    "() => {"
    + _CONTROLS
    + r"""
  const out = root.querySelector(".minipar-explorer-output");
  set("model", "bloom-176b");
  set("layout", "custom");
  set("t (custom)", "8");
  set("p (custom)", "20");
  set("ZeRO", "2");
  const before = out.textContent;
  set("KV heads (0 = the model's)", "1");
  return {before, after: out.textContent};
}
"""
)

# Runs on a page in the given theme ("light" or "dark", as the book's theme sets data-theme on
# <html>): explorers whose panel does not follow the theme (a light box on a dark page), and text
# below WCAG AA contrast against what is behind it (4.5:1; 3:1 for chart text). Disabled
# controls are exempt, as in WCAG.
_THEME_CONTRAST = r"""
(theme) => {
  document.documentElement.dataset.theme = theme;
  const rgb = (c) => (c.match(/[\d.]+/g) || []).map(Number);
  const lum = (c) => {
    const [r, g, b] = rgb(c).slice(0, 3).map((x) => {
      x /= 255;
      return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const bg = (el) => {
    for (let a = el; a; a = a.parentElement) {
      const c = getComputedStyle(a).backgroundColor, v = rgb(c);
      if (v.length === 3 || v[3] > 0.5) return c;
    }
    return theme === "dark" ? "rgb(18, 18, 18)" : "rgb(255, 255, 255)";
  };
  const ratio = (a, b) => {
    const x = lum(a), y = lum(b);
    return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05);
  };
  const out = [];
  for (const root of document.querySelectorAll(".minipar-explorer")) {
    const name = root.dataset.explorer;
    if ((theme === "dark") !== (lum(bg(root)) < 0.2)) out.push(`${name}: its panel (${bg(root)}) does not follow the ${theme} theme`);
    const texts = "label, p, a, output, button, select, input, li, td, th, span, b, code";
    for (const e of root.querySelectorAll(texts)) {
      if (e.type === "range" || e.type === "checkbox") continue;  // no text to read
      if (e.matches(":disabled") || e.querySelector(":disabled") || !e.textContent.trim() && e.tagName !== "INPUT") continue;
      if (e.getBoundingClientRect().width === 0) continue;
      const k = ratio(getComputedStyle(e).color, bg(e));
      if (k < 4.5) out.push(`${name}: <${e.tagName.toLowerCase()}> "${(e.textContent || e.value).trim().slice(0, 30)}" at contrast ${k.toFixed(2)}`);
    }
    for (const t of root.querySelectorAll("svg text")) {
      const k = ratio(getComputedStyle(t).fill, bg(t.closest("svg")));
      if (k < 3) out.push(`${name}: chart text "${t.textContent.slice(0, 30)}" at contrast ${k.toFixed(2)}`);
    }
  }
  return Array.from(new Set(out));
}
"""

pytestmark = [  # Chromium is a process of its own: slow, as CONTRIBUTING.md defines it
    pytest.mark.slow,
    pytest.mark.skipif(_missing() is not None, reason=str(_missing())),
]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    pages = write_pages(tmp_path_factory.mktemp("explorers"))
    out = {"pages": [p.stem for p in pages], "errors": [], "external": [], "largest": []}
    out.update(poke=[], narrow=[], presets=[], unformatted=[], no_cue=[], themes=[])

    def watch(request):  # noted where it would leave the machine (it fails at the proxy)
        if not request.url.startswith("file:") and leaves(request.url):
            out["external"].append(request.url)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=offline())
        for width in (1280, 390):
            context = browser.new_context(viewport={"width": width, "height": 900})
            context.on("request", watch)
            page = context.new_page()
            page.on("pageerror", lambda e: out["errors"].append(str(e)))
            for path in pages:
                page.goto(path.as_uri(), wait_until="load")
                out["no_cue"] += [
                    f"{path.stem} at {width} px: {w}" for w in page.evaluate(_NO_SCROLL_CUE)
                ]
                if width == 390:
                    out["narrow"] += page.evaluate(_NARROW_EXPLORERS, 320)
                    continue
                for theme in ("light", "dark"):
                    out["themes"] += [
                        f"{theme}: {x}" for x in page.evaluate(_THEME_CONTRAST, theme)
                    ]
                page.goto(path.as_uri(), wait_until="load")
                out["largest"] += page.evaluate(_LARGEST_VALUES, -1)  # every box, with its time
                if path.stem == "plan":
                    page.goto(path.as_uri(), wait_until="load")
                    out["rescue"] = page.evaluate(_FP8_THEN_A100)
                    page.goto(path.as_uri(), wait_until="load")
                    out["custom"] = page.evaluate(_DEEPSEEK_THEN_CUSTOM)
                    page.goto(path.as_uri(), wait_until="load")
                    out["stuck"] = page.evaluate(_TWO_IMPOSSIBLE_SETTINGS)
                page.goto(path.as_uri(), wait_until="load")
                out["presets"] += page.evaluate(_PRESET_SWITCHES)
                page.goto(path.as_uri(), wait_until="load")
                out["unformatted"] += page.evaluate(_NUMBERS_AT_EXTREMES)
                page.goto(path.as_uri(), wait_until="load")
                out["poke"] += page.evaluate(_POKE_EXPLORERS)
                # the poke leaves other controls enabled (a layout or model set to "custom")
                out["largest"] += page.evaluate(_LARGEST_VALUES, -1)
        browser.close()
    return out


def test_every_explorer_loads_offline_without_errors(reports):
    assert len(reports["pages"]) == 9
    assert not reports["errors"] and not reports["external"]
    assert sorted(r["name"] for r in reports["poke"]) == sorted(reports["pages"])


def test_every_box_is_bounded_and_its_largest_value_draws(reports):
    unbounded = [x for x in reports["largest"] if "no upper bound" in x]
    assert not unbounded
    timed = [x for x in reports["largest"] if " took " in x]
    assert len(timed) > 80
    slowest = sorted(timed, key=lambda x: -int(re.search(r"took (\d+) ms", x).group(1)))[:5]
    print("\nslowest updates at the largest values:", *slowest, sep="\n  ")


def test_every_enabled_control_changes_the_output(reports):
    for r in reports["poke"]:
        assert r["svg"] and r["initial"] > 0, r["name"]
        assert r["controls"] > 0 and r["redrawn"] == r["controls"] and not r["empty"], r
        assert not r["inert"], f"{r['name']}: enabled controls that change nothing: {r['inert']}"


def test_switching_between_any_two_presets_shows_no_error(reports):
    """A menu that sets other controls (a model preset) resets every setting its preset implies:
    each ordered pair of its options, switched in turn, draws without an error message."""
    presets = {(r["name"], r["control"]): r for r in reports["presets"]}
    assert {("plan", "model"), ("memory", "model")} <= set(presets), sorted(presets)
    assert all(r["switches"] >= 2 for r in reports["presets"]), reports["presets"]
    errors = [f"{r['name']} {r['control']}: {e}" for r in reports["presets"] for e in r["errors"]]
    assert not errors, f"{len(errors)} preset switches show an error: {errors[:8]}"


def test_a_preset_resets_what_the_readers_settings_break(reports):
    """FP8 chosen on an H100 model, then a model whose run is on A100s: the explorer draws the
    A100 run with FP8 back at its default and says so, instead of an error."""
    r = reports["rescue"]
    assert r["before"] == "0" and r["after"] == "0", r
    assert r["gpu"] == "A100-80GB" and "back to the default FP8 GEMMs = none" in r["note"], r


def test_a_box_answers_while_an_earlier_setting_is_impossible(reports):
    """With p = 20 over 70 layers and ZeRO-2 on screen, nothing draws; a new KV-head count still
    changes the output: the explorer says the new value breaks a rule of its own too."""
    r = reports["stuck"]
    assert "layers (70) must be divisible by p (20)" in r["before"], r
    assert r["after"] != r["before"], r
    assert "With the last setting that worked, KV heads = 1 is impossible too" in r["after"], r


def test_leaving_a_preset_for_custom_keeps_its_run_and_says_what_it_turned_off(reports):
    """DeepSeek-V3's preset, then "custom": its run's settings (ep = 64, rowwise FP8) stay, p
    moves to a divisor of the 61 layers, and DualPipe, which needs p even, goes off with a note."""
    r = reports["custom"]
    assert r["error"] == "0" and (r["p"], r["ep"], r["fp8"]) == ("1", "64", "rowwise"), r
    assert (
        not r["dualpipe"]
        and "the earlier setting: back to the default DualPipe schedule = false" in r["note"]
    ), r


def test_explorers_show_formatted_numbers(reports):
    """No output (chart, text or message) shows a 7-digit number with a decimal point or an
    ungrouped 7-digit integer, at any box's largest or smallest value or after any preset."""
    bad = list(reports["unformatted"])
    bad += [f"{r['name']} {r['control']} {u}" for r in reports["presets"] for u in r["unformatted"]]
    assert not bad, f"{len(bad)} unformatted numbers: {bad[:10]}"


def test_every_explorer_fits_a_phone(reports):
    assert len(reports["narrow"]) == 9
    bad = [r for r in reports["narrow"] if not (r["fits"] and r["legible"])]
    assert not bad, bad


def test_a_chart_wider_than_a_phone_shows_a_scroll_cue(reports):
    """At 390 px a chart keeps its 480 px (legible) and scrolls inside the explorer; a line under
    it says so (the site's minipar-scroll-cue.js), so the right quarter is not hidden silently."""
    assert not reports["no_cue"], reports["no_cue"][:5]


def test_every_explorer_follows_the_theme_legibly(reports):
    """In the dark theme an explorer is a dark panel, not a light box on a dark page, and every
    text in it (the "minipar plan" link, a message, a chart's labels) reads in both themes."""
    assert not reports["themes"], reports["themes"][:10]


def test_the_theme_check_can_fail():
    """Negative control: a light panel on a dark page, and the light theme's link blue on the
    dark panel, are both named."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page()
        page.route("**/*", lambda r: r.abort())
        page.set_content(
            '<html><body><div class="minipar-explorer" data-explorer="light-box" '
            'style="background:#fff;color:#111"><p>step 2.1 s</p></div>'
            '<div class="minipar-explorer" data-explorer="dim-link" '
            'style="background:#1b1f24;color:#e6e6e6"><p>The full search: '
            '<a href="#" style="color:#0b62a4">minipar plan</a></p></div></body></html>'
        )
        found = page.evaluate(_THEME_CONTRAST, "dark")
        browser.close()
    assert any(x.startswith("light-box: its panel") for x in found), found
    assert any(x.startswith('dim-link: <a> "minipar plan"') for x in found), found
