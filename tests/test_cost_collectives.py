"""α-β collective costs (Thakur et al. 2005), nccl-tests bus bandwidth, links, units, no torch."""

import subprocess
import sys
from pathlib import Path

import pytest

import minipar.cost
from minipar.cost.kernels.hardware import GPUS, LINKS, Link, gpu, link
from minipar.cost.network.collectives import (
    ALGORITHMS,
    OPS,
    algbw,
    busbw,
    busbw_factor,
    collective_time,
    fit_alpha_beta,
    hierarchical_all_reduce_time,
    parameter_server_time,
    ring_bytes_per_rank,
)
from minipar.cost.units import GB, GiB, fmt_bytes, fmt_seconds


def test_importing_cost_does_not_import_torch():
    # every module of the package, found by walking it (a new module is checked without a list)
    root = Path(minipar.cost.__file__).parent
    mods = sorted(
        ".".join(p.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for p in root.rglob("*.py")
        if p != root / "__init__.py"
    )
    assert len(mods) >= 20 and "planner.three_d" in mods and "validation.kernel_fit" in mods
    code = (
        f"import minipar.cost, {', '.join('minipar.cost.' + m for m in mods)}; "
        "import sys; assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_units_and_formatting():
    """fmt_bytes/fmt_seconds pick the unit at the right boundary (1024 vs 1000) and round-trip
    through the command line's size parser within the 3 significant digits they print."""
    from minipar.cost.cli import size_bytes

    assert (fmt_bytes(GiB - 1), fmt_bytes(GiB), fmt_bytes(1023), fmt_bytes(1024)) == (
        "1024.00 MiB",
        "1.00 GiB",
        "1023 B",
        "1.00 KiB",
    )
    assert (fmt_bytes(999, binary=False), fmt_bytes(1000, binary=False)) == ("999 B", "1.00 kB")
    assert fmt_bytes(-1.5 * GiB) == "-1.50 GiB" and fmt_bytes(1.5e9, binary=False) == "1.50 GB"
    assert (fmt_seconds(0.999e-3), fmt_seconds(1e-3), fmt_seconds(5e-10), fmt_seconds(0)) == (
        "999.00 µs",
        "1.00 ms",
        "0.50 ns",
        "0 s",
    )
    assert fmt_seconds(-0.0123) == "-12.30 ms"
    for x in (512, 1500, 3 * 2**20 + 7, 1.5 * GiB, 12.3e12):
        for binary in (True, False):
            text = fmt_bytes(x, binary=binary).replace(" ", "").replace("kB", "KB")
            assert size_bytes(text) == pytest.approx(x, rel=5e-3), (x, binary, text)
    # the two GB: a 1 GiB message is 7.4 % more than 1 GB
    assert fmt_bytes(GiB, binary=False) == "1.07 GB" and GB < GiB


def test_busbw_factors_match_nccl_tests():
    assert busbw_factor("all-reduce", 8) == pytest.approx(2 * 7 / 8)
    for op in ("all-gather", "reduce-scatter", "all-to-all"):
        assert busbw_factor(op, 8) == pytest.approx(7 / 8)
    assert busbw_factor("broadcast", 8) == busbw_factor("reduce", 8) == 1.0
    # 1 GB all-reduce in 10 ms on 8 ranks: algbw 100 GB/s, busbw 175 GB/s
    assert algbw(1e9, 0.01) == pytest.approx(100e9)
    assert busbw("all-reduce", 8, 1e9, 0.01) == pytest.approx(175e9)


def test_ring_bytes_per_rank():
    S = 1e9
    assert ring_bytes_per_rank("all-reduce", 4, S) == pytest.approx(1.5e9)
    assert ring_bytes_per_rank("all-gather", 4, S) == pytest.approx(0.75e9)
    assert ring_bytes_per_rank("reduce-scatter", 4, S) == pytest.approx(0.75e9)
    # all-reduce = reduce-scatter + all-gather, byte for byte
    assert ring_bytes_per_rank("all-reduce", 7, S) == pytest.approx(
        ring_bytes_per_rank("reduce-scatter", 7, S) + ring_bytes_per_rank("all-gather", 7, S)
    )
    with pytest.raises(ValueError, match="ring"):
        ring_bytes_per_rank("broadcast", 4, S)


def test_thakur_formulas():
    a, bw, S = 1e-5, 1e9, 1e8
    beta = 1 / bw
    assert collective_time("all-reduce", "ring", 8, S, a, bw) == pytest.approx(
        14 * a + 2 * 7 / 8 * S * beta
    )
    assert collective_time("all-reduce", "recursive-doubling", 8, S, a, bw) == pytest.approx(
        3 * (a + S * beta)
    )
    assert collective_time("all-reduce", "rabenseifner", 8, S, a, bw) == pytest.approx(
        6 * a + 2 * 7 / 8 * S * beta
    )
    assert collective_time("all-reduce", "binomial-tree", 8, S, a, bw) == pytest.approx(
        6 * (a + S * beta)
    )
    assert collective_time("all-gather", "ring", 8, S, a, bw) == pytest.approx(
        7 * a + 7 / 8 * S * beta
    )
    assert collective_time("all-gather", "recursive-doubling", 8, S, a, bw) == pytest.approx(
        3 * a + 7 / 8 * S * beta
    )
    assert collective_time("broadcast", "binomial-tree", 5, S, a, bw) == pytest.approx(
        3 * (a + S * beta)
    )  # ceil(log2 5) = 3 rounds
    # ring all-reduce is exactly reduce-scatter followed by all-gather
    assert collective_time("all-reduce", "ring", 6, S, a, bw) == pytest.approx(
        collective_time("reduce-scatter", "ring", 6, S, a, bw)
        + collective_time("all-gather", "ring", 6, S, a, bw)
    )


@pytest.mark.parametrize(
    "op, alg, n, want",
    [
        # written out by hand from Thakur et al. 2005 (L = ceil(log2 n)); a = α, b = S·β
        ("reduce-scatter", "ring", 8, lambda a, b: 7 * a + 7 / 8 * b),
        ("reduce-scatter", "recursive-halving", 8, lambda a, b: 3 * a + 7 / 8 * b),
        ("broadcast", "scatter-allgather", 8, lambda a, b: (3 + 7) * a + 2 * 7 / 8 * b),
        ("broadcast", "scatter-allgather", 6, lambda a, b: (3 + 5) * a + 2 * 5 / 6 * b),
        ("reduce", "binomial-tree", 6, lambda a, b: 3 * (a + b)),
        ("reduce", "rabenseifner", 8, lambda a, b: 6 * a + 2 * 7 / 8 * b),
        # non-power-of-two: 6 ranks fold into n' = 4 (one α + Sβ for reduce, two for all-reduce)
        ("reduce", "rabenseifner", 6, lambda a, b: (a + b) + 4 * a + 2 * 3 / 4 * b),
        ("all-reduce", "rabenseifner", 6, lambda a, b: 2 * (a + b) + 4 * a + 2 * 3 / 4 * b),
        ("all-reduce", "recursive-doubling", 6, lambda a, b: 2 * (a + b) + 2 * (a + b)),
        ("all-to-all", "pairwise-exchange", 8, lambda a, b: 7 * a + 7 / 8 * b),
        ("all-to-all", "pairwise-exchange", 3, lambda a, b: 2 * a + 2 / 3 * b),
    ],
)
def test_each_pair_against_its_formula(op, alg, n, want):
    a, bw, S = 1e-5, 1e9, 1e6
    assert collective_time(op, alg, n, S, a, bw) == pytest.approx(want(a, S / bw), rel=1e-12)


def test_every_listed_pair_runs_and_one_rank_is_free():
    for op in OPS:
        for alg in ALGORITHMS[op]:
            assert collective_time(op, alg, 8, 1e6, 1e-6, 1e9) > 0
            assert collective_time(op, alg, 1, 1e6, 1e-6, 1e9) == 0


def test_latency_vs_bandwidth_regimes():
    """Small messages: log-step algorithms win; large: ring / rabenseifner win (Thakur §4)."""
    a, bw, n = 5e-6, 50e9, 64
    small, large = 1e3, 1e9
    assert collective_time("all-reduce", "recursive-doubling", n, small, a, bw) < collective_time(
        "all-reduce", "ring", n, small, a, bw
    )
    assert collective_time("all-reduce", "ring", n, large, a, bw) < collective_time(
        "all-reduce", "recursive-doubling", n, large, a, bw
    )
    # the ring's bandwidth term tends to 2S/bw, independent of n
    t = [collective_time("all-reduce", "ring", n, large, 0.0, bw) for n in (2, 8, 1024)]
    assert t[-1] == pytest.approx(2 * large / bw, rel=1e-2) and t[0] < t[1] < t[2]


def test_parameter_server_grows_with_n_ring_does_not():
    S, a, bw = 1e9, 0.0, 12.5e9
    assert parameter_server_time(2, S, a, bw) == pytest.approx(2 * S / bw)
    assert parameter_server_time(9, S, a, bw) == pytest.approx(2 * 8 * S / bw)
    assert collective_time("all-reduce", "parameter-server", 9, S, a, bw) == parameter_server_time(
        9, S, a, bw
    )
    assert parameter_server_time(64, S, a, bw) > 30 * collective_time(
        "all-reduce", "ring", 64, S, a, bw
    )


def test_non_power_of_two():
    a, bw, S = 1e-5, 1e9, 1e6
    # all-reduce: MPICH fix-up, 6 ranks fold to 4 plus two extra α + Sβ steps
    assert collective_time("all-reduce", "rabenseifner", 6, S, a, bw) == pytest.approx(
        2 * (a + S / bw) + collective_time("all-reduce", "rabenseifner", 4, S, a, bw)
    )
    with pytest.raises(ValueError, match=r"power of two, got n \(6\)"):
        collective_time("all-gather", "recursive-doubling", 6, S, a, bw)
    with pytest.raises(ValueError, match="power of two"):
        collective_time("reduce-scatter", "recursive-halving", 12, S, a, bw)


@pytest.mark.parametrize(
    "args, match",
    [
        (("all-reduce", "scatter-allgather", 4, 1.0), "not one for all-reduce"),
        (("broadcast", "ring", 4, 1.0), "not one for broadcast"),
        (("all-gather", "rabenseifner", 4, 1.0), "not one for all-gather"),
        (("gather", "ring", 4, 1.0), "op"),
        (("all-reduce", "ring", 0, 1.0), r"n \(0\)"),
        (("all-reduce", "ring", 4, -1.0), r"nbytes \(-1.0\)"),
    ],
)
def test_bad_inputs_name_the_rule(args, match):
    with pytest.raises(ValueError, match=match):
        collective_time(*args, alpha=1e-6, bandwidth=1e9)


def test_hierarchical_all_reduce():
    intra, inter = link("nvlink4-h100"), link("ib-ndr400")
    S, N, g = 4e9, 16, 8
    t = hierarchical_all_reduce_time(N, g, S, intra, inter)
    expected = (
        collective_time("reduce-scatter", "ring", g, S, intra.alpha, intra.bandwidth)
        + collective_time("all-reduce", "ring", N, S / g, inter.alpha, inter.bandwidth)
        + collective_time("all-gather", "ring", g, S, intra.alpha, intra.bandwidth)
    )
    assert t == pytest.approx(expected)
    # better than a flat ring over all 128 GPUs whose slowest hop is InfiniBand
    flat = collective_time("all-reduce", "ring", N * g, S, inter.alpha, inter.bandwidth)
    assert t < flat
    # one node: just the intra-node ring all-reduce
    assert hierarchical_all_reduce_time(1, g, S, intra, inter) == pytest.approx(
        collective_time("all-reduce", "ring", g, S, intra.alpha, intra.bandwidth)
    )


@pytest.mark.parametrize(
    "op, alg, n",
    [
        ("all-reduce", "ring", 8),
        ("all-gather", "ring", 4),
        ("broadcast", "binomial-tree", 8),
        ("all-reduce", "rabenseifner", 6),
    ],
)
def test_fit_alpha_beta_recovers_the_model(op, alg, n):
    alpha, bw = 7e-6, 40e9
    sizes = [2.0**k for k in range(10, 31, 2)]
    times = [collective_time(op, alg, n, S, alpha, bw) for S in sizes]
    a_fit, bw_fit = fit_alpha_beta(sizes, times, op, n, algorithm=alg)
    assert a_fit == pytest.approx(alpha, rel=1e-6) and bw_fit == pytest.approx(bw, rel=1e-9)


def test_fit_alpha_beta_errors():
    with pytest.raises(ValueError, match="distinct sizes"):
        fit_alpha_beta([1e6, 1e6], [1.0, 2.0], "all-reduce", 4)
    with pytest.raises(ValueError, match="do not grow"):
        fit_alpha_beta([1e6, 2e6], [2.0, 1.0], "all-reduce", 4)


def test_links_are_per_direction_with_sources():
    """Each link's bandwidth is the per-direction rate derived here from the physical layer
    (a bidirectional sum would be 2x), and it is what a ring all-reduce's busbw reaches for a
    large message (nccl-tests compare busbw with the per-direction link speed)."""
    per_direction = {
        "nvlink4-h100": 18 * 25e9,  # 18 NVLink-4 links x 25 GB/s each way
        "pcie5-x16": 32e9 * 16 * 128 / 130 / 8,  # 32 GT/s x 16 lanes, 128b/130b, bits -> bytes
        "ib-ndr400": 400e9 / 8,  # 400 Gb/s per port, each way
        "eth-100g": 100e9 / 8,
    }
    for name, bw in per_direction.items():
        lk = link(name)
        assert lk.bandwidth == pytest.approx(bw, rel=1e-9), name
        S, n = 1e12, 8
        t = collective_time("all-reduce", "ring", n, S, lk.alpha, lk.bandwidth)
        assert busbw("all-reduce", n, S, t) == pytest.approx(bw, rel=1e-3), name
    assert "bidirectional" in link("pcie5-x16").note  # seed 004's unit slip is recorded
    for lk in LINKS.values():
        assert isinstance(lk, Link) and lk.source and 0 < lk.alpha < 1e-3
    with pytest.raises(ValueError, match="nvlink4-h100"):
        link("nvlink5")


def test_gpus_are_dense_peaks():
    """bf16 peaks are the dense tensor-core rates, derived here from SMs x tensor cores x
    FLOPs per clock x boost clock (the datasheets' "with sparsity" figures are 2x), the
    denominator Megatron's "% of peak" uses."""
    dense = {
        "A100-80GB": 108 * 4 * 512 * 1.41e9,  # 3rd-gen tensor core: 256 bf16 FMA/clock
        "H100-SXM": 132 * 4 * 1024 * 1.83e9,
    }  # 4th-gen: 512 bf16 FMA/clock
    for name, peak in dense.items():
        assert GPUS[name].peak_flops["bf16"] == pytest.approx(peak, rel=2e-3), name
        assert GPUS[name].peak_flops["fp16"] == GPUS[name].peak_flops["bf16"]
    assert GPUS["H200"].peak_flops["bf16"] == GPUS["H100-SXM"].peak_flops["bf16"]  # same die
    with pytest.raises(ValueError, match="H100-SXM"):
        gpu("B300")
    # HBM capacities are binary: 80 GiB, 141 GiB (the datasheets' "GB")
    assert GPUS["A100-80GB"].memory_bytes == GPUS["H100-SXM"].memory_bytes == 80 * 2**30
    assert GPUS["H200"].memory_bytes == 141 * 2**30
