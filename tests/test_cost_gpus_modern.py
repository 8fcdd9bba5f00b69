"""The H800, B200 and GB200 NVL72 presets (minipar.cost.kernels.presets.json): each constant as its
datasheet prints it (dense = half the "with sparsity" peaks; bandwidth per direction = half the
bidirectional NVLink figure), the NVLink domain that sets the planner's GPUs per node, and
MXFP8, refused before Blackwell with its own rule."""

import json

import pytest
from test_cli_cost import run, run_json

from minipar.cost.kernels import hardware as H
from minipar.cost.kernels.compute import (
    FP8_CAST_BYTES,
    FP8_SCALING,
    check_fp8_gpu,
    fp8_cast_bytes_per_token,
    fp8_weight_cast_bytes,
)

T = 1e12
GiB = 2**30


def test_h800_is_an_h100_sxm_with_a_narrower_nvlink():
    h800, h100 = H.GPUS["H800"], H.GPUS["H100-SXM"]
    # NVIDIA H800 Tensor Core GPU datasheet (SXM): 1979 BF16 / 3958 FP8 TFLOP/s with sparsity
    # (the H100 SXM5's), 80 GB HBM3 at 3.35 TB/s, NVLink 400 GB/s, FP64 1 TFLOP/s
    for k in ("bf16", "fp16", "fp8", "tf32"):
        assert h800.peak_flops[k] == h100.peak_flops[k]
    assert h800.peak_flops["bf16"] == pytest.approx(1979 / 2 * T, rel=1e-3)
    assert h800.peak_flops["fp8"] == pytest.approx(3958 / 2 * T, rel=1e-3)
    assert h800.peak_flops["fp64"] == 1 * T
    assert "mxfp8" not in h800.peak_flops
    assert h800.memory_bytes == 80 * GiB and h800.sms == 132
    assert h800.hbm_bandwidth == h100.hbm_bandwidth  # the same achieved 3.35 x 4.22/4.8 TB/s
    nv = H.LINKS[h800.intra]
    # 400 GB/s bidirectional = 200 GB/s per direction; the DeepSeek-V3 report (§3.2.2) measures
    # 160 GB/s, 0.8 of it, the bus efficiency the H100's NVLink assumes
    assert nv.bandwidth == 200e9 and nv.bus_efficiency == 0.8
    assert nv.bandwidth * nv.bus_efficiency == 160e9
    # one ConnectX-7 NDR 400 Gb/s NIC per GPU: 50 GB/s per direction (the report's IB 50 GB/s)
    assert H.LINKS[h800.inter].bandwidth == 50e9 and h800.nvlink_domain == 8


@pytest.mark.parametrize(
    ("name", "sparse", "memory_gb", "hbm", "domain"),
    [
        # NVIDIA HGX platform specifications, HGX B200, per GPU: FP8/FP6 9 PFLOPS, FP16/BF16
        # 4.5 PFLOPS, TF32 2.2 PFLOPS with sparsity; 180 GB HBM3E at 7.7 TB/s; 8 GPUs per NVLink
        ("B200", {"fp8": 9000, "bf16": 4500, "tf32": 2200}, 180, 7.7e12, 8),
        # NVIDIA GB200 NVL72 specifications, per GPU: FP8/FP6 10, FP16/BF16 5, TF32 2.5
        # PFLOPS with sparsity; 186 GB HBM3E at 8 TB/s; 72 GPUs on one NVLink domain
        ("GB200-NVL72", {"fp8": 10000, "bf16": 5000, "tf32": 2500}, 186, 8e12, 72),
    ],
)
def test_blackwell_presets(name, sparse, memory_gb, hbm, domain):
    g = H.GPUS[name]
    for k, tflops in sparse.items():
        assert g.peak_flops[k] == tflops / 2 * T, k  # dense is half
    assert g.peak_flops["fp16"] == g.peak_flops["bf16"]
    # MXFP8 runs on Blackwell's tensor cores at the FP8 rate
    assert g.peak_flops["mxfp8"] == g.peak_flops["fp8"] == 2 * g.peak_flops["bf16"]
    assert g.memory_bytes == memory_gb * GiB
    # Blackwell's own kernel constants (hardware.blackwell_kernels): the achieved HBM rate a
    # B200 measured, scaled by the datasheet; the H200's bandwidth-bound constants scaled by it
    achieved = H.B200_HBM_ACHIEVED * hbm / H.B200_DATASHEET_HBM
    assert g.hbm_bandwidth == pytest.approx(achieved)
    assert g.elementwise_bandwidth == pytest.approx(1.6e12 * achieved / H.H200_HBM_ACHIEVED)
    assert g.gemm_efficiency == H.BLACKWELL_GEMM_EFFICIENCY != H.H200_GEMM_EFFICIENCY
    assert g.gemm_rule == "additive"  # the SM count (an assumption) is not read
    assert g.nvlink_domain == domain
    nv = H.LINKS[g.intra]
    # 5th-generation NVLink: 1.8 TB/s per GPU bidirectional = 900 GB/s per direction (DGX B200
    # User Guide: 14.4 TB/s over 8 GPUs; GB200 NVL72: 130 TB/s over 72)
    assert nv.name == "nvlink5-b200" and nv.bandwidth == 900e9
    assert (
        nv.bandwidth == pytest.approx(14.4e12 / 8 / 2) == pytest.approx(130e12 / 72 / 2, rel=0.02)
    )
    # DGX B200 User Guide: 8 ConnectX-7 cards, 400 Gb/s InfiniBand each, one per GPU
    assert g.inter == "ib-ndr400"


def test_only_blackwell_has_an_mxfp8_peak():
    have = sorted(k for k, g in H.GPUS.items() if "mxfp8" in g.peak_flops)
    assert have == ["B200", "GB200-NVL72"]
    assert all(g.nvlink_domain == 8 for k, g in H.GPUS.items() if k != "GB200-NVL72")


@pytest.mark.parametrize("name", ["A100-80GB", "H100-SXM", "H100-PCIe", "H200", "H800"])
def test_mxfp8_is_refused_before_blackwell(name):
    with pytest.raises(ValueError) as e:
        check_fp8_gpu(H.GPUS[name], "mxfp8")
    assert str(e.value) == f"precision mxfp8 needs a Blackwell GPU (B200, GB200), got {name}"


def test_mxfp8_on_blackwell_and_the_other_recipes_unchanged():
    for name in ("B200", "GB200-NVL72"):
        for scaling in (None, *FP8_SCALING):
            check_fp8_gpu(H.GPUS[name], scaling)
    check_fp8_gpu(H.GPUS["H100-SXM"], "delayed")  # Hopper keeps its FP8 recipes
    with pytest.raises(ValueError, match="has none"):
        check_fp8_gpu(H.GPUS["A100-80GB"], "delayed")
    with pytest.raises(ValueError, match=r"fp8 \('mx'\) must be one of"):
        check_fp8_gpu(H.GPUS["B200"], "mx")
    # the older recipes' bytes as before; MXFP8: read 2, write two FP8 blockings and a scale
    # byte per 32 elements each, in one pass
    assert {k: FP8_CAST_BYTES[k] for k in ("delayed", "current", "rowwise")} == {
        "delayed": 4,
        "current": 6,
        "rowwise": 3,
    }
    assert FP8_CAST_BYTES["mxfp8"] == 2 + 2 * (1 + 1 / 32)
    assert fp8_weight_cast_bytes("mxfp8") == FP8_CAST_BYTES["mxfp8"]
    assert fp8_weight_cast_bytes("delayed") == 4 and fp8_weight_cast_bytes("rowwise") == 8
    fwd, bwd = fp8_cast_bytes_per_token(4096, 14336, 1024, 1, scaling="mxfp8")
    ref, _ = fp8_cast_bytes_per_token(4096, 14336, 1024, 1, scaling="delayed")
    assert fwd == pytest.approx(ref * FP8_CAST_BYTES["mxfp8"] / 4)


def test_a_profile_keeps_its_nvlink_domain(tmp_path):
    p = tmp_path / "gb200.json"
    p.write_text(json.dumps(H.gpu_profile(H.GPUS["GB200-NVL72"])))
    assert H.load_gpu_profile(p) == H.GPUS["GB200-NVL72"]
    p.write_text(json.dumps(H.gpu_profile(H.GPUS["B200"]) | {"nvlink_domain": 7.5}))
    with pytest.raises(ValueError, match=r"nvlink_domain \(7.5\) must be a whole number"):
        H.load_gpu_profile(p)
    p.write_text(json.dumps(H.gpu_profile(H.GPUS["B200"]) | {"nvlink_domain": 0}))
    with pytest.raises(ValueError, match=r"nvlink_domain \(0\) must be > 0"):
        H.load_gpu_profile(p)


BASE = ("plan", "--model", "mixtral-8x7b", "--global-batch", "256", "--tp", "1", "--pp", "1")
BASE += ("--ep", "8", "--micro-batch", "1")


def test_plan_refuses_mxfp8_before_blackwell(capsys):
    status, out, err = run(capsys, *BASE, "--gpu", "H100-SXM", "--gpus", "64", "--fp8", "mxfp8")
    assert status == 2 and out == ""
    assert err.strip() == (
        "minipar plan: error: precision mxfp8 needs a Blackwell GPU (B200, GB200), got H100-SXM"
    )


def test_plan_prices_mxfp8_casts_on_b200(capsys):
    args = (*BASE, "--gpu", "B200", "--gpus", "64", "--precision", "megatron")
    bf16 = run_json(capsys, *args)["configs"][0]
    mx = run_json(capsys, *args, "--fp8", "mxfp8")["configs"][0]
    assert bf16["fp8_casts_seconds"] == 0 < mx["fp8_casts_seconds"]
    assert mx["step_seconds"] < bf16["step_seconds"]


def test_plan_puts_a_gb200_rack_on_one_nvlink_domain(capsys):
    """GPUs per node default to the GPU's NVLink domain: 72 on GB200 NVL72 (at most --gpus),
    8 elsewhere; --gpus-per-node still overrides it."""
    args = ("plan", "--model", "llama3-8b", "--global-batch", "576", "--tp", "1", "--pp", "1")
    for gpu, gpus, per_node in (("GB200-NVL72", 144, 72), ("GB200-NVL72", 64, 64), ("B200", 64, 8)):
        status, out, err = run(capsys, *args, "--gpu", gpu, "--gpus", str(gpus))
        assert status == 0, err
        assert f"({per_node}/node)" in out, out
    status, out, _ = run(
        capsys, *args, "--gpu", "GB200-NVL72", "--gpus", "144", "--gpus-per-node", "4"
    )
    assert status == 0 and "(4/node)" in out


def test_the_planner_refuses_mxfp8_before_blackwell():
    """The rule holds in the Python API too (every default is decided in plan_options)."""
    from minipar.cost.planner import three_d as planner

    m = planner.MODELS["llama3-8b"]
    lay = planner.Layout(64, 1, 1, 8, 1)
    opt = planner.Options(fp8="mxfp8", precision="megatron")
    with pytest.raises(ValueError, match=r"needs a Blackwell GPU \(B200, GB200\), got H800"):
        planner.evaluate(m, planner.cluster(8, 8, "H800"), lay, opt)
    c = planner.evaluate(m, planner.cluster(8, 8, "B200"), lay, opt)
    assert c.as_dict()["fp8_casts_seconds"] > 0
