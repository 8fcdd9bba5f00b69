"""Parameter and FLOP counts against the Megatron papers' published tables."""

import pytest

from minipar.cost.model import flops_per_iteration, hfu, mfu, param_count, six_nd

S, V = 2048, 51200  # both Megatron papers: sequence 2048, vocabulary 51,200

# Narayanan et al. 2021, Table 1: (billions as printed, heads a, hidden h, layers L)
PTD_P_TABLE_1 = [
    (1.7, 24, 2304, 24),
    (3.6, 32, 3072, 30),
    (7.5, 32, 4096, 36),
    (18.4, 48, 6144, 40),
    (39.1, 64, 8192, 48),
    (76.1, 80, 10240, 60),
    (145.6, 96, 12288, 80),
    (310.1, 128, 16384, 96),
    (529.6, 128, 20480, 105),
    (1008.0, 160, 25600, 128),
]


@pytest.mark.parametrize("billions, a, h, L", PTD_P_TABLE_1)
def test_param_count_reproduces_ptd_p_table_1(billions, a, h, L):
    # the table prints one decimal: our count must round to it
    assert round(param_count(L, h, V, S) / 1e9, 1) == billions


def test_gpt3_175b():
    # GPT-3 175B (L=96, h=12288): Eq. 2 gives 174.6B with V=51200, s=2048
    assert param_count(96, 12288, V, S) / 1e9 == pytest.approx(174.6, abs=0.05)


def test_flops_formulas_and_their_relations():
    B, L, h = 8, 24, 2304
    none = flops_per_iteration(B, S, L, h, V, "none")
    sel = flops_per_iteration(B, S, L, h, V, "selective")
    full = flops_per_iteration(B, S, L, h, V, "full")
    # direct count: per layer forward 24Bsh² + 4Bs²h, logits 2BshV, × 3 for fwd + bwd
    fwd = L * (24 * B * S * h**2 + 4 * B * S**2 * h) + 2 * B * S * h * V
    assert none == pytest.approx(3 * fwd)
    # full recomputation adds exactly one more forward of the layers, not of the logits
    assert full == pytest.approx(4 * fwd - 2 * B * S * h * V)
    # Korthikanti Eq. 8: selective adds 12Bs²hL (the paper doubles the s² term)
    assert sel - none == pytest.approx(12 * B * S**2 * h * L)
    assert none < sel < full
    # 6ND ignores the s² and logit terms: within a few percent of model FLOPs at s << 6h
    N = 12 * L * h**2
    assert six_nd(N, B * S) == pytest.approx(72 * B * S * L * h**2)
    with pytest.raises(ValueError, match="recompute"):
        flops_per_iteration(B, S, L, h, V, "partial")


# Korthikanti et al. 2022, Table 3 (config) and Table 5 (iteration time, MFU %, HFU %), A100
# bf16 peak 312 TFLOP/s, no data parallelism. Iteration times are printed to 0.01 s, so the MFU
# they imply is only known to within that rounding: we check the printed MFU/HFU (0.1 %) lies in
# the interval the rounded time allows.
KORTHIKANTI_TABLE_5 = [
    # name, B (global batch), L, h, GPUs, seconds, MFU %, HFU %
    ("22B", 4, 48, 6144, 8, 1.10, 41.5, 43.7),
    ("175B", 64, 96, 12288, 64, 13.75, 51.4, 52.8),
    ("530B", 280, 105, 20480, 280, 37.83, 56.0, 57.0),
    ("1T", 512, 128, 25600, 512, 71.49, 56.3, 57.0),
]


@pytest.mark.parametrize("name, B, L, h, gpus, sec, mfu_pct, hfu_pct", KORTHIKANTI_TABLE_5)
def test_mfu_hfu_reproduce_korthikanti_table_5(name, B, L, h, gpus, sec, mfu_pct, hfu_pct):
    peak = 312e12
    for recompute, pct in (("none", mfu_pct), ("selective", hfu_pct)):
        f = flops_per_iteration(B, S, L, h, V, recompute) / gpus
        lo = 100 * (mfu if recompute == "none" else hfu)(f / (sec + 0.005), peak)
        hi = 100 * (mfu if recompute == "none" else hfu)(f / (sec - 0.005), peak)
        assert lo - 0.05 <= pct <= hi + 0.05, (name, recompute, lo, hi)


@pytest.mark.parametrize("name, B, L, h, gpus, sec, mfu_pct, hfu_pct", KORTHIKANTI_TABLE_5)
def test_hfu_over_mfu_ratio_needs_the_papers_s_over_3h(name, B, L, h, gpus, sec, mfu_pct, hfu_pct):
    """Negative control: the HFU/MFU ratio in Table 5 (no timing needed) matches Eq. 8's s/(3h);
    counting only the re-run forward attention (1 + 2s/(9h)) would not match the 22B row."""
    ratio = flops_per_iteration(B, S, L, h, V, "selective") / flops_per_iteration(
        B, S, L, h, V, "none"
    )
    lo, hi = (hfu_pct - 0.05) / (mfu_pct + 0.05), (hfu_pct + 0.05) / (mfu_pct - 0.05)
    assert lo <= ratio <= hi
    if name == "22B":
        alt = (1 + 2 * S / (9 * h) + V / (12 * h * L)) / (1 + S / (6 * h) + V / (12 * h * L))
        assert not lo <= alt <= hi


def test_ptd_p_abstract_52_percent_of_peak():
    # Narayanan et al. 2021 abstract: 502 petaFLOP/s on 3072 A100s, 52% of theoretical peak
    assert round(100 * hfu(502e15 / 3072, 312e12)) == 52


def test_bad_sizes():
    with pytest.raises(ValueError, match=r"h \(0\)"):
        param_count(24, 0, V, S)
    with pytest.raises(ValueError, match="peak"):
        mfu(1.0, 0.0)
    # the smallest model: 12 + 13 weights and biases in one layer, 2 embedding rows of h = 1
    assert param_count(1, 1, 1, 1) == 12 + 13 + 2


def test_llama_parameter_counts_are_the_published_ones():
    from minipar.cost.model import param_count_llama

    assert param_count_llama(32, 4096, 32000, 32, 32, 11008) == 6_738_415_616  # Llama 2 7B
    assert param_count_llama(80, 8192, 32000, 64, 8, 28672) == 68_976_648_192  # Llama 2 70B
    # control: Eq. 2's GPT shape for the same L, h, V misses 4.5B (GQA, SwiGLU width, untied)
    assert param_count(80, 8192, 32000, 4096) < 65e9
    with pytest.raises(
        ValueError,
        match=r"heads \(64\) must be divisible by key-value heads "
        r"a_kv \(7\)",
    ):
        param_count_llama(80, 8192, 32000, 64, 7, 28672)
