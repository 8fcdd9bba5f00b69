"""Expert parallelism: the EP layer equals the one-process MoE on all ranks' tokens (outputs,
input gradients, owned experts' gradients, the summed router gradient, the same tokens dropped)
at ep = 2, 3, 4 with uneven token counts, top-1 and top-2, with and without a capacity, in
float64; EP × DP equals one process after several optimizer steps; traced all-to-all bytes equal
the cost model's from the routed counts; negative controls show each classic bug is caught."""

import pytest
import torch

from minipar.expert_parallel import (
    ExpertParallelMoE,
    MoE,
    all_to_all,
    capacity,
    load_balancing_loss,
    priority_positions,
    queue_ahead,
    slot_counts,
    top_k_gates,
)
from minipar.expert_parallel.experiments import (
    MoETraining,
    ep_dp_train_on_rank,
    parity_on_rank,
    traffic_on_rank,
)
from minipar.expert_parallel.grid import ep_dp_groups
from minipar.runtime.launch import run

TOL = 1e-12
BUG = 1e-6


# ------------------------------------------------------------------ buggy variants (controls)
class CombineWithoutGates(ExpertParallelMoE):
    """Bug: the expert outputs are added back without their gate weights."""

    def combine(self, back, token, gate, n):
        return back.new_zeros(n, self.hidden).index_add(0, token, back)


class CombineInDispatchOrder(ExpertParallelMoE):
    """Bug: the combined rows are returned in dispatch (expert-sorted) order, not token order."""

    def combine(self, back, token, gate, n):
        y = back.new_zeros(n, self.hidden)
        rows = gate[:, None] * back
        return y.index_add(0, torch.arange(len(rows)) % n, rows)


# ------------------------------------------------------------------ one process
def test_one_rank_is_the_moe():
    for K, cf in ((1, None), (2, None), (2, 1.0), (1, 0.5)):
        res = parity_on_rank(0, 4, K, cf)
        assert max(res[k] for k in ("out", "dx", "dw1", "dw2", "drouter")) < TOL, res
        assert res["kept differ"] == 0 and res["copies"]


def test_gates_are_top_k_renormalised():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]], dtype=torch.float64)
    probs, gates, experts = top_k_gates(logits, 2)
    p = torch.softmax(logits, -1)[0]
    assert experts.tolist() == [[0, 1]]
    assert torch.allclose(gates[0], p[:2] / p[:2].sum())
    _, g1, _ = top_k_gates(logits, 1)
    assert g1.item() == 1.0  # top-1 renormalised: always 1
    _, g1s, _ = top_k_gates(logits, 1, renormalize=False)
    assert g1s.item() == pytest.approx(p[0].item())  # Switch's unnormalised gate


def test_capacity_and_priority_order():
    assert capacity(10, 4, 2, 1.0) == 5 and capacity(10, 4, 1, 1.25) == 4
    assert capacity(10, 4, 1, None) is None
    # 4 tokens, top-2 over 3 experts: all first choices queue before any second choice
    experts = torch.tensor([[0, 1], [0, 2], [1, 0], [0, 1]])
    pos = priority_positions(experts, 3)
    assert pos.tolist() == [[0, 1], [1, 0], [0, 3], [2, 2]]
    assert (pos < 2).tolist() == [[True, True], [True, True], [True, False], [False, False]]
    # two ranks' queues equal the queue of their concatenation
    a, b = experts[:3], experts[3:]
    counts = torch.stack([slot_counts(a, 3), slot_counts(b, 3)])
    joined = torch.cat(
        [
            priority_positions(a, 3, queue_ahead(counts, 0)),
            priority_positions(b, 3, queue_ahead(counts, 1)),
        ]
    )
    assert torch.equal(joined, pos)


def test_balancing_loss_is_one_when_even_and_E_when_collapsed():
    E = 4
    even = torch.full((8, E), 1 / E, dtype=torch.float64)
    assert load_balancing_loss(even, torch.arange(8)[:, None] % E).item() == pytest.approx(1.0)
    collapsed = torch.zeros(8, E, dtype=torch.float64)
    collapsed[:, 0] = 1
    assert load_balancing_loss(collapsed, torch.zeros(8, 1, dtype=torch.long)).item() == E


def test_errors_name_rule_and_value(monkeypatch):
    import minipar.expert_parallel.layer as layer

    monkeypatch.setattr(layer, "group_size", lambda g=None: 3)
    with pytest.raises(ValueError, match=r"experts \(4\) must be divisible by ep \(3\)"):
        ExpertParallelMoE(8, 12, 4, 1)
    with pytest.raises(ValueError, match=r"top_k \(5\) must be between 1 and experts \(4\)"):
        MoE(8, 12, 4, 5)
    with pytest.raises(ValueError, match=r"capacity_factor \(0\) must be > 0"):
        capacity(8, 4, 1, 0)


def test_all_to_all_is_identity_without_a_group():
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    y = all_to_all(x, [5], [5])
    assert torch.equal(y, x)
    (g,) = torch.autograd.grad(y.sum(), x)
    assert torch.equal(g, torch.ones_like(x))


# ------------------------------------------------------------------ ep = 2, 3, 4 on gloo ranks
CASES = [(1, None), (2, None), (1, 1.0), (2, 1.0)]


def _everything(rank, ep):
    E = 6 if ep == 3 else 4
    out = {
        "parity": {case: parity_on_rank(rank, E, *case) for case in CASES},
        "no gates": parity_on_rank(rank, E, 2, None, cls=CombineWithoutGates),
        "dispatch order": parity_on_rank(rank, E, 1, None, cls=CombineInDispatchOrder),
        "traffic": {cf: traffic_on_rank(rank, E, 2, cf) for cf in (None, 1.0)},
    }
    return out


@pytest.fixture(scope="module", params=[2, 3, 4], ids=lambda ep: f"ep{ep}")
def launched(request):
    ep = request.param
    return ep, run(_everything, ep, backend="gloo", timeout=300)


@pytest.mark.slow
def test_parity_with_one_process(launched):
    ep, results = launched
    for r in results:
        for case, res in r["parity"].items():
            assert max(res[k] for k in ("out", "dx", "dw1", "dw2", "drouter")) < TOL, (case, res)
            assert res["kept differ"] == 0 and res["copies"], (case, res)
    E = 6 if ep == 3 else 4  # expert parameters per rank ∝ 1/ep
    assert all(
        res["expert params"] == E // ep * 2 * 8 * 12
        for r in results
        for res in r["parity"].values()
    )
    # the capacity cases really drop tokens (else "same tokens dropped" would be vacuous)
    assert all(results[0]["parity"][(k, 1.0)]["dropped"] > 0 for k in (1, 2))


@pytest.mark.slow
def test_negative_controls_are_caught(launched):
    ep, results = launched
    for r in results:
        assert r["no gates"]["out"] > BUG  # outputs not scaled by the gates
        assert r["dispatch order"]["out"] > BUG  # rows land on the wrong tokens


@pytest.mark.slow
def test_traced_bytes_equal_the_model(launched):
    ep, results = launched
    for r in results:
        for cf, t in r["traffic"].items():
            assert t["traced"] == t["model"], (cf, t)
            assert [op for op, _ in t["traced"]].count("all_to_all") == 5


def _ep_dp(rank, world):
    g = ep_dp_groups(2)
    return {
        "ok": ep_dp_train_on_rank(rank, world, 2, MoETraining(4, 2), groups=g),
        "capacity": ep_dp_train_on_rank(rank, world, 2, MoETraining(4, 2, 1.0), groups=g),
        "divide by dp": ep_dp_train_on_rank(
            rank, world, 2, MoETraining(4, 2), expert_divisor=2, groups=g
        ),
    }


@pytest.mark.slow
def test_ep_inside_dp_equals_one_process_after_steps():
    results = run(_ep_dp, 4, backend="gloo", timeout=300)
    assert [r["ok"]["replica"] for r in results] == [0, 0, 1, 1]
    for r in results:
        assert max(r["ok"]["param diff per step"]) < TOL, r
        assert max(r["capacity"]["param diff per step"]) < TOL, r
        assert min(r["divide by dp"]["param diff per step"]) > BUG, r  # control: expert grads 2×
    assert sum(r["capacity"]["dropped"] for r in results) > 0


def test_the_copy_check_catches_a_view():
    """Negative control for "copies": a rank's slice taken as a view keeps all E experts alive."""
    full = torch.zeros(4, 8, 12, dtype=torch.float64)
    view, copy = full[2:], full[2:].clone()
    own = lambda w: w.untyped_storage().nbytes() == w.numel() * w.element_size()
    assert not own(view) and own(copy)
