"""minipar.cost.chapters.data_parallel: the bucketed-overlap step model worked by hand, the compute
model, the hiding condition T ≥ q·F/(2W), and the flat-ring vs tree latency across nodes."""

import pytest

from minipar.cost.chapters.data_parallel import (
    ACHIEVED_FLOPS,
    allreduce_seconds,
    bucket_sizes,
    compute_seconds,
    dp_step_time,
    forward_backward,
    min_tokens_to_hide,
)
from minipar.cost.kernels.hardware import link
from minipar.cost.network.collectives import (
    collective_time,
    double_binary_tree_all_reduce_time,
    hierarchical_all_reduce_time,
)


def test_step_time_by_hand():
    # F = 1 s, B = 2 s, 4 bytes in buckets of 2, all-reduce 1 s per byte.
    # bucket 1 ready at 1 + 2·2/4 = 2, runs 2..4; bucket 2 ready at 3, waits, runs 4..6.
    st = dp_step_time(1, 2, 4, 2, lambda s: s)
    assert st.intervals == [(2, 4), (4, 6)]
    assert (st.step_s, st.compute_s, st.comm_s, st.exposed_s) == (6, 3, 4, 3)
    assert st.efficiency == pytest.approx(0.5)
    # without overlap both wait for the end of backward (t = 3): 3..5, 5..7
    assert dp_step_time(1, 2, 4, 2, lambda s: s, overlap=False).intervals == [(3, 5), (5, 7)]
    # uneven buckets: F = 1, B = 4, 5 bytes in buckets of 2 -> [2, 2, 1], 0.5 s per byte.
    # ready at 1 + 4·2/5 = 2.6, 4.2, 5.0; the link is serial, so the last waits until 5.2
    st = dp_step_time(1, 4, 5, 2, lambda s: s / 2)
    assert [t for iv in st.intervals for t in iv] == pytest.approx([2.6, 3.6, 4.2, 5.2, 5.2, 5.7])
    assert (st.step_s, st.compute_s, st.comm_s, st.exposed_s) == pytest.approx((5.7, 5, 2.5, 0.7))
    # a fast link hides everything but the last bucket: 1 + 4 + 0.01
    assert dp_step_time(1, 4, 5, 2, lambda s: 0.01).exposed_s == pytest.approx(0.01)


def test_bucket_sizes_and_errors():
    assert bucket_sizes(10, 4) == [4, 4, 2]
    assert len(bucket_sizes(1.3e9 * 2, 25 * 2**20)) == 100  # 2.6 GB / 26.2 MB = 99.2
    with pytest.raises(ValueError, match=r"bucket bytes \(0\) must be > 0"):
        bucket_sizes(10, 0)
    with pytest.raises(ValueError, match=r"forward \(-1\)"):
        dp_step_time(-1, 1, 1, 1, lambda s: s)


def test_compute_model():
    """6·Ψ·T and the 1 : 2 forward/backward split, against the FLOPs torch counts for an MLP
    (every layer computes its input gradient, as inside a transformer)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    widths, T = [24, 40, 16, 8], 32
    mlp = torch.nn.Sequential(
        *(torch.nn.Linear(a, b, bias=False) for a, b in zip(widths, widths[1:]))
    )
    psi = sum(p.numel() for p in mlp.parameters())
    x = torch.randn(T, widths[0], requires_grad=True)
    with FlopCounterMode(display=False) as fwd:
        y = mlp(x)
    with FlopCounterMode(display=False) as bwd:
        y.sum().backward()
    flops = fwd.get_total_flops() + bwd.get_total_flops()
    assert compute_seconds(psi, T, 1.0) == flops  # 6·Ψ·T exactly
    assert compute_seconds(psi, T) == pytest.approx(flops / ACHIEVED_FLOPS)
    f, b = forward_backward(compute_seconds(psi, T, 1.0))
    assert (f, b) == pytest.approx((fwd.get_total_flops(), bwd.get_total_flops()))
    with pytest.raises(ValueError, match=r"flops_per_s \(0\) must be > 0"):
        compute_seconds(1, 1, 0)


def test_hiding_condition_is_where_backward_equals_the_ring_bandwidth_term():
    F, W, q, psi = 400e12, 50e9, 2, 1.3e9
    T = min_tokens_to_hide(F, W, q)
    assert T == pytest.approx(F / W) == pytest.approx(8000)  # bf16: T ≥ F_eff/W
    backward = forward_backward(compute_seconds(psi, T, F))[1]
    n = 10**6  # 2(n−1)/n → 2
    ring_bw_term = collective_time("all-reduce", "ring", n, q * psi, 0.0, W)
    assert backward == pytest.approx(ring_bw_term, rel=1e-5)
    # and in the step model (α = 0, small buckets): above the threshold nothing is exposed
    for tokens, hidden in ((2 * T, True), (T / 2, False)):
        f, b = forward_backward(compute_seconds(psi, tokens, F))
        st = dp_step_time(
            f, b, q * psi, 2**20, lambda s: collective_time("all-reduce", "ring", n, s, 0.0, W)
        )
        assert (st.exposed_s < 0.01 * st.compute_s) is hidden, (tokens, st.exposed_s)


def test_allreduce_seconds_one_node_and_many():
    nv, ib = link("nvlink4-h100"), link("ib-ndr400")
    S = 25 * 2**20
    assert allreduce_seconds(8)(S) == collective_time(
        "all-reduce", "ring", 8, S, nv.alpha, nv.bandwidth
    )
    assert allreduce_seconds(512)(S) == hierarchical_all_reduce_time(64, 8, S, nv, ib)
    # across 64 nodes a flat ring pays 2·63·α per bucket, a tree 2·6·α
    ring = allreduce_seconds(512)(S)
    tree = allreduce_seconds(512, inter_algorithm="double-binary-tree")(S)
    assert ring - tree == pytest.approx(
        2 * (63 - 6) * ib.alpha + 2 * S / 8 * (63 / 64 - 1) / ib.bandwidth
    )
    with pytest.raises(ValueError, match=r"ranks n \(12\) must be a multiple of gpus_per_node"):
        allreduce_seconds(12)


@pytest.mark.parametrize("n, depth", [(1, 0), (2, 1), (5, 3), (8, 3), (64, 6)])
def test_double_binary_tree_formula(n, depth):
    a, bw, S = 3e-6, 1e9, 1e6
    want = 0.0 if n == 1 else 2 * depth * a + 2 * S / bw
    assert double_binary_tree_all_reduce_time(n, S, a, bw) == pytest.approx(want)


def test_scaling_scenarios_tell_the_story():
    from minipar.data_parallel.scaling import DEFAULT_SCENARIOS, scaling_curves

    eff = scaling_curves((8, 64, 512))
    two_k = [k for k in DEFAULT_SCENARIOS if k.startswith("2k") and "no overlap" not in k]
    assert len({round(eff[k][0], 12) for k in two_k}) == 1  # 8 GPUs: one node, NVLink only
    assert eff["2k tokens/GPU, IB NDR, overlap"][2] < 0.5  # flat ring latency at 512
    assert eff["2k tokens/GPU, IB NDR, tree across nodes"][2] > 0.8
    assert eff["16k tokens/GPU, IB NDR, overlap"][2] > 0.99  # T ≫ F/W: hidden
