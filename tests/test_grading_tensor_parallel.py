"""Tensor-parallel exercises: solutions pass, starters fail, the classic mistakes get named."""
import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from grading_support import exercise_function, failure
from minipar.grading import check
from minipar.tensor_parallel import copy_to_tp_region, reduce_from_tp_region

TASKS = {"copy_to_tp_region": ("01_f_and_g", "copy_to_tp_region"),
         "reduce_from_tp_region": ("01_f_and_g", "reduce_from_tp_region"),
         "column_row_mlp": ("02_column_row_mlp", "ParallelMLP"),
         "vocab_parallel_cross_entropy": ("03_vocab_parallel_cross_entropy",
                                          "vocab_parallel_cross_entropy"),
         "sp_layernorm": ("04_sequence_parallel_layernorm", "SPLayerNorm")}


def _fn(name, solved):
    stem, attr = TASKS[name]
    return exercise_function("tensor_parallel", stem, attr, solved=solved)


@pytest.mark.slow
@pytest.mark.parametrize("name", TASKS)
def test_solution_passes_and_starter_fails(name, capsys):
    assert check(f"tensor_parallel.{name}", _fn(name, True))
    assert not check(f"tensor_parallel.{name}", _fn(name, False))
    assert "not implemented yet" in capsys.readouterr().out.splitlines()[-1]


def test_the_library_passes_too(capsys):
    """Our own mappings are graded like a learner's answer (t = 1 runs without ranks too)."""
    assert check("tensor_parallel.copy_to_tp_region", copy_to_tp_region)


# ------------------------------------------------------------------ 01 f and g
class _NoAllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _Mean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad / dist.get_world_size(), None


def f_without_backward_all_reduce(x, group=None):
    return _NoAllReduce.apply(x, group)


def f_mean(x, group=None):
    return _Mean.apply(x, group)


def f_reducing_forward(x, group=None):
    return reduce_from_tp_region(x, group)


def g_identity_forward(x, group=None):
    return copy_to_tp_region(x, group) * 1.0


def g_reducing_backward(x, group=None):
    return copy_to_tp_region(reduce_from_tp_region(x, group), group)


def g_in_place(x, group=None):
    class _InPlace(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            dist.all_reduce(x.data)
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return grad
    return _InPlace.apply(x)


@pytest.mark.slow
@pytest.mark.parametrize("task, fn, reason", [
    ("copy_to_tp_region", f_without_backward_all_reduce, "this rank's own partial gradient"),
    ("copy_to_tp_region", f_mean, "MEAN over the 2 ranks"),
    ("copy_to_tp_region", f_reducing_forward, "forward all-reduced x"),
    ("reduce_from_tp_region", g_identity_forward, "returned this rank's partial result"),
    ("reduce_from_tp_region", g_reducing_backward, "2 times too large"),
    ("reduce_from_tp_region", g_in_place, "reduced its input in place"),
])
def test_f_and_g_mistakes(task, fn, reason, capsys):
    assert reason in failure(f"tensor_parallel.{task}", fn, capsys)


# ------------------------------------------------------------------ 02 MLP
class _Sharded(nn.Module):
    def __init__(self, fc1, fc2, group=None):
        super().__init__()
        t, r = dist.get_world_size(group), dist.get_rank(group)
        n = fc1.out_features // t
        self.group = group
        self.w1 = nn.Parameter(fc1.weight.detach()[r * n:(r + 1) * n].clone())
        self.b1 = nn.Parameter(fc1.bias.detach()[r * n:(r + 1) * n].clone())
        self.w2 = nn.Parameter(fc2.weight.detach()[:, r * n:(r + 1) * n].clone())
        self.b2 = nn.Parameter(fc2.bias.detach().clone())


class MLPBiasPerRank(_Sharded):
    def forward(self, x):
        u = F.gelu(F.linear(copy_to_tp_region(x, self.group), self.w1, self.b1))
        return reduce_from_tp_region(F.linear(u, self.w2, self.b2), self.group)


class MLPWithoutF(_Sharded):
    def forward(self, x):
        u = F.gelu(F.linear(x, self.w1, self.b1))
        return reduce_from_tp_region(F.linear(u, self.w2), self.group) + self.b2


class MLPReplicated(nn.Module):
    """A plain copy of the full layers on every rank (complaint #9: a TP layer that is not one)."""

    def __init__(self, fc1, fc2, group=None):
        super().__init__()
        self.fc1, self.fc2 = fc1, fc2

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class MLPWrongSlice(_Sharded):
    """fc2's columns taken from the next rank's slice: shards not in rank order."""

    def __init__(self, fc1, fc2, group=None):
        super().__init__(fc1, fc2, group)
        t, r = dist.get_world_size(group), dist.get_rank(group)
        n = fc1.out_features // t
        r = (r + 1) % t
        self.w2 = nn.Parameter(fc2.weight.detach()[:, r * n:(r + 1) * n].clone())

    def forward(self, x):
        u = F.gelu(F.linear(copy_to_tp_region(x, self.group), self.w1, self.b1))
        return reduce_from_tp_region(F.linear(u, self.w2), self.group) + self.b2


@pytest.mark.slow
@pytest.mark.parametrize("cls, reason", [
    (MLPBiasPerRank, "(t−1)·bias"),
    (MLPWithoutF, "put f (copy_to_tp_region) before fc1"),
    (MLPReplicated, "the whole MLP"),
    (MLPWrongSlice, "output differs from the unsharded MLP"),
])
def test_mlp_mistakes(cls, reason, capsys):
    assert reason in failure("tensor_parallel.column_row_mlp", cls, capsys)


# ------------------------------------------------------------------ 03 cross-entropy
def _ce(local_logits, target, group=None, *, max_op="global", mean=True, mask=True):
    per = local_logits.shape[-1]
    start = dist.get_rank(group) * per
    z = local_logits
    if max_op != "none":
        m = local_logits.detach().max(dim=-1).values
        if max_op == "global":
            dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
        z = local_logits - m.unsqueeze(-1)
    outside = (target < start) | (target >= start + per)
    local = (target - start).clamp(0, per - 1)
    picked = z.gather(-1, local.unsqueeze(-1)).squeeze(-1)
    if mask:
        picked = picked.masked_fill(outside, 0.0)
    picked = reduce_from_tp_region(picked, group)
    loss = reduce_from_tp_region(z.exp().sum(-1), group).log() - picked
    return loss.mean() if mean else loss.sum()


def ce_no_max(local_logits, target, group=None):
    return _ce(local_logits, target, group, max_op="none")


def ce_local_max(local_logits, target, group=None):
    return _ce(local_logits, target, group, max_op="local")


def ce_sum(local_logits, target, group=None):
    return _ce(local_logits, target, group, mean=False)


def ce_unmasked(local_logits, target, group=None):
    return _ce(local_logits, target, group, mask=False)


def ce_backward_all_reduce(local_logits, target, group=None):
    """The sums reduced with an all-reduce that runs in backward too (f∘g): gradients × t."""
    per = local_logits.shape[-1]
    start = dist.get_rank(group) * per
    m = local_logits.detach().max(dim=-1).values
    dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
    z = local_logits - m.unsqueeze(-1)
    outside = (target < start) | (target >= start + per)
    picked = z.gather(-1, (target - start).clamp(0, per - 1).unsqueeze(-1)).squeeze(-1)
    picked = copy_to_tp_region(reduce_from_tp_region(picked.masked_fill(outside, 0.0), group), group)
    s = copy_to_tp_region(reduce_from_tp_region(z.exp().sum(-1), group), group)
    return (s.log() - picked).mean()


@pytest.mark.slow
@pytest.mark.parametrize("fn, reason", [
    (ce_no_max, "subtract the global max"),
    (ce_local_max, "each rank subtracted its own max"),
    (ce_sum, "SUM over the 10 tokens"),
    (ce_unmasked, "only on the rank that owns it"),
    (ce_backward_all_reduce, "the loss is right but the logit gradient is not"),
])
def test_cross_entropy_mistakes(fn, reason, capsys):
    assert reason in failure("tensor_parallel.vocab_parallel_cross_entropy", fn, capsys)


# ------------------------------------------------------------------ 04 SP layer norm
def _sp_class(backward: str, finish: bool):
    class Gather(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, group):
            ctx.group = group
            parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
            dist.all_gather(parts, x.contiguous(), group=group)
            return torch.cat(parts, dim=1)

        @staticmethod
        def backward(ctx, grad):
            t, r = dist.get_world_size(ctx.group), dist.get_rank(ctx.group)
            k = grad.shape[1] // t
            if backward == "reduce":
                grad = grad.clone()
                dist.all_reduce(grad, group=ctx.group)
            return grad[:, r * k:(r + 1) * k].contiguous(), None

    class SP(nn.Module):
        def __init__(self, h, group=None):
            super().__init__()
            self.ln, self.group = nn.LayerNorm(h), group

        def forward(self, x):
            return Gather.apply(self.ln(x), self.group)

        def finish_grads(self):
            if finish:
                for p in self.ln.parameters():
                    dist.all_reduce(p.grad, group=self.group)
    return SP


@pytest.mark.slow
def test_sp_layernorm_mistakes_and_an_alternative(capsys):
    # all-reduce then slice is a correct (if twice as chatty) reduce-scatter: accepted
    assert check("tensor_parallel.sp_layernorm", _sp_class("reduce", True))
    assert "reduce-scatter (sum, then slice)" in failure(
        "tensor_parallel.sp_layernorm", _sp_class("slice", True), capsys)
    assert "all-reduce them over the group in finish_grads" in failure(
        "tensor_parallel.sp_layernorm", _sp_class("reduce", False), capsys)
