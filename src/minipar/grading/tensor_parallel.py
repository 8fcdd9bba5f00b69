"""Checkers for the tensor-parallel exercises (``exercises/tensor_parallel``).

Each runs the learner's code on gloo ranks (:func:`minipar.launch.run`, 30 s timeout) in float64
and compares with one process on the unsharded computation. When the answer is wrong, the
checker recomputes the outcome of the classic mistakes in one process (f without its backward
all-reduce, g that also reduces in backward, the row bias added per rank, cross-entropy without
the global max or with a local one, sequence parallelism without the reduce-scatter or without
the layer-norm gradient all-reduce) and names the one the answer matches.
"""
from __future__ import annotations

from minipar.grading import GradeFailure, task

TIMEOUT = 30


def _launch(fn, n, *args):
    from minipar.launch import run
    return run(fn, n, *args, backend="gloo", timeout=TIMEOUT)


def _randn(*shape, seed):
    import torch
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _same(a, b, atol=1e-9) -> bool:
    import torch
    return a is not None and b is not None and tuple(a.shape) == tuple(b.shape) and \
        bool(torch.allclose(a, b, atol=atol, rtol=1e-7))


def _err(a, b) -> str:
    if a is None or b is None or tuple(a.shape) != tuple(b.shape):
        return f"shape {None if a is None else tuple(a.shape)}, expected {tuple(b.shape)}"
    return f"max error {(a - b).abs().max().item():.3g}"


# ----------------------------------------------------------------------------- 01 f and g
def _f_on_rank(rank, n, fn):
    import torch
    x = _randn(4, 6, seed=1).requires_grad_()                # (4, 6) the same on every rank
    y = fn(x)
    unchanged = torch.equal(x.detach(), _randn(4, 6, seed=1))
    (y * _randn(4, 6, seed=100 + rank)).sum().backward()     # each rank uses x differently
    return dict(y=y.detach(), grad=None if x.grad is None else x.grad.clone(), unchanged=unchanged)


@task("tensor_parallel.copy_to_tp_region",
      "f is the identity forward and sums the gradient over 1, 2 and 3 ranks backward")
def check_copy_to_tp_region(fn, **_):
    for n in (1, 2, 3):
        x = _randn(4, 6, seed=1)
        ws = [_randn(4, 6, seed=100 + r) for r in range(n)]
        total = sum(ws)
        for rank, r in enumerate(_launch(_f_on_rank, n, fn)):
            if not r["unchanged"]:
                raise GradeFailure(f"rank {rank}: f modified its input x in place (t = {n})")
            if not _same(r["y"], x):
                if _same(r["y"], n * x) and n > 1:
                    raise GradeFailure(f"rank {rank}: f's forward all-reduced x (t = {n}): the "
                                       "forward is the identity, every rank already holds x")
                raise GradeFailure(f"rank {rank}: f's forward changed x (t = {n}, {_err(r['y'], x)})")
            g = r["grad"]
            if g is None:
                raise GradeFailure(f"rank {rank}: no gradient reached x (t = {n}): return the "
                                   "gradient from backward")
            if _same(g, total):
                continue
            if _same(g, ws[rank]):
                raise GradeFailure(f"rank {rank}: x.grad is this rank's own partial gradient "
                                   f"(t = {n}): f's backward must all-reduce (sum) it")
            if _same(g, total / n):
                raise GradeFailure(f"rank {rank}: x.grad is the MEAN over the {n} ranks: f's "
                                   "backward is the sum, not the average")
            raise GradeFailure(f"rank {rank}: x.grad differs from the sum of the ranks' "
                               f"gradients (t = {n}, {_err(g, total)})")


def _g_on_rank(rank, n, fn):
    import torch
    x = _randn(4, 6, seed=10 + rank).requires_grad_()        # this rank's partial result
    y = fn(x)
    unchanged = torch.equal(x.detach(), _randn(4, 6, seed=10 + rank))
    (y * _randn(4, 6, seed=7)).sum().backward()              # y is replicated: same use everywhere
    return dict(y=y.detach(), grad=None if x.grad is None else x.grad.clone(), unchanged=unchanged)


@task("tensor_parallel.reduce_from_tp_region",
      "g sums the partial results over 1, 2 and 3 ranks forward and is the identity backward")
def check_reduce_from_tp_region(fn, **_):
    for n in (1, 2, 3):
        xs = [_randn(4, 6, seed=10 + r) for r in range(n)]
        total, w = sum(xs), _randn(4, 6, seed=7)
        for rank, r in enumerate(_launch(_g_on_rank, n, fn)):
            if not r["unchanged"]:
                raise GradeFailure(f"rank {rank}: g reduced its input in place (t = {n}): "
                                   "all-reduce a copy, the caller's tensor must not change")
            if not _same(r["y"], total):
                if _same(r["y"], xs[rank]) and n > 1:
                    raise GradeFailure(f"rank {rank}: g's forward returned this rank's partial "
                                       f"result: it must all-reduce (sum) over the {n} ranks")
                if _same(r["y"], total / n):
                    raise GradeFailure(f"rank {rank}: g's forward is the mean, not the sum")
                raise GradeFailure(f"rank {rank}: g's forward differs from the sum "
                                   f"(t = {n}, {_err(r['y'], total)})")
            g = r["grad"]
            if g is None:
                raise GradeFailure(f"rank {rank}: no gradient reached the input (t = {n})")
            if _same(g, w):
                continue
            if _same(g, n * w):
                raise GradeFailure(f"rank {rank}: the gradient is {n} times too large: g's "
                                   "backward all-reduced again; it must be the identity")
            raise GradeFailure(f"rank {rank}: g's backward changed the gradient (t = {n}, "
                               f"{_err(g, w)}): it is the identity")


# ----------------------------------------------------------------------------- 02 MLP
H = 12


def _mlp_full():
    import torch
    import torch.nn as nn
    torch.manual_seed(3)
    fc1, fc2 = nn.Linear(H, 4 * H).double(), nn.Linear(4 * H, H).double()
    with torch.no_grad():
        fc2.bias.add_(1.0)                                   # a bias large enough to see twice
    return fc1, fc2


def _mlp_on_rank(rank, n, cls):
    import copy

    import torch.nn.functional as F
    fc1, fc2 = _mlp_full()
    m = cls(copy.deepcopy(fc1), copy.deepcopy(fc2), None).double()
    stored = sum(p.numel() for p in m.parameters())
    x = _randn(2, 5, H, seed=4).requires_grad_()             # (b, s, h)
    y = m(x)
    (y * _randn(2, 5, H, seed=5)).sum().backward()
    grads = [p.grad.clone() for p in m.parameters() if p.grad is not None]
    return dict(y=y.detach(), dx=None if x.grad is None else x.grad.clone(), grads=grads,
                stored=stored)


@task("tensor_parallel.column_row_mlp",
      "the column→row MLP equals the unsharded one (output, input and weight gradients) on 2 and "
      "3 ranks, each rank storing 1/t of the weights")
def check_column_row_mlp(cls, **_):
    import torch.nn.functional as F
    fc1, fc2 = _mlp_full()
    x = _randn(2, 5, H, seed=4).requires_grad_()
    dy = _randn(2, 5, H, seed=5)
    ref = fc2(F.gelu(fc1(x)))
    (ref * dy).sum().backward()
    for n in (2, 3):
        k = 4 * H // n
        for rank, r in enumerate(_launch(_mlp_on_rank, n, cls)):
            sl = slice(rank * k, (rank + 1) * k)
            want_stored = (4 * H * H + 4 * H + H * 4 * H) // n + H
            if r["stored"] >= 2 * H * 4 * H:
                raise GradeFailure(f"rank {rank} stores {r['stored']} parameters, the whole MLP: "
                                   f"keep only this rank's shards ({want_stored} with t = {n})")
            if not _same(r["y"], ref.detach()):
                if _same(r["y"], ref.detach() + (n - 1) * fc2.bias.detach()):
                    raise GradeFailure(f"rank {rank}: the output is off by (t−1)·bias: fc2's "
                                       "bias was added on every rank before the all-reduce; add "
                                       "it once, after")
                raise GradeFailure(f"rank {rank}: output differs from the unsharded MLP (t = {n}, "
                                   f"{_err(r['y'], ref)}): fc1 keeps rows (output features) "
                                   "r·4h/t…, fc2 columns (input features), then g sums")
            # this rank's own contribution to dL/dx (what a missing f leaves)
            u = F.linear(x.detach(), fc1.weight[sl].detach(), fc1.bias[sl].detach())
            u.requires_grad_()
            part = F.linear(F.gelu(u), fc2.weight[:, sl].detach())
            (part * dy).sum().backward()
            own = u.grad @ fc1.weight[sl].detach()
            if not _same(r["dx"], x.grad):
                if _same(r["dx"], own):
                    raise GradeFailure(f"rank {rank}: the input gradient is this rank's partial "
                                       "sum: put f (copy_to_tp_region) before fc1 so that "
                                       "backward all-reduces it")
                raise GradeFailure(f"rank {rank}: the input gradient differs (t = {n}, "
                                   f"{_err(r['dx'], x.grad)})")
            want = [fc1.weight.grad[sl], fc1.bias.grad[sl], fc2.weight.grad[:, sl], fc2.bias.grad]
            names = ["fc1.weight rows", "fc1.bias slice", "fc2.weight columns", "fc2.bias"]
            for name, w in zip(names, want):
                if not any(_same(g, w) for g in r["grads"]):
                    raise GradeFailure(f"rank {rank}: no parameter has the gradient of the "
                                       f"{name} of this rank (t = {n})")


# ----------------------------------------------------------------------------- 03 cross-entropy
N, V = 10, 24


def _ce_data():
    import torch
    logits = 1000 * _randn(N, V, seed=6)                     # exp() overflows without the max
    target = torch.randint(0, V, (N,), generator=torch.Generator().manual_seed(7))
    return logits, target


def _ce_on_rank(rank, n, fn):
    logits, target = _ce_data()
    per = V // n
    ll = logits[:, rank * per:(rank + 1) * per].clone().requires_grad_()   # (N, V/t)
    loss = fn(ll, target)
    loss.backward()
    return dict(loss=loss.detach(), grad=None if ll.grad is None else ll.grad.clone())


def _ce_local_max(logits, target, n):
    """The loss when each rank subtracts its own max (the exp-sums are on different scales)."""
    per = V // n
    picked, sum_e = 0.0, 0.0
    for r in range(n):
        z = logits[:, r * per:(r + 1) * per]
        z = z - z.max(-1, keepdim=True).values
        own = (target >= r * per) & (target < (r + 1) * per)
        picked = picked + z.gather(-1, (target - r * per).clamp(0, per - 1).unsqueeze(-1)
                                   ).squeeze(-1) * own
        sum_e = sum_e + z.exp().sum(-1)
    return (sum_e.log() - picked).mean()


@task("tensor_parallel.vocab_parallel_cross_entropy",
      "the loss and logit gradients equal one process's cross-entropy on 2 and 3 ranks, with "
      "logits of size ~1000")
def check_vocab_parallel_cross_entropy(fn, **_):
    import torch
    import torch.nn.functional as F
    logits, target = _ce_data()
    full = logits.clone().requires_grad_()
    ref = F.cross_entropy(full, target)
    ref.backward()
    for n in (2, 3):
        per = V // n
        for rank, r in enumerate(_launch(_ce_on_rank, n, fn)):
            loss = r["loss"]
            if loss.numel() != 1:
                raise GradeFailure(f"rank {rank}: the loss has shape {tuple(loss.shape)}: return "
                                   "the mean over tokens, a scalar")
            if not torch.isfinite(loss):
                raise GradeFailure(f"rank {rank}: the loss is {loss.item()} with logits of size "
                                   "~1000: subtract the global max (all-reduce with "
                                   "ReduceOp.MAX) before exp")
            if not _same(loss, ref.detach()):
                if _same(loss, N * ref.detach()):
                    raise GradeFailure(f"rank {rank}: the loss is the SUM over the {N} tokens: "
                                       "return the mean")
                if _same(loss, _ce_local_max(logits, target, n)):
                    raise GradeFailure(f"rank {rank}: each rank subtracted its own max: all-reduce "
                                       "the max with ReduceOp.MAX so every rank uses the global one")
                raise GradeFailure(f"rank {rank}: the loss differs from F.cross_entropy on the "
                                   f"gathered logits (t = {n}, {_err(loss, ref)}): is the target's "
                                   "logit taken only on the rank that owns it?")
            want = full.grad[:, rank * per:(rank + 1) * per]
            if not _same(r["grad"], want):
                raise GradeFailure(f"rank {rank}: the loss is right but the logit gradient is not "
                                   f"(t = {n}, {_err(r['grad'], want)}): sum with "
                                   "reduce_from_tp_region so backward is the identity")


# ----------------------------------------------------------------------------- 04 SP layer norm
S, HS, OUT = 6, 8, 12


def _sp_full():
    import torch
    import torch.nn as nn
    torch.manual_seed(8)
    ln = nn.LayerNorm(HS).double()
    with torch.no_grad():
        ln.weight.add_(_randn(HS, seed=9)), ln.bias.add_(_randn(HS, seed=10))
    return ln, _randn(OUT, HS, seed=11)                      # column layer's full weight (out, h)


def _sp_on_rank(rank, n, cls):
    import torch.nn.functional as F
    ln, A = _sp_full()
    m = cls(HS, None).double()
    m.ln.load_state_dict(ln.state_dict())
    k, c = S // n, OUT // n
    x = _randn(2, S, HS, seed=12)[:, rank * k:(rank + 1) * k].clone().requires_grad_()  # (b, s/t, h)
    g = m(x)                                                 # (b, s, h)
    y = F.linear(g, A[rank * c:(rank + 1) * c])              # (b, s, out/t) column-parallel
    (y * _randn(2, S, OUT, seed=13)[..., rank * c:(rank + 1) * c]).sum().backward()
    m.finish_grads()
    return dict(g=g.detach(), dx=None if x.grad is None else x.grad.clone(),
                dw=m.ln.weight.grad.clone(), db=m.ln.bias.grad.clone())


@task("tensor_parallel.sp_layernorm",
      "the sequence-parallel layer-norm region equals one process (gathered output, input and "
      "layer-norm gradients) on 2 and 3 ranks")
def check_sp_layernorm(cls, **_):
    import torch.nn.functional as F
    ln, A = _sp_full()
    x = _randn(2, S, HS, seed=12).requires_grad_()
    dy = _randn(2, S, OUT, seed=13)
    out = ln(x)
    (F.linear(out, A) * dy).sum().backward()
    for n in (2, 3):
        k, c = S // n, OUT // n
        for rank, r in enumerate(_launch(_sp_on_rank, n, cls)):
            if not _same(r["g"], out.detach()):
                raise GradeFailure(f"rank {rank}: the gathered output differs from the layer norm "
                                   f"of the whole sequence (t = {n}, {_err(r['g'], out)}): "
                                   "all-gather along dim 1, slices in rank order")
            want_dx = x.grad[:, rank * k:(rank + 1) * k]
            if not _same(r["dx"], want_dx):
                # what a backward that only slices its own gradient gives
                xs = x.detach()[:, rank * k:(rank + 1) * k].clone().requires_grad_()
                o = F.layer_norm(xs, (HS,), ln.weight.detach(), ln.bias.detach())
                go = (dy[..., rank * c:(rank + 1) * c] @ A[rank * c:(rank + 1) * c])
                (o * go[:, rank * k:(rank + 1) * k]).sum().backward()
                if _same(r["dx"], xs.grad):
                    raise GradeFailure(f"rank {rank}: backward kept this rank's slice of its own "
                                       "gradient: the column layer's ranks each contribute a "
                                       "part, reduce-scatter (sum, then slice) along s")
                raise GradeFailure(f"rank {rank}: the gradient of x differs (t = {n}, "
                                   f"{_err(r['dx'], want_dx)})")
            if not (_same(r["dw"], ln.weight.grad) and _same(r["db"], ln.bias.grad)):
                raise GradeFailure(f"rank {rank}: the layer-norm gradients are this rank's "
                                   f"partial sums over its s/t tokens (t = {n}): all-reduce "
                                   "them over the group in finish_grads")
