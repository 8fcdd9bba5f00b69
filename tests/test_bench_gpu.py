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

TRUTH = replace(
    GPUS["H200"],
    gemm_latency_s=6e-6,
    bmm_bandwidth=3.1e12,
    bmm_latency_s=15e-6,
    layer_overhead_s=0.5e-3,
    flash_efficiency=0.5,
    attention_score_bytes=60.0,
    optimizer_bandwidth=3.0e12,
)
INFO = ("NVIDIA H200", 141 * 2**30, 132)
FIELDS = (
    "gemm_efficiency",
    "hbm_bandwidth",
    "gemm_latency_s",
    "bmm_bandwidth",
    "bmm_latency_s",
    "layer_overhead_s",
    "flash_efficiency",
    "attention_score_bytes",
    "optimizer_bandwidth",
)


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
            b, s, h, a, t, attention = p.dims
            if swap_attention:
                attention = {"sdpa": "unfused", "unfused": "sdpa"}[attention]
            return C.layer_seconds(
                b,
                s,
                h,
                a,
                gpu,
                t,
                grad_accum_bytes=0,
                attention="flash" if attention == "sdpa" else "unfused",
            ).total_s
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


def test_command_on_the_cpu_writes_a_profile_load_gpu_profile_reads(tmp_path, capsys):
    out = tmp_path / "cpu.json"
    assert main(["calibrate", "gpu", "--device", "cpu", "--out", str(out)]) == 0
    g = load_gpu_profile(out)
    data = json.loads(out.read_text())
    assert g.name == "CPU" and g.gemm_rule == "additive" and 0 < g.gemm_efficiency <= 1
    assert len(data["measured"]["layers"]) == 4 and len(data["measured"]["adam"]) == 2
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
