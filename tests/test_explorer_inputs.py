"""One input contract for every explorer: the JavaScript (explorer.js) and its Python twin
(minipar.widgets.inputs) refuse the same values with the same words, on every number box of
every registered explorer, and no refused value reaches a chapter's draw (so no NaN reaches an
SVG).

Negative controls: a twin that lets 1e12 through, and one that names the wrong field, fail the
comparison.
"""

from __future__ import annotations

import functools
import re

import pytest
from explorer_parity_support import js_call, node_available

from minipar import chapters
from minipar.widgets import bundle, inputs

pytestmark = pytest.mark.skipif(
    not node_available(), reason="Node.js (/usr/bin/node) not installed"
)

SLUGS = chapters.SLUGS
# what a reader can type into a number box (an empty box reads as "")
BAD = ["", "abc", 1e308, -1e308, 1e12, 1e21, 1.5e7, 0.5, 2.5, -1, 0, 1e-7]


def _registered() -> list[tuple[str, str]]:
    """(slug, explorer) of every ``registerExplorer("...")`` call, read from each chapter's
    JavaScript bundle as text: collection starts no Node.js (it did, 16 runs in every worker)."""
    out = []
    for slug in SLUGS:
        for name in re.findall(r'^registerExplorer\("([^"]+)"', bundle(slug), flags=re.M):
            if name not in {n for _, n in out}:
                out.append((slug, name))
    return out


EXPLORERS = _registered()


@functools.cache
def _specs(slug: str) -> dict:
    """{explorer: its controls, divisibility rules and defaults} as the JavaScript of ``slug``
    gives them (one Node.js run), for the explorers that the collection assigned to ``slug``."""
    own = [n for s, n in EXPLORERS if s == slug]
    calls = [("explorerInputs", [n]) for n in own] + [("defaultValues", [n, {}]) for n in own]
    got = js_call(slug, [("explorerNames", []), *calls])
    assert set(own) <= set(got[0][1]), (slug, own, got[0][1])
    specs, defaults = got[1 : len(own) + 1], got[len(own) + 1 :]
    return {n: {**spec, "defaults": d} for n, (_, spec), (_, d) in zip(own, specs, defaults)}


def _spec(slug: str, name: str) -> dict:
    return _specs(slug)[name]


def test_the_text_finds_every_explorer_the_javascript_registers():
    """The collection's reading of the source is Node.js's own list: an explorer registered in a
    way the pattern misses (another quote, an indented call) would otherwise go untested."""
    from_node = []
    for slug in SLUGS:
        ((_, names),) = js_call(slug, [("explorerNames", [])])
        from_node += [(slug, n) for n in names if n not in {x for _, x in from_node}]
    assert EXPLORERS == from_node


def _cases(spec):
    """(values, changed) pairs: each number box set to each bad value, alone and together
    with an earlier box that is also bad (the changed one must be named)."""
    numbers = [c for c in spec["controls"] if c["type"] == "number"]
    cases = [(spec["defaults"], None)]
    for c in numbers:
        for bad in BAD:
            cases.append(({**spec["defaults"], c["name"]: bad}, c["name"]))
        other = next((o for o in numbers if o is not c), None)
        if other is not None:
            cases.append(({**spec["defaults"], c["name"]: 1e12, other["name"]: ""}, c["name"]))
    return cases


def _python(spec, values, changed):
    try:
        inputs.check_controls(spec["controls"], values, changed, spec["divisible"])
        return None
    except ValueError as e:
        return str(e)


@pytest.mark.parametrize("slug,name", EXPLORERS, ids=[n for _, n in EXPLORERS])
def test_every_explorer_refuses_what_the_python_twin_refuses_in_the_same_words(slug, name):
    _same_refusals(slug, name, _spec(slug, name))


def _same_refusals(slug, name, spec):
    """The JavaScript of ``slug`` and the Python twin, given ``spec``, refuse the same values of
    explorer ``name`` in the same words, and every box refuses the values no box takes."""
    cases = _cases(spec)
    js = js_call(slug, [("inputError", [name, v, ch]) for v, ch in cases])
    bad = [
        f"{ch}={v.get(ch)!r}: python {_python(spec, v, ch)!r}, js {m!r}"
        for (v, ch), (_, m) in zip(cases, js)
        if _python(spec, v, ch) != m
    ]
    assert not bad, "\n".join(bad[:10])
    assert js[0][1] is None  # the default view is valid
    always = {"", "abc", 1e308, -1e308, 1e12, 1e21}  # refused in every number box
    missed = [
        (ch, v[ch])
        for (v, ch), (_, m) in zip(cases, js)
        if ch and v[ch] in always and v[ch] != 0 and not m
    ]
    assert not missed, missed


@pytest.mark.parametrize("slug,name", EXPLORERS, ids=[n for _, n in EXPLORERS])
def test_no_refused_value_reaches_a_chart(slug, name):
    spec = _spec(slug, name)
    numbers = [c["name"] for c in spec["controls"] if c["type"] == "number"]
    calls = [
        ("drawExplorer", [name, {**spec["defaults"], f: v}, {}, f])
        for f in numbers
        for v in ("", 1e308, 1e12, 0.5)
    ]
    for (kind, out), (_, (_, _values, _, _f)) in zip(js_call(slug, calls), calls):
        assert kind == "ok"
        assert "NaN" not in out["html"] and "Infinity" not in out["html"]
        if out["error"]:
            assert "<svg" not in out["html"]


@pytest.mark.parametrize("slug,name", EXPLORERS, ids=[n for _, n in EXPLORERS])
def test_python_reads_the_same_boxes_from_the_javascript_source(slug, name):
    """inputs.js_controls (what a notebook's explorer call is checked against) sees every
    number box the JavaScript registers, with the same label and bounds."""
    keys = ("name", "label", "min", "max", "step")
    spec = _spec(slug, name)
    js = [{k: c.get(k) for k in keys} for c in spec["controls"] if c["type"] == "number"]
    controls, divisible = inputs.js_controls(slug, name)
    assert [{k: c.get(k) for k in keys} for c in controls] == js
    assert [list(p) for p in divisible] == [list(p) for p in spec["divisible"]]


def test_a_notebook_cannot_open_an_explorer_on_nonsense():
    """The chapter's Python explorer functions refuse what the page would refuse, in its words."""
    from minipar.widgets.data_parallel import zero_memory_explorer
    from minipar.widgets.pipeline_parallel import pp_explorer
    from minipar.widgets.tensor_parallel import tp_explorer

    with pytest.raises(ValueError, match=r"^t \(0\) must be at least 1$"):
        tp_explorer(t=0)
    with pytest.raises(ValueError, match=r"^t_F \(1e\+308\) must be at most 1000$"):
        pp_explorer(tF=1e308)
    with pytest.raises(ValueError, match=r"^d is empty$"):
        zero_memory_explorer(d="")
    assert tp_explorer(t=4).values == {"t": 4}


def test_the_message_names_the_field_changed_and_empty_says_empty():
    (_, empty), (_, big), (_, both) = js_call(
        "tensor_parallel",
        [
            ("inputError", ["tp-layer", {"b": ""}, "b"]),
            ("inputError", ["tp-layer", {"t": 1e12}, "t"]),
            ("inputError", ["tp-layer", {"t": 0, "b": 1e308}, "b"]),
        ],
    )
    assert empty == "b is empty"
    assert big == "t (1000000000000) must be at most 64"  # the box's own bound
    assert both in (
        "b (1e+308) must be a finite number",
        "b (1e+308) must be at most 1024",  # the box's own bound
    )


def test_divisibility_names_both_fields():
    controls = [
        {"name": "h", "label": "h", "type": "number", "min": 1, "step": 1},
        {"name": "a", "label": "a (heads)", "type": "number", "min": 1, "step": 1},
    ]
    with pytest.raises(ValueError, match=r"^h \(3\) must be divisible by a \(128\)$"):
        inputs.check_controls(controls, {"h": 3, "a": 128}, "h", [("h", "a")])


def test_js_number_writes_numbers_as_javascript_does():
    assert [inputs.js_number(x) for x in (1e308, 1e21, 1e12, 10_000_000, 2.5, 1e-7, 0.5, 3.0)] == [
        "1e+308",
        "1e+21",
        "1000000000000",
        "10000000",
        "2.5",
        "1e-7",
        "0.5",
        "3",
    ]


def test_negative_control_a_twin_that_lets_1e12_through_is_caught(monkeypatch):
    slug, name = next(e for e in EXPLORERS if e[1] == "tp-layer")
    spec = _spec(slug, name)
    monkeypatch.setattr(inputs, "MAX_INPUT", 1e13)
    # the twin forgets the boxes' own bounds too (every tp-layer box has one), so 1e12 passes it
    unbounded = {**spec, "controls": [{**c, "max": None} for c in spec["controls"]]}
    with pytest.raises(
        AssertionError, match=r"python None, js 't \(1000000000000\) must be at most 64'"
    ):
        _same_refusals(slug, name, unbounded)


def test_negative_control_a_twin_that_names_the_wrong_field_is_caught(monkeypatch):
    slug, name = next(e for e in EXPLORERS if e[1] == "tp-layer")
    spec = _spec(slug, name)
    real = inputs.check_controls
    monkeypatch.setattr(
        inputs,
        "check_controls",
        lambda controls, values, changed, divisible: real(controls, values, None, divisible),
    )
    with pytest.raises(AssertionError, match="python"):
        _same_refusals(slug, name, spec)


def test_messages_on_screen_use_the_readers_words_and_numbers():
    """The error the cost model raises keeps its code names (Python says the same), but the
    explorer shows it in the controls' labels and reader words, long numbers grouped; the number
    helpers never print seven bare digits. Negative control: a message without code names or
    long numbers is shown as it is."""
    spec = {
        "controls": [
            {"name": "gpus", "label": "GPUs N (custom)"},
            {"name": "t", "label": "t"},
            {"name": "s", "label": "sequence length s"},
        ]
    }
    msgs = [
        "gpus (1024) must be a multiple of gpus_per_node (72)",
        "sequence length s (131072) must be divisible by 2·cp (10)",
        "gpus (1048576) must be divisible by t·p (5·16)",
        "heads (12) must be divisible by t (5)",
    ]
    got = js_call("collectives", [("readerMessage", [spec, m]) for m in msgs])
    assert [out for _, out in got] == [
        "GPUs N (1024) must be a multiple of GPUs per node (72)",
        "sequence length s (131,072) must be divisible by 2·cp (10)",
        "GPUs N (1,048,576) must be divisible by t·p (5·16)",
        "heads (12) must be divisible by t (5)",
    ]
    nums = js_call(
        "collectives",
        [
            ("fmtNumber", [2281750592.4, 1]),
            ("fmtNumber", [1048576]),
            ("fmtNumber", [12345.678, 2]),
            ("fmtBytes", [2**70]),
            ("fmtSeconds", [1234567.5]),
        ],
    )
    want = ["2.3×10⁹", "1,048,576", "12,345.68", "1,048,576 PiB", "1.2×10⁶ s"]
    assert [out for _, out in nums] == want
