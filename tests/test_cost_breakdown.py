"""Per-GPU breakdown = the published pieces added up, and impossible layouts named."""

import pytest

from minipar.cost.chapters.memory_time import (
    activation_bytes_per_layer,
    model_state_bytes,
    pipeline_first_stage_activation_bytes,
)
from minipar.cost.model import param_count
from minipar.cost.planner.breakdown import per_gpu_memory

GPT3 = dict(L=96, h=12288, a=96, s=2048, V=51200)


def test_sum_of_published_pieces():
    r = per_gpu_memory(**GPT3, b=1, d=4, t=8, p=8, zero=1, sp=True, recompute="selective")
    psi = param_count(96, 12288, 51200, 2048)
    assert r.psi == psi
    states = model_state_bytes(psi, d=4, t=8, p=8, zero=1)
    assert (r.weights, r.gradients, r.optimizer) == states[:3]
    act = activation_bytes_per_layer(2048, 1, 12288, 96, t=8, sp=True, recompute="selective")
    assert r.activations == pytest.approx(96 * act)  # 1F1B: p micro-batches × L/p layers
    assert r.total == pytest.approx(states.total + r.activations)


def test_zero_leaves_activations_alone_and_pipeline_keeps_L_layers():
    a0 = per_gpu_memory(**GPT3, d=8, t=8, p=1, zero=0)
    a3 = per_gpu_memory(**GPT3, d=8, t=8, p=1, zero=3)
    assert a0.activations == a3.activations and a3.total < a0.total
    # first stage of 1F1B with m >= p: L layers' worth, whatever p is
    p8 = per_gpu_memory(**GPT3, t=8, p=8, sp=True)
    assert p8.activations == pytest.approx(per_gpu_memory(**GPT3, t=8, p=1, sp=True).activations)
    assert p8.activations == pytest.approx(
        pipeline_first_stage_activation_bytes(2048, 1, 12288, 96, 96, 8, t=8, sp=True)
    )
    # fewer micro-batches than stages: only m in flight
    m2 = per_gpu_memory(**GPT3, t=8, p=8, sp=True, m=2)
    assert m2.activations == pytest.approx(p8.activations / 4)


@pytest.mark.parametrize(
    "kw, msg",
    [
        (dict(t=5), r"heads \(96\) must be divisible by t \(5\)"),
        (dict(p=7), r"layers \(96\) must be divisible by p \(7\)"),
        (dict(zero=4), r"ZeRO stage \(4\)"),
        (dict(d=0), r"d \(0\) must be a positive integer"),
    ],
)
def test_impossible_layouts(kw, msg):
    with pytest.raises(ValueError, match=msg):
        per_gpu_memory(**GPT3, **kw)
    with pytest.raises(ValueError, match=r"hidden size \(100\) must be divisible by heads \(3\)"):
        per_gpu_memory(L=2, h=100, a=3, s=8, V=10)
