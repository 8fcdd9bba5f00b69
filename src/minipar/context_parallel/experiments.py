"""Rank functions behind the chapter's tests and notebook (``*_on_rank(rank, cp, ...)`` under
:func:`minipar.runtime.launch.run`, the CP group the whole world): parity with one process,
negative controls, traffic, causal load balance, activation memory and a ring-step timeline.
Errors are relative, max |ours − reference| / max |reference|, in float64.
"""

from __future__ import annotations

import functools
import math
from unittest import mock

import torch
import torch.distributed as dist
from torch.utils.flop_counter import FlopCounterMode

from minipar.grid import Grid, new_groups
from minipar.memory_time.activations import saved_bytes
from minipar.model import GPT, GPTConfig, Layer
from minipar.runtime.timing import one_rank_at_a_time, timed

from . import ring as ring_module
from .block import (
    ContextParallelGPT,
    ContextTensorParallelBlock,
    allreduce_cp_grads,
    cp_attention,
    full_gpt_loss,
    full_layer_forward,
)
from .online_softmax import block_attention, expand_kv, full_attention, merge_blocks
from .ring import Mask, RingOptions, ring_attention
from .sharding import (
    chunk_ids,
    chunks_per_rank,
    document_ids,
    gather_sequence,
    positions,
    shard_sequence,
)

METHODS = (("ring", "contiguous"), ("ring", "zigzag"), ("ulysses", "contiguous"))


def rel_diff(ours, ref) -> float:
    return ((ours - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()


def qkv(b=2, a=6, s=24, d=8, *, a_kv=None, logit=1e3, seed=0, dtype=torch.float64):
    """Random q (b, a, s, d), k and v (b, a_kv, s, d) (a_kv: default a), drawn in float64 and
    returned in ``dtype``, whose largest |q·k|/√d is about ``logit``."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(b, h, s, d) for h in (a, a_kv or a, a_kv or a)]
    q, k, v = (torch.randn(*shape, generator=g, dtype=torch.float64) for shape in shapes)
    z = (q @ expand_kv(k, a).transpose(-2, -1)).abs().max() / math.sqrt(d)
    q = q * math.sqrt(logit / z)
    k = k * math.sqrt(logit / z)
    return tuple(t.to(dtype) for t in (q, k, v))


def run_method(method, qkv, mask: Mask, group=None, **kw):
    """``method``'s output shard of this rank's shards ``qkv`` = (q, k, v) (ring, allgather,
    ulysses) under ``mask``; ``kw``: :func:`.block.cp_attention`'s."""
    causal, layout, documents = mask
    return cp_attention(
        *qkv, causal=causal, group=group, attention=method, layout=layout, documents=documents, **kw
    )


def errors(method, layout, inputs, *, causal=True, documents=None, **kw) -> dict:
    """{out, dq, dk, dv}: ``method`` on ``inputs`` = (q, k, v) against one process in float64
    (the reference takes the same, possibly rounded, inputs, so only the parallel computation's
    error is measured). ``kw``: :func:`run_method`'s."""
    q, k, v = inputs
    doc_ids = None if documents is None else document_ids(documents, q.shape[2])
    qr, kr, vr = (t.detach().double().clone().requires_grad_() for t in (q, k, v))
    ref = full_attention(qr, kr, vr, causal, doc_ids)
    dout = torch.randn(ref.shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    ref.backward(dout)
    ql, kl, vl = (shard_sequence(t, 2, None, layout).requires_grad_() for t in (q, k, v))
    out = run_method(method, (ql, kl, vl), Mask(causal, layout, documents), **kw)
    out.backward(shard_sequence(dout.to(q.dtype), 2, None, layout))
    full = lambda t: gather_sequence(t.detach(), 2, None, layout).double()
    return {
        "out": rel_diff(full(out), ref),
        "dq": rel_diff(full(ql.grad), qr.grad),
        "dk": rel_diff(full(kl.grad), kr.grad),
        "dv": rel_diff(full(vl.grad), vr.grad),
    }


def attention_parity_on_rank(rank, cp, logit=1e3):
    """{"ring/contiguous/causal": max error over out, dq, dk, dv, ...} for every method."""
    out = {}
    for method, layout in METHODS:
        for causal in (False, True):
            e = errors(method, layout, qkv(a=12, logit=logit), causal=causal)
            out[f"{method}/{layout}/{'causal' if causal else 'full'}"] = max(e.values())
    return out


def merge_without_lse(o_a, lse_a, o_b, lse_b):
    """The classic bug: average the blocks' normalised outputs, ignoring how much softmax mass
    each block carries."""
    return (o_a + o_b) / 2, torch.maximum(lse_a, lse_b)


def plan_local_positions(q_ids, k_ids, causal):
    """The classic bug: every block masked by local position (as if each block were the
    diagonal one), ignoring where the block sits in the sequence."""
    for i in range(len(q_ids)):
        for j in range(len(k_ids)):
            yield i, j, "causal" if causal else "full"


def controls_on_rank(rank, cp):
    """Ring attention with each classic bug, against the same reference."""
    err = lambda layout, causal: max(errors("ring", layout, qkv(a=12), causal=causal).values())
    with mock.patch.object(ring_module, "merge_blocks", merge_without_lse):
        out = {"merge without lse": err("contiguous", False)}
    with mock.patch.object(ring_module, "plan", plan_local_positions):
        for layout in ("contiguous", "zigzag"):
            out[f"causal by local position/{layout}"] = err(layout, True)
    return out


def small_gpt(s=24, a=12, L=2, h=48, seed=0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(L=L, h=h, a=a, s=s, V=50, dropout=0.0)).double()


def batch(b=2, s=24, V=50, seed=3):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, V, (b, s + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]  # inputs, next-token targets


def max_param_diff(a, b) -> float:
    """Largest relative difference between same-named parameters of two models."""
    theirs = dict(b.named_parameters())
    return max(rel_diff(p, theirs[name]) for name, p in a.named_parameters())


def gpt_training_on_rank(
    rank, world, attention="ring", layout="contiguous", causal=True, steps=3, finish=True, dp=1
):
    """Max relative loss and parameter differences after ``steps`` Adam steps of the CP GPT
    against one process on the whole batch. ``dp`` > 1: CP × DP on a :class:`minipar.grid.Grid`,
    CP innermost (tp → cp → dp), each DP replica taking its 2 sequences of the global batch;
    every rank's loss is its share of the global mean, so one all-reduce over the combined
    dp × cp group sums the gradients (``finish="cp"``, the classic bug: over the CP group only,
    the replicas never averaged; ``finish=False``: not summed at all)."""
    cpg, reduce, di = None, None, 0  # the world, replica 0
    if dp > 1:
        grid = Grid(d=dp, cp=world // dp)  # rank = i_dp·cp + i_cp
        groups = new_groups(grid, ("cp", "dp_cp"))
        di, cpg = grid.coord(rank).dp, groups["cp"]
        reduce = cpg if finish == "cp" else groups["dp_cp"]
    ref = small_gpt()
    cpm = ContextParallelGPT(ref, cpg, attention=attention, layout=layout, causal=causal)
    opt_r = torch.optim.Adam(ref.parameters(), lr=1e-2)
    opt_c = torch.optim.Adam(cpm.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        x, y = batch(b=2 * dp, seed=3 + step)  # the global batch (2·dp, s)
        loss_r = full_gpt_loss(ref, x, y, causal)
        loss_r.backward()
        mine = slice(2 * di, 2 * di + 2)  # this replica's 2 sequences
        xl, yl = (shard_sequence(t[mine], 1, cpg, layout) for t in (x, y))
        loss_c = cpm.loss(xl, yl) / dp  # this rank's share of the global mean
        loss_c.backward()
        if finish:
            allreduce_cp_grads(cpm, reduce)
        summed = loss_c.detach().clone()
        dist.all_reduce(summed)
        losses.append(abs(summed.item() - loss_r.item()) / abs(loss_r.item()))
        opt_r.step(), opt_c.step(), opt_r.zero_grad(), opt_c.zero_grad()
    return {"loss": max(losses), "params": max_param_diff(cpm, ref)}


def cp_tp_on_rank(rank, world, cp=2, layout="zigzag", steps=3):
    """CP × TP on cp·t ranks of a :class:`minipar.grid.Grid`, TP innermost: a ContextTensorParallelBlock
    trained against one full layer; returns the max relative error of outputs, input grads and
    each rank's weight shard after ``steps`` SGD steps."""
    groups = new_groups(Grid(t=world // cp, cp=cp), ("tp", "cp"))  # rank = i_cp·t + i_tp
    tp, cpg = groups["tp"], groups["cp"]
    torch.manual_seed(0)
    c = GPTConfig(L=1, h=48, a=6, s=24, V=50, dropout=0.0)
    layer = Layer(c).double()
    block = ContextTensorParallelBlock.from_layers(layer, tp, cpg, layout=layout, causal=True)
    block0 = ContextTensorParallelBlock.from_layers(layer, tp, cpg, layout=layout)
    ref = layer  # one process: full_layer_forward
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt_b = torch.optim.SGD(block.parameters(), lr=0.1)
    errs = {"out": 0.0, "dx": 0.0}
    for step in range(steps):
        g = torch.Generator().manual_seed(10 + step)
        x = torch.randn(2, c.s, c.h, generator=g, dtype=torch.float64).requires_grad_()
        y = full_layer_forward(ref, x, causal=True)
        y.square().sum().div(y.numel()).backward()  # mean of squares over all tokens
        xl = shard_sequence(x.detach(), 1, cpg, layout).requires_grad_()
        yl = block(xl)
        yl.square().sum().div(y.numel()).backward()  # this rank's share of that mean
        allreduce_cp_grads(block, cpg)
        errs["out"] = max(errs["out"], rel_diff(gather_sequence(yl.detach(), 1, cpg, layout), y))
        errs["dx"] = max(errs["dx"], rel_diff(gather_sequence(xl.grad, 1, cpg, layout), x.grad))
        opt_r.step(), opt_b.step(), opt_r.zero_grad(), opt_b.zero_grad()
    full = ContextTensorParallelBlock.from_layers(ref, tp, cpg, layout=layout)  # shard of ref
    errs["params"] = max_param_diff(block, full)
    errs["params moved"] = max(
        (p - q).abs().max().item()  # the steps changed something
        for p, q in zip(block.parameters(), block0.parameters())
    )
    return errs


def cp_dp_on_rank(rank, world, cp=2, layout="zigzag", steps=3, reduce_over="dp x cp"):
    """CP × DP on dp·cp ranks with ring attention: :func:`gpt_training_on_rank` with dp =
    world/cp; ``reduce_over="cp"`` is the classic bug."""
    finish = "cp" if reduce_over == "cp" else True
    return gpt_training_on_rank(rank, world, "ring", layout, True, steps, finish, world // cp)


# ------------------------------------------------------------------ traffic, balance, memory
def traffic_on_rank(rank, cp, b=2, a=12, s=24, d=4):
    """Bytes and calls this rank's ring and Ulysses attention put on the wire, traced with
    :class:`minipar.runtime.tracer.trace`, forward and backward separately (float64)."""
    out = {}
    for method in ("ring", "ulysses"):
        local = tuple(shard_sequence(t, 2).requires_grad_() for t in qkv(b, a, s, d))
        out.update(traced_calls(method, functools.partial(run_method, method, local, Mask(True))))
    return out


def traced_calls(method: str, forward) -> dict:
    """``{"<method>/forward": {op: (calls, bytes)}, "<method>/backward": ...}`` of ``forward()``
    and the backward of its output, traced apart with :class:`minipar.runtime.tracer.trace`."""
    from minipar.runtime.tracer import trace  # noqa: PLC0415 (lazy: tracer)

    with trace() as fwd:
        o = forward()
    with trace() as bwd:
        o.backward(torch.ones_like(o))
    return {
        f"{method}/{name}": {op: (st.calls, st.bytes) for op, st in tr.summary().items()}
        for name, tr in (("forward", fwd), ("backward", bwd))
    }


def balance_on_rank(rank, cp, layout, b=1, a=4, s=768, d=32, repeats=3):
    """This rank's causal ring-attention forward: FLOPs counted by ``FlopCounterMode`` during a
    real ring call, and the seconds of the same block computations (best of ``repeats``) timed
    one rank at a time, so ranks that share a machine's cores do not slow each other down."""
    full = [t.float() for t in qkv(b, a, s, d, logit=10)]
    q, k, v = (shard_sequence(t, 2, None, layout) for t in full)
    with FlopCounterMode(display=False) as fc:
        ring_attention(q, k, v, True, None, layout)
    shards = [[t.index_select(2, positions(s, cp, r, layout)) for t in full[1:]] for r in range(cp)]
    compute = lambda: _ring_compute(q, shards, rank, cp, layout)
    best = one_rank_at_a_time(lambda: min(timed(compute, repeats, barrier=False)))
    return {"flops": fc.get_total_flops(), "compute_s": best}


def _ring_compute(q, shards, rank, cp, layout):
    """The block attention and merges ring attention does on ``rank`` (no communication)."""
    n = chunks_per_rank(layout)
    qs, outs = q.chunk(n, dim=2), [None] * n
    with torch.no_grad():
        for step in range(cp):
            src = (rank - step) % cp
            ks, vs = shards[src][0].chunk(n, dim=2), shards[src][1].chunk(n, dim=2)
            for i, j, mask in ring_module.plan(
                chunk_ids(rank, cp, layout), chunk_ids(src, cp, layout), True
            ):
                o = block_attention(qs[i], ks[j], vs[j], mask)
                outs[i] = o if outs[i] is None else merge_blocks(*outs[i], *o)
    return outs


def memory_on_rank(rank, cp, s=96, b=2, L=2, h=48, a=6, layout="zigzag"):
    """Bytes autograd saves for the layer stack on this rank (``minipar.memory_time``'s hooks):
    the CP layers on s/cp tokens, and, for comparison, the course's layer with the full (s × s)
    attention scores materialised (cp = 1 only)."""
    model = small_gpt(s=s, a=a, L=L, h=h)
    cpm = ContextParallelGPT(model, None, layout=layout, causal=True)
    x = torch.randn(b, s, h, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    xl = shard_sequence(x, 1, None, layout).requires_grad_()
    stack = lambda layers: torch.nn.Sequential(*layers)  # the same modules, in order
    got = saved_bytes(stack(cpm.layers), xl, exclude=list(cpm.parameters()))
    got.result.sum().backward()
    out = {"cp_layers": got.total}
    if cp == 1:
        model.train()
        full = saved_bytes(
            stack(model.layers), x.clone().requires_grad_(), exclude=list(model.parameters())
        )
        out["materialised_scores"] = full.total
    return out


def timeline_on_rank(rank, cp, b=1, a=4, s=1536, d=32, layout="zigzag"):
    """One causal ring-attention forward's per-step compute and transfer intervals (float32)."""
    q, k, v = (shard_sequence(t.float(), 2, None, layout) for t in qkv(b, a, s, d, logit=10))
    with torch.no_grad():
        ring_attention(q, k, v, True, None, layout)  # warm-up
        dist.barrier()
        tl = []
        ring_attention(q, k, v, True, None, layout, options=RingOptions(timeline=tl))
    return tl
