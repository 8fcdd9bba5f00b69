"""``minipar calibrate gpu``: the fit recovers a GPU's constants from times its own model
produced (an injected clock, no GPU), the command runs end to end on the CPU and writes a
profile that ``load_gpu_profile`` reads, and without CUDA it exits 2 with one line."""

import json
from dataclasses import replace

import pytest

from minipar.bench import gpu as calib
from minipar.cli import main
from minipar.cost.kernels import compute as C
from minipar.cost.kernels.hardware import GPUS, load_gpu_profile
from minipar.cost.validation import kernel_fit

TRUTH = replace(
    GPUS["H200"],
    gemm_latency_s=6e-6,
    bmm_bandwidth=3.1e12,
    bmm_latency_s=15e-6,
    layer_overhead_s=0.5e-3,
    flash_efficiency=0.5,
    attention_score_bytes=60.0,
    optimizer_bandwidth=3.0e12,
    elementwise_bandwidth=1.5e12,
    kernel_issue_s=9e-6,
)
INFO = ("NVIDIA H200", 141 * 2**30, 132)
FIELDS = (
    "gemm_efficiency",
    "hbm_bandwidth",
    "gemm_latency_s",
    "bmm_bandwidth",
    "bmm_latency_s",
    "flash_efficiency",
    "attention_score_bytes",
    "optimizer_bandwidth",
    "elementwise_bandwidth",
    "kernel_issue_s",
)


def layer_clock(gpu, b, s, h, a, t, attention):
    """A layer as the planner prices it on ``gpu`` (``three_d_terms.recipe_kernels_seconds``):
    its GEMMs and attention, and GPT's element-wise kernels each at max(τ, bytes/W_e) in place
    of the fused byte count and the fixed per-layer time."""
    kind = "flash" if attention == "sdpa" else "unfused"
    lt = C.layer_seconds(b, s, h, a, gpu, t, grad_accum_bytes=0, attention=kind).total_s
    lt -= gpu.layer_overhead_s + C.fused_activation_seconds(b, s, h, t, gpu)
    return lt + C.elementwise_seconds(C.elementwise_kernels(h, 4 * h, h, t), b * s, gpu)


def model_clock(gpu, *, swap_attention=False):
    """A clock that answers every probe with ``gpu``'s modelled time (no tensor is made)."""

    def timer(p: calib.Probe) -> float:
        if p.kind == "ceiling":
            n, M, N, K = p.dims
            return 2 * M * N * K / (gpu.peak_flops["bf16"] * gpu.gemm_efficiency)
        if p.kind == "copy":
            return 2 * p.dims[0] / gpu.hbm_bandwidth
        if p.kind == "gemm":
            n, M, N, K = p.dims
            return C.gpu_gemm_seconds(gpu, M, N, K, n)
        if p.kind == "layer":
            *shape, attention = p.dims
            if swap_attention:
                attention = {"sdpa": "unfused", "unfused": "sdpa"}[attention]
            return layer_clock(gpu, *shape, attention)
        assert p.kind == "adam"
        return 28 * p.dims[0] / gpu.optimizer_bandwidth

    return timer


@pytest.mark.parametrize("quick", [False, True])
def test_calibration_recovers_the_constants_behind_the_times(quick, tmp_path):
    profile = calib.calibrate(quick=quick, timer=model_clock(TRUTH), device_info=INFO)
    for f in FIELDS:
        assert profile[f] == pytest.approx(getattr(TRUTH, f), rel=1e-6), f
    assert profile["name"] == "NVIDIA H200" and profile["gemm_rule"] == "additive"
    assert profile["method"]["peak_from"] == "the H200 preset's dense bf16 peak"
    plan = calib.PLANS["quick" if quick else "full"]
    assert len(profile["measured"]["gemms"]) == 18 * len(plan.shapes)
    assert [r["role"] for r in profile["measured"]["gemms"][:3]] == list(calib.ROLES)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile))
    got = load_gpu_profile(path)
    assert got.flash_efficiency == pytest.approx(0.5) and got.sms == 132


def test_negative_control_mislabelled_attention_is_not_recovered():
    """Layers whose SDPA and unfused times were swapped fit a different flash rate and
    bytes per score: the fit is sensitive to which attention ran."""
    profile = calib.calibrate(timer=model_clock(TRUTH, swap_attention=True), device_info=INFO)
    assert profile["flash_efficiency"] != pytest.approx(0.5, rel=0.05) or profile[
        "attention_score_bytes"
    ] != pytest.approx(60, rel=0.05)


def test_three_token_counts_tell_a_launch_from_a_token():
    """The plan's layers span three token counts (b·s) and two widths, and some of GPT's
    kernels are launch-bound at the smallest: τ and W_e come back. Negative controls: at one
    token count (as the H200 file timed its layers) the fit declines, and the fixed per-layer
    time fitted there, exact at that count, misses the others: +65 % at 2,048 tokens, −18 % at
    32,768 (flash attention)."""
    for plan in calib.PLANS.values():
        assert len({b * s for b, s, h, a in plan.shapes}) >= 3
        assert len({h for b, s, h, a in plan.shapes}) >= 2
    measured = calib.measure(calib.PLANS["full"], "cuda", model_clock(TRUTH))
    layers, gpu = measured["layers"], kernel_fit.fit_gpu(measured, TRUTH)
    smallest = min(2048 * k.bytes_per_token for k in C.elementwise_kernels(2048, 8192, 2048))
    assert layers[0]["b"] * layers[0]["s"] == 2048 and smallest / 1.5e12 < 9e-6
    assert (gpu.kernel_issue_s, gpu.elementwise_bandwidth) == pytest.approx((9e-6, 1.5e12))
    one = [r for r in layers if r["b"] * r["s"] == 8192 and r["h"] == 2048]
    assert len(one) == 4 and kernel_fit.fit_elementwise(one, gpu) is None
    adder = replace(gpu, **kernel_fit.fit_layers(one, gpu))
    error = {
        r["b"] * r["s"]: C.layer_seconds(
            r["b"], r["s"], r["h"], r["a"], adder, grad_accum_bytes=0, attention="flash"
        ).total_s
        / r["measured_s"]
        - 1
        for r in layers
        if r["attention"] == "sdpa" and r["h"] == 2048
    }
    assert abs(error[8192]) < 1e-6 and error[2048] > 0.5 and error[32768] < -0.15, error


def test_base_gpu_matches_the_part_not_the_family():
    """'NVIDIA H100 PCIe' is the 756-TFLOP/s PCIe part, not the SXM5 (a substring match on
    'H100' alone would take the first); an unknown card uses its measured ceiling."""
    g, why = calib.base_gpu("NVIDIA H100 PCIe", 80e9, 114, None, 5e14)
    assert g.peak_flops["bf16"] == 756e12 and "H100-PCIe" in why
    g, _ = calib.base_gpu("NVIDIA H100 80GB HBM3", 80e9, 132, None, 7e14)
    assert g.peak_flops["bf16"] == 989.4e12
    g, why = calib.base_gpu("Some GPU", 24e9, 80, None, 1.5e14)
    assert g.peak_flops["bf16"] == 1.5e14 and "measured ceiling" in why
    g, why = calib.base_gpu("Some GPU", 24e9, 80, 165.0, 1.5e14)
    assert g.peak_flops["bf16"] == 165e12 and why == "--peak-tflops"


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_command_on_the_cpu_writes_a_profile_load_gpu_profile_reads(tmp_path, capsys):
    out = tmp_path / "cpu.json"
    assert main(["calibrate", "gpu", "--device", "cpu", "--out", str(out)]) == 0
    g = load_gpu_profile(out)
    data = json.loads(out.read_text())
    assert g.name == "CPU" and g.gemm_rule == "additive" and 0 < g.gemm_efficiency <= 1
    assert len(data["measured"]["layers"]) == 10 and len(data["measured"]["adam"]) == 2
    assert {r["attention"] for r in data["measured"]["layers"]} == {"sdpa", "unfused"}
    assert str(out) in capsys.readouterr().err


def test_without_cuda_it_exits_2_with_one_line(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the GPU test below runs instead")
    assert main(["calibrate", "gpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "needs a CUDA GPU" in err
    assert main(["calibrate", "gpu", "--device", "cpu", "--peak-tflops", "-1"]) == 2
    assert "--peak-tflops (-1.0) must be > 0" in capsys.readouterr().err


@pytest.mark.gpu
def test_quick_calibration_on_this_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    out = tmp_path / "gpu.json"
    assert main(["calibrate", "gpu", "--quick", "--out", str(out)]) == 0
    g = load_gpu_profile(out)
    assert 0 < g.gemm_efficiency <= 1 and 0 < g.flash_efficiency <= 1
    assert g.hbm_bandwidth > 1e11 and g.bmm_bandwidth > 1e11
    assert (
        g.elementwise_bandwidth > 1e11 and 0 <= g.kernel_issue_s < 1e-3
    )  # measured, not a preset's
