"""The chapter pages' step-through animations (book/animations/, the {minipar-animation}
directive): the page's player (book/animations/player.js) recomputes every step's state from the
data the course's code exports, and that state must equal what Python computes from the same
code: the ring's summed chunks, the schedule's running actions and held activations, the ring
attention's merged softmax statistics. The player runs under Node.js."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
sys.path.insert(0, str(BOOK))

from animations import kit  # noqa: E402 (book/ joins sys.path above)

NODE = shutil.which("node") or ("/usr/bin/node" if Path("/usr/bin/node").exists() else None)
NAMES = kit.names()
DIRECTIVE = re.compile(r"^[`:]{3,}\{minipar-animation\}\s+(\S+)", re.M)


def test_node_is_there_on_ci():
    if os.environ.get("CI") == "true":
        assert NODE, "CI must have Node.js: the animations' parity test needs it"


def js_frames(data: dict, player: str | None = None):
    """The player's frames(data), run in Node.js on ``player`` (default: the page's player)."""
    if NODE is None:
        pytest.skip("needs Node.js")
    src = kit.player() if player is None else player
    script = (
        "const module = {exports: {}};\n"
        + src
        + "\nconst data = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        + "\nprocess.stdout.write(JSON.stringify(module.exports.frames(data)));\n"
    )
    out = subprocess.run(
        [NODE, "-e", script], input=json.dumps(data), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def differences(py, js, path="frames") -> list[str]:
    """Where ``js`` differs from ``py``: structure, labels and integers exactly, floats to
    1e-12 relative."""
    if isinstance(py, float) or isinstance(js, float):
        if not isinstance(js, (int, float)) or not isinstance(py, (int, float)):
            return [f"{path}: {py!r} != {js!r}"]
        ok = math.isclose(py, js, rel_tol=1e-12, abs_tol=1e-12)
        return [] if ok else [f"{path}: {py!r} != {js!r}"]
    if isinstance(py, dict):
        if not isinstance(js, dict) or set(py) != set(js):
            return [f"{path}: keys {sorted(py)} != {sorted(js) if isinstance(js, dict) else js!r}"]
        return [d for k in py for d in differences(py[k], js[k], f"{path}.{k}")]
    if isinstance(py, (list, tuple)):
        if not isinstance(js, list) or len(py) != len(js):
            return [f"{path}: {py!r} != {js!r}"]
        return [
            d for i, (a, b) in enumerate(zip(py, js)) for d in differences(a, b, f"{path}[{i}]")
        ]
    return [] if py == js else [f"{path}: {py!r} != {js!r}"]


def test_the_animations_are_found():
    assert NAMES == ["pipeline_schedule", "ring_all_reduce", "ring_attention"], NAMES


def _resolve(dotted: str):
    module, _, attr = dotted.rpartition(".")
    return inspect.unwrap(getattr(importlib.import_module(module), attr))


@pytest.mark.parametrize("name", NAMES)
def test_player_reproduces_python_frames_from_the_code_it_names(name):
    anim = kit.load(name)
    wanted = {_resolve(d).__code__: d for d in anim.draws}
    called = set()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in wanted:
            called.add(frame.f_code)

    sys.setprofile(profile)
    try:
        data, frames = anim.build()
    finally:
        sys.setprofile(None)
    missing = [wanted[c] for c in wanted if c not in called]
    assert not missing, f"{name} no longer calls {missing}"
    data = json.loads(json.dumps(data))  # what the page inlines
    frames = json.loads(json.dumps(frames))
    diff = differences(frames, js_frames(data))
    assert not diff, f"{name}: {len(diff)} differences, first {diff[:3]}"


def test_the_frames_show_what_the_mechanism_does():
    """Python's frames say the right thing on their own: the ring ends with every rank holding
    every rank's sum in every chunk; 1F1B's rank 0 holds at most p = 4 micro-batches; ring
    attention's rank r computes r + 1 blocks on the contiguous layout and, on the zigzag layout
    (shown first), every rank the same work at every step, two chunk pairs' worth (a diagonal
    pair counting half)."""
    _, ring = kit.load("ring_all_reduce").build()
    assert all(c == [0, 1, 2, 3] for row in ring[-1]["held"] for c in row)
    assert [f["phase"] for f in ring].count("reduce-scatter") == 3
    _, pipe = kit.load("pipeline_schedule").build()
    assert max(f["held"][0] for f in pipe["1f1b"]) == 4
    assert all(f["held"] == [0, 0, 0, 0] for f in pipe["1f1b"][-1:])
    data, att = kit.load("ring_attention").build()
    assert [v["name"] for v in data["variants"]] == ["zigzag", "contiguous"]
    computed = [sum(bool(f["pairs"][r]) for f in att["contiguous"]) for r in range(4)]
    assert computed == [1, 2, 3, 4]
    work = [
        [sum(0.5 if m == "causal" else 1 for *_, m in p) for p in f["pairs"]] for f in att["zigzag"]
    ]
    assert work == [[2, 2, 2, 2]] * 4, work


def test_negative_controls_a_wrong_player_or_plan_is_caught():
    """A player that merges blocks without rescaling the running sum by e^(m − m'), one that
    forgets a backward frees its activations, and a plan whose ring adds into the wrong chunk: each
    gives frames that differ from Python's."""
    player = kit.player()
    data, frames = kit.load("ring_attention").build()
    bug = player.replace("s.l * Math.exp(s.m - m)", "s.l")
    assert bug != player
    assert differences(json.loads(json.dumps(frames)), js_frames(data, bug))
    data, frames = kit.load("pipeline_schedule").build()
    bug = player.replace('if (op === "B" && t1 <= t) held[r] -= 1;', "")
    assert bug != player
    assert differences(json.loads(json.dumps(frames)), js_frames(data, bug))
    data, frames = kit.load("ring_all_reduce").build()
    data["steps"][0]["recv"][1] = (data["steps"][0]["recv"][1] + 1) % 4
    assert differences(json.loads(json.dumps(frames)), js_frames(data))


def test_pages_show_only_animations_that_exist():
    shown = set()
    for page in BOOK.glob("*.md"):
        shown |= set(DIRECTIVE.findall(page.read_text(encoding="utf-8")))
    assert shown <= set(NAMES), shown - set(NAMES)


def test_player_is_offline_and_the_inlined_json_cannot_close_its_script():
    """The player loads nothing (no URL, no fetch, no import), and the directive's JSON cannot
    end its <script> element early (a label with "</script>" in it is escaped)."""
    player = kit.player()
    assert not re.search(r"https?://|\bfetch\(|XMLHttpRequest|^\s*import\s", player, re.M)
    sys.path.insert(0, str(BOOK / "_ext"))
    from minipar_animations import _inline_json  # book/_ext joins sys.path above

    text = _inline_json({"title": "a </script><script>alert(1)</script>"})
    assert "</" not in text and json.loads(text)["title"].endswith("</script>")


def _chromium_missing() -> str | None:
    from test_site_browser import CHROMIUM

    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        return (
            f"chromium not found at {CHROMIUM}: `apt-get install -y chromium` (.ci/run does this)"
        )
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright for Python is not installed (it is in requirements.txt)"
    return None


def animation_page(name: str, player: str | None = None) -> str:
    """The animation as the {minipar-animation} directive writes it, in a page with the site's
    stylesheet and scroll-cue script, its column the page's width less 16 px margins."""
    sys.path.insert(0, str(BOOK / "_ext"))
    from minipar_animations import _inline_json  # book/_ext joins sys.path above

    data, _ = kit.load(name).build()
    static = ROOT / "_static"
    return (
        '<!doctype html><html><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<link rel="stylesheet" href="{(static / "minipar.css").as_uri()}">'
        f'<script src="{(static / "minipar-scroll-cue.js").as_uri()}"></script></head>'
        '<body style="margin:0 16px"><article class="bd-article">'
        f'<div class="minipar-animation" data-animation="{name}">'
        f'<script type="application/json" class="minipar-animation-data">{_inline_json(data)}</script>'
        f"</div><script>{kit.player() if player is None else player}</script></article></body></html>"
    )


# Runs in the page: the player's state, and what of its drawing lies outside the part of the
# stage a reader sees without scrolling.
_PLAYER_STATE = r"""
() => {
  const el = document.querySelector(".minipar-animation"), stage = el.querySelector(".mpa-stage");
  const box = stage.getBoundingClientRect();
  const outside = (sel) => Array.from(stage.querySelectorAll(sel)).filter((c) => {
    const r = c.getBoundingClientRect();
    return r.width > 0 && (r.right > box.right + 1 || r.left < box.left - 1);
  }).length;
  const sel = el.querySelector("select");
  return {pos: el.querySelector(".mpa-pos").textContent, say: el.querySelector(".mpa-say").textContent,
          step: Number(el.dataset.step), variant: sel ? sel.value : null,
          scrolls: stage.scrollWidth > stage.clientWidth + 1,
          merge_hidden: outside("table.mpa-merge td, table.mpa-merge th"),
          cursor_hidden: outside(".mpa-cursor"), focus: document.activeElement === el};
}
"""


@pytest.mark.slow
@pytest.mark.skipif(_chromium_missing() is not None, reason=str(_chromium_missing()))
def test_players_fit_their_column_keep_the_keyboard_and_count_like_their_narration(tmp_path):
    """In Chromium, at a 650 px column and on a 390 px phone: no animation is wider than its
    column, and what scrolls inside the player has the scroll cue; ring attention opens on the
    zigzag layout with its merge columns (m, ℓ, lse, o) in view at 650 px; the pipeline's
    timeline fits 650 px and its cursor stays in view while stepping at 390 px; ← and → step
    after a mouse click on any button (the player keeps the focus); the counter reads "Step k
    of n" like the narration."""
    from playwright.sync_api import sync_playwright
    from test_site_browser import _NO_SCROLL_CUE, _TOO_WIDE, CHROMIUM, FLAGS

    problems, errors = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        for width in (682, 390):  # a 650 px column; a phone
            page = browser.new_page(viewport={"width": width, "height": 900})
            page.route(
                "**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort()
            )
            page.on("pageerror", lambda e: errors.append(str(e)))
            for name in NAMES:
                path = tmp_path / f"{name}.html"
                path.write_text(animation_page(name), encoding="utf-8")
                page.goto(path.as_uri(), wait_until="load")
                at = f"{name} at {width} px"
                problems += [f"{at}: {w}" for w in page.evaluate(_TOO_WIDE)]
                problems += [f"{at}: {w}" for w in page.evaluate(_NO_SCROLL_CUE)]
                s = page.evaluate(_PLAYER_STATE)
                if name == "ring_attention":
                    if s["variant"] != "zigzag":
                        problems.append(f"{at}: opens on the {s['variant']} layout")
                    if width > 600 and (s["scrolls"] or s["merge_hidden"]):
                        problems.append(f"{at}: {s['merge_hidden']} merge cells out of view")
                if name == "pipeline_schedule" and width > 600 and s["scrolls"]:
                    problems.append(f"{at}: the timeline scrolls")
                page.click("button[aria-label='forward one step']")
                page.keyboard.press("ArrowRight")
                s = page.evaluate(_PLAYER_STATE)
                if s["step"] != 2 or not s["focus"]:
                    problems.append(f"{at}: → after a click on Step left step {s['step']}")
                while True:  # to the end, one click at a time: Step ends disabled
                    s = page.evaluate(_PLAYER_STATE)
                    if name == "pipeline_schedule" and s["cursor_hidden"]:
                        problems.append(f"{at}: the cursor left the view at {s['pos']}")
                        break
                    if s["pos"].split(" of ")[0] == s["pos"]:
                        problems.append(f"{at}: counter {s['pos']!r}")
                    counter = re.match(r"Step (\d+) of (\d+)", s["pos"])
                    if counter and not s["say"].startswith(counter.group(0)):
                        problems.append(f"{at}: counter {s['pos']!r}, narration {s['say'][:30]!r}")
                    if page.is_disabled("button[aria-label='forward one step']"):
                        break
                    page.click("button[aria-label='forward one step']")
                page.keyboard.press("ArrowLeft")
                if page.evaluate(_PLAYER_STATE)["step"] != s["step"] - 1:
                    problems.append(f"{at}: ← did nothing once Step was disabled")
            page.close()
        browser.close()
    assert not errors, errors[:5]
    assert not problems, problems[:10]
