"""3D training from the chapters' own pieces, composed as Megatron-LM composes them: pipeline
stages (minipar.pipeline_parallel) of tensor-parallel blocks with sequence parallelism
(minipar.tensor_parallel), each stage trained by ZeRO-1 over its data-parallel group
(minipar.data_parallel), on the groups of one RankGrid.

Rank r with grid coordinates (i_p, i_d, i_t) builds the whole GPT from seed 0 and keeps pipeline
stage i_p (:class:`Stage3D`), every layer its i_t-th ``ParallelBlock`` shard (embeddings, final
layer norm and the tied output layer replicated over TP); it takes slice i_d of every global
batch, runs 1F1B over m micro-batches with ``PipelineExecutor`` on its PP group (which also
all-reduces the tied embedding's gradient in the embedding group), and steps with
``ZeRO(stage, 1, Adam)`` over its DP group.

Stage messages (``mode``):
  ``"sp"``              sequence parallelism inside TP (Korthikanti et al. 2022 §4.2.2): each TP
                        rank sends its (b, s/t, h) slice, Narayanan et al. 2021 §4.1's
                        scatter/gather for free; the layer-norm and row-bias gradients are then
                        summed over TP (``allreduce_sequence_parallel_grads``).
  ``"scatter_gather"``  Narayanan et al. 2021 §4.1 without SP: the sender keeps 1/t of the
                        replicated (b, s, h) output, the receiver all-gathers over TP (fast link).
  ``"full"``            every TP rank sends the whole (b, s, h): t copies over the pipeline link.

Every rank also trains the one-process reference and compares with its own shard of it (first
step's losses and gradients, parameters after the last step); :mod:`minipar.runtime.tracer`
attributes every traced call to its process group (tp, dp, pp, embedding) by identity.
:func:`fsdp2_tp_on_rank` composes PyTorch's own pieces the torchtitan way (``parallelize_module``
over ``tp``, then ``fully_shard`` over ``dp``) and compares them with the course's TP + ZeRO-3.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from minipar.data_parallel.zero import ZeRO
from minipar.model import GPT, GPTConfig, token_batches
from minipar.pipeline_parallel.executor import PipelineExecutor
from minipar.pipeline_parallel.schedules import schedule
from minipar.pipeline_parallel.stage import GPTStage
from minipar.runtime.tracer import trace
from minipar.tensor_parallel import ParallelBlock
from minipar.tensor_parallel.block import allreduce_sequence_parallel_grads
from minipar.tensor_parallel.dtensor import MLPBlock, ours, shard_of
from minipar.tensor_parallel.mappings import gather_from_tp_ranks, scatter_to_sp_region

from .grid import RankGrid, new_groups

SMALL = GPTConfig(L=4, h=12, a=6, s=6, V=16, dropout=0.0)  # s and a divisible by t = 2, 3
LR = 0.01
MODES = ("sp", "scatter_gather", "full")
BUGS = (None, "swapped_groups", "no_embedding_allreduce", "no_sp_grad_allreduce")


@dataclass(frozen=True)
class Workload:
    """What every rank trains: the GPT ``config``; per data-parallel replica and step ``m``
    micro-batches of ``b`` sequences; ``steps`` Adam steps, in ``dtype``."""

    config: GPTConfig = field(default_factory=lambda: SMALL)  # GPTConfig is not hashable
    m: int = 2
    b: int = 2
    steps: int = 3
    dtype: torch.dtype = torch.float64

    @property
    def bytes_per_elem(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()


class Stage3D(nn.Module):
    """Pipeline stage ``i_p`` of ``full`` with its layers sharded over ``tp_group``.

    Input: tokens (b, s) on the first stage, else the received message; output: logits
    (b, s, V) on the last stage, else the message sent on. Messages are (b, s/t, h) in modes
    ``sp`` and ``scatter_gather``, (b, s, h) in ``full``."""

    def __init__(self, full: GPT, i_p: int, p: int, tp_group, mode: str = "sp"):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode ({mode!r}) must be one of {', '.join(MODES)}")
        self.inner, self.mode, self.group = GPTStage(full, i_p, p), mode, tp_group
        sp = mode == "sp"
        self.inner.layers = nn.ModuleList(
            ParallelBlock.from_full(layer, tp_group, sequence_parallel=sp)
            for layer in self.inner.layers
        )

    def forward(self, x):
        st, g = self.inner, self.group
        if st.first:  # tokens (b, s)
            x = st.tok(x) + st.pos(torch.arange(x.shape[1], device=x.device))  # (b, s, h)
            if self.mode == "sp":
                x = scatter_to_sp_region(x, g)  # (b, s/t, h)
        elif self.mode == "scatter_gather":
            x = gather_from_tp_ranks(x, g)  # (b, s/t, h) -> (b, s, h)
        for layer in st.layers:
            x = layer(x)  # (b, s/t, h) under SP
        if st.last:
            if self.mode == "sp":
                x = gather_from_tp_ranks(x, g)  # (b, s, h)
            return st.ln_f(x) @ st.head.T  # (b, s, V)
        if self.mode == "scatter_gather":
            x = scatter_to_sp_region(x, g)  # (b, s, h) -> (b, s/t, h)
        return x  # the message

    def tied_weight(self):
        return self.inner.tied_weight()


def max_diff(ours, expected) -> float:
    """The largest |a − b| over paired tensors (parameters, gradients) of two lists."""
    return max((a.detach() - b.detach()).abs().max().item() for a, b in zip(ours, expected))


def ce_loss(model, x, y):
    """The mean cross-entropy of ``model``'s logits (B, s, V) for next tokens ``y`` (B, s)."""
    return F.cross_entropy(model(x).flatten(0, 1), y.flatten())  # (B·s, V)


def reference_run(build, batches, rows: slice = slice(None), m: int = 1):
    """One process on a fresh ``build()``: the first-step losses per micro-batch and gradients
    (as a model whose weights are them) on ``rows`` of the first batch, and the model after
    Adam on every whole batch."""
    model = build()
    x, y = batches[0][0][rows], batches[0][1][rows]
    losses = [ce_loss(model, xm, ym).item() for xm, ym in zip(x.chunk(m), y.chunk(m))]
    ce_loss(model, x, y).backward()
    grads = build()  # a copy whose weights are the gradients
    for g, q in zip(grads.parameters(), model.parameters()):
        g.data = q.grad.detach().clone()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    for xb, yb in batches:
        opt.zero_grad()
        ce_loss(model, xb, yb).backward()
        opt.step()
    return losses, grads, model


def seeded_gpt(config: GPTConfig, dtype) -> GPT:
    """The course's GPT from seed 0: every rank and the reference build the same weights."""
    torch.manual_seed(0)
    return GPT(config).to(dtype)


def train_3d_on_rank(
    rank: int,
    world_size: int,
    grid: RankGrid,
    bugs=BUGS,
    mode: str = "sp",
    work: Workload = Workload(),
) -> dict:
    """Train 3D on this rank once per entry of ``bugs`` (None = correct; the others are
    negative controls) and return, per entry, the parity maxima against the reference; for the
    correct run also the traced traffic per (group, op) and ZeRO's measured state bytes."""
    groups = new_groups(grid)
    c = grid.coord(rank)
    config, m, b, dtype = work.config, work.m, work.b, work.dtype
    d, t, p = grid.d, grid.t, grid.p
    batches = token_batches(work.steps, d * m * b, config)
    rows = slice(c.dp * m * b, (c.dp + 1) * m * b)  # this replica's sequences
    build = lambda: seeded_gpt(config, dtype)
    ref_losses, ref_grads, ref_model = reference_run(build, batches, rows, m)
    msg = (b, config.s if mode == "full" else config.s // t, config.h)  # (b, s/t, h)
    out = {}
    for bug in bugs:
        if (bug == "no_sp_grad_allreduce" and mode != "sp") or (
            bug == "swapped_groups" and d != t
        ):  # would crash, not mislead
            continue
        tp_group, dp_group = (
            (groups.dp, groups.tp) if bug == "swapped_groups" else (groups.tp, groups.dp)
        )
        emb = None if bug == "no_embedding_allreduce" else groups.embedding
        stage = Stage3D(build(), c.pp, p, tp_group, mode)
        zero = ZeRO(stage, 1, lambda ps: torch.optim.Adam(ps, lr=LR), group=dp_group)
        ex = PipelineExecutor({c.pp: stage}, p, c.pp, p, m, group=groups.pp, embedding_group=emb)
        actions = schedule("1f1b", p, m)[c.pp]
        tr = trace(groups._asdict())  # traced for the correct run only (costly)
        losses, grads0 = [], None
        with tr if bug is None else contextlib.nullcontext():
            for step, (x, y) in enumerate(batches):
                zero.zero_grad()
                rec = ex.run(actions, list(x[rows].chunk(m)), list(y[rows].chunk(m)), msg, dtype)
                if mode == "sp" and bug != "no_sp_grad_allreduce":
                    allreduce_sequence_parallel_grads(stage, tp_group)  # LN, row biases
                if step == 0:
                    losses = rec.losses
                    grads0 = [q.grad.clone() for q in stage.parameters()]
                zero.step()
        ref_stage = Stage3D(ref_grads, c.pp, p, groups.tp, mode)
        expected_params = Stage3D(ref_model, c.pp, p, groups.tp, mode).parameters()
        r = {
            "params": max_diff(list(stage.parameters()), list(expected_params)),
            "grads": max_diff(grads0, list(ref_stage.parameters())),
            "loss": max((abs(a - e) for a, e in zip(losses, ref_losses)), default=0.0),
        }
        if bug is None:
            r["traffic"] = {f"{k}:{op}": v for (k, op), v in sorted(tr.by_group().items())}
            r["state_bytes"], r["flat_numel"] = zero.state_bytes(), zero.P
            r["sp_numel"] = sum(
                q.numel() for q in stage.parameters() if getattr(q, "sequence_parallel", False)
            )
            r["coord"] = tuple(c)
        out[bug or "correct"] = r
    return out


# ------------------------------------------------------------------ FSDP2 + TP, torchtitan's way
@dataclass(frozen=True)
class MLPWorkload:
    """The FSDP2 + TP comparison's data: ``b`` sequences of ``s`` positions and width ``h`` per
    data-parallel replica, ``steps`` Adam steps, in ``dtype``."""

    h: int = 8
    b: int = 2
    s: int = 3
    steps: int = 3
    dtype: torch.dtype = torch.float64


def _mlp_model(h: int, dtype) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(MLPBlock(h), MLPBlock(h)).to(dtype)


def _mlp_loss(model, x):
    return model(x).square().mean()


def _adam_steps(model, data, rows) -> None:
    """One process or FSDP2: plain Adam on ``x[rows]`` of every batch."""
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    for x in data:
        opt.zero_grad()
        _mlp_loss(model, x[rows]).backward()
        opt.step()


def _fsdp2_over_tp(mesh, work: MLPWorkload, data, rows, tr) -> dict:
    """torchtitan: TP first, then FSDP outermost (per block, then the root); the full
    parameters after training, by name."""
    model = _mlp_model(work.h, work.dtype)
    for blk in model:
        parallelize_module(blk, mesh["tp"], {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
        fully_shard(blk, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    with tr:
        _adam_steps(model, data, rows)
    return {n: q.full_tensor() for n, q in model.named_parameters()}


def _course_tp_zero3(groups, work: MLPWorkload, data, rows) -> tuple[dict, int]:
    """The course: TP layers over the grid's TP group, ZeRO-3 over its DP group; this rank's
    parameters after training by name, and their element count."""
    torch.manual_seed(0)
    mine = nn.Sequential(*(ours(blk, groups.tp) for blk in _mlp_model(work.h, work.dtype)))
    zero = ZeRO(mine, 3, lambda ps: torch.optim.Adam(ps, lr=LR), group=groups.dp)
    for x in data:
        zero.zero_grad()
        _mlp_loss(mine, x[rows]).backward()
        zero.step()
    names = [n for n, _ in mine.named_parameters()]
    return dict(zip(names, zero.full_parameters())), sum(q.numel() for q in mine.parameters())


def fsdp2_tp_on_rank(
    rank: int,
    world_size: int,
    d: int,
    t: int,
    bug: str | None = None,
    work: MLPWorkload = MLPWorkload(),
) -> dict:
    """Two MLP blocks (LN → fc1 → GeLU → fc2, residual) on a (d, t) grid, trained ``work.steps``
    Adam steps on the same global batch of d·b sequences three ways: one process (the
    reference); torchtitan's (a (dp, tp) ``DeviceMesh``, fc1 ``ColwiseParallel`` and fc2
    ``RowwiseParallel`` over ``tp``, then ``fully_shard`` per block and on the root over ``dp``);
    the course's (``Column``/``RowParallelLinear`` over the TP group, ``ZeRO(model, 3, Adam)``
    over the DP group).

    Returns max |difference| of the final parameters, FSDP2 vs one process, course vs one process
    and FSDP2 vs course (on this rank's TP shards), and the FSDP2 run's traffic per mesh
    dimension. ``bug="data_by_tp_rank"``, the negative control: each rank takes its batch slice
    by its TP index instead of its DP index, so the ranks of one TP group see different data."""
    grid = RankGrid(d, t, 1)
    groups = new_groups(grid)
    c = grid.coord(rank)
    mesh = device_mesh.init_device_mesh("cpu", (d, t), mesh_dim_names=("dp", "tp"))
    assert sorted(dist.get_process_group_ranks(mesh["tp"].get_group())) == grid.group_of("tp", rank)
    g = torch.Generator().manual_seed(1)
    b, shape = work.b, (d * work.b, work.s, work.h)
    data = [torch.randn(*shape, generator=g, dtype=work.dtype) for _ in range(work.steps)]
    slot = c.tp % d if bug == "data_by_tp_rank" else c.dp
    rows = slice(slot * b, (slot + 1) * b)

    ref = _mlp_model(work.h, work.dtype)
    _adam_steps(ref, data, slice(None))
    tr = trace(
        [*groups._asdict().items(), ("dp", mesh["dp"].get_group()), ("tp", mesh["tp"].get_group())]
    )
    fsdp_full = _fsdp2_over_tp(mesh, work, data, rows, tr)
    mine, params_local = _course_tp_zero3(groups, work, data, rows)

    refp = dict(ref.named_parameters())
    diff = lambda a, e: (a.detach() - e.detach()).abs().max().item()
    sh = lambda n, full: shard_of(n, full, c.tp, t)
    return {
        "fsdp2-ref": max(diff(fsdp_full[n], refp[n]) for n in refp),
        "ours-ref": max(diff(mine[n], sh(n, refp[n])) for n in refp),
        "fsdp2-ours": max(diff(sh(n, fsdp_full[n]), mine[n]) for n in refp),
        "traffic": {f"{k}:{op}": v for (k, op), v in sorted(tr.by_group().items())},
        "params_local": params_local,  # this rank's TP shards
    }
