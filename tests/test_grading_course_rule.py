"""One rule on the course's own code, in every one of the 38 graded tasks: an answer may call
torch, the launcher and the earlier exercises' answers it builds on, not the course's
implementation of what the task asks. A cheat per task (an answer that calls the course's
implementation, which would pass on its values) fails with the same one-line reason, before any
rank starts; the texts state the rule the grader holds."""

import re

import pytest
from grading_support import EXERCISES

from minipar.grading import check
from minipar.grading.imports import RULE, course_reason
from minipar.grading.notebooks import expected_tasks, scripts


# ----------------------------------------------------------------------------- collectives
def ring_all_reduce(tensor):
    from minipar.collectives import ring_all_reduce as course

    return course(tensor)


def all_gather(chunk):
    from minipar.collectives.ring import ring_all_gather

    return ring_all_gather(chunk)


def ring_all_reduce_time(n, S, alpha, bandwidth):
    from minipar.cost.network.collectives import collective_time

    return collective_time("all-reduce", "ring", n, S, alpha, bandwidth)


def bus_bandwidth(op, n, S, seconds):
    from minipar.cost.network import collectives

    return collectives.busbw(op, n, S, seconds)


def gradient_sync():
    from minipar.cost.network.collectives import collective_time

    S = 1.5e9 * 4
    return dict(
        S_bytes=S, bandwidth=450e9, seconds=collective_time("all-reduce", "ring", 8, S, 2e-6, 450e9)
    )


# ----------------------------------------------------------------------------- memory and time
def params(L, h, V, s):
    from minipar.cost.model import param_count

    return param_count(L, h, V, s)


def measured_and_predicted(L, h, a, s, V):
    from minipar.cost.model import param_count

    return param_count(L, h, V, s), param_count(L, h, V, s)


def zero_bytes(psi, d, stage):
    from minipar.cost.chapters.memory_time import model_state_bytes

    return model_state_bytes(psi, d=d, zero=stage).total


def adam_state_bytes(rank, n, stage):
    return 0


def predict_adam_state_bytes(psi, d, stage):
    from minipar.cost.chapters import memory_time

    return memory_time.model_state_bytes(psi, d=d, zero=stage).optimizer


def activations(s, b, h, a, t, sp, recompute):
    from minipar.cost.chapters.memory_time import activation_bytes_per_layer

    return activation_bytes_per_layer(s, b, h, a, t=t, sp=sp, recompute=recompute)


def mfu(B, s, L, h, V, seconds, gpus, peak):
    from minipar.cost.model import flops_per_iteration

    return flops_per_iteration(B, s, L, h, V) / (seconds * gpus * peak)


# ----------------------------------------------------------------------------- data parallelism
def average_gradients(model, group=None):
    from minipar.data_parallel import all_reduce_gradients

    all_reduce_gradients(model, group=group)


def make_bucketed(model, cap):
    from minipar.data_parallel import BucketedDataParallel

    return BucketedDataParallel(model, bucket_cap_mb=cap / 2**20)


def accumulation(model, dp, micro_batches, loss_fn):
    from minipar.data_parallel.accumulation import accumulation_step

    accumulation_step(model, dp, micro_batches, loss_fn)


def zero1_step(flat, grad, shard, opt):
    import minipar.data_parallel.zero as zero

    zero.ZeRO.step(opt)


# ----------------------------------------------------------------------------- tensor parallelism
def copy_to_tp_region(x, group):
    from minipar.tensor_parallel import copy_to_tp_region as f

    return f(x, group)


def reduce_from_tp_region(x, group):
    from minipar.tensor_parallel.mappings import reduce_from_tp_region as g

    return g(x, group)


def parallel_mlp(fc1, fc2, group):
    from minipar.tensor_parallel import ColumnParallelLinear

    return ColumnParallelLinear(fc1, group)


def vocab_parallel_cross_entropy(logits, target, group):
    from minipar.tensor_parallel import vocab_parallel_cross_entropy as course

    return course(logits, target, group)


def sp_layernorm(ln, group):
    from minipar.tensor_parallel import gather_from_sp_region

    return gather_from_sp_region


# ----------------------------------------------------------------------------- pipeline
def one_f_one_b(rank, p, m):
    from minipar.pipeline_parallel import schedule

    return schedule("1f1b", p, m)[rank]


def gpipe_step(stage, rank, p, xs, ys, shape):
    from minipar.pipeline_parallel.communication import P2P

    return P2P


def backward_input(y, x, gy):
    from minipar.pipeline_parallel import executor

    return executor._accumulate([x], [gy])


def backward_weight(y, params, gy):
    return None


def interleaved(rank, p, m, v):
    from minipar.pipeline_parallel import schedule

    return schedule("interleaved", p, m, v=v)[rank]


# ----------------------------------------------------------------------------- context parallelism
def merge_softmax_blocks(o1, lse1, o2, lse2):
    from minipar.context_parallel import merge_blocks

    return merge_blocks(o1, lse1, o2, lse2)


def zigzag_shard(x, group=None):
    from minipar.context_parallel import shard_sequence

    return shard_sequence(x, group)


def ring_step(q, k, v, group=None):
    from minipar.context_parallel import ring_attention

    return ring_attention(q, k, v, group)


def seq_to_heads(x, group=None):
    from minipar.context_parallel import seq_to_heads as course

    return course(x, group)


def allgather_documents(q, k, v, doc_ids, group=None):
    from minipar.context_parallel import allgather_attention

    return allgather_attention(q, k, v, doc_ids, group)


# ----------------------------------------------------------------------------- expert parallelism
def top_k_gates(logits, k):
    from minipar.expert_parallel import top_k_gates as course

    return course(logits, k)


def dispatch(x, experts, group=None):
    from minipar.expert_parallel import all_to_all, exchange_counts

    return all_to_all, exchange_counts


def combine(out, ctx, group=None):
    from minipar.expert_parallel.moe import MoE

    return MoE


def keep_mask(experts, num_experts, capacity):
    from minipar.expert_parallel import priority_positions

    return priority_positions(experts, num_experts) < capacity


def dropless_dispatch(x, experts, group=None):
    from minipar.expert_parallel import dropless_forward

    return dropless_forward


# ----------------------------------------------------------------------------- 3D and 5D
def rank_groups(d, t, p):
    from minipar.three_d.grid import RankGrid

    grid = RankGrid(d, t, p)
    return {ax: grid.groups(ax) for ax in ("tp", "dp", "pp")}


def choose_layout():
    from minipar.cost.planner import three_d as planner

    best = min(
        planner.search(planner.MODELS["gpt3-175b"], None, 1536), key=lambda c: c.step_seconds
    )
    return best.dp, best.tp, best.pp


def cost_per_token(*args, **kwargs):
    from minipar.cost.planner.three_d import dollars_per_million_tokens

    return dollars_per_million_tokens(*args, **kwargs)


def five_d_groups(d, t, p, cp, ep):
    from minipar.grid import Grid

    grid = Grid(d=d, t=t, p=p, cp=cp, ep=ep)
    return {kind: grid.groups(kind) for kind in ("cp", "dp_cp", "ep", "edp")}


CHEATS = {
    "collectives.ring_all_reduce": (ring_all_reduce, "minipar.collectives.ring"),
    "collectives.all_gather": (all_gather, "minipar.collectives.ring"),
    "collectives.alpha_beta_time": (ring_all_reduce_time, "minipar.cost.network.collectives"),
    "collectives.busbw": (bus_bandwidth, "minipar.cost.network.collectives"),
    "collectives.gradient_sync": (gradient_sync, "minipar.cost.network.collectives"),
    "memory_time.params": (params, "minipar.cost.model"),
    "memory_time.params_measured": (measured_and_predicted, "minipar.cost.model"),
    "memory_time.zero_bytes": (zero_bytes, "minipar.cost.chapters.memory_time"),
    "memory_time.adam_state": (
        (adam_state_bytes, predict_adam_state_bytes),
        "minipar.cost.chapters.memory_time",
    ),
    "memory_time.activations": (activations, "minipar.cost.chapters.memory_time"),
    "memory_time.mfu": (mfu, "minipar.cost.model"),
    "data_parallel.average_gradients": (average_gradients, "minipar.data_parallel.naive"),
    "data_parallel.bucketed": (make_bucketed, "minipar.data_parallel.bucketed"),
    "data_parallel.accumulation": (accumulation, "minipar.data_parallel.accumulation"),
    "data_parallel.zero1_step": (zero1_step, "minipar.data_parallel.zero"),
    "tensor_parallel.copy_to_tp_region": (copy_to_tp_region, "minipar.tensor_parallel.mappings"),
    "tensor_parallel.reduce_from_tp_region": (
        reduce_from_tp_region,
        "minipar.tensor_parallel.mappings",
    ),
    "tensor_parallel.column_row_mlp": (parallel_mlp, "minipar.tensor_parallel.layers"),
    "tensor_parallel.vocab_parallel_cross_entropy": (
        vocab_parallel_cross_entropy,
        "minipar.tensor_parallel.cross_entropy",
    ),
    "tensor_parallel.sp_layernorm": (sp_layernorm, "minipar.tensor_parallel.mappings"),
    "pipeline_parallel.one_f_one_b": (one_f_one_b, "minipar.pipeline_parallel.schedules"),
    "pipeline_parallel.gpipe_send_recv": (gpipe_step, "minipar.pipeline_parallel.communication"),
    "pipeline_parallel.bw_split": (
        (backward_input, backward_weight),
        "minipar.pipeline_parallel.executor",
    ),
    "pipeline_parallel.interleaved": (interleaved, "minipar.pipeline_parallel.schedules"),
    "context_parallel.merge_softmax_blocks": (
        merge_softmax_blocks,
        "minipar.context_parallel.online_softmax",
    ),
    "context_parallel.zigzag_shard": (zigzag_shard, "minipar.context_parallel.sharding"),
    "context_parallel.ring_step": (ring_step, "minipar.context_parallel.ring"),
    "context_parallel.seq_to_heads": (seq_to_heads, "minipar.context_parallel.ulysses"),
    "context_parallel.allgather_documents": (
        allgather_documents,
        "minipar.context_parallel.allgather",
    ),
    "expert_parallel.top_k_gates": (top_k_gates, "minipar.expert_parallel.routing"),
    "expert_parallel.dispatch": (dispatch, "minipar.expert_parallel.communication"),
    "expert_parallel.combine": (combine, "minipar.expert_parallel.moe"),
    "expert_parallel.keep_mask": (keep_mask, "minipar.expert_parallel.routing"),
    "expert_parallel.dropless_dispatch": (dropless_dispatch, "minipar.expert_parallel.grouped"),
    "three_d.rank_groups": (rank_groups, "minipar.three_d.grid"),
    "three_d.choose_layout": (choose_layout, "minipar.cost.planner.three_d"),
    "three_d.cost_per_token": (cost_per_token, "minipar.cost.planner.three_d"),
    "three_d.five_d_groups": (five_d_groups, "minipar.grid"),
}


def _every_task() -> list[str]:
    return sorted({t for s in scripts(EXERCISES) for t in expected_tasks(s)})


def test_a_cheat_for_every_task():
    assert len(_every_task()) == 38
    assert sorted(CHEATS) == _every_task()


@pytest.mark.parametrize("task_id", sorted(CHEATS))
def test_a_cheat_fails_with_the_one_reason(task_id, capsys):
    cheat, module = CHEATS[task_id]
    capsys.readouterr()
    assert not check(task_id, cheat), f"{task_id}: an answer calling the course's {module} passed"
    line = capsys.readouterr().out.strip()
    m = re.fullmatch(
        rf"FAIL {re.escape(task_id)}: your code uses the course's own (.+?): (.+)", line
    )
    assert m, line
    assert m.group(1).startswith(module), line
    assert line.endswith(course_reason(m.group(1))) and m.group(2) == RULE


def test_every_starter_and_the_introduction_state_the_rule():
    intro = (EXERCISES.parent / "book" / "intro.md").read_text()
    assert "not the course's implementation of what the task asks" in intro
    for script in scripts(EXERCISES):
        text = re.sub(r"\s*\n#\s*", " ", script.read_text())  # the markdown, unwrapped
        assert "the check holds you to" in text, script.name
        assert "The course's code:" in text, f"{script.name} does not state the rule"
        assert "not the course's implementation of what the task asks" in text, script.name
