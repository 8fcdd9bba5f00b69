"""All five parallelisms in one training run: a tiny mixture-of-experts GPT (:mod:`.moe_gpt`:
every MLP a dropless MoE, causal attention) trained with d × t × p × cp (and ep folded over
them) on the groups of one :class:`minipar.grid.Grid`. Rank r with coordinates
(i_pp, i_dp, i_cp, i_tp) and expert coordinates (i_edp, i_ep) holds, from the one-process
model's weights:

  * **pp**: the layers of stage i_pp (:func:`minipar.pipeline_parallel.stage.partition_layers`),
    run by the course's 1F1B executor; embeddings on the first stage, the final LayerNorm and
    the tied output layer on the last;
  * **dp**: the micro-batches of sequences i_dp·m·b … (i_dp+1)·m·b of every global batch;
  * **cp**: zigzag sequence shard i_cp of those, attention exact by ring attention over cp;
  * **tp**: a/t heads of every attention (QKV column-, output row-parallel, Megatron);
  * **ep**: E/ep experts of every MoE layer. Before the MoE each TP rank keeps 1/t of its tokens
    ((b, s/cp, h) → (b, s/(cp·t), h)), so an expert group's ranks, TP and CP neighbours
    included, all bring different tokens; after it the TP group all-gathers the outputs back.

After backward, :func:`reduce_gradients` finishes what each rank's partial view leaves out
(Megatron-Core's finalize_model_grads): (1) the router saw only this TP rank's tokens: sum over
**tp**; (2) dense weights saw other sequences and positions: sum over **dp_cp**; (3) an expert's
gradient sums its EP group's tokens, and the edp ranks holding the same experts saw others: sum
over **edp**. Each rank's loss is the mean over its own tokens, the global loss the mean over
the d·cp ranks of distinct tokens, so both sums are divided by d·cp.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from minipar.context_parallel.block import RingParallelAttention
from minipar.context_parallel.sharding import positions, shard_sequence
from minipar.cost.chapters.context_parallel import ring_sent_bytes_per_layer
from minipar.cost.chapters.pipeline_parallel import pp_p2p_bytes_per_microbatch
from minipar.cost.chapters.tensor_parallel import tp_collectives_per_layer
from minipar.dist import allreduce_flat, group_rank, group_size
from minipar.expert_parallel import ExpertParallelMoE
from minipar.grid import Grid, new_groups
from minipar.model import GPTConfig, token_batches
from minipar.pipeline_parallel.executor import PipelineExecutor
from minipar.pipeline_parallel.schedules import schedule
from minipar.pipeline_parallel.stage import GPTStage, partition_layers
from minipar.runtime.tracer import trace
from minipar.tensor_parallel import (
    ColumnParallelLinear,
    ParallelAttention,
    RowParallelLinear,
    allreduce_sequence_parallel_grads,
    scatter_to_sp_region,
)
from minipar.tensor_parallel.mappings import gather_from_tp_ranks

from .moe_gpt import EXPERTS, TINY, TOP_K, MoEGPT, MoELayer, moe_gpt
from .train import Workload, max_diff, reference_run

LR = 0.01
BUGS = (None, "no_cp_grad_reduction", "experts_over_ep", "router_not_over_tp")


@dataclass(frozen=True)
class MoEWorkload(Workload):
    """:class:`~minipar.three_d.train.Workload` for the MoE GPT: its ``config``, ``experts`` per
    MoE layer, each token routed to ``top_k``; sequences sharded over cp in ``layout``."""

    config: GPTConfig = field(default_factory=lambda: TINY)
    experts: int = EXPERTS
    top_k: int = TOP_K
    layout: str = "zigzag"


# ------------------------------------------------------------------ this rank's part
class Layer5D(nn.Module):
    """One :class:`MoELayer`: attention over tp (heads) × cp (ring), experts over ep.
    x (b, s/cp, h), replicated over the TP group → same."""

    def __init__(self, layer: MoELayer, groups: dict, layout: str):
        super().__init__()
        tp = groups["tp"]
        self.tp = tp
        self.ln1, self.ln2 = copy.deepcopy(layer.ln1), copy.deepcopy(layer.ln2)
        base = ParallelAttention(
            ColumnParallelLinear.from_full(layer.qkv, tp, stride=3),
            RowParallelLinear.from_full(layer.proj, tp),
            layer.c,
        )
        self.attn = RingParallelAttention(base, groups["cp"], layout, causal=True)
        self.moe = ExpertParallelMoE.from_full(layer.moe, groups["ep"])
        self.moe.router.weight.sequence_parallel = True  # saw 1/t of the tokens: sum over tp

    def forward(self, x):  # x (b, s/cp, h)
        x = x + self.attn(self.ln1(x))  # g over tp, ring over cp
        y = scatter_to_sp_region(self.ln2(x), self.tp)  # (b, s/(cp·t), h)
        y = gather_from_tp_ranks(self.moe(y), self.tp)  # a2a over ep; (b, s/cp, h)
        return x + y


class Stage5D(GPTStage):
    """Pipeline stage ``i_p`` of ``model``, its layers :class:`Layer5D`: tokens
    (b, s/cp) on the first stage, else the received (b, s/cp, h); logits (b, s/cp, V) on the
    last stage, else the message."""

    def __init__(self, model: MoEGPT, i_p: int, p: int, groups: dict, layout: str = "zigzag"):
        super().__init__(model, i_p, p)
        self.cp_group, self.layout = groups["cp"], layout
        self.layers = nn.ModuleList(Layer5D(layer, groups, layout) for layer in self.layers)

    def forward(self, x):
        if self.first:  # tokens (b, s/cp)
            cp, r = group_size(self.cp_group), group_rank(self.cp_group)
            pos = positions(x.shape[1] * cp, cp, r, self.layout)  # (s/cp,) global
            x = self.tok(x) + self.pos(pos)  # (b, s/cp, h)
        for layer in self.layers:
            x = layer(x)
        return self.ln_f(x) @ self.head.T if self.last else x  # (b, s/cp, V)


def applies(bug: str | None, grid: Grid) -> bool:
    """Whether a negative control changes anything on ``grid`` (no cp to forget at cp = 1, no
    router split at t = 1, the ep and edp groups the same at one rank per stage)."""
    return {
        "no_cp_grad_reduction": grid.cp > 1,
        "router_not_over_tp": grid.t > 1,
        "experts_over_ep": grid.stage_size > 1,
    }.get(bug, True)


def _is_expert(name: str) -> bool:
    return name.endswith("moe.w1") or name.endswith("moe.w2")


def _all_reduce_mean(grads: list, group, divisor: int) -> int:
    """Sum ``grads`` over ``group`` in one flat all-reduce, divide by ``divisor``; elements
    (counted for a group of one too: the cost model's count does not depend on it)."""
    allreduce_flat(grads, group)
    for g in grads:
        g /= divisor
    return sum(g.numel() for g in grads)


def reduce_gradients(stage: Stage5D, groups: dict, grid: Grid, bug: str | None = None) -> dict:
    """The three reductions of the module docstring; returns the elements of each."""
    params = [(n, q) for n, q in stage.named_parameters() if q.grad is not None]
    router = (
        0 if bug == "router_not_over_tp" else allreduce_sequence_parallel_grads(stage, groups["tp"])
    )
    dense = [q.grad for n, q in params if not _is_expert(n)]
    experts = [q.grad for n, q in params if _is_expert(n)]
    if bug == "no_cp_grad_reduction":  # forgot cp: dp only, ÷ d
        n_dense = _all_reduce_mean(dense, groups["dp"], grid.d)
    else:
        n_dense = _all_reduce_mean(dense, groups["dp_cp"], grid.d * grid.cp)
    wrong = bug == "experts_over_ep"  # same shapes, other experts
    n_exp = _all_reduce_mean(experts, groups["ep" if wrong else "edp"], grid.d * grid.cp)
    return {"router": router, "dense": n_dense, "experts": n_exp}


def train_5d_on_rank(
    rank: int, world_size: int, grid: Grid, bugs=BUGS, work: MoEWorkload = MoEWorkload()
) -> dict:
    """Train the MoE GPT with all five parallelisms once per entry of ``bugs`` (None: correct;
    the others negative controls) and return, per entry, max |difference| from one process of
    the parameters after ``work.steps`` Adam steps and of the first step's gradients; for the correct
    run also the traffic per (group, op) and this rank's coordinates and reduced elements."""
    groups = new_groups(grid)
    c = grid.coord(rank)
    config, m, b, p, layout = work.config, work.m, work.b, grid.p, work.layout
    batches = token_batches(work.steps, grid.d * m * b, config)
    rows = slice(c.dp * m * b, (c.dp + 1) * m * b)  # this replica's sequences
    cpg = groups["cp"]
    local = [
        (shard_sequence(x[rows], 1, cpg, layout), shard_sequence(y[rows], 1, cpg, layout))
        for x, y in batches
    ]  # (m·b, s/cp) each
    build = lambda: moe_gpt(config, work.experts, work.top_k, dtype=work.dtype)
    _, ref_grads, ref_model = reference_run(build, batches)
    msg = (b, config.s // grid.cp, config.h)  # (b, s/cp, h)
    actions = schedule("1f1b", p, m)[c.pp]
    out = {}
    for bug in (x for x in bugs if applies(x, grid)):
        stage = Stage5D(build(), c.pp, p, groups, layout)
        opt = torch.optim.Adam(stage.parameters(), lr=LR)
        ex = PipelineExecutor(
            {c.pp: stage}, p, c.pp, p, m, group=groups["pp"], embedding_group=groups["embedding"]
        )
        tr = trace(dict(groups))
        grads0 = reduced = None
        with tr if bug is None else contextlib.nullcontext():
            for step, (x, y) in enumerate(local):
                opt.zero_grad()
                ex.run(actions, list(x.chunk(m)), list(y.chunk(m)), msg, work.dtype)
                reduced = reduce_gradients(stage, groups, grid, bug)
                if step == 0:
                    grads0 = [q.grad.clone() for q in stage.parameters()]
                opt.step()
        expected_grads = Stage5D(ref_grads, c.pp, p, groups, layout).parameters()
        expected = Stage5D(ref_model, c.pp, p, groups, layout).parameters()
        r = {
            "params": max_diff(list(stage.parameters()), list(expected)),
            "grads": max_diff(grads0, list(expected_grads)),
        }
        if bug is None:
            r["traffic"] = {f"{k}:{op}": v for (k, op), v in sorted(tr.by_group().items())}
            r["coord"], r["reduced"] = tuple(c), reduced
            r["layers"] = len(stage.layers)
        out[bug or "correct"] = r
    return out


# ------------------------------------------------------------------ the cost model's count
def expected_traffic(
    grid: Grid, i_p: int, reduced: dict, work: MoEWorkload = MoEWorkload()
) -> dict:
    """Bytes (nccl-tests sizes S, as :mod:`minipar.runtime.tracer` records them) one rank of
    stage ``i_p`` moves per group over ``work.steps`` steps, elements of ``work.dtype``; ``"ep"`` is the total of one EP group.
    ``reduced``: the elements :func:`reduce_gradients` reduced (router, dense, experts).

    tp  per layer and micro-batch four collectives of S = b·(s/cp)·h (Shoeybi et al. 2019 §3,
        :func:`minipar.cost.chapters.tensor_parallel.tp_collectives_per_layer`: the attention's f and g
        stay all-reduces; the MoE's split and gather replace the MLP's two by two all-gathers of
        the same S); and once per step the router's gradient;
    cp  ring attention's K/V sends, :func:`minipar.cost.chapters.context_parallel.ring_sent_bytes_per_layer`
        with h_kv = h/t (each TP rank's heads);
    pp  one (b, s/cp, h) message per micro-batch and direction of each boundary the rank has
        (:func:`minipar.cost.chapters.pipeline_parallel.pp_p2p_bytes_per_microbatch` counts both
        directions);
    ep  per layer and micro-batch, the count exchange (E int64) and four token all-to-alls
        whose inputs sum over the group to 4·ep·n·K rows, n = b·s/(cp·t) tokens per rank
        (Lepikhin et al. 2021 §3.2: dispatch and combine, each mirrored backward);
    dp_cp, edp  one all-reduce of the dense and of the expert gradients per step;
    embedding  the tied (V, h) gradient per step when p > 1.
    """
    c, B, m, b, steps = work.config, work.bytes_per_elem, work.m, work.b, work.steps
    L = len(partition_layers(c.L, grid.p)[i_p])
    sc, t = c.s // grid.cp, grid.t
    tp_per_layer = sum(S * calls for _, S, calls in tp_collectives_per_layer(b, sc, c.h, t, B))
    n = b * sc // t
    boundaries = (i_p > 0) + (i_p < grid.p - 1)  # pipeline links this stage has
    return {
        "tp": (tp_per_layer * L * m + (reduced["router"] * B if t > 1 else 0)) * steps,
        "cp:send": ring_sent_bytes_per_layer(b, c.s, c.h // t, grid.cp, B)["total"] * L * m * steps,
        "pp:send": pp_p2p_bytes_per_microbatch(b, sc, c.h, B) / 2 * m * steps * boundaries,
        "ep": (
            grid.ep * (work.experts * 8 + 4 * n * work.top_k * c.h * B) * L * m * steps
            if grid.ep > 1
            else 0
        ),
        "dp_cp": reduced["dense"] * B * steps if grid.d * grid.cp > 1 else 0,
        "edp": reduced["experts"] * B * steps if grid.stage_size // grid.ep > 1 else 0,
        "embedding": c.V * c.h * B * steps if grid.p > 1 else 0,
    }


def measured_traffic(results: list[dict], grid: Grid) -> list[dict]:
    """Per rank, the traced bytes in the keys of :func:`expected_traffic` (``"ep"`` summed over
    the rank's EP group)."""

    def total(tr, prefix):
        return sum(v[1] for k, v in tr.items() if k == prefix or k.startswith(prefix + ":"))

    out = []
    for r, res in enumerate(results):
        tr = res["correct"]["traffic"]
        row = {k: total(tr, k) for k in ("tp", "cp:send", "pp:send", "dp_cp", "edp", "embedding")}
        row["ep"] = sum(
            total(results[x]["correct"]["traffic"], "ep") for x in grid.group_of("ep", r)
        )
        out.append(row)
    return out


def summary(grid: Grid, results: list[dict]) -> dict:
    """What the notebook prints and glues: the worst parity of the correct run and of each
    negative control, every (rank, group) traffic figure measured and modelled, and their
    totals per kind of group (bytes over all ranks)."""
    rows = []
    for r, (res, got) in enumerate(zip(results, measured_traffic(results, grid))):
        ok = res["correct"]
        want = expected_traffic(grid, ok["coord"][0], ok["reduced"])
        rows += [(r, k, got[k], want[k]) for k in want]
    bugs = [b for b in results[0] if b != "correct"]
    totals: dict = {}  # per kind over all ranks (ep: over its groups)
    for r, kind, got, want in rows:
        if kind != "ep" or grid.group_of("ep", r)[0] == r:
            g, w = totals.get(kind, (0, 0))
            totals[kind] = (g + got, w + want)
    return {
        "params": max(x["correct"]["params"] for x in results),
        "grads": max(x["correct"]["grads"] for x in results),
        "bugs": {b: max(x[b]["params"] for x in results) for b in bugs},
        "traffic": rows,
        "totals": totals,
        "traffic_equal": sum(abs(g - w) <= 1e-12 * max(w, 1) for _, _, g, w in rows),
        "traffic_moving": sum(w > 0 for *_, w in rows),
    }
