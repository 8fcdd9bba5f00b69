"""The element-wise kernels of the recipe run, each at max(issue time, traffic): both H200 step
files predicted within ±10 % in step time and peak memory, the 350M GPT at 16,384 and 32,768
tokens per micro-batch included; a fixed per-layer adder cannot do both."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from minipar.cost.kernels import compute
from minipar.cost.kernels.hardware import GPUS
from minipar.cost.planner import three_d as planner
from minipar.cost.validation import kernel_fit

FILES = ("h200_step_times.json", "h200_step_times_batch_recompute.json")
MEASURED = Path(compute.__file__).resolve().parents[1] / "validation" / "measurements"


def _rows():
    return [r for f in FILES for r in json.loads((MEASURED / f).read_text())["rows"]]


def _predict(r, gpu):
    kernel = "unfused" if r["attention"] == "unfused" else "flash"
    m = planner.ModelShape(r["L"], r["h"], r["a"], r["s"], 50304, attention=kernel)
    cl = replace(planner.cluster(1, 1, "H200"), gpu=gpu)
    rc = "full" if r["attention"].endswith("+full") else "none"
    lay = planner.Layout(r["b"] * r["m"], 1, 1, 1, r["b"], recompute=rc, zero=0)
    return planner.evaluate(m, cl, lay, planner.Options(precision="megatron"))


def _errors(gpu):
    out = []
    for r in _rows():
        c = _predict(r, gpu)
        t, mem = c.step_seconds / r["measured_s"] - 1, c.bytes_per_gpu / r["peak_bytes"] - 1
        out.append((r["name"], r["b"], r["attention"], 100 * t, 100 * mem, c.fits))
    return out


def test_both_h200_step_files_within_ten_percent():
    rows = _errors(GPUS["H200"])
    assert len(rows) == 10 and all(fits for *_, fits in rows)
    bad = [r for r in rows if abs(r[3]) > 10 or abs(r[4]) > 10]
    assert not bad, bad
    gpt350 = [r for r in rows if r[0] == "GPT 350M"]
    assert sorted(r[1] for r in gpt350) == [8, 16]


def test_a_fixed_per_layer_adder_misses_the_small_model_at_two_token_counts():
    """Negative control: Megatron's fused byte count and the fixed 0.72 ms per layer (the model
    before) put the 350M GPT at 32,768 tokens per micro-batch 21 % too fast."""
    old = replace(GPUS["H200"], elementwise_bandwidth=None, kernel_issue_s=0.0)
    rows = {(r[0], r[1]): r[3] for r in _errors(old)}
    assert rows[("GPT 350M", 16)] < -15 and rows[("GPT 350M", 8)] < -10


def test_isolated_layers_fit_kernels_that_make_whole_steps_too_fast():
    """What the measurements README reports: the layer file's six shapes (t = 1 to 8) fit
    τ ≈ 41 µs and W_e ≈ 3.6 TB/s, and whole steps priced with them fall 0 to 20 % fast, the
    350M GPT at b 16 outside ±10 %: the preset keeps the step files' constants."""
    data = json.loads((MEASURED / "h200_layer_gemm_times.json").read_text())
    fit = kernel_fit.fit_elementwise(data["layers"], GPUS["H200"])
    assert fit["kernel_issue_s"] == pytest.approx(41e-6, rel=0.02)
    assert fit["elementwise_bandwidth"] == pytest.approx(3.6e12, rel=0.02)
    keys = ("kernel_issue_s", "elementwise_bandwidth")
    rows = {(r[0], r[1]): r[3] for r in _errors(replace(GPUS["H200"], **{k: fit[k] for k in keys}))}
    assert -21 < min(rows.values()) < -19 and max(rows.values()) < 0
    assert rows[("GPT 350M", 16)] < -10
    assert (
        kernel_fit.fit_elementwise([r for r in data["layers"] if r["t"] == 1], GPUS["H200"]) is None
    )


def test_kernels_follow_the_recipe():
    """Llama's recipe (RMSNorm, SwiGLU, RoPE, no dropout, no biases) runs other kernels than
    GPT's: no dropout masks, SwiGLU's two forward kernels, RoPE on Q and K, no bias gradients."""
    gpt = {k.name for k in compute.elementwise_kernels(1024, 4096, 1024)}
    llama = compute.elementwise_kernels(
        4096,
        14336,
        1024,
        recipe=dict(norm="rmsnorm", mlp_matrices=3, rope=True, dropout=0.0, bias=False),
    )
    names = {k.name for k in llama}
    assert "dropout1" in gpt and "gelu" in gpt and "bias grad 0" in gpt
    assert not any(n.startswith(("dropout", "bias", "gelu")) for n in names)
    assert {"silu", "gate * up", "rope 0", "rope 1 bwd"} <= names


def test_a_kernel_costs_its_launch_at_few_tokens_and_its_traffic_at_many():
    """max(issue, traffic): at 8 tokens every kernel is issue-bound (time ∝ kernels), at 2^16
    tokens traffic-bound (time ∝ tokens)."""
    gpu = GPUS["H200"]
    ks = compute.elementwise_kernels(1024, 4096, 1024)
    few = compute.elementwise_seconds(ks, 8, gpu)
    assert few == pytest.approx(len(ks) * gpu.kernel_issue_s)
    many = compute.elementwise_seconds(ks, 1 << 16, gpu)
    bytes_ = sum(k.bytes_per_token for k in ks) * (1 << 16)
    assert many == pytest.approx(bytes_ / gpu.elementwise_bandwidth)
