"""Tensor-parallel cost model: collectives, bytes, activation items, comm/compute ratio."""

import subprocess
import sys

import pytest

from minipar.cost.chapters.memory_time import activation_bytes_per_layer
from minipar.cost.chapters.tensor_parallel import (
    PAPER_BYTES,
    ElementBytes,
    activation_items,
    comm_compute_ratio,
    layer_forward_flops,
    sp_grad_allreduce_elements,
    tp_bytes_per_layer,
    tp_collectives_per_layer,
    tp_sent_bytes_per_layer,
)

GPT3 = dict(s=2048, b=1, h=12288, a=96)  # Korthikanti et al. 2022 Table 3, 175B


def test_pure_python():
    code = "import sys, minipar.cost.chapters.tensor_parallel; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("t", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("sp", [False, True])
def test_collectives_and_bytes(t, sp):
    b, s, h = 2, 12, 48
    ops = tp_collectives_per_layer(b, s, h, t, 8, sp=sp)
    if t == 1:
        assert ops == [] and tp_sent_bytes_per_layer(b, s, h, t, sp=sp) == 0
        return
    size = b * s * h * 8
    assert ops == (
        [("all-gather", size, 4), ("reduce-scatter", size, 4)] if sp else [("all-reduce", size, 4)]
    )
    # same bytes with or without sequence parallelism: 4 · 2(t−1)/t · bsh · bytes
    assert tp_sent_bytes_per_layer(b, s, h, t, 8, sp=sp) == pytest.approx(
        4 * 2 * (t - 1) / t * size
    )
    assert tp_sent_bytes_per_layer(b, s, h, t, 8, sp=sp) == pytest.approx(
        tp_bytes_per_layer(b, s, h, t, 8)
    )
    # counted step by step as a ring runs them: an all-reduce is 2(t−1) steps, an all-gather
    # or reduce-scatter t−1 steps, each sending one S/t chunk per rank
    steps = {"all-reduce": 2 * (t - 1), "all-gather": t - 1, "reduce-scatter": t - 1}
    assert tp_sent_bytes_per_layer(b, s, h, t, 8, sp=sp) == pytest.approx(
        sum(n * steps[op] * S / t for op, S, n in ops)
    )


def _paper_items(s, b, h, a, t, sp):
    """Korthikanti et al. 2022 §4.1, item by item (2-byte activations, 1-byte masks): what
    tensor parallelism splits is divided by t; the layer-norm inputs, the f outputs (QKV and
    h→4h inputs) and the two dropout masks after g stay whole unless sp splits them too."""
    sbh, as2b = s * b * h, a * s * s * b
    split = {
        "Q, K, V": 6 * sbh,
        "softmax output": 2 * as2b,
        "attention dropout mask": as2b,
        "attention dropout output": 2 * as2b,
        "projection input": 2 * sbh,
        "GeLU input": 8 * sbh,
        "4h→h input (GeLU output)": 8 * sbh,
    }
    whole = {
        "layer-norm inputs (2)": 4 * sbh,
        "layer-norm mean and 1/std (2 × 2)": 0,
        "QKV-linear input": 2 * sbh,
        "h→4h input": 2 * sbh,
        "dropout masks after projection and MLP (2)": 2 * sbh,
    }
    return {
        **{k: v / t for k, v in split.items()},
        **{k: v / (t if sp else 1) for k, v in whole.items()},
    }


@pytest.mark.parametrize("t", [1, 2, 3, 6])
@pytest.mark.parametrize("sp", [False, True])
def test_activation_items_add_up_to_table_2(t, sp):
    shape = dict(s=6, b=2, h=12, a=6)
    items = activation_items(**shape, t=t, sp=sp)
    assert items == pytest.approx(_paper_items(**shape, t=t, sp=sp))
    # the items add up to Table 2 (minipar.cost.chapters.memory_time, written from the table itself)
    table_2 = activation_bytes_per_layer(**shape, t=t, sp=sp)
    assert sum(items.values()) == pytest.approx(table_2)
    if t > 1 and not sp:
        # control: sharding the h→4h input (it is f's output: whole on every rank) is caught
        wrong = dict(items, **{"h→4h input": items["h→4h input"] / t})
        assert sum(wrong.values()) != pytest.approx(table_2)


def test_element_bytes_price_each_kind_of_item():
    """ElementBytes carries a device's sizes (activations, masks, statistics) in one value: CPU
    float32 keeps 4-byte masks and statistics, which the paper's conventions leave at 1 and 0."""
    shape = dict(s=6, b=2, h=12, a=6, t=2)
    paper = activation_items(**shape)
    fp32 = activation_items(**shape, sizes=ElementBytes(act_bytes=4, mask_bytes=4, stats_bytes=4))
    assert paper == activation_items(**shape, sizes=PAPER_BYTES)
    assert paper["layer-norm mean and 1/std (2 × 2)"] == 0
    assert fp32["layer-norm mean and 1/std (2 × 2)"] == 4 * 6 * 2 * 4
    assert fp32["Q, K, V"] == 2 * paper["Q, K, V"]
    assert fp32["attention dropout mask"] == 4 * paper["attention dropout mask"]


def test_tp_leaves_10_sbh_replicated_and_sp_removes_it():
    sbh = GPT3["s"] * GPT3["b"] * GPT3["h"]
    big_t = activation_items(**GPT3, t=96)  # t = a: everything splittable is split
    replicated = sum(
        v
        for k, v in big_t.items()
        if k
        in (
            "layer-norm inputs (2)",
            "QKV-linear input",
            "h→4h input",
            "dropout masks after projection and MLP (2)",
        )
    )
    assert replicated == pytest.approx(10 * sbh)
    # the wrong bug-class: a model that forgot the replicated part would undercount
    assert sum(big_t.values()) > sum(activation_items(**GPT3, t=96, sp=True).values())


def test_comm_compute_ratio_does_not_depend_on_batch():
    F, BW = 989.4e12, 450e9
    r = [comm_compute_ratio(b, 2048, 12288, 8, flops=F, bandwidth=BW) for b in (1, 4, 16)]
    assert r[0] == pytest.approx(r[1]) == pytest.approx(r[2])
    # grows with t, shrinks with h, grows when the link slows
    assert comm_compute_ratio(1, 2048, 12288, 16, flops=F, bandwidth=BW) > r[0]
    assert comm_compute_ratio(1, 2048, 4096, 8, flops=F, bandwidth=BW) > r[0]
    assert comm_compute_ratio(1, 2048, 12288, 8, flops=F, bandwidth=50e9) > r[0]
    assert comm_compute_ratio(1, 2048, 12288, 1, flops=F, bandwidth=BW) == 0
    # s ≪ 6h, α = 0: ≈ (t−1)·bytes·F / (6h·BW) — within the 4bs²h attention term
    approx = 7 * 2 * F / (6 * 12288 * BW)
    assert r[0] == pytest.approx(approx / (1 + 2048 / (6 * 12288)))


def test_flops_and_errors():
    assert layer_forward_flops(1, 10, 8, 2) == (24 * 10 * 64 + 4 * 100 * 8) / 2
    assert sp_grad_allreduce_elements(48) == 6 * 48
    with pytest.raises(ValueError, match=r"heads \(12\) must be divisible by t \(5\)"):
        activation_items(12, 1, 48, 12, t=5)
    with pytest.raises(ValueError, match=r"t \(0\) must be an integer >= 1"):
        tp_collectives_per_layer(1, 1, 1, 0)
    with pytest.raises(ValueError, match=r"bandwidth \(0\)"):
        comm_compute_ratio(1, 1, 1, 2, flops=1.0, bandwidth=0)


def test_numbers_quoted_in_the_chapter():
    """book/tensor_parallel.md quotes these; a change in the model must show up here."""
    from minipar.cost.chapters.tensor_parallel import layer_comm_fraction
    from minipar.cost.kernels.hardware import gpu, link

    F = gpu("H100-SXM").peak_flops["bf16"]

    def ratio(t, name):
        return comm_compute_ratio(
            1, 2048, 12288, t, flops=F, bandwidth=link(name).bandwidth, alpha=link(name).alpha
        )

    def share(t, name):
        return layer_comm_fraction(
            1, 2048, 12288, t, flops=F, bandwidth=link(name).bandwidth, alpha=link(name).alpha
        )

    assert round(ratio(8, "nvlink4-h100"), 2) == 0.46
    assert round(ratio(8, "ib-ndr400"), 1) == 3.8
    assert round(100 * share(2, "nvlink4-h100")) == 4
    assert round(100 * share(8, "nvlink4-h100")) == 24
    assert round(100 * share(16, "nvlink4-h100")) == 43
    assert round(100 * share(8, "pcie5-x16")) == 67
    assert round(100 * share(8, "ib-ndr400")) == 72
    msg = 2048 * 12288 * 2  # one (s, h) bf16 activation, bytes
    assert round(msg / 1e6) == 50
    nv = link("nvlink4-h100")
    assert round(2 * 7 * nv.alpha * 1e6) == 28  # latency term, µs
    assert round(2 * 7 / 8 * msg / nv.bandwidth * 1e6) == 196  # bandwidth term, µs
