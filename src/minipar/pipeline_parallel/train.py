"""Train the stage-split GPT with any schedule on ranks (:func:`train_rank`: m micro-batches
per batch through :class:`PipelineExecutor`, the loss scaled by 1/m) and in one process on the
whole batch (:func:`train_reference`): both take the same optimizer steps.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from minipar.data_parallel.train import make_optimizer
from minipar.model import GPTConfig, token_batches  # noqa: F401  (token_batches: chapter name)

from .executor import LastStageLoss, PipelineExecutor
from .schedules import schedule
from .stage import build_stages, reference_model


def small_config(L: int = 8) -> GPTConfig:
    """A GPT small enough for many runs on a CPU: L layers, h = 8, 2 heads, s = 4, V = 16."""
    return GPTConfig(L=L, h=8, a=2, s=4, V=16, dropout=0.0)


def train_reference(c: GPTConfig, batches, optimizer: str = "adam", dtype=torch.float64):
    """One process, whole batch: (losses, first-step gradients, final parameters) by name."""
    model = reference_model(c, dtype=dtype)
    opt = make_optimizer(optimizer)(model.parameters())
    losses, grads = [], None
    for x, y in batches:
        opt.zero_grad()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())  # (B·s, V) vs (B·s,)
        loss.backward()
        if grads is None:
            grads = {n: q.grad.clone() for n, q in model.named_parameters()}
        opt.step()
        losses.append(loss.item())
    return losses, grads, {n: q.detach().clone() for n, q in model.named_parameters()}


@dataclass
class RankResult:
    losses: list  # per step, mean over micro-batches (last stage only, else [])
    grads: dict  # first step's gradients by reference name
    params: dict  # final parameters by reference name
    peak_in_flight: int  # high-water of (stage, micro-batch) activations held, first step
    peak_saved_bytes: int
    timeline: list  # first step's (rank, action, start, end)
    sends: tuple = (0, 0)  # first step's p2p sends (messages, bytes), when traced


def embedding_group(p: int):
    """The first and last stage's ranks {0, p−1}; every rank must call this (new_group)."""
    if p == 1:
        return None
    return dist.new_group([0, p - 1])


@dataclass(frozen=True)
class TrainOptions:
    """How :func:`train_rank` trains, beyond the schedule and the data: the optimizer ("sgd" or
    "adam"), the executor class (a negative control's subclass), explicit ``actions`` (one list
    per rank) instead of the named schedule's, the last stage's loss scale (None: 1/m), the
    tied embedding's group ("auto": ranks {0, p−1}), the dtype, and whether to record the
    first step's sends with :class:`minipar.runtime.tracer.trace`."""

    optimizer: str = "adam"
    executor_cls: type = PipelineExecutor
    actions: list | None = None
    loss_scale: float | None = None
    emb_group: Any = "auto"
    dtype: torch.dtype = torch.float64
    trace_first_step: bool = False


def train_rank(
    rank: int,
    p: int,
    name: str,
    m: int,
    v: int,
    c: GPTConfig,
    batches,
    opts: TrainOptions | None = None,
):
    """Train on rank ``rank`` of p with schedule ``name`` (or ``opts.actions``); each batch of
    B = m·b sequences is cut into m micro-batches of b. Returns this rank's :class:`RankResult`."""
    from minipar.runtime.tracer import trace  # noqa: PLC0415 (lazy: tracer)

    o = opts or TrainOptions()
    dtype = o.dtype
    stages = build_stages(c, rank, p, v, dtype=dtype)
    group = embedding_group(p) if o.emb_group == "auto" else o.emb_group
    params = list({id(q): q for st in stages.values() for q in st.parameters()}.values())
    opt = make_optimizer(o.optimizer)(params)
    lists = o.actions or schedule(name, p, m, v)
    acts = lists[rank]
    loss = LastStageLoss(scale=o.loss_scale)
    ex = o.executor_cls(stages, v * p, rank, p, m, embedding_group=group, loss=loss)
    named = {n: q for st in stages.values() for n, q in st.reference_names().items()}
    out = RankResult([], {}, {}, 0, 0, [])
    for step, (x, y) in enumerate(batches):
        if x.shape[0] % m:
            raise ValueError(f"batch ({x.shape[0]}) must be divisible by micro-batches m ({m})")
        b = x.shape[0] // m
        opt.zero_grad()
        with trace() if o.trace_first_step and step == 0 else nullcontext() as tr:
            rec = ex.run(
                acts, list(x.chunk(m)), list(y.chunk(m)), (b, c.s, c.h), dtype, all_actions=lists
            )
        if tr is not None:
            sends = [e for e in tr.events if e.op == "send"]
            out.sends = (len(sends), sum(e.bytes for e in sends))
        if rec.losses:
            out.losses.append(sum(rec.losses) / m)
        if step == 0:
            out.grads = {n: q.grad.clone() for n, q in named.items() if q.grad is not None}
            out.peak_in_flight, out.peak_saved_bytes = rec.peak_in_flight, rec.peak_saved_bytes
            out.timeline = rec.timeline
        opt.step()
    out.params = {n: q.detach().clone() for n, q in named.items()}
    return out


def max_error(ranks: list[RankResult], ref: dict, what: str = "params") -> float:
    """Largest |pipeline − reference| over every parameter every rank holds (relative to the
    reference's largest entry of that tensor); every reference parameter must be held."""
    seen, worst = set(), 0.0
    for r in ranks:
        for n, t in getattr(r, what).items():
            seen.add(n)
            worst = max(worst, ((t - ref[n]).abs().max() / ref[n].abs().max()).item())
    missing = set(ref) - seen
    if missing:
        raise AssertionError(f"reference parameters not held by any rank: {sorted(missing)}")
    return worst
