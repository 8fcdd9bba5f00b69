"""Rank functions behind the tests and the chapter (``*_on_rank(rank, t, ...)`` under
:func:`minipar.runtime.launch.run`, or t = 1 in one process): every piece against the unsharded
module (maximum absolute differences), the communication traced per layer, saved bytes.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed
import torch.nn as nn
import torch.nn.functional as F

from minipar.cost.chapters.tensor_parallel import ElementBytes, activation_items
from minipar.memory_time.activations import device_conventions, saved_bytes
from minipar.model import GPT, GPTConfig, Layer
from minipar.runtime import launch
from minipar.runtime.device import get_device, synchronize

from .block import ParallelBlock, allreduce_sequence_parallel_grads
from .cross_entropy import vocab_parallel_cross_entropy
from .gpt import ParallelGPT
from .layers import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding, shard
from .random import TP_SEED_OFFSET, model_parallel_seed

# divisible by t = 1, 2, 3, 4: h/t, 4h/t, a/t, v/t, s/t
SMALL = GPTConfig(L=2, h=48, a=12, s=12, V=96, dropout=0.0)
B = 2


def _randn(*shape, seed, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def max_diff(a, b) -> float:
    return (a.detach() - b.detach()).abs().max().item()


def grads_as_module(module: nn.Module) -> nn.Module:
    """A copy of ``module`` whose parameters hold its gradients: ``Cls.from_full`` of it gives
    the slices of the full gradients that each rank's shard must have."""
    g = copy.deepcopy(module)
    for p, q in zip(module.parameters(), g.parameters()):
        q.data = p.grad.detach().clone()
    return g


def param_diff(tp: nn.Module, expected: nn.Module, grads: bool) -> float:
    ours = {n: p.grad if grads else p for n, p in tp.named_parameters()}
    return max(max_diff(ours[name], e) for name, e in expected.named_parameters())


def grad_diff(sharded: nn.Module, full: nn.Module, group=None, **kw) -> float:
    """Largest |difference| of ``sharded``'s gradients from its shard of ``full``'s gradients
    (``type(sharded).from_full`` with ``kw``)."""
    return param_diff(sharded, type(sharded).from_full(grads_as_module(full), group, **kw), True)


def layer_parity(rank: int, t: int, group=None, dtype=torch.float64) -> dict[str, float]:
    """Column, row, column→row, vocab embedding and cross-entropy against the full modules."""
    c = SMALL
    torch.manual_seed(0)
    full_col, full_row = nn.Linear(c.h, 4 * c.h).to(dtype), nn.Linear(4 * c.h, c.h).to(dtype)
    x = _randn(B, c.s, c.h, seed=1, dtype=dtype).requires_grad_()  # (b, s, h)
    dy = _randn(B, c.s, c.h, seed=2, dtype=dtype)  # (b, s, h)
    where = (rank, t, group)
    res = _column_parity(full_col, x, where)
    x.grad = None
    for m in (full_col, full_row):
        m.zero_grad()
    res.update(_row_and_mlp_parity(full_col, full_row, x, dy, where))
    res.update(_vocab_parity(dy, where))
    return res


def _column_parity(full_col: nn.Linear, x, where) -> dict[str, float]:
    """A column-parallel layer, synchronous and with the asynchronous input-gradient
    all-reduce: output and input gradient against ``full_col``, weight gradients against its
    slices. ``where`` = (rank, t, group)."""
    rank, t, group = where
    res = {}
    ref = full_col(x)  # (b, s, 4h)
    ref.backward(_randn(*ref.shape, seed=3, dtype=x.dtype))
    for key, kw in (("column", {}), ("async column", {"async_grad_allreduce": True})):
        col = ColumnParallelLinear.from_full(full_col, group, **kw)
        xl = x.detach().clone().requires_grad_()
        y = col(xl)  # (b, s, 4h/t)
        y.backward(shard(_randn(*ref.shape, seed=3, dtype=x.dtype), -1, rank, t))
        if not kw:
            res["column out"] = max_diff(y, shard(ref, -1, rank, t))
        res[f"{key} dX"] = max_diff(xl.grad, x.grad)
        res[f"{key} dW"] = grad_diff(col, full_col, group)
    return res


def _row_and_mlp_parity(full_col, full_row, x, dy, where) -> dict[str, float]:
    """A row-parallel layer alone, then column → GeLU → row (the MLP), against the full
    layers: outputs, input gradients and weight-gradient slices."""
    rank, t, group = where
    res, c, dtype = {}, SMALL, x.dtype
    u = _randn(B, c.s, 4 * c.h, seed=4, dtype=dtype).requires_grad_()  # (b, s, 4h)
    ref = full_row(u)
    ref.backward(dy)
    row = RowParallelLinear.from_full(full_row, group)
    ul = shard(u.detach(), -1, rank, t).requires_grad_()  # (b, s, 4h/t)
    y = row(ul)
    y.backward(dy)
    res["row out"] = max_diff(y, ref)
    res["row dX"] = max_diff(ul.grad, shard(u.grad, -1, rank, t))
    res["row dW"] = grad_diff(row, full_row, group)
    full_row.zero_grad()

    ref = full_row(F.gelu(full_col(x)))
    ref.backward(dy)
    col = ColumnParallelLinear.from_full(full_col, group)
    row = RowParallelLinear.from_full(full_row, group)
    xl = x.detach().clone().requires_grad_()
    y = row(F.gelu(col(xl)))
    y.backward(dy)
    res["mlp out"] = max_diff(y, ref)
    res["mlp dX"] = max_diff(xl.grad, x.grad)
    res["mlp dW"] = max(grad_diff(col, full_col, group), grad_diff(row, full_row, group))
    return res


def _vocab_parity(dy, where) -> dict[str, float]:
    """The vocabulary-parallel embedding, and the vocabulary-parallel cross-entropy with
    logits large enough to overflow exp() unshifted, against the full ones."""
    rank, t, group = where
    res, c, dtype = {}, SMALL, dy.dtype
    emb = nn.Embedding(c.V, c.h).to(dtype)
    tokens = torch.randint(0, c.V, (B, c.s), generator=torch.Generator().manual_seed(5))
    ref = emb(tokens)
    ref.backward(dy)
    vemb = VocabParallelEmbedding.from_full(emb, group)
    y = vemb(tokens)
    y.backward(dy)
    res["embedding out"] = max_diff(y, ref)
    res["embedding dW"] = max_diff(vemb.weight.grad, shard(emb.weight.grad, 0, rank, t))

    logits = (1000 * _randn(B, c.s, c.V, seed=6, dtype=dtype)).requires_grad_()  # (b, s, v)
    target = torch.randint(0, c.V, (B, c.s), generator=torch.Generator().manual_seed(7))
    ref = F.cross_entropy(logits.flatten(0, 1), target.flatten())
    ref.backward()
    ll = shard(logits.detach(), -1, rank, t).requires_grad_()  # (b, s, v/t)
    loss = vocab_parallel_cross_entropy(ll, target, group)
    loss.backward()
    res["cross-entropy loss"] = max_diff(loss, ref)
    res["cross-entropy dlogits"] = max_diff(ll.grad, shard(logits.grad, -1, rank, t))
    return res


def block_parity(
    rank: int,
    t: int,
    group=None,
    *,
    sequence_parallel: bool = False,
    finish: bool = True,
    dtype=torch.float64,
) -> dict[str, float]:
    """One :class:`ParallelBlock` against :class:`minipar.model.Layer`: output, input
    gradient and every parameter gradient (``finish=False`` skips the sequence-parallel
    gradient all-reduce: the negative control)."""
    torch.manual_seed(0)
    layer = Layer(SMALL).to(dtype)
    x = _randn(B, SMALL.s, SMALL.h, seed=11, dtype=dtype).requires_grad_()  # (b, s, h)
    dy = _randn(B, SMALL.s, SMALL.h, seed=12, dtype=dtype)
    ref = layer(x)
    ref.backward(dy)
    blk = ParallelBlock.from_full(layer, group, sequence_parallel=sequence_parallel)
    mine = (lambda v: shard(v, 1, rank, t)) if sequence_parallel else (lambda v: v)  # (b, s/t, h)
    xl = mine(x.detach()).clone().requires_grad_()
    y = blk(xl)
    y.backward(mine(dy))
    if sequence_parallel and finish:
        allreduce_sequence_parallel_grads(blk, group)
    return {
        "block out": max_diff(y, mine(ref)),
        "block dX": max_diff(xl.grad, mine(x.grad)),
        "block dW": grad_diff(blk, layer, group, sequence_parallel=sequence_parallel),
    }


def gpt_training(
    rank: int,
    t: int,
    group=None,
    *,
    sequence_parallel: bool = False,
    steps: int = 3,
    finish: bool = True,
    dtype=torch.float64,
) -> dict[str, float]:
    """Adam for ``steps`` steps on the TP GPT and on one process from the same weights; the
    largest loss difference and the largest parameter difference after the last step."""
    torch.manual_seed(0)
    full = GPT(SMALL).to(dtype)
    tp = ParallelGPT.from_full(full, group, sequence_parallel=sequence_parallel)
    opt_full = torch.optim.Adam(full.parameters(), lr=1e-2)
    opt_tp = torch.optim.Adam(tp.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(21)
    loss_diff = 0.0
    for _ in range(steps):
        tokens = torch.randint(0, SMALL.V, (B, SMALL.s), generator=g)
        targets = torch.roll(tokens, -1, dims=1)
        opt_full.zero_grad(), opt_tp.zero_grad()
        ref = F.cross_entropy(full(tokens).flatten(0, 1), targets.flatten())
        ref.backward()
        loss = tp.loss(tokens, targets)
        loss.backward()
        if finish:
            tp.finish_grads()
        opt_full.step(), opt_tp.step()
        loss_diff = max(loss_diff, max_diff(loss, ref))
    expected = ParallelGPT.from_full(full, group, sequence_parallel=sequence_parallel)
    return {"gpt loss": loss_diff, "gpt params": param_diff(tp, expected, False)}


def all_parity(rank: int, t: int, group=None) -> dict[str, float]:
    """Every parity number at once (one launch): layers, block with and without sequence
    parallelism, and GPT training with and without it."""
    res = layer_parity(rank, t, group)
    for fn in (block_parity, gpt_training):
        for prefix, sp in (("", False), ("sp ", True)):
            res.update({prefix + k: v for k, v in fn(rank, t, group, sequence_parallel=sp).items()})
    return res


def block_traffic(
    rank: int,
    t: int,
    group=None,
    *,
    sequence_parallel: bool = False,
    c: GPTConfig = SMALL,
    b: int = B,
    dtype=torch.float64,
) -> list[tuple[str, int, int]]:
    """(op, nccl-tests bytes, group size) of every collective one :class:`ParallelBlock` makes in
    one forward and backward of a (b, s, h) micro-batch, traced with :class:`minipar.runtime.tracer`."""
    from minipar.runtime.tracer import trace  # noqa: PLC0415 (lazy: tracer)

    torch.manual_seed(0)
    blk = ParallelBlock.from_full(Layer(c).to(dtype), group, sequence_parallel=sequence_parallel)
    s = c.s // t if sequence_parallel else c.s
    x = _randn(b, s, c.h, seed=31, dtype=dtype).requires_grad_()  # (b, s or s/t, h)
    with trace() as tr:
        blk(x).sum().backward()
    return [(e.op, e.bytes, e.group_size) for e in tr.events]


def dropout_masks(
    rank: int, t: int, group=None, *, tp_offset: int | None = None, n: int = 4096
) -> dict[str, torch.Tensor]:
    """Dropout masks drawn on the default stream (replicated activations) and on the
    tensor-parallel stream (inside the parallel region) with :func:`model_parallel_seed`.
    ``tp_offset`` given as the same number on every rank reproduces the bug of one seed for
    the parallel region (we pass rank 0 for every rank)."""
    if tp_offset is None:
        tracker = model_parallel_seed(1234, rank)
    else:  # bug: same tensor-parallel seed everywhere
        tracker = model_parallel_seed(1234, 0, tp_offset=tp_offset or TP_SEED_OFFSET)
    ones = torch.ones(n, dtype=torch.float64)
    replicated = F.dropout(ones, 0.5, True) != 0
    with tracker.fork():
        parallel = F.dropout(ones, 0.5, True) != 0
    after = F.dropout(ones, 0.5, True) != 0  # default stream continues as if unforked
    return {"replicated": replicated, "parallel": parallel, "after fork": after}


def block_saved_bytes(
    rank: int,
    t: int,
    group=None,
    *,
    sequence_parallel: bool = False,
    c: GPTConfig | None = None,
    b: int = B,
    dtype=torch.float32,
) -> dict:
    """Bytes one rank's :class:`ParallelBlock` saves for backward on a micro-batch (dropout on,
    measured with :func:`minipar.memory_time.activations.saved_bytes`), and the per-rank items of
    :func:`minipar.cost.chapters.tensor_parallel.activation_items` with this device's conventions."""
    c = c or GPTConfig(L=1, h=48, a=12, s=12, V=96, dropout=0.1)
    tracker = model_parallel_seed(0, rank)
    blk = ParallelBlock.from_full(
        Layer(c).to(dtype), group, sequence_parallel=sequence_parallel, tracker=tracker
    )
    blk.train()
    s = c.s // t if sequence_parallel else c.s
    x = _randn(b, s, c.h, seed=41, dtype=dtype).requires_grad_()  # (b, s or s/t, h)
    got = saved_bytes(blk, x, exclude=list(blk.parameters()))
    got.result.sum().backward()
    sizes = ElementBytes(**device_conventions("cpu", dtype))
    items = activation_items(c.s, b, c.h, c.a, t=t, sp=sequence_parallel, sizes=sizes)
    return {
        "measured": got.total,
        "model": sum(items.values()),
        "items": items,
        "by_shape": dict(got.by_shape),
    }


# ------------------------------------------------------------------ for the notebook
def run_on_gloo(fn, world_size: int, *args, **kwargs) -> list:
    """:func:`minipar.runtime.launch.run` on gloo, whatever GPUs there are: the functions above
    draw CPU inputs and measure with CPU conventions (those that use the rank's device, such as
    :func:`overlap_on_rank`, also run under ``launch.run(..., backend="auto")``)."""
    return launch.run(fn, world_size, *args, backend="gloo", **kwargs)


def _chapter_on_rank(rank, t):
    return {
        "parity": all_parity(rank, t),
        "traffic": block_traffic(rank, t),
        "traffic sp": block_traffic(rank, t, sequence_parallel=True),
        "saved": block_saved_bytes(rank, t),
        "saved sp": block_saved_bytes(rank, t, sequence_parallel=True),
    }


def chapter_runs(ts=(1, 2, 3)) -> dict[int, dict]:
    """One launch per t (t = 1 in this process): ``parity`` is the largest |difference| over
    ranks for every check of :func:`all_parity`; traffic and saved bytes are rank 0's."""
    out = {}
    for t in ts:
        per_rank = [_chapter_on_rank(0, 1)] if t == 1 else run_on_gloo(_chapter_on_rank, t)
        out[t] = dict(per_rank[0])
        out[t]["parity"] = {k: max(r["parity"][k] for r in per_rank) for k in per_rank[0]["parity"]}
    return out


def overlap_on_rank(
    rank: int, t: int, h: int = 256, b: int = 4, s: int = 128, steps: int = 3
) -> list[dict]:
    """Backward event times of an async column-parallel layer (``async_grad_allreduce=True``):
    the input-gradient GEMM, the all-reduce from launch to the end of its wait, the
    weight-gradient GEMM running meanwhile, and whether the all-reduce had already completed
    when the GEMM ended. Times in seconds from the start of each backward."""
    dev = get_device()
    torch.manual_seed(0)
    col = ColumnParallelLinear(h, 4 * h, async_grad_allreduce=True).to(dev)
    x = torch.randn(b, s, h, generator=torch.Generator().manual_seed(1)).to(dev).requires_grad_()
    out = []
    for _ in range(steps):
        col.timeline = []
        y = col(x).sum()
        synchronize()  # the forward is done before timing
        if t > 1:
            torch.distributed.barrier()  # ranks enter backward together
        y.backward()
        ev = col.timeline[0]
        t0 = ev["grad_input_gemm"][0]
        out.append(
            {k: (v if isinstance(v, bool) else (v[0] - t0, v[1] - t0)) for k, v in ev.items()}
        )
    return out
