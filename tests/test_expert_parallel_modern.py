"""Expert parallelism as run at scale: dropless grouped GEMMs, three dispatchers, MoE parallel
folding, balancing beyond Switch's loss. Every parallel run is compared with one process in
float64 (outputs, input and weight gradients; parameters after SGD steps where it trains) at
world sizes 3, 4 and 6, its traced bytes with the cost model, and each part has a negative
control: a plausible bug the same check catches."""

import itertools

import pytest
import torch

from minipar.cost.chapters import expert_parallel as cost
from minipar.expert_parallel import balancing, routing
from minipar.expert_parallel.experiments import (
    MoETraining,
    _randn,
    dispatcher_traffic_on_rank,
    folded_train_on_rank,
    make_moe,
    parity_on_rank,
    run_on_gloo,
)
from minipar.expert_parallel.grouped import dropless_forward, grouped_mm, permute, unpermute
from minipar.grid import Grid

TOL = 1e-12
KEYS = ("out", "dx", "dw1", "dw2", "drouter")


# ------------------------------------------------------------------ dropless, one process
@pytest.mark.parametrize("top_k", [1, 2, 3])
@pytest.mark.parametrize("kernel", ["padded", "loop"])
def test_dropless_grouped_equals_per_expert_reference(top_k, kernel):
    moe = make_moe(6, top_k)
    x = _randn(17, 8, seed=1).requires_grad_()
    moe(x).sum().backward()
    ref = [p.grad.clone() for p in moe.parameters()] + [x.grad.clone()]
    y_ref = moe(x).detach()
    moe.zero_grad()
    x.grad = None
    y = dropless_forward(moe, x, kernel)
    y.sum().backward()
    got = [p.grad for p in moe.parameters()] + [x.grad]
    assert (y - y_ref).abs().max() < TOL
    assert max((a - b).abs().max().item() for a, b in zip(got, ref)) < TOL


def test_grouped_mm_kernels_agree_with_empty_groups():
    rows, w = _randn(10, 4, seed=2), _randn(4, 4, 3, seed=3)
    sizes = [3, 0, 7, 0]  # empty groups included
    want = grouped_mm(rows, sizes, w, "loop")
    assert (grouped_mm(rows, sizes, w, "padded") - want).abs().max() < TOL
    if hasattr(torch, "_grouped_mm"):  # float32, 16-byte strides
        r32, w32 = torch.randn(10, 8), torch.randn(4, 8, 4)
        try:
            got = grouped_mm(r32, sizes, w32, "grouped_mm")
        except RuntimeError:
            pytest.skip("torch._grouped_mm not supported on this device")
        assert (got - grouped_mm(r32, sizes, w32, "loop")).abs().max() < 1e-5
        from minipar.expert_parallel.grouped import grouped_mlp

        w1 = torch.randn(4, 8, 4, requires_grad=True)
        w2 = torch.randn(4, 4, 8, requires_grad=True)
        grouped_mlp(r32, sizes, w1, w2, "grouped_mm").sum().backward()  # zero-stride grad
        g = w1.grad.clone()
        w1.grad = None
        grouped_mlp(r32, sizes, w1, w2, "loop").sum().backward()
        assert (g - w1.grad).abs().max() < 1e-4
    with pytest.raises(ValueError, match="kernel .'tiled'. must be one of"):
        grouped_mm(rows, sizes, w, "tiled")


def test_unpermute_needs_the_same_permutation():
    """Negative control: gates taken in token order instead of the permuted order."""
    moe = make_moe(6, 2)
    x = _randn(11, 8, seed=4)
    _, gates, experts = routing.top_k_gates(moe.router(x), 2)
    rows, token, order, sizes = permute(x, experts, 6)
    from minipar.expert_parallel.grouped import grouped_mlp

    out = grouped_mlp(rows, sizes, moe.w1, moe.w2)
    right = unpermute(out, token, gates.T.reshape(-1)[order], 11)
    wrong = unpermute(out, token, gates.T.reshape(-1), 11)  # forgot to permute the gates
    assert (right - moe(x)).abs().max() < TOL
    assert (wrong - moe(x)).abs().max() > 1e-3


def test_moe_grouped_kernel_with_capacity_and_drop_policies():
    for cf, policy, k in itertools.product((None, 1.0), ("position", "probs"), (1, 2)):
        moe = make_moe(6, k, cf)
        moe.drop_policy = policy
        x = _randn(20, 8, seed=5)
        y = moe(x)
        moe.kernel = "padded"
        assert (moe(x) - y).abs().max() < TOL


# ------------------------------------------------------------------ dispatchers, on ranks
def _dispatchers_on_rank(rank, world, node_size):
    from minipar.expert_parallel.dispatchers import node_groups

    node, rail = node_groups(node_size)
    out = {}
    for disp in ("all_to_all", "all_gather", "node_dedup"):
        kw = {"node_group": node, "rail_group": rail} if disp == "node_dedup" else {}
        for k, cf in ((1, None), (2, None), (2, 1.0), (3, None)):
            r = parity_on_rank(rank, 2 * world, k, cf, dispatcher=disp, **kw)
            out[disp, k, cf] = max(r[key] for key in KEYS)
            t = dispatcher_traffic_on_rank(rank, disp, 2 * world, k, cf, node_size)
            out["bytes", disp, k, cf] = (t["traced"] == t["model"], t["inter-node rows"])
    # negative control: node and rail groups swapped (same sizes when ep = node_size²)
    r = parity_on_rank(
        rank, 2 * world, 2, None, dispatcher="node_dedup", node_group=rail, rail_group=node
    )
    out["swapped"] = max(r[key] for key in KEYS)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("world, node_size", [(3, 3), (3, 1), (4, 2), (6, 3)])
def test_dispatchers_equal_one_process_and_bytes_equal_model(world, node_size):
    res = run_on_gloo(_dispatchers_on_rank, world, node_size)
    for key in res[0]:
        if key == "swapped":
            continue
        if key[0] == "bytes":
            assert all(r[key][0] for r in res), key  # traced == model on every rank
            rows = res[0][key][1]
            assert rows["node_dedup"] <= rows["all_to_all"]  # dedup never sends more
        else:
            assert max(r[key] for r in res) < TOL, key
    if world == 4:  # node and rail both of size 2
        assert max(r["swapped"] for r in res) > 1e-3  # the check catches the swap
    if node_size > 1 and world // node_size > 1:  # two nodes: dedup saves rows
        rows = res[0]["bytes", "node_dedup", 3, None][1]
        assert rows["node_dedup"] < rows["all_to_all"]


def _train_dispatchers_on_rank(rank, world):
    from minipar.expert_parallel.dispatchers import node_groups
    from minipar.expert_parallel.experiments import ep_dp_train_on_rank
    from minipar.expert_parallel.grid import ep_dp_groups

    groups = ep_dp_groups(world)
    node, rail = node_groups(2, [list(range(world))])
    out = {}
    for disp, kernel in (
        ("all_to_all", "loop"),
        ("all_to_all", "padded"),
        ("all_gather", "padded"),
        ("node_dedup", "padded"),
    ):
        kw = {"node_group": node, "rail_group": rail} if disp == "node_dedup" else {}
        for cf in (None, 1.0):
            r = ep_dp_train_on_rank(
                rank,
                world,
                world,
                MoETraining(2 * world, 2, cf, steps=3),
                groups=groups,
                dispatcher=disp,
                kernel=kernel,
                **kw,
            )
            out[disp, kernel, cf] = max(r["param diff per step"])
    return out


@pytest.mark.slow
def test_dispatchers_train_like_one_process():
    """Three SGD steps with momentum on 4 ranks (2 nodes of 2): parameters equal one process."""
    res = run_on_gloo(_train_dispatchers_on_rank, 4)
    for key in res[0]:
        assert max(r[key] for r in res) < TOL, key


def test_dispatcher_models_from_counts():
    choices = [[[0, 1], [2, 3], [0, 3]], [[1, 2]]]  # 2 ranks, E 4, node_size 1
    rows = cost.dispatch_rows(choices, 4)
    assert rows == [[3, 3], [1, 1]]
    t = cost.node_dedup_rows(choices, 4, 1)
    assert t["rail"] == [[2, 2], [1, 1]]  # distinct (token, node) pairs
    assert cost.inter_node_rows(choices, 4, 1, "all_to_all") == 4
    assert cost.inter_node_rows(choices, 4, 1, "node_dedup") == 3
    ev = cost.all_gather_events([3, 1], 0, hidden=8, top_k=2, bytes_per_elem=8)
    assert ev[1] == ("all_gather", 2 * 3 * 8 * 8)  # padded to the largest rank
    with pytest.raises(ValueError, match=r"ep \(3\) must be divisible by node_size \(2\)"):
        cost.node_dedup_rows([[]] * 3, 6, 2)


def test_expected_nodes_per_token_matches_sampling():
    E, K, N = 32, 4, 4
    g = torch.Generator().manual_seed(0)
    picks = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(20000)])
    sampled = torch.tensor([len(set((p // (E // N)).tolist())) for p in picks]).double().mean()
    assert cost.expected_nodes_per_token(E, K, N) == pytest.approx(float(sampled), rel=0.02)
    assert cost.expected_nodes_per_token(256, 8, 8, max_nodes=4) == 4
    # control: K rows per token (no dedup) is not what the formula gives
    assert cost.expected_nodes_per_token(E, K, N) < K


# ------------------------------------------------------------------ MoE parallel folding
@pytest.mark.slow
@pytest.mark.parametrize("world, t, d, ep", [(4, 2, 2, 4), (6, 2, 3, 6), (3, 3, 1, 3)])
def test_folded_layout_trains_like_one_process(world, t, d, ep):
    """EP does not divide the attention's DP degree: it reuses tensor-parallel ranks."""
    assert d % ep != 0
    grid, train = Grid(d=d, t=t, ep=ep), MoETraining(12, 2, steps=3)
    res = run_on_gloo(folded_train_on_rank, world, grid, train)
    assert max(r["out"] for r in res) < TOL and max(r["dx"] for r in res) < TOL
    assert max(max(r["param diff per step"]) for r in res) < TOL
    assert res[0]["edp"] == world // ep
    if d > 1 and world // ep != d:  # negative control
        bad = run_on_gloo(folded_train_on_rank, world, grid, train, True)
        assert max(max(r["param diff per step"]) for r in bad) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize(
    "world, t, d, ep", [(4, 2, 2, 4), (6, 2, 3, 6), (3, 3, 1, 3), (4, 2, 2, 2)]
)
def test_folded_traffic_equals_model(world, t, d, ep):
    """Every call of one folded training step: the sequence-parallel dense part over t, the
    all-to-alls over ep, the dense shards' reduction over dp·cp, the experts' over EDP."""
    from minipar.expert_parallel.experiments import folded_traffic_on_rank

    res = run_on_gloo(folded_traffic_on_rank, world, t, d, ep)
    assert all(r["traced"] == r["model"] for r in res)
    if world // ep != d:  # control: a model that reduces experts over d ("EP inside DP")
        layer = cost.MoELayer(4, 8, 12, 12, 2, ep, matrices=2, bytes_per_elem=8)
        bad = cost.folded_block_events([[0] * ep] * ep, 0, layer, 12, t, d, d, world)
        reduces = lambda ev: sorted(e for e in ev if e[0] == "all_reduce")  # routing-free part
        assert reduces(bad) != reduces(res[0]["traced"])


def test_folding_cost_rules():
    assert cost.folded_expert_dp(t=2, cp=1, d=2, ep=4) == 1
    assert cost.folded_expert_dp(t=2, cp=2, d=4, ep=8, etp=1) == 2
    with pytest.raises(
        ValueError,
        match=r"etp·ep \(1·3 = 3\) must divide the ranks of a stage, "
        r"t·cp·d = 8",
    ):
        cost.folded_expert_dp(2, 1, 4, 3)
    # leaving the node depends on the EP degree, not the number of experts: DeepSeek-V2's 160
    # experts over 8-way EP stay in an 8-GPU node; 64-way EP sends 7/8 of the rows off it
    assert cost.off_node_fraction(8, 8) == 0.0
    assert cost.off_node_fraction(64, 8) == pytest.approx(7 / 8)
    layer = cost.MoELayer(4096, 7168, 2048, 256, 8, ep=64)
    f = cost.folded_moe_traffic(layer, t=1, cp=1, d=64, micro_batches=2)
    _, off = cost.even_dispatch_bytes(4096, 8, 7168, 64, 2)
    assert f["ep a2a bytes"] == pytest.approx(4 * off * 2) and f["edp"] == 1
    assert f["expert grad ring bytes"] == 0  # EDP = 1: nothing to reduce


def test_tokens_vs_weights_is_per_step():
    layer = cost.MoELayer(4096, 4096, 14336, experts=8, top_k=2, ep=8, matrices=3)
    one = cost.tokens_vs_weights_bytes(layer)
    eight = cost.tokens_vs_weights_bytes(layer, micro_batches=8)
    assert eight["ep tokens"] == 8 * one["ep tokens"]  # per micro-batch traffic adds up
    assert eight["dp expert grads"] == one["dp expert grads"]  # once per step
    assert eight["ep tokens per micro-batch"] == one["ep tokens"]


# ------------------------------------------------------------------ balancing
def test_capacity_is_defined_once():
    assert routing.capacity is cost.capacity


def test_aux_loss_maximum_is_e_over_k():
    E, K, n = 8, 2, 16
    logits = torch.full((n, E), -30.0, dtype=torch.float64)
    logits[:, :K] = 30.0  # every token: experts 0 and 1
    probs, _, experts = routing.top_k_gates(logits, K)
    assert routing.load_balancing_loss(probs, experts).item() == pytest.approx(E / K, rel=1e-9)
    even = torch.zeros(n, E, dtype=torch.float64)
    probs, _, experts = routing.top_k_gates(even, K)
    ex = torch.stack([torch.arange(n) % E, (torch.arange(n) + 1) % E], 1)
    assert routing.load_balancing_loss(probs, ex).item() == pytest.approx(1.0)


def test_balancing_losses_and_bias():
    g = _randn(32, 8, seed=6)
    probs, _, experts = routing.top_k_gates(g, 2)
    seq = balancing.sequence_load_balancing_loss(probs, experts, 8)
    assert seq == pytest.approx(
        sum(
            routing.load_balancing_loss(p, e) for p, e in zip(probs.split(8), experts.split(8))
        ).item()
        / 4
    )
    local = routing.slot_counts(experts, 8).sum(0)
    assert balancing.global_load_balancing_loss(probs, experts, local) == pytest.approx(
        routing.load_balancing_loss(probs, experts).item()
    )
    assert balancing.router_z_loss(g) == pytest.approx((torch.logsumexp(g, -1) ** 2).mean().item())
    b = torch.zeros(4)
    balancing.update_bias(b, torch.tensor([10, 2, 2, 2]), 0.1)
    assert b.tolist() == pytest.approx([-0.1, 0.1, 0.1, 0.1])  # overloaded expert less likely
    # the bias changes the choice, not the gate
    probs, gates, experts = routing.top_k_gates(
        g, 1, renormalize=False, bias=torch.tensor([0, 0, 0, 0, 0, 0, 0, 5.0])
    )
    assert (experts == 7).all() and torch.equal(gates[:, 0], probs[:, 7])


def test_drop_by_probability_keeps_the_most_probable():
    p = torch.tensor([[0.1], [0.9], [0.5], [0.7]], dtype=torch.float64)
    e = torch.zeros(4, 1, dtype=torch.long)
    assert balancing.keep_by_probability(p, e, 1, 2)[:, 0].tolist() == [False, True, False, True]
    # control: the position policy keeps the first two instead
    assert (routing.priority_positions(e, 1) < 2)[:, 0].tolist() == [True, True, False, False]


@pytest.mark.parametrize("score, m", [("max", 3), ("top_sum", 4)])
def test_group_limited_routing_bounds_the_groups(score, m):
    s = torch.rand(64, 32, generator=torch.Generator().manual_seed(0))
    ex = balancing.group_limited_top_k(s, 8, groups=8, max_groups=m, group_score=score)
    assert max(len(set((r // 4).tolist())) for r in ex) <= m
    free = s.topk(8, -1).indices  # unrestricted routing: more groups
    assert max(len(set((r // 4).tolist())) for r in free) > m


@pytest.mark.slow  # over a CPU-second (CONTRIBUTING.md, Tests)
def test_bias_balances_the_training_demo():
    from minipar.expert_parallel.experiments import Balancing, balancing_run, balancing_summary

    none = balancing_summary(balancing_run())
    bias = balancing_summary(balancing_run(Balancing(bias_rate=1e-2)))
    assert bias["last"] < none["last"]
    assert none["dropped last"] == 0 and bias["dropped last"] == 0
