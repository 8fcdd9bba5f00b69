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
* at 390 px every explorer fits the screen with charts at least 320 px wide.

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
    _POKE_EXPLORERS,
    CHROMIUM,
    FLAGS,
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


pytestmark = [  # Chromium is a process of its own: slow, as CONTRIBUTING.md defines it
    pytest.mark.slow,
    pytest.mark.skipif(_missing() is not None, reason=str(_missing())),
]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    pages = write_pages(tmp_path_factory.mktemp("explorers"))
    out = {"pages": [p.stem for p in pages], "errors": [], "external": [], "largest": []}
    out.update(poke=[], narrow=[])

    def route(r):
        if r.request.url.startswith(("file:", "data:", "about:")):
            r.continue_()
        else:
            out["external"].append(r.request.url)
            r.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        for width in (1280, 390):
            context = browser.new_context(viewport={"width": width, "height": 900})
            context.route("**/*", route)
            page = context.new_page()
            page.on("pageerror", lambda e: out["errors"].append(str(e)))
            for path in pages:
                page.goto(path.as_uri(), wait_until="load")
                if width == 390:
                    out["narrow"] += page.evaluate(_NARROW_EXPLORERS, 320)
                    continue
                out["largest"] += page.evaluate(_LARGEST_VALUES, -1)  # every box, with its time
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


def test_every_explorer_fits_a_phone(reports):
    assert len(reports["narrow"]) == 9
    bad = [r for r in reports["narrow"] if not (r["fits"] and r["legible"])]
    assert not bad, bad
