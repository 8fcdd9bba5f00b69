"""Numbers the tensor-parallel page states (its section worked problems, its bandwidth roofline's
caption and text alternative) are the cost model's or follow from the problem's data: if a
preset or a formula changes, this names the sentence to rewrite."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book"))

from figures.tensor_parallel import SHAPES, bandwidth_to_break_even  # noqa: E402

from minipar.cost.chapters.tensor_parallel import (  # noqa: E402
    comm_compute_ratio,
    tp_collectives_per_layer,
    tp_sent_bytes_per_layer,
)
from minipar.cost.kernels.hardware import gpu, link  # noqa: E402
from minipar.cost.network.collectives import ring_bytes_per_rank  # noqa: E402

PAGE = (ROOT / "book" / "tensor_parallel.md").read_text("utf-8")
F = gpu("H100-SXM").peak_flops["bf16"]


def _problem(title: str) -> str:
    """The text of the worked problem whose title starts with ``title``, answer included."""
    start = PAGE.index(f"Worked problem: {title}")
    return PAGE[start : PAGE.index("\n:::\n", start)]


def _has(text: str, *parts: str) -> None:
    missing = [p for p in parts if p not in text]
    assert not missing, missing


def test_bandwidth_roofline_states_the_drawn_crossings():
    start = PAGE.index("{minipar-figure} tensor_parallel.tp_ratio_bandwidth")
    figure = PAGE[start : PAGE.index("```", start)]
    need = {name: bandwidth_to_break_even(h) for name, h in SHAPES}
    for (_, h), w in zip(SHAPES, need.values()):  # the crossing is where the ratio is 1
        ratio = comm_compute_ratio(1, 2048, h, 8, flops=F, bandwidth=w, alpha=2e-6)
        assert abs(ratio - 1) < 1e-6, (h, ratio)
    text = [f"{float(f'{w / 1e9:.3g}'):,.0f}" for w in need.values()]  # 1,030, 311, 194
    _has(figure, *text)
    ib = link("ib-ndr400").bandwidth
    _has(figure, f"{min(need.values()) / ib:.0f} to {max(need.values()) / ib:.0f} times short")
    nvlink4 = link("nvlink4-h100").bandwidth
    assert need["GPT-3"] < need["Llama 2 70B"] < nvlink4 < need["Llama 2 7B"]


def test_f_and_g_problem():
    b, s, h, t = 8, 1024, 1024, 4
    ((op, size, calls),) = tp_collectives_per_layer(b, s, h, t)
    assert (op, calls) == ("all-reduce", 4)
    per = ring_bytes_per_rank(op, t, size)
    layer = tp_sent_bytes_per_layer(b, s, h, t)
    _has(
        _problem("a GPT-2 medium"),
        f"{size / 1e6:.1f} MB",
        f"{per / 1e6:.1f} MB per all-reduce",
        f"**{layer / 1e6:.0f} MB** per layer",
        f"{24 * layer / 1e9:.2f} GB for the 24 layers",
    )


def test_random_numbers_problem():
    from minipar.tensor_parallel.random import TP_SEED_OFFSET

    a, t, s = 16, 4, 2048
    text = _problem("one stream too few")
    _has(text, f"**{1234 + TP_SEED_OFFSET + 3}**", f"**{a // t} masks**")
    others = [5 + r * s // t for r in range(1, t)]
    _has(text, f"**{others[0]}, {others[1]} and {others[2]}**")


def test_collective_matmul_problem():
    h, s, t = 12288, 2048, 8
    chunk = s // t * h * 2  # one rank's (s/t, h) slice in bf16, bytes
    gemm = 2 * (s // t) * h * (4 * h // t) / F
    text = _problem("is one chunk")
    _has(text, f"{chunk / 1e6:.2f} MB", f"**{gemm * 1e6:.1f} µs**")
    for name in ("nvlink4-h100", "ib-ndr400"):
        lk = link(name)
        step = lk.alpha + chunk / lk.bandwidth
        _has(text, f"**{step * 1e6:.1f} µs**", f"{chunk / lk.bandwidth * 1e6:.1f} µs")
    ib = link("ib-ndr400")
    assert link("nvlink4-h100").alpha + chunk / link("nvlink4-h100").bandwidth < gemm
    _has(text, f"about {(ib.alpha + chunk / ib.bandwidth - gemm) * 1e6:.0f} µs")


def test_dtensor_problem():
    import torch

    from minipar.tensor_parallel.layers import shard

    h, t = 768, 4
    fc1 = torch.empty(4 * h, h)  # (out, in), as nn.Linear stores it
    fc2 = torch.empty(h, 4 * h)
    assert tuple(shard(fc1, 0, 0, t).shape) == tuple(shard(fc2, 1, 0, t).shape) == (h, h)
    size = 8 * 1024 * h * 2
    _has(
        _problem("what DTensor"),
        f"**({h}, {h})**",
        f"{size / 1e6:.1f} MB",
        f"**{ring_bytes_per_rank('all-reduce', t, size) / 1e6:.1f} MB**",
    )
