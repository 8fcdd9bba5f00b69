"""Numbers the tensor-parallel page states (its section worked problems, its bandwidth roofline's
caption and text alternative) are the cost model's or follow from the problem's data: if a
preset or a formula changes, this names the sentence to rewrite."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book"))

from figures.tensor_parallel import SHAPES, bandwidth_to_break_even  # noqa: E402
from page_support import has, worked_problem  # noqa: E402

from minipar.cost.chapters.tensor_parallel import (  # noqa: E402
    comm_compute_ratio,
    tp_collectives_per_layer,
    tp_sent_bytes_per_layer,
)
from minipar.cost.kernels.hardware import gpu, link  # noqa: E402
from minipar.cost.network.collectives import ring_bytes_per_rank  # noqa: E402

PAGE = (ROOT / "book" / "tensor_parallel.md").read_text("utf-8")
F = gpu("H100-SXM").peak_flops["bf16"]


def test_bandwidth_roofline_states_the_drawn_crossings():
    start = PAGE.index("{minipar-figure} tensor_parallel.tp_ratio_bandwidth")
    figure = PAGE[start : PAGE.index("```", start)]
    need = {name: bandwidth_to_break_even(h) for name, h in SHAPES}
    for (_, h), w in zip(SHAPES, need.values()):  # the crossing is where the ratio is 1
        ratio = comm_compute_ratio(1, 2048, h, 8, flops=F, bandwidth=w, alpha=2e-6)
        assert abs(ratio - 1) < 1e-6, (h, ratio)
    text = [f"{float(f'{w / 1e9:.3g}'):,.0f}" for w in need.values()]  # 1,030, 311, 194
    has(figure, *text)
    ib = link("ib-ndr400").bandwidth
    has(figure, f"{min(need.values()) / ib:.0f} to {max(need.values()) / ib:.0f} times short")
    nvlink4 = link("nvlink4-h100").bandwidth
    assert need["GPT-3"] < need["Llama 2 70B"] < nvlink4 < need["Llama 2 7B"]


def test_f_and_g_problem():
    b, s, h, t = 8, 1024, 1024, 4
    ((op, size, calls),) = tp_collectives_per_layer(b, s, h, t)
    assert (op, calls) == ("all-reduce", 4)
    per = ring_bytes_per_rank(op, t, size)
    layer = tp_sent_bytes_per_layer(b, s, h, t)
    has(
        worked_problem(PAGE, "a GPT-2 medium"),
        f"{size / 1e6:.1f} MB",
        f"{per / 1e6:.1f} MB per all-reduce",
        f"**{layer / 1e6:.0f} MB** per layer",
        f"{24 * layer / 1e9:.2f} GB for the 24 layers",
    )


def test_random_numbers_problem():
    from minipar.tensor_parallel.random import TP_SEED_OFFSET

    a, t, s = 16, 4, 2048
    text = worked_problem(PAGE, "one stream too few")
    has(text, f"**{1234 + TP_SEED_OFFSET + 3}**", f"**{a // t} masks**")
    others = [5 + r * s // t for r in range(1, t)]
    has(text, f"**{others[0]}, {others[1]} and {others[2]}**")


def test_collective_matmul_problem():
    h, s, t = 12288, 2048, 8
    chunk = s // t * h * 2  # one rank's (s/t, h) slice in bf16, bytes
    gemm = 2 * (s // t) * h * (4 * h // t) / F
    text = worked_problem(PAGE, "is one chunk")
    has(text, f"{chunk / 1e6:.2f} MB", f"**{gemm * 1e6:.1f} µs**")
    for name in ("nvlink4-h100", "ib-ndr400"):
        lk = link(name)
        step = lk.alpha + chunk / lk.bandwidth
        has(text, f"**{step * 1e6:.1f} µs**", f"{chunk / lk.bandwidth * 1e6:.1f} µs")
    ib = link("ib-ndr400")
    assert link("nvlink4-h100").alpha + chunk / link("nvlink4-h100").bandwidth < gemm
    has(text, f"about {(ib.alpha + chunk / ib.bandwidth - gemm) * 1e6:.0f} µs")


def test_dtensor_problem():
    import torch

    from minipar.tensor_parallel.layers import shard

    h, t = 768, 4
    fc1 = torch.empty(4 * h, h)  # (out, in), as nn.Linear stores it
    fc2 = torch.empty(h, 4 * h)
    assert tuple(shard(fc1, 0, 0, t).shape) == tuple(shard(fc2, 1, 0, t).shape) == (h, h)
    size = 8 * 1024 * h * 2
    has(
        worked_problem(PAGE, "what DTensor"),
        f"**({h}, {h})**",
        f"{size / 1e6:.1f} MB",
        f"**{ring_bytes_per_rank('all-reduce', t, size) / 1e6:.1f} MB**",
    )


def _ratio(h: int, t: int, name: str) -> float:
    lk = link(name)
    return comm_compute_ratio(1, 2048, h, t, flops=F, bandwidth=lk.bandwidth, alpha=lk.alpha)


def _crossing(t: int, name: str) -> float:
    """The hidden size at which the forward ratio falls to 1 (bisection on the model)."""
    lo, hi = 256.0, 200_000.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _ratio(round(mid), t, name) > 1 else (lo, mid)
    return hi


def test_opening_problem():
    from minipar.cost.chapters.tensor_parallel import layer_comm_fraction, layer_forward_flops

    nv = link("nvlink4-h100")
    size = 2048 * 12288 * 2
    sent = ring_bytes_per_rank("all-reduce", 8, size)
    flops = layer_forward_flops(1, 2048, 12288, 8)
    share = layer_comm_fraction(1, 2048, 12288, 8, flops=F, bandwidth=nv.bandwidth, alpha=nv.alpha)
    one = 2 * 7 * nv.alpha + sent / nv.bandwidth
    has(
        worked_problem(PAGE, "what does one GPT-3 layer"),
        f"**{size / 1e6:.1f} MB**",
        f"**{sent / 1e6:.1f} MB**",
        f"{sent / nv.bandwidth * 1e6:.0f} µs of bandwidth",
        f"**{one * 1e6:.0f} µs**",
        f"{flops / 1e11:.1f} \\cdot 10^{{11}}",
        f"{flops / F * 1e3:.2f} ms at peak",
        f"take {2 * one * 1e3:.2f} ms",
        f"**{_ratio(12288, 8, 'nvlink4-h100'):.2f}**",
        f"{100 * share:.0f} %",
        f"ratio is {_ratio(12288, 8, 'ib-ndr400'):.1f}",
    )


def test_split_logits_and_sequence_parallel_problems():
    from minipar.cost.chapters.memory_time import activation_bytes_per_layer

    shard = 4096 * 4096 * 2
    partial = 8192 * 4096 * 2
    ((_, size, _),) = tp_collectives_per_layer(8192, 1, 4096, 4)
    assert size == partial
    row_cut = ring_bytes_per_rank("all-reduce", 4, 8192 * 16384 * 2)
    has(
        worked_problem(PAGE, "cutting the MLP"),
        f"{shard / 1e6:.1f} MB each",
        f"{partial / 1e6:.1f} MB",
        f"**{ring_bytes_per_rank('all-reduce', 4, partial) / 1e6:.0f} MB**",
        f"**{row_cut / 1e6:.0f} MB**",
    )
    gather = ring_bytes_per_rank("all-gather", 4, 8 * 1024 * 50304 * 4)
    scalars = 3 * ring_bytes_per_rank("all-reduce", 4, 8192 * 4)
    has(
        worked_problem(PAGE, "gather the logits"),
        f"**{gather / 1e9:.2f} GB**",
        f"({8192 * 4 / 1e3:.1f} kB)",
        f"**{scalars / 1e3:.0f} kB**",
        f"about {round(gather / scalars, -3):,.0f} times less",
    )
    tp = activation_bytes_per_layer(2048, 1, 12288, 96, t=8)
    sp = activation_bytes_per_layer(2048, 1, 12288, 96, t=8, sp=True)
    has(
        worked_problem(PAGE, "what sequence parallelism saves"),
        f"**{tp / 2**20:.0f} MiB**",
        f"**{sp / 2**20:.0f} MiB**",
        f"{100 * (1 - sp / tp):.0f} % less",
        f"({96 * tp / 2**30:.1f} against\n{96 * sp / 2**30:.1f} GiB",
    )


def test_how_wide_problem_and_h_roofline_caption():
    nv, ib = link("nvlink4-h100"), link("ib-ndr400")
    bound = 7 * F * 2 / nv.bandwidth
    text = worked_problem(PAGE, "how wide")
    has(text, f"{round(bound, -1):,.0f}", f"**{round((bound - 2048) / 6, -1):,.0f}**")
    has(text, f"**{round(_crossing(8, 'nvlink4-h100'), -1):,.0f}**")
    ib_bound = round((7 * F * 2 / ib.bandwidth - 2048) / 6, -2)
    has(text, f"$h > {ib_bound:,.0f}$".replace(",", "{,}"))
    start = PAGE.index("{minipar-figure} tensor_parallel.tp_roofline")
    figure = PAGE[start : PAGE.index("```", start)]
    ratios = [_ratio(h, 8, "nvlink4-h100") for _, h in SHAPES]
    has(figure, *(f"{r:.2f}" for r in ratios), f"{_ratio(12288, 8, 'ib-ndr400'):.1f}")
    has(figure, f"about {round(_crossing(4, 'nvlink4-h100'), -2):.0f}")
    has(figure, f"about {round(_crossing(8, 'nvlink4-h100'), -2):,.0f}")
    assert all(_ratio(h, 8, "ib-ndr400") > 1 for _, h in SHAPES)
