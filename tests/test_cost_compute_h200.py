"""The kernel model against the H200 calibration set (measurements/h200_layer_gemm_times.json):
every GEMM, every whole layer and the Adam rows, with the targets the model is held to, the
constants re-derived from the file, and negative controls (the 2021 wave rule, η = 0.70).

Targets: ≥ 85 % of the 108 GEMMs within ±15 %; every SDPA (flash) layer within ±15 %; every
unfused layer within ±25 %; the presets that reproduce the 2021 runs unchanged."""

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from minipar.cost.chapters.memory_time import activation_bytes_per_layer
from minipar.cost.kernels import compute as C
from minipar.cost.kernels import hardware
from minipar.cost.kernels.hardware import GPUS
from minipar.cost.validation import kernel_fit

DATA = json.loads(
    (
        Path(hardware.__file__).parents[1]
        / "validation"
        / "measurements"
        / "h200_layer_gemm_times.json"
    ).read_text()
)
H200 = GPUS["H200"]


def gemm_errors(gpu) -> list[float]:
    """(predicted / measured − 1) of every GEMM row: dense rows through the GPU's GEMM rule,
    batched (attention) rows through its batched-GEMM rule, as layer_seconds prices them."""
    return [
        C.gpu_gemm_seconds(gpu, g["M"], g["N"], g["K"], g["batch"]) / g["measured_s"] - 1
        for g in DATA["gemms"]
    ]


def layer_errors(gpu, attention: str) -> dict[str, float]:
    """(predicted / measured − 1) per layer row of one attention kind ("sdpa" is flash); the
    layers were timed without fp32 gradient accumulation, so grad_accum_bytes = 0."""
    kernel = {"sdpa": "flash"}.get(attention, attention)
    return {
        r["shape"]: C.layer_seconds(
            r["b"], r["s"], r["h"], r["a"], gpu, r["t"], attention=kernel, grad_accum_bytes=0
        ).total_s
        / r["measured_s"]
        - 1
        for r in DATA["layers"]
        if r["attention"] == attention
    }


def within(errors, tol) -> int:
    return sum(abs(e) <= tol for e in errors)


def test_gemms_meet_the_target_and_report_the_counts():
    e = gemm_errors(H200)
    assert len(e) == 108
    assert within(e, 0.15) >= math.ceil(0.85 * 108)  # 92
    assert within(e, 0.15) == 105 and within(e, 0.10) == 85  # the figures the docs quote
    assert statistics.median(abs(x) for x in e) < 0.04
    assert max(abs(x) for x in e) < 0.30
    dense = [x for x, g in zip(e, DATA["gemms"]) if g["batch"] == 1]
    assert within(dense, 0.15) == len(dense) == 72  # every dense GEMM


def test_negative_controls_fail_the_gemm_target():
    """The 2021 wave rule (256×128 tiles, η = 0.70 assumed, max of the two roofs) and the new
    rule with the assumed η = 0.70 both miss the ±15 % target. The batched attention GEMMs
    priced as dense ones (no bandwidth of their own) leave a third of them outside ±15 % and
    the worst at +60 %: the s = 8192 products with the s × s operand as input."""
    need = math.ceil(0.85 * 108)
    old = replace(H200, gemm_rule="waves", gemm_efficiency=0.70, bmm_bandwidth=None)
    assert within(gemm_errors(old), 0.15) < 70
    assert within(gemm_errors(replace(H200, gemm_efficiency=0.70)), 0.15) < need
    batched = [i for i, g in enumerate(DATA["gemms"]) if g["batch"] > 1]
    as_dense = [gemm_errors(replace(H200, bmm_bandwidth=None))[i] for i in batched]
    own = [gemm_errors(H200)[i] for i in batched]
    assert within(as_dense, 0.15) <= 24 < 33 <= within(own, 0.15)
    assert max(as_dense) > 0.5 > 0.3 > max(abs(x) for x in own)
    # the wave rule over-charges (2048, 4608, 12288): three waves of 256×128 tiles, +35 % even
    # at the measured η (+50 % at the assumed 0.70); the additive rule is within 15 %
    row = next(g for g in DATA["gemms"] if (g["M"], g["N"], g["K"]) == (2048, 4608, 12288))
    kw = dict(
        peak=H200.peak_flops["bf16"],
        efficiency=H200.gemm_efficiency,
        hbm=H200.hbm_bandwidth,
        sms=H200.sms,
    )
    assert C.gemm_seconds(2048, 4608, 12288, **kw) / row["measured_s"] > 1.3
    assert (
        C.gemm_seconds(2048, 4608, 12288, rule="additive", latency=H200.gemm_latency_s, **kw)
        / row["measured_s"]
        < 1.15
    )


def test_layers_meet_the_targets():
    sdpa, unfused = layer_errors(H200, "sdpa"), layer_errors(H200, "unfused")
    assert len(sdpa) == len(unfused) == 6
    assert max(abs(x) for x in sdpa.values()) <= 0.15, sdpa
    assert max(abs(x) for x in unfused.values()) <= 0.25, unfused


def test_layer_negative_controls():
    """Pricing the SDPA layers as unfused attention (materialised scores), or dropping the
    per-layer overhead, misses the ±15 % target; so did the model of the day (file's record)."""
    as_unfused = {
        r["shape"]: C.layer_seconds(
            r["b"], r["s"], r["h"], r["a"], H200, r["t"], grad_accum_bytes=0
        ).total_s
        / r["measured_s"]
        - 1
        for r in DATA["layers"]
        if r["attention"] == "sdpa"
    }
    assert max(abs(x) for x in as_unfused.values()) > 0.5
    no_overhead = layer_errors(replace(H200, layer_overhead_s=0.0), "sdpa")
    assert max(abs(x) for x in no_overhead.values()) > 0.15
    recorded = [r["predicted_s"] / r["measured_s"] - 1 for r in DATA["layers"]]
    assert max(abs(x) for x in recorded) > 0.5


def test_adam_rows():
    for r in DATA["adam"]:
        pred = C.optimizer_seconds(r["params"], H200, bytes_per_param=kernel_fit.ADAM_FP32_BYTES)
        assert pred == pytest.approx(r["measured_s"], rel=0.05)
    # negative control: the datasheet HBM bandwidth at 30 bytes per parameter is 26 % short
    big = DATA["adam"][-1]
    assert big["predicted_s"] / big["measured_s"] < 0.8


def test_the_preset_is_the_calibration_file_rounded():
    """Every kernel constant of the H200 preset is what kernel_fit derives from the file, to
    the rounding the preset prints (the whole-step file is never read)."""
    assert H200.gemm_efficiency == pytest.approx(
        DATA["gemm_ceiling_flops"] / H200.peak_flops["bf16"], abs=0.005
    )
    assert H200.hbm_bandwidth == pytest.approx(DATA["copy_bytes_per_s"], rel=0.005)
    fit = kernel_fit.fit_gpu(DATA, H200)
    for field, rel in (
        ("gemm_latency_s", 0.01),
        ("bmm_bandwidth", 0.01),
        ("bmm_latency_s", 0.01),
        ("layer_overhead_s", 0.01),
        ("flash_efficiency", 0.01),
        ("attention_score_bytes", 0.01),
        ("optimizer_bandwidth", 0.005),
    ):
        assert getattr(H200, field) == pytest.approx(getattr(fit, field), rel=rel), field
    assert H200.gemm_rule == fit.gemm_rule == "additive"


def test_fit_recovers_constants_from_its_own_model():
    """Times generated by the model with known constants are fitted back exactly (the fit is
    linear least squares); a wrong byte count per Adam parameter would not recover W_adam."""
    truth = replace(
        H200,
        gemm_latency_s=5e-6,
        bmm_bandwidth=3.0e12,
        bmm_latency_s=12e-6,
        layer_overhead_s=0.3e-3,
        flash_efficiency=0.55,
        attention_score_bytes=40.0,
        optimizer_bandwidth=3.0e12,
    )
    synth = dict(
        DATA,
        gemms=[
            dict(g, measured_s=C.gpu_gemm_seconds(truth, g["M"], g["N"], g["K"], g["batch"]))
            for g in DATA["gemms"]
        ],
        layers=[
            dict(
                r,
                measured_s=C.layer_seconds(
                    r["b"],
                    r["s"],
                    r["h"],
                    r["a"],
                    truth,
                    r["t"],
                    grad_accum_bytes=0,
                    attention="flash" if r["attention"] == "sdpa" else "unfused",
                ).total_s,
            )
            for r in DATA["layers"]
        ],
        adam=[dict(r, measured_s=28 * r["params"] / 3.0e12) for r in DATA["adam"]],
        gemm_ceiling_flops=truth.gemm_efficiency * truth.peak_flops["bf16"],
        copy_bytes_per_s=truth.hbm_bandwidth,
    )
    fit = kernel_fit.fit_gpu(synth, H200)
    for field in (
        "gemm_efficiency",
        "hbm_bandwidth",
        "gemm_latency_s",
        "bmm_bandwidth",
        "bmm_latency_s",
        "layer_overhead_s",
        "flash_efficiency",
        "attention_score_bytes",
        "optimizer_bandwidth",
    ):
        assert getattr(fit, field) == pytest.approx(getattr(truth, field), rel=1e-6), field
    wrong = dict(synth, adam=[dict(r, measured_s=30 * r["params"] / 3.0e12) for r in DATA["adam"]])
    assert kernel_fit.fit_gpu(wrong, H200).optimizer_bandwidth != pytest.approx(3.0e12, rel=0.01)


# --- the 2021 model and the memory chapter are unchanged -----------------------------------


def test_a_bare_gpu_keeps_the_2021_wave_rule():
    """A GPU given only its datasheet (no kernel fields, as an old profile) gets the 2021 model:
    the layer time is the wave-rule roofline of its six GEMMs plus 9 + 11 bytes per score,
    exactly as written before attention= existed."""
    from minipar.cost.kernels.hardware import GPU

    a100 = GPUS["A100-80GB"]
    g = GPU("bare", a100.memory_bytes, a100.peak_flops, hbm_bandwidth=2.0e12, sms=108)
    assert (
        g.gemm_rule,
        g.bmm_bandwidth,
        g.layer_overhead_s,
        g.attention_score_bytes,
        g.optimizer_bandwidth,
    ) == ("waves", None, 0.0, 20.0, None)
    b, s, h, a, t = 1, 2048, 12288, 96, 8
    kw = dict(
        peak=g.peak_flops["bf16"], efficiency=g.gemm_efficiency, hbm=g.hbm_bandwidth, sms=g.sms
    )
    gemms = C.layer_gemms(b, s, h, a, t)
    fwd = sum(C.gemm_seconds(M, N, K, batch=n, **kw) for n, M, N, K in gemms)
    bwd = sum(
        C.gemm_seconds(M, K, N, batch=n, **kw) + C.gemm_seconds(K, N, M, batch=n, **kw)
        for n, M, N, K in gemms
    )
    bsh, sc = b * s * h, a * s * s * b / t
    mem = 22 * bsh + 16 * bsh / t + 9 * sc + 22 * bsh + 24 * bsh / t + 11 * sc + 10 * 12 * h * h / t
    got = C.layer_seconds(b, s, h, a, g, t)
    assert got.gemm_s == pytest.approx(fwd + bwd, rel=1e-12)
    assert got.memory_s == pytest.approx(mem / g.hbm_bandwidth, rel=1e-12)
    assert C.optimizer_seconds(1e9, g) == 30e9 / g.hbm_bandwidth


def test_flash_attention_terms():
    """Flash: 4·b·s²·h/t forward FLOPs halved by causality, backward 2.5 × forward, at the
    GPU's flash rate; no per-score bytes, so its memory term is the unfused one less 20 bytes
    per score; selective recomputation re-runs the flash forward."""
    b, s, h, a, t = 2, 4096, 4096, 32, 2
    f, bw = C.flash_attention_flops(b, s, h, t)
    assert f == 4 * b * s * s * h / t / 2 and bw == 2.5 * f
    assert C.flash_attention_flops(b, s, h, t, causal=False)[0] == 2 * f
    rate = H200.peak_flops["bf16"] * H200.flash_efficiency
    core = C.attention_core_and_mlp_seconds(b, s, h, a, H200, t, attention="flash")
    assert (core["core_f"], core["core_b"]) == pytest.approx((f / rate, bw / rate))
    g = GPUS["A100-80GB"]
    un = C.layer_seconds(b, s, h, a, g, t)
    fl = C.layer_seconds(b, s, h, a, g, t, attention="flash")
    sc = a * s * s * b / t
    assert un.memory_s - fl.memory_s == pytest.approx(
        g.attention_score_bytes * sc / g.hbm_bandwidth
    )
    sel = C.layer_seconds(b, s, h, a, g, t, attention="flash", recompute="selective")
    ff, _ = C.flash_attention_seconds(b, s, h, a, g, t)
    assert sel.gemm_s - fl.gemm_s == pytest.approx(ff)
    assert fl.total_s < un.total_s  # s = 4096 ≫ h/a: scores dominate
    with pytest.raises(ValueError, match=r"attention \('sdpa'\) must be one of unfused, flash"):
        C.layer_seconds(b, s, h, a, g, t, attention="sdpa")


def test_additive_rule_and_bmm_terms():
    kw = dict(peak=1e15, efficiency=0.5, hbm=4e12, sms=132)
    t = C.gemm_seconds(1024, 2048, 512, rule="additive", latency=1e-5, **kw)
    assert t == pytest.approx(
        1e-5 + 2 * 1024 * 2048 * 512 / 5e14 + 2 * (1024 * 512 + 512 * 2048 + 1024 * 2048) / 4e12
    )
    assert C.bmm_seconds(2048, 2048, 128, batch=16, bandwidth=4e12, latency=2e-5) == pytest.approx(
        2e-5 + 16 * 2 * (2048 * 128 * 2 + 2048 * 2048) / 4e12
    )
    with pytest.raises(ValueError, match=r"rule \('tiles'\) must be one of waves, additive"):
        C.gemm_seconds(8, 8, 8, rule="tiles", **kw)
    with pytest.raises(ValueError, match=r"latency \(-1\) must be >= 0"):
        C.gemm_seconds(8, 8, 8, rule="additive", latency=-1, **kw)


def test_flash_activation_memory_against_table_2():
    """Flash keeps no scores: Table 2 less 5as²b/t, plus the fp32 logsumexp 4·a·s·b/t."""
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    un = activation_bytes_per_layer(s, b, h, a, t=t)
    fl = activation_bytes_per_layer(s, b, h, a, t=t, attention="flash")
    assert un - fl == pytest.approx(5 * a * s * s * b / t - 4 * a * s * b / t)
    assert fl == pytest.approx(sbh * (10 + 24 / t) + 4 * a * s * b / t)


# --- GPU presets and profiles -------------------------------------------------------------


def test_h100_pcie_is_its_own_part():
    """The PCIe H100 is a smaller part than the SXM5 (datasheet; architecture whitepaper):
    114 SMs, 2.0 TB/s HBM2e, 756 dense bf16 TFLOP/s, PCIe Gen5 between the GPUs."""
    p, x = GPUS["H100-PCIe"], GPUS["H100-SXM"]
    achieved = hardware.H200_HBM_ACHIEVED / hardware.H200_DATASHEET_HBM
    assert (p.sms, p.peak_flops["bf16"], p.intra) == (114, 756e12, "pcie5-x16")
    assert p.hbm_bandwidth == pytest.approx(2.0e12 * achieved)
    assert (x.sms, x.hbm_bandwidth) == (132, pytest.approx(3.35e12 * achieved))  # not a copy


def test_h100_presets_take_the_h200s_kernel_constants():
    """Same GH100 chip: η, the per-call and per-layer times, the flash rate and the unfused
    bytes per score are the H200's; the HBM-bound rates scale with the datasheet HBM (3.35 and
    2.0 against 4.8 TB/s). Negative control: the H200's own rates are not copied."""
    h = GPUS["H200"]
    for name, ds in (("H100-SXM", 3.35e12), ("H100-PCIe", 2.0e12)):
        g, r = GPUS[name], ds / 4.8e12
        same = ("gemm_rule", "gemm_efficiency", "gemm_latency_s", "bmm_latency_s")
        same += ("flash_efficiency", "attention_score_bytes", "layer_overhead_s")
        assert all(getattr(g, f) == getattr(h, f) for f in same), name
        for f in ("hbm_bandwidth", "bmm_bandwidth", "optimizer_bandwidth"):
            assert getattr(g, f) == pytest.approx(getattr(h, f) * r), (name, f)
            assert getattr(g, f) < getattr(h, f)


def test_gpu_profile_round_trip_and_errors(tmp_path):
    for name, g in GPUS.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(hardware.gpu_profile(g)))
        assert hardware.load_gpu_profile(path) == g
    good = hardware.gpu_profile(H200) | {"measured": {"anything": 1}}
    cases = [
        ({k: v for k, v in good.items() if k != "sms"}, "missing field 'sms'"),
        (good | {"hbm_bandwidth": -1}, r"hbm_bandwidth \(-1\) must be > 0"),
        (good | {"gemm_efficiency": 1.3}, r"gemm_efficiency \(1.3\) must be in \(0, 1\]"),
        (good | {"flash_efficiency": "fast"}, r"flash_efficiency \('fast'\) must be a finite"),
        (good | {"peak_flops": {"fp32": 1e14}}, "peak_flops .* 'bf16'"),
        (good | {"hbm_bandwith": 4e12}, "unknown field 'hbm_bandwith'"),
        (good | {"gemm_rule": "tiles"}, r"gemm_rule \('tiles'\) must be one of"),
        (good | {"intra": "nvlink9"}, r"intra \('nvlink9'\) must be one of"),
        (good | {"sms": 13.5}, r"sms \(13.5\) must be a whole number"),
        ([1, 2], "must be a JSON object"),
    ]
    for i, (profile, message) in enumerate(cases):
        path = tmp_path / f"bad{i}.json"
        path.write_text(json.dumps(profile))
        with pytest.raises(ValueError, match=f"gpu profile {path}: {message}"):
            hardware.load_gpu_profile(path)
    (tmp_path / "x.json").write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        hardware.load_gpu_profile(tmp_path / "x.json")
    with pytest.raises(ValueError, match="cannot be read"):
        hardware.load_gpu_profile(tmp_path / "absent.json")
    minimal = {
        k: good[k]
        for k in ("name", "memory_bytes", "peak_flops", "hbm_bandwidth", "sms", "gemm_efficiency")
    }
    (tmp_path / "min.json").write_text(json.dumps(minimal))
    assert hardware.load_gpu_profile(tmp_path / "min.json").gemm_rule == "waves"
