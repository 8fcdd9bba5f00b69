"""Measured bytes on a real model equal the formulas, with the known gaps accounted for."""

import matplotlib
import pytest
import torch
from explorer_parity_support import js_call, node_available

from minipar.cost.chapters.memory_time import activation_bytes_per_layer, model_state_bytes
from minipar.cost.model import param_count
from minipar.memory_time.activations import (
    device_conventions,
    expected_items,
    layer_activation_bytes,
    saved_bytes,
)
from minipar.memory_time.model_states import fp32_adam_step, mixed_precision_adam_step
from minipar.model import GPTConfig, gpt

matplotlib.use("Agg")
C = GPTConfig(L=2, h=32, a=4, s=16, V=50)


def test_parameter_count_is_eq2_plus_the_final_layer_norm():
    psi = sum(p.numel() for p in gpt(C).parameters())
    assert psi == param_count(C.L, C.h, C.V, C.s) + 2 * C.h  # Eq. 2 omits the final LN


@pytest.mark.parametrize(
    "recipe, dtype, kw",
    [
        (fp32_adam_step, torch.float32, dict(weight_bytes=4, grad_bytes=4, optimizer_bytes=8)),
        (mixed_precision_adam_step, torch.bfloat16, {}),
    ],
)
def test_model_states_equal_the_formula_exactly(recipe, dtype, kw):
    r = recipe(gpt(C, dtype=dtype))
    f = model_state_bytes(r.psi, **kw)
    assert (r.weights, r.gradients, r.optimizer, r.total) == f
    assert r.total == 16 * r.psi
    n_tensors = len(list(gpt(C).parameters()))
    assert r.step_counters == 4 * n_tensors  # one fp32 scalar per tensor


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_saved_activations_equal_the_itemised_formula(dtype, recompute):
    c = GPTConfig(**{**C.__dict__, "recompute": recompute})
    b = 3
    got = layer_activation_bytes(gpt(c, dtype=dtype), b).total
    want = sum(
        expected_items(
            c.s, b, c.h, c.a, recompute=recompute, **device_conventions("cpu", dtype)
        ).values()
    )
    assert got == c.L * want


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_itemised_formula_with_papers_conventions_is_table_2(recompute):
    items = expected_items(16, 3, 32, 4, recompute=recompute)
    assert sum(items.values()) == activation_bytes_per_layer(16, 3, 32, 4, recompute=recompute)


def test_shared_storages_counted_once_and_parameters_skipped():
    w = torch.nn.Parameter(torch.randn(8, 8))
    x = torch.randn(4, 8, requires_grad=True)

    def fn(x):  # both halves are views of x; matmul saves x and w
        return (x[:, :4] * x[:, 4:]).sum() + (x @ w).sum()

    assert saved_bytes(fn, x, exclude=[w]).total == x.nbytes
    assert saved_bytes(fn, x).total == x.nbytes + w.nbytes  # negative control


@pytest.mark.skipif(not node_available(), reason="Node.js (/usr/bin/node) not installed")
def test_widget_draws_default_and_names_impossible_settings():
    from minipar.widgets.memory_time import memory_config

    cfg = memory_config()
    (k0, default), (k1, bad_t), (k2, bad_p), (k3, fixed) = js_call(
        "memory_time",
        [
            ("drawExplorer", ["memory", {}, cfg]),
            ("drawExplorer", ["memory", {"t": 7}, cfg]),
            ("drawExplorer", ["memory", {"preset": "custom", "p": 5}, cfg]),
            ("drawExplorer", ["memory", {"t": 8}, cfg]),
        ],
    )
    assert (k0, k1, k2, k3) == ("ok",) * 4
    assert default["error"] is None and default["html"].count("ZeRO-") >= 4  # 4 stages drawn
    assert "ZeRO-1 ★" in default["html"]  # the chosen one
    assert bad_t["error"] == "heads (96) must be divisible by t (7)"
    assert "minipar-explorer-message" in bad_t["html"] and "<svg" not in bad_t["html"]
    assert bad_p["error"] == "layers (96) must be divisible by p (5)"
    assert fixed["error"] is None and fixed["html"] == default["html"]  # t = 8 is the default


def test_llama_presets_name_the_published_parameter_count():
    from minipar.widgets.memory_time import LLAMA_SHAPES, PRESETS, memory_config, preset_params

    got = preset_params("Llama-2 70B-like")
    assert got["llama"] == 68_976_648_192  # Llama 2 70B, published shape
    assert got["eq2"] == param_count(80, 8192, 32000, 2048)  # what the calculator sizes
    assert abs(got["eq2"] / 1e9 - 64.7) < 0.05 and got["eq2"] < got["llama"]
    assert preset_params("7B (Llama-like)")["llama"] == 6_738_415_616
    assert preset_params("GPT-3 175B")["llama"] is None
    for name, (L, h, V, a, _, _) in LLAMA_SHAPES.items():  # same L, h, a, V as the preset
        assert PRESETS[name] == (L, h, a, V)
    assert memory_config()["llama_params"]["Llama-2 70B-like"] == got["llama"]
    with pytest.raises(ValueError, match=r"preset \('custom'\) must be one of"):
        preset_params("custom")


def test_memory_vs_gpus_figure_and_peak_skips_cpu():
    from minipar.memory_time.peak import peak_allocated
    from minipar.plotting.memory_time import memory_vs_gpus

    fig = memory_vs_gpus((80, 8192, 64, 4096, 32000))
    assert len(fig.axes[0].lines) == 5
    assert peak_allocated(lambda: None, "cpu") is None
