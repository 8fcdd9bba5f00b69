"""3D training from the chapters' own pieces: pipeline stages (minipar.pipeline_parallel) whose
layers are tensor-parallel blocks (minipar.tensor_parallel), each stage's parameters trained by
ZeRO-1 over its data-parallel group (minipar.data_parallel), on the groups of one RankGrid.

Rank r with grid coordinates (i_p, i_d, i_t):
  * builds the whole GPT from seed 0 and keeps pipeline stage i_p (``GPTStage``), with every
    layer replaced by its i_t-th ``ParallelBlock`` shard over the TP group; embeddings, final
    layer norm and the tied output layer stay replicated over the TP group (their inputs are
    identical on every TP rank, so are their gradients);
  * takes slice i_d of every global batch and runs the 1F1B schedule over m micro-batches with
    ``PipelineExecutor`` on its PP group (which also all-reduces the tied embedding's gradient
    in the embedding group);
  * steps with ``ZeRO(stage, 1, Adam)`` over its DP group: reduce-scatter of the gradient,
    Adam on its shard, all-gather of the parameters.

Every rank also trains the one-process reference (the whole GPT on the whole batch) and compares
with its own shard of it: losses and gradients of the first step on its own micro-batches, and
parameters after the last step. The tracer records the three groups' traffic separately.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from minipar.data_parallel.zero import ZeRO
from minipar.memory_time.gpt import GPT, GPTConfig
from minipar.pipeline_parallel.executor import PipelineExecutor
from minipar.pipeline_parallel.schedules import schedule
from minipar.pipeline_parallel.stage import GPTStage
from minipar.pipeline_parallel.train import token_batches
from minipar.tensor_parallel import ParallelBlock
from minipar.tensor_parallel.experiments import grads_as_module
from minipar.tracer import trace

from .grid import RankGrid, new_groups

SMALL = GPTConfig(L=4, h=8, a=2, s=4, V=16, dropout=0.0)
LR = 0.01
BUGS = (None, "swapped_groups", "no_embedding_allreduce")


def stage_3d(full: GPT, i_p: int, p: int, tp_group) -> GPTStage:
    """Pipeline stage ``i_p`` of ``full`` with its layers sharded over ``tp_group``."""
    st = GPTStage(full, i_p, p)
    st.layers = nn.ModuleList(ParallelBlock.from_full(layer, tp_group) for layer in st.layers)
    return st


def _max_diff(ours, expected) -> float:
    return max((a.detach() - b.detach()).abs().max().item() for a, b in zip(ours, expected))


def _reference(batches, rows: slice, m: int, dtype):
    """One process: first-step losses per micro-batch and gradients on ``rows`` of the first
    batch (a fresh model), and the model after Adam on every whole batch."""
    torch.manual_seed(0)
    model = GPT(SMALL).to(dtype)
    x, y = batches[0][0][rows], batches[0][1][rows]
    losses = [F.cross_entropy(model(xm).flatten(0, 1), ym.flatten()).item()
              for xm, ym in zip(x.chunk(m), y.chunk(m))]
    F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
    grads = grads_as_module(model)
    model.zero_grad()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    for xb, yb in batches:
        opt.zero_grad()
        F.cross_entropy(model(xb).flatten(0, 1), yb.flatten()).backward()   # (B·s, V)
        opt.step()
    return losses, grads, model


def train_3d_on_rank(rank: int, world_size: int, d: int, t: int, p: int, bugs=BUGS, *,
                     m: int = 2, b: int = 2, steps: int = 3, dtype=torch.float64) -> dict:
    """Train 3D on this rank once per entry of ``bugs`` (None = correct; the others are
    negative controls) and return, per entry, the parity maxima against the reference; for the
    correct run also the traced traffic per group and ZeRO's measured state bytes."""
    grid = RankGrid(d, t, p)
    groups = new_groups(grid)
    c = grid.coord(rank)
    B = d * m * b
    batches = token_batches(steps, B, SMALL)
    rows = slice(c.dp * m * b, (c.dp + 1) * m * b)           # this replica's sequences
    ref_losses, ref_grads, ref_model = _reference(batches, rows, m, dtype)
    out = {}
    for bug in bugs:
        tp_group, dp_group = (groups.dp, groups.tp) if bug == "swapped_groups" else \
            (groups.tp, groups.dp)
        emb = None if bug == "no_embedding_allreduce" else groups.embedding
        torch.manual_seed(0)
        stage = stage_3d(GPT(SMALL).to(dtype), c.pp, p, tp_group)
        zero = ZeRO(stage, 1, lambda ps: torch.optim.Adam(ps, lr=LR), group=dp_group)
        ex = PipelineExecutor({c.pp: stage}, p, c.pp, p, m, group=groups.pp,
                              embedding_group=emb)
        actions = schedule("1f1b", p, m)[c.pp]
        pipe_events, dp_events, losses, grads0 = [], [], [], None
        for step, (x, y) in enumerate(batches):
            zero.zero_grad()
            with trace() as tr:
                rec = ex.run(actions, list(x[rows].chunk(m)), list(y[rows].chunk(m)),
                             (b, SMALL.s, SMALL.h), dtype)
            pipe_events += tr.events
            if step == 0:
                losses = rec.losses
                grads0 = [q.grad.clone() for q in stage.parameters()]
            with trace() as tr:
                zero.step()
            dp_events += tr.events
        expected_grads = stage_3d(ref_grads, c.pp, p, groups.tp).parameters()
        expected_params = stage_3d(ref_model, c.pp, p, groups.tp).parameters()
        r = {"params": _max_diff(list(stage.parameters()), list(expected_params)),
             "grads": _max_diff(grads0, list(expected_grads)),
             "loss": max((abs(a - e) for a, e in zip(losses, ref_losses)), default=0.0)}
        if bug is None:
            emb_bytes = SMALL.V * SMALL.h * torch.finfo(dtype).bits // 8
            ar = [e for e in pipe_events if e.op == "all_reduce"]
            r["traffic"] = {
                "tp_all_reduce": sum(e.bytes for e in ar if e.bytes != emb_bytes),
                "tp_calls": sum(1 for e in ar if e.bytes != emb_bytes),
                "embedding_all_reduce": sum(e.bytes for e in ar if e.bytes == emb_bytes),
                "pp_send": sum(e.bytes for e in pipe_events if e.op == "send"),
                "dp": {op: sum(e.bytes for e in dp_events if e.op == op)
                       for op in sorted({e.op for e in dp_events})},
            }
            r["state_bytes"], r["flat_numel"] = zero.state_bytes(), zero.P
            r["coord"] = tuple(c)
        out[bug or "correct"] = r
    return out
