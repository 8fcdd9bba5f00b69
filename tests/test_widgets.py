"""Explorers: a widget with a kernel, a self-contained HTML copy without one.

The JavaScript models are checked against Python in test_explorer_parity.py and in a real
browser in test_site_browser.py; here: the Python side and the inline script."""

import json
import re
import subprocess

import matplotlib
import pytest

matplotlib.use("Agg")

from explorer_parity_support import NODE, node_available

from minipar import chapters
from minipar.widgets import bundle, chapter_files, classic_script, static_html

SLUGS = chapters.SLUGS  # every chapter has an explorer


@pytest.mark.parametrize("slug", SLUGS)
def test_static_html_is_self_contained(slug):
    page = static_html(slug, slug if slug == "collectives" else "x", {"n": 3}, {"k": "</script>"})
    assert "minipar-explorer-mount" in page and "mountExplorer(" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # nothing to fetch
    assert re.search(r"^\s*(import|export)\b", classic_script(slug), re.M) is None
    assert page.count("</script>") == 1  # the config cannot close it early


@pytest.mark.skipif(not node_available(), reason="Node.js not installed")
@pytest.mark.parametrize("slug", SLUGS)
def test_classic_script_parses(slug, tmp_path):
    path = tmp_path / "x.js"
    path.write_text(classic_script(slug))
    subprocess.run([NODE, "--check", str(path)], check=True)


def test_bundle_orders_dependencies_first(tmp_path, monkeypatch):
    import minipar.widgets as W

    (tmp_path / "a.js").write_text("// minipar-requires: b\nexport function fa() {}\n")
    (tmp_path / "b.js").write_text("export function fb() {}\n")
    (tmp_path / "c.js").write_text("// minipar-requires: d\n")
    (tmp_path / "d.js").write_text("// minipar-requires: c\n")
    monkeypatch.setattr(W, "JS_DIR", tmp_path)
    assert chapter_files("a") == ["b", "a"]
    with pytest.raises(ValueError, match="cycle: c -> d -> c"):
        chapter_files("c")
    with pytest.raises(ValueError, match=r"slug \('nope'\) has no file nope.js"):
        chapter_files("nope")


def test_explorer_widget_carries_model_and_static_copy():
    from minipar.widgets.collectives import MACHINE, collectives_explorer

    w = collectives_explorer(fitted=(2e-4, 1e9), n=3)
    assert w.explorer == "collectives" and w.values == {"n": 3}
    assert w.config["links"][MACHINE] == {
        "alpha": 2e-4,
        "bandwidth": 1e9,
        "source": w.config["links"][MACHINE]["source"],
    }
    assert 'registerExplorer("collectives"' in w._esm and "export default" in w._esm
    data, _ = w._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data
    html = data["text/html"]
    assert json.dumps({"n": 3}) in html and "rough default" not in html
    assert bundle("collectives") == w._esm


def test_every_chapter_explorer_is_a_widget_with_a_static_copy():
    from minipar.widgets.data_parallel import dp_step_explorer, zero_memory_explorer
    from minipar.widgets.memory_time import memory_time_explorer

    for w, name in (
        (dp_step_explorer(ranks=16), "dp-step"),
        (zero_memory_explorer(), "zero-memory"),
        (memory_time_explorer(t=4), "memory"),
    ):
        assert w.explorer == name
        html = w._repr_mimebundle_()[0]["text/html"]
        assert (
            f'registerExplorer("{name}"' in html
            and "mountExplorer(document.getElementById(" in html
        )
    assert chapter_files("data_parallel") == ["collectives", "memory_time", "data_parallel"]


@pytest.mark.skipif(not node_available(), reason="Node.js (/usr/bin/node) not installed")
def test_memory_calculator_greys_out_what_does_not_apply():
    """L, h, a, V apply only to the "custom" model: a named model fills them with its shape and
    disables them; sequence parallelism is disabled at t = 1. The filled shape is what the bars
    use (the same total as the preset)."""
    from explorer_parity_support import js_call

    from minipar.widgets.memory_time import PRESETS, memory_config

    config = memory_config()
    got = js_call(
        "memory_time",
        [
            ("memoryLink", [{"preset": "Llama-2 70B-like"}, "preset", config]),
            ("memoryLink", [{"preset": "custom"}, "preset", config]),
            ("memoryLink", [{"preset": "GPT-3 175B"}, "t", config]),
            ("memoryDisabled", [{"preset": "GPT-3 175B", "t": 8}]),
            ("memoryDisabled", [{"preset": "custom", "t": 8}]),
            ("memoryDisabled", [{"preset": "custom", "t": 1}]),
        ],
    )
    L, h, a, V = PRESETS["Llama-2 70B-like"]
    assert [out for _, out in got] == [
        {"L": L, "h": h, "a": a, "V": V},
        {},
        {},
        ["L", "h", "a", "V"],
        [],
        ["sp"],
    ]
    named = {"preset": "Llama-2 70B-like", "t": 8, "p": 1, "d": 1, "zero": 0}
    (_, a1), (_, a2) = js_call(
        "memory_time",
        [
            ("drawExplorer", ["memory", named, config]),
            ("drawExplorer", ["memory", {**named, "preset": "custom", **got[0][1]}, config]),
        ],
    )
    total = re.compile(r"<b>([\d.]+) GiB</b>")
    assert a1["error"] is None and total.search(a1["html"])[1] == total.search(a2["html"])[1]


@pytest.mark.slow
def test_every_explorer_names_an_unknown_link_gpu_or_preset_the_same_way():
    """The explorers look a link, a GPU or a preset up by the control's value through one
    helper (``configEntry`` in explorer.js): an unknown name is refused with the same message,
    naming the choices, whichever explorer draws."""
    from explorer_parity_support import js_call

    from minipar.widgets.collectives import collectives_config
    from minipar.widgets.context_parallel import cp_config
    from minipar.widgets.data_parallel import dp_config
    from minipar.widgets.expert_parallel import ep_config
    from minipar.widgets.memory_time import memory_config
    from minipar.widgets.tensor_parallel import tp_config

    cases = [  # (slug, explorer, config, control, its table)
        ("collectives", "collectives", collectives_config(), "link", "links"),
        ("context_parallel", "cp-layer", cp_config(), "link", "links"),
        ("context_parallel", "cp-layer", cp_config(), "gpu", "gpus"),
        ("data_parallel", "dp-step", dp_config(), "intra", "links"),
        ("data_parallel", "dp-step", dp_config(), "inter", "links"),
        ("expert_parallel", "ep-layer", ep_config(), "link", "links"),
        ("memory_time", "memory", memory_config(), "gpu", "gpus"),
        ("memory_time", "memory", memory_config(), "preset", "presets"),
        ("tensor_parallel", "tp-layer", tp_config(), "link", "links"),
        ("tensor_parallel", "tp-layer", tp_config(), "gpu", "gpus"),
    ]
    for slug, name, config, control, table in cases:
        ((_, got),) = js_call(slug, [("drawExplorer", [name, {control: "nowhere"}, config])])
        noun = {"links": "link", "gpus": "gpu", "presets": "preset"}[table]
        want = f"{noun} ('nowhere') must be one of {', '.join(config[table])}"
        assert got["error"] == want, (name, control, got["error"])
        ((_, ok),) = js_call(slug, [("drawExplorer", [name, {}, config])])
        assert ok["error"] is None, (name, ok["error"])
