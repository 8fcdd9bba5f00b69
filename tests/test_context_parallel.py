"""Context parallelism: ring attention (both layouts) and Ulysses equal full attention
(outputs, q/k/v gradients; float64; cp = 2, 3; causal and not; logits ~1e3); a CP GPT equals one
process after several Adam steps; CP × TP and CP × DP on 4 ranks equal one process; traced bytes equal the
cost model; causal FLOPs per rank equal the model (contiguous unbalanced, zigzag balanced);
saved activations per rank ∝ 1/cp. Negative controls: merge without the log-sum-exp
correction, causal mask by local position, CP gradients not summed."""

import pytest
import torch

from minipar.context_parallel import (
    block_attention,
    chunk_ids,
    full_attention,
    merge_blocks,
    positions,
    shard_sequence,
    ulysses_attention,
)
from minipar.context_parallel import experiments as E
from minipar.cost.chapters import context_parallel as C
from minipar.runtime.launch import run

TOL = 1e-11  # float64, logits ~1e3: outputs and gradients, relative to the largest entry
TOL_TRAIN = 1e-9  # parameters after 3 Adam steps
BUG = 1e-2  # a bug must move something by more than this


# ------------------------------------------------------------------ one process
def test_layouts_exactly_as_specified():
    assert positions(16, 2, 0, "zigzag").tolist() == [0, 1, 2, 3, 12, 13, 14, 15]
    assert positions(12, 3, 1, "zigzag").tolist() == [2, 3, 8, 9]
    assert chunk_ids(2, 3, "zigzag") == [2, 3] and chunk_ids(2, 3, "contiguous") == [2]
    assert positions(12, 3, 1, "contiguous").tolist() == [4, 5, 6, 7]
    every = sorted(sum((positions(24, 3, r, "zigzag").tolist() for r in range(3)), []))
    assert every == list(range(24))
    x = torch.arange(12.0).view(1, 12)
    assert torch.equal(shard_sequence(x, 1), x)  # one rank: the whole sequence
    with pytest.raises(ValueError, match=r"sequence length \(10\) must be divisible by 2·cp \(4\)"):
        positions(10, 2, 0, "zigzag")
    with pytest.raises(ValueError, match="layout must be one of"):
        chunk_ids(0, 2, "diagonal")
    assert positions(12, 3, 1, "striped").tolist() == [1, 4, 7, 10]  # Brandon et al. 2023


def test_merge_two_blocks_equals_softmax_over_both_at_huge_logits():
    q, k, v = E.qkv(a=2, s=16, logit=1e4)
    o_a, l_a = block_attention(q, k[:, :, :8], v[:, :, :8])
    o_b, l_b = block_attention(q, k[:, :, 8:], v[:, :, 8:])
    ref = full_attention(q, k, v)
    o, lse = merge_blocks(o_a, l_a, o_b, l_b)
    assert torch.isfinite(o).all() and E.rel_diff(o, ref) < TOL
    z = q @ k.transpose(-2, -1) / 8**0.5
    assert E.rel_diff(lse, torch.logsumexp(z, -1)) < 1e-14
    bad, _ = E.merge_without_lse(o_a, l_a, o_b, l_b)  # negative control
    assert E.rel_diff(bad, ref) > BUG
    assert not torch.isfinite(z.exp()).all()  # why the max is subtracted


def test_cost_model_formulas():
    for cp in (2, 3, 4, 8):
        assert C.imbalance(cp, "contiguous", diagonal="whole") == pytest.approx(2 * cp / (cp + 1))
        assert C.imbalance(cp, "contiguous") == pytest.approx((2 * cp - 1) / cp)  # causal kernel
        assert C.imbalance(cp, "zigzag") == 1.0 == C.imbalance(cp, "striped")
        assert C.imbalance(cp, "contiguous", causal=False) == 1.0
    kv = C.kv_block_bytes(1, 1024, 64, 4, 2)
    assert kv == 2 * 256 * 64 * 2
    assert C.ring_sent_bytes_per_layer(1, 1024, 64, 4, 2, 2) == {
        "forward": 3 * kv,
        "backward": 3 * kv + 4 * kv,
        "total": 10 * kv,
    }
    assert (
        C.ring_sent_bytes_per_layer(1, 1024, 64, 4)["backward"] == 3 * kv + 4 * 2 * kv
    )  # fp32 dK/dV
    assert C.ring_sent_bytes_per_layer(1, 1024, 64, 1)["total"] == 0
    assert [n for n, _ in C.ulysses_all_to_alls_per_layer(1, 8, 4, 2)] == ["qkv", "out"]
    assert C.activation_bytes_per_rank(1024, 1, 64, 4, 4) * 4 == C.activation_bytes_per_rank(
        1024, 1, 64, 4
    )
    # overlap: block compute equals transfer exactly at the threshold
    F, B = 1e12, 1e10
    n = C.min_tokens_per_rank_for_overlap(F, B, causal=False)
    assert 4 * n * n * 64 / F == pytest.approx(2 * n * 64 * 2 / B)
    n2 = C.min_tokens_per_rank_for_overlap(F, B, causal=True, layout="zigzag")
    assert n2 == 2 * n  # half a block pair per step
    assert C.min_tokens_per_rank_for_overlap(F, B, causal=True, layout="contiguous") == n
    with pytest.raises(
        ValueError, match=r"sequence length s \(10\) must be divisible by 2·cp \(4\)"
    ):
        C.attention_flops_per_rank(1, 10, 64, 2, "zigzag")
    with pytest.raises(ValueError, match=r"cp \(0\) must be an integer >= 1"):
        C.kv_block_bytes(1, 8, 4, 0)


# ------------------------------------------------------------------ ranks
def _everything(rank, cp):
    out = {
        "parity": E.attention_parity_on_rank(rank, cp),
        "controls": E.controls_on_rank(rank, cp),
        "traffic": E.traffic_on_rank(rank, cp),
        "flops": {
            lay: E.balance_on_rank(rank, cp, lay, s=48, d=4, repeats=1)["flops"]
            for lay in ("contiguous", "zigzag")
        },
        "memory": E.memory_on_rank(rank, cp, s=24)["cp_layers"],
    }
    for attention, layout in E.METHODS:
        out[f"gpt {attention}/{layout}"] = E.gpt_training_on_rank(rank, cp, attention, layout)
    out["gpt grads not summed"] = E.gpt_training_on_rank(rank, cp, finish=False)
    try:
        ulysses_attention(*(torch.zeros(1, 5, 4, 2) for _ in range(3)))
    except ValueError as e:
        out["ulysses error"] = str(e)
    return out


@pytest.fixture(scope="module")
def runs():
    return {cp: run(_everything, cp, backend="gloo") for cp in (2, 3)}


@pytest.mark.slow
@pytest.mark.parametrize("cp", [2, 3])
def test_attention_equals_full_attention(runs, cp):
    for r in runs[cp]:
        assert set(r["parity"]) == {
            f"{m}/{lay}/{c}" for m, lay in E.METHODS for c in ("full", "causal")
        }
        for case, err in r["parity"].items():
            assert err < TOL, (cp, case, err)
        for case, err in r["controls"].items():
            assert err > BUG, (cp, case, err)  # each classic bug is caught
        assert r["ulysses error"] == f"heads (5) must be divisible by cp ({cp})"


@pytest.mark.slow
@pytest.mark.parametrize("cp", [2, 3])
def test_gpt_trains_like_one_process(runs, cp):
    for r in runs[cp]:
        for attention, layout in E.METHODS:
            got = r[f"gpt {attention}/{layout}"]
            assert got["loss"] < 1e-13 and got["params"] < TOL_TRAIN, (attention, layout, got)
        assert r["gpt grads not summed"]["params"] > BUG


@pytest.mark.slow
@pytest.mark.parametrize("cp", [2, 3])
def test_traffic_flops_and_memory_equal_the_model(runs, cp):
    b, a, s, d, e = 2, 12, 24, 4, 8  # traffic_on_rank's float64 inputs
    ring = C.ring_sent_bytes_per_layer(b, s, a * d, cp, e)
    sends = C.ring_sends_per_layer(cp)
    sizes = sum(S for _, S in C.ulysses_all_to_alls_per_layer(b, s, a * d, cp, e))
    for r in runs[cp]:
        t = r["traffic"]
        for phase in ("forward", "backward"):
            assert t[f"ring/{phase}"]["send"] == (sends[phase], ring[phase])
            assert t[f"ring/{phase}"]["recv"] == (sends[phase], ring[phase])
            assert t[f"ulysses/{phase}"] == {"all_to_all": (2, sizes)}  # packed QKV, output
    flops = C.attention_flops_per_rank(1, 48, 4 * 4, cp, "contiguous")
    assert [r["flops"]["contiguous"] for r in runs[cp]] == flops
    zig = C.attention_flops_per_rank(1, 48, 4 * 4, cp, "zigzag")
    assert [r["flops"]["zigzag"] for r in runs[cp]] == zig and len(set(zig)) == 1
    measured = [r["flops"]["contiguous"] for r in runs[cp]]
    assert max(measured) / (sum(measured) / cp) == pytest.approx(2 * cp / (cp + 1))
    mem = {r["memory"] for r in runs[cp]}
    assert len(mem) == 1


@pytest.mark.slow
def test_memory_per_rank_scales_as_one_over_cp():
    got = {cp: run(E.memory_on_rank, cp, 48, backend="gloo")[0] for cp in (1, 2, 4)}
    base = got[1]["cp_layers"]
    for cp in (2, 4):
        assert got[cp]["cp_layers"] * cp == base, got
    assert got[1]["materialised_scores"] > base  # the s² scores cost extra


def _four_ranks(rank, world):
    return {
        "tp": E.cp_tp_on_rank(rank, world),
        "dp": E.cp_dp_on_rank(rank, world),
        "dp control": E.cp_dp_on_rank(rank, world, reduce_over="cp"),
    }


@pytest.mark.slow
def test_cp_times_tp_and_cp_times_dp_on_four_ranks_equal_one_process():
    for r in run(_four_ranks, 4, backend="gloo"):
        tp = r["tp"]
        assert tp["out"] < TOL and tp["dx"] < TOL and tp["params"] < TOL, tp
        assert tp["params moved"] > 1e-4, tp  # the steps were not no-ops
        assert r["dp"]["params"] < TOL_TRAIN, r["dp"]
        assert r["dp control"]["params"] > BUG, r["dp control"]  # DP replicas never averaged
