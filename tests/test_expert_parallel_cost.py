"""The expert-parallel cost model: event sizes from routed counts, even-routing bytes, α-β times,
all-to-all vs all-reduce, imbalance, parameters per rank, Mixtral 8×7B from its shapes."""

import pytest

from minipar.cost.chapters.expert_parallel import (
    MoELayer,
    all_to_all_time,
    all_to_all_vs_all_reduce,
    capacity,
    check_shapes,
    even_dispatch_bytes,
    expert_params_per_rank,
    imbalance,
    layer_comm_time,
    layer_events,
    mixtral_8x7b,
    moe_params,
    off_rank_bytes,
    tokens_vs_weights_bytes,
)
from minipar.expert_parallel import capacity as torch_capacity


def test_layer_events_from_counts():
    rows = [[3, 1], [2, 4]]  # rank 0 sends 3 to itself, 1 to rank 1; ...
    ev = layer_events(rows, 0, hidden=8, experts=4, top_k=2, bytes_per_elem=8)
    assert ev == [
        ("all_to_all", 32),
        ("all_to_all", 4 * 64),
        ("all_to_all", 5 * 64),
        ("all_to_all", 4 * 64),
        ("all_to_all", 5 * 64),
    ]
    ev = layer_events(rows, 1, 8, 4, 2, 8, capacity_limited=True)
    assert ev[0] == ("all_gather", 2 * 2 * 4 * 8) and ev[2] == ("all_to_all", 6 * 64)
    assert layer_events([[5]], 0, 8, 4, 2) == []
    assert off_rank_bytes(rows, 0, 8, 8) == 64 and off_rank_bytes(rows, 1, 8, 8) == 128


def test_even_routing_and_times():
    S, off = even_dispatch_bytes(tokens=4096, top_k=2, hidden=4096, ep=8, bytes_per_elem=2)
    assert S == 2 * 4096 * 4096 * 2 and off == S * 7 / 8
    t = all_to_all_time(S, 8, 1e-5, 1e10)
    assert t == pytest.approx(7 * 1e-5 + 7 / 8 * S / 1e10)
    both = all_to_all_vs_all_reduce(S, 8, 0.0, 1e10)
    assert both["all-reduce"] == pytest.approx(2 * both["all-to-all"])  # bandwidth terms 2:1
    rows = [[2, 2], [1, 5]]
    assert layer_comm_time(rows, 8, 0.0, 1.0, 1) == pytest.approx(4 * 0.5 * 7 * 8)  # rank 1: 7


def test_tokens_vs_weights():
    r = tokens_vs_weights_bytes(MoELayer(4096, 4096, 14336, 8, 2, 8, matrices=2))
    assert r["ep tokens"] == pytest.approx(4 * 7 / 8 * 2 * 4096 * 4096 * 2)
    assert r["dp expert grads"] == pytest.approx(2 * 7 / 8 * 8 * 2 * 4096 * 14336 * 2)


def test_imbalance_and_params():
    im = imbalance([10, 2, 2, 2], 2)
    assert im["per rank"] == [12, 4] and im["max/mean rank"] == 1.5 and im["max/mean expert"] == 2.5
    assert imbalance([4, 4, 4, 4], 4)["max/mean rank"] == 1.0
    assert [expert_params_per_rank(8, 16, 32, ep) for ep in (1, 2, 4, 8)] == [
        8192,
        4096,
        2048,
        1024,
    ]
    p = moe_params(16, 32, 8, 2)
    assert p["total"] == 8 * 2 * 16 * 32 + 16 * 8 and p["active"] == 2 * 2 * 16 * 32 + 16 * 8


def test_mixtral_matches_the_published_counts():
    m = mixtral_8x7b()
    assert m["total"] / 1e9 == pytest.approx(46.7, abs=0.05)  # Jiang et al. 2024: 47B
    assert m["active"] / 1e9 == pytest.approx(12.9, abs=0.05)  # 13B active


def test_capacity_twins_agree_and_errors_name_rule_and_value():
    for args in ((10, 4, 2, 1.0), (100, 8, 1, 1.25), (7, 3, 2, 0.5), (7, 3, 2, None)):
        assert capacity(*args) == torch_capacity(*args)
    with pytest.raises(ValueError, match=r"experts \(6\) must be divisible by ep \(4\)"):
        check_shapes(6, 2, 4)
    with pytest.raises(ValueError, match=r"top_k \(3\) must be <= experts \(2\)"):
        check_shapes(2, 3, 1)
    with pytest.raises(ValueError, match=r"ep \(0\) must be an integer >= 1"):
        check_shapes(4, 1, 0)
    with pytest.raises(ValueError, match=r"capacity_factor \(-1\) must be > 0"):
        capacity(4, 2, 1, -1)
