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
    attention's rank r computes r + 1 blocks (causal, contiguous)."""
    _, ring = kit.load("ring_all_reduce").build()
    assert all(c == [0, 1, 2, 3] for row in ring[-1]["held"] for c in row)
    assert [f["phase"] for f in ring].count("reduce-scatter") == 3
    _, pipe = kit.load("pipeline_schedule").build()
    assert max(f["held"][0] for f in pipe["1f1b"]) == 4
    assert all(f["held"] == [0, 0, 0, 0] for f in pipe["1f1b"][-1:])
    _, att = kit.load("ring_attention").build()
    computed = [sum(f["mask"][r] is not None for f in att) for r in range(4)]
    assert computed == [1, 2, 3, 4]


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
