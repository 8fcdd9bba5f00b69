"""Tensor-parallel exercises: solutions pass, starters fail, and realistic wrong answers (written
as a learner would, without the solution) fail with a reason that names their mistake.

Exercises 2-4 tell the learner to use the course's f and g (``minipar.tensor_parallel``); the
wrong answers do the same there, and nothing else from the course, except the ones that test
the course-code rule."""

import importlib
import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from grading_support import clause_cases, clause_fails, exercise_function

import minipar.tensor_parallel as tp
from minipar.grading import check
from minipar.grading.imports import find_course_use, forbid_course_code
from minipar.tensor_parallel import copy_to_tp_region, reduce_from_tp_region

_F_AND_G = ("copy_to_tp_region", "reduce_from_tp_region")
# the wrong answers travel to the ranks by value, as a notebook's do: importing this test module
# there (pytest, the grading helpers) would cost each rank seconds
cloudpickle.register_pickle_by_value(sys.modules[__name__])

TASKS = {
    "copy_to_tp_region": ("01_f_and_g", "copy_to_tp_region"),
    "reduce_from_tp_region": ("01_f_and_g", "reduce_from_tp_region"),
    "column_row_mlp": ("02_column_row_mlp", "ParallelMLP"),
    "vocab_parallel_cross_entropy": (
        "03_vocab_parallel_cross_entropy",
        "vocab_parallel_cross_entropy",
    ),
    "sp_layernorm": ("04_sequence_parallel_layernorm", "SPLayerNorm"),
}


def _fn(name, solved):
    stem, attr = TASKS[name]
    return exercise_function("tensor_parallel", stem, attr, solved=solved)


@pytest.mark.slow
@pytest.mark.parametrize("name", TASKS)
def test_solution_passes_and_starter_fails(name, capsys):
    assert check(f"tensor_parallel.{name}", _fn(name, True))
    assert not check(f"tensor_parallel.{name}", _fn(name, False))
    assert "not implemented yet" in capsys.readouterr().out.splitlines()[-1]


def test_the_course_code_rule_without_ranks():
    """The static rule: the course's f is the answer to exercise 1 (rejected), but exercise 2
    may use it (allowed by name); a helper of the learner's that imports a course class inside
    the function is followed."""
    from minipar.grading import GradeFailure

    def helper(x):
        from minipar.tensor_parallel import ColumnParallelLinear

        return ColumnParallelLinear

    def uses_helper(x, group=None):
        return helper(x)

    with pytest.raises(
        GradeFailure,
        match=r"course's own minipar.tensor_parallel.mappings "
        r"\(copy_to_tp_region\)",
    ):
        forbid_course_code(copy_to_tp_region, "tensor_parallel")
    assert find_course_use(MLPWithoutF, ("minipar.tensor_parallel",), allow=_F_AND_G) is None
    assert (
        find_course_use(uses_helper, ("minipar.tensor_parallel",))
        == "minipar.tensor_parallel.layers (ColumnParallelLinear)"
    )  # an import in a helper
    assert "minipar.tensor_parallel" in find_course_use(MLPFromCourse, ("minipar.tensor_parallel",))

    class OwnShard(nn.Module):  # its own attribute is named like the course's tp.shard
        def forward(self, x):
            return tp.copy_to_tp_region(self.shard(x))

    class CourseShard(nn.Module):  # the negative control: the course's own tp.shard
        def forward(self, x):
            return tp.copy_to_tp_region(tp.shard(x, 0, 0, 2))

    assert find_course_use(OwnShard, ("minipar.tensor_parallel",), allow=_F_AND_G) is None
    assert (
        find_course_use(CourseShard, ("minipar.tensor_parallel",), allow=_F_AND_G)
        == "minipar.tensor_parallel.layers (shard)"
    )


# ------------------------------------------------------------------ 01 f and g
def _ar(x, group):
    """A learner's all-reduce of a copy over ``group`` (None: the world)."""
    x = x.clone()
    dist.all_reduce(x, group=group)
    return x


class FNoAllReduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class FMean(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return _ar(grad, ctx.group) / dist.get_world_size(ctx.group), None


class FReducingForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _ar(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _ar(grad, ctx.group), None


class FIgnoresGroup(torch.autograd.Function):
    """Keeps the group but all-reduces over the whole world (a learner's 3D-grid bug)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        if dist.get_world_size(ctx.group) == 1:
            return grad, None
        grad = grad.clone()
        dist.all_reduce(grad)  # no group=
        return grad, None


class GIdentityForward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return _ar(grad, ctx.group), None


class GReducingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _ar(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _ar(grad, ctx.group), None


class GInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        dist.all_reduce(x, group=group)  # the caller's tensor changes
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class GIgnoresGroup(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        x = x.clone()
        dist.all_reduce(x)  # no group=
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class GFloat32(torch.autograd.Function):
    """Right sum, wrong type: the exercise's tensors are float64 and g must keep the dtype."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.clone()
        dist.all_reduce(x, group=group)
        return x.float()  # float64 in, float32 out

    @staticmethod
    def backward(ctx, grad):
        return grad.double(), None


class FBatched(torch.autograd.Function):
    """Right values and gradient, wrong shape: a batch dimension added in forward."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.unsqueeze(0).clone()  # (4, 6) -> (1, 4, 6)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.squeeze(0).clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def _wrap(fn_cls):
    def op(x, group=None):
        return fn_cls.apply(x, group)

    return op


def f_from_the_course(x, group=None):
    return copy_to_tp_region(x, group)


def g_via_importlib(x, group=None):
    """The course's g reached without an import statement: only the rank-side watch sees it."""
    return importlib.import_module("minipar.tensor_parallel.mappings").reduce_from_tp_region(
        x, group
    )


# ------------------------------------------------------------------ 02 MLP
class _Sharded(nn.Module):
    """A learner's shard copies (group rank and size), for the forward mistakes below."""

    def __init__(self, fc1, fc2, group=None):
        super().__init__()
        t, r = dist.get_world_size(group), dist.get_rank(group)
        n = fc1.out_features // t
        self.group = group
        self.w1 = nn.Parameter(fc1.weight.data[r * n : (r + 1) * n].clone())
        self.b1 = nn.Parameter(fc1.bias.data[r * n : (r + 1) * n].clone())
        self.w2 = nn.Parameter(fc2.weight.data[:, r * n : (r + 1) * n].clone())
        self.b2 = nn.Parameter(fc2.bias.data.clone())

    def forward(self, x):
        h = F.gelu(F.linear(copy_to_tp_region(x, self.group), self.w1, self.b1))
        return reduce_from_tp_region(F.linear(h, self.w2), self.group) + self.b2


class MLPBiasPerRank(_Sharded):
    def forward(self, x):
        h = F.gelu(F.linear(copy_to_tp_region(x, self.group), self.w1, self.b1))
        return reduce_from_tp_region(F.linear(h, self.w2, self.b2), self.group)


class MLPWithoutF(_Sharded):
    def forward(self, x):
        h = F.gelu(F.linear(x, self.w1, self.b1))
        return reduce_from_tp_region(F.linear(h, self.w2), self.group) + self.b2


class MLPReplicated(nn.Module):
    """A plain copy of the full layers on every rank."""

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
        self.w2 = nn.Parameter(fc2.weight.data[:, r * n : (r + 1) * n].clone())


class MLPViews(_Sharded):
    """The 'shards' are views of the full weights: right values, but each rank keeps all of
    fc1's and fc2's storage (a learner's memory bug)."""

    def __init__(self, fc1, fc2, group=None):
        super().__init__(fc1, fc2, group)
        t, r = dist.get_world_size(group), dist.get_rank(group)
        n = fc1.out_features // t
        self.w1 = nn.Parameter(fc1.weight.data[r * n : (r + 1) * n])  # a view, no copy
        self.b1 = nn.Parameter(fc1.bias.data[r * n : (r + 1) * n])


class MLPGlobalRank(_Sharded):
    """Slices with the global rank and world size: right only when the group is the world."""

    def __init__(self, fc1, fc2, group=None):
        nn.Module.__init__(self)
        t, r = dist.get_world_size(), dist.get_rank()
        n = fc1.out_features // t
        self.group = group
        self.w1 = nn.Parameter(fc1.weight.data[r * n : (r + 1) * n].clone())
        self.b1 = nn.Parameter(fc1.bias.data[r * n : (r + 1) * n].clone())
        self.w2 = nn.Parameter(fc2.weight.data[:, r * n : (r + 1) * n].clone())
        self.b2 = nn.Parameter(fc2.bias.data.clone())


class MLPFromCourse(nn.Module):
    def __init__(self, fc1, fc2, group=None):
        super().__init__()
        from minipar.tensor_parallel import ColumnParallelLinear, RowParallelLinear

        t, r = dist.get_world_size(group), dist.get_rank(group)
        self.fc1 = ColumnParallelLinear(fc1.in_features, fc1.out_features, group=group)
        self.fc2 = RowParallelLinear(fc2.in_features, fc2.out_features, group=group)
        del t, r

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


# ------------------------------------------------------------------ 03 cross-entropy
def _lo_per(local_logits, group):
    per = local_logits.shape[-1]
    return dist.get_rank(group) * per, per


def ce_no_max(local_logits, target, group=None):
    lo, per = _lo_per(local_logits, group)
    mine = (target >= lo) & (target < lo + per)
    idx = torch.where(mine, target - lo, torch.zeros_like(target))
    picked = local_logits.gather(1, idx[:, None])[:, 0] * mine
    total = reduce_from_tp_region(local_logits.exp().sum(1), group)
    return (total.log() - reduce_from_tp_region(picked, group)).mean()


def ce_local_max(local_logits, target, group=None):
    lo, per = _lo_per(local_logits, group)
    z = local_logits - local_logits.max(1, keepdim=True).values.detach()  # not all-reduced
    mine = (target >= lo) & (target < lo + per)
    idx = torch.where(mine, target - lo, torch.zeros_like(target))
    picked = z.gather(1, idx[:, None])[:, 0] * mine
    return (
        reduce_from_tp_region(z.exp().sum(1), group).log() - reduce_from_tp_region(picked, group)
    ).mean()


def _good_ce(
    local_logits,
    target,
    group=None,
    *,
    own=None,
    clamp=False,
    reduce_sum=True,
    reduce_pick=True,
    detach=True,
    mean=True,
    start=None,
):
    """A learner's cross-entropy, written from the four steps of the exercise, with one of the
    mistakes below switched on."""
    lo, per = _lo_per(local_logits, group)
    if start is not None:
        lo = start
    m = local_logits.max(dim=1).values
    m = m.detach() if detach else m
    dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
    z = local_logits - m[:, None]
    mine = own(target, lo, per) if own else (target >= lo) & (target < lo + per)
    idx = (target - lo).clamp(0, per - 1) if clamp else torch.where(mine, target - lo, 0)
    picked = z.gather(1, idx[:, None])[:, 0] * mine
    s = z.exp().sum(1)
    s = reduce_from_tp_region(s, group) if reduce_sum else s
    picked = reduce_from_tp_region(picked, group) if reduce_pick else picked
    loss = s.log() - picked
    return loss.mean() if mean else loss.sum()


def ce_max_over_world(local_logits, target, group=None):
    """The MAX all-reduce without group=: the max cancels out of the loss, so this is right
    whenever every group's logits reach the same max."""
    lo, per = _lo_per(local_logits, group)
    m = local_logits.detach().max(dim=1).values.clone()
    dist.all_reduce(m, op=dist.ReduceOp.MAX)  # over the world
    z = local_logits - m[:, None]
    mine = (target >= lo) & (target < lo + per)
    picked = z.gather(1, (target - lo).clamp(0, per - 1)[:, None])[:, 0] * mine
    total = reduce_from_tp_region(z.exp().sum(1), group)
    return (total.log() - reduce_from_tp_region(picked, group)).mean()


def ce_sum(local_logits, target, group=None):
    return _good_ce(local_logits, target, group, mean=False)


def ce_unmasked(local_logits, target, group=None):
    return _good_ce(local_logits, target, group, clamp=True, own=lambda t, lo, per: t >= 0)


def ce_boundary_twice(local_logits, target, group=None):
    """A learner's off-by-one: 'hi' is the next shard's first id and the test is target <= hi
    (indices clamped, so nothing raises)."""
    return _good_ce(
        local_logits, target, group, clamp=True, own=lambda t, lo, per: (t >= lo) & (t <= lo + per)
    )


def ce_boundary_missed(local_logits, target, group=None):
    """hi taken as the last id, but the test is target < hi: each shard's last id is lost."""
    return _good_ce(
        local_logits, target, group, own=lambda t, lo, per: (t >= lo) & (t < lo + per - 1)
    )


def ce_boundary_index_error(local_logits, target, group=None):
    """Megatron's masking with an off-by-one: target == hi is kept, its index is out of range."""
    lo, per = _lo_per(local_logits, group)
    m = local_logits.detach().max(1).values
    dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
    z = local_logits - m[:, None]
    outside = (target < lo) | (target > lo + per)
    local = (target - lo).masked_fill(outside, 0)
    picked = z.gather(1, local[:, None])[:, 0].masked_fill(outside, 0.0)
    return (
        reduce_from_tp_region(z.exp().sum(1), group).log() - reduce_from_tp_region(picked, group)
    ).mean()


def ce_sum_not_reduced(local_logits, target, group=None):
    return _good_ce(local_logits, target, group, reduce_sum=False)


def ce_pick_not_reduced(local_logits, target, group=None):
    return _good_ce(local_logits, target, group, reduce_pick=False)


def ce_max_not_detached(local_logits, target, group=None):
    return _good_ce(local_logits, target, group, detach=False)


def ce_global_rank(local_logits, target, group=None):
    return _good_ce(local_logits, target, group, start=dist.get_rank() * local_logits.shape[-1])


def ce_all_reduce_both_ways(local_logits, target, group=None):
    """The sums reduced with a hand-written all-reduce that also all-reduces in backward."""

    class AllReduce(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x = x.clone()
            dist.all_reduce(x, group=group)
            return x

        @staticmethod
        def backward(ctx, g):
            g = g.clone()
            dist.all_reduce(g, group=group)
            return g

    lo, per = _lo_per(local_logits, group)
    m = local_logits.detach().max(1).values
    dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
    z = local_logits - m[:, None]
    mine = (target >= lo) & (target < lo + per)
    picked = z.gather(1, torch.where(mine, target - lo, 0)[:, None])[:, 0] * mine
    return (AllReduce.apply(z.exp().sum(1)).log() - AllReduce.apply(picked)).mean()


def ce_from_course(local_logits, target, group=None):
    from minipar.tensor_parallel import vocab_parallel_cross_entropy

    return vocab_parallel_cross_entropy(local_logits, target, group)


# ------------------------------------------------------------------ 04 SP layer norm
def _sp_class(backward="reduce_scatter", finish="sum", gather_group=True):
    """A learner's region: all_gather of a list then cat; backward by reduce-scatter (all-reduce
    then slice, correct), or only slicing; finish_grads summing, averaging, the weight only,
    over the world, or nothing."""

    class Gather(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, group):
            ctx.group = group
            g = group if gather_group else None
            parts = [torch.empty_like(x) for _ in range(dist.get_world_size(g))]
            dist.all_gather(parts, x.contiguous(), group=g)
            return torch.cat(parts, dim=1)

        @staticmethod
        def backward(ctx, grad):
            t, r = dist.get_world_size(ctx.group), dist.get_rank(ctx.group)
            k = grad.shape[1] // t
            if backward == "reduce_scatter":
                grad = grad.clone()
                dist.all_reduce(grad, group=ctx.group)
            return grad[:, r * k : (r + 1) * k].contiguous(), None

    class SP(nn.Module):
        def __init__(self, h, group=None):
            super().__init__()
            self.ln, self.group = nn.LayerNorm(h), group

        def forward(self, x):
            return Gather.apply(self.ln(x), self.group)

        def finish_grads(self):
            params = {"weight_only": [self.ln.weight]}.get(finish, list(self.ln.parameters()))
            for p in params if finish != "none" else []:
                dist.all_reduce(p.grad, group=None if finish == "world" else self.group)
                if finish == "mean":
                    p.grad /= dist.get_world_size(self.group)

    return SP


def sp_from_course():
    from minipar.tensor_parallel import gather_from_sp_region

    class SP(nn.Module):
        def __init__(self, h, group=None):
            super().__init__()
            self.ln, self.group = nn.LayerNorm(h), group

        def forward(self, x):
            return gather_from_sp_region(self.ln(x), self.group)

        def finish_grads(self):
            for p in self.ln.parameters():
                dist.all_reduce(p.grad, group=self.group)

    return SP


@pytest.mark.slow
def test_sp_layernorm_alternative_passes(capsys):
    # all-reduce then slice is a correct (if twice as chatty) reduce-scatter: accepted
    assert check("tensor_parallel.sp_layernorm", _sp_class())


# ------------------------------------------------------------------ the clause table's wrong answers
WRONG = {
    # 01 f and g
    "f_no_all_reduce": _wrap(FNoAllReduce),
    "f_mean": _wrap(FMean),
    "f_reducing_forward": _wrap(FReducingForward),
    "f_ignores_group": _wrap(FIgnoresGroup),
    "f_from_the_course": f_from_the_course,
    "f_batched": _wrap(FBatched),
    "g_identity_forward": _wrap(GIdentityForward),
    "g_reducing_backward": _wrap(GReducingBackward),
    "g_in_place": _wrap(GInPlace),
    "g_ignores_group": _wrap(GIgnoresGroup),
    "g_float32": _wrap(GFloat32),
    "g_via_importlib": g_via_importlib,
    # 02 column-row MLP
    "mlp_bias_per_rank": MLPBiasPerRank,
    "mlp_without_f": MLPWithoutF,
    "mlp_replicated": MLPReplicated,
    "mlp_wrong_slice": MLPWrongSlice,
    "mlp_views": MLPViews,
    "mlp_global_rank": MLPGlobalRank,
    "mlp_from_course": MLPFromCourse,
    # 03 vocab-parallel cross-entropy
    "ce_no_max": ce_no_max,
    "ce_local_max": ce_local_max,
    "ce_max_over_world": ce_max_over_world,
    "ce_sum": ce_sum,
    "ce_unmasked": ce_unmasked,
    "ce_boundary_twice": ce_boundary_twice,
    "ce_boundary_missed": ce_boundary_missed,
    "ce_boundary_index_error": ce_boundary_index_error,
    "ce_sum_not_reduced": ce_sum_not_reduced,
    "ce_pick_not_reduced": ce_pick_not_reduced,
    "ce_max_not_detached": ce_max_not_detached,
    "ce_global_rank": ce_global_rank,
    "ce_all_reduce_both_ways": ce_all_reduce_both_ways,
    "ce_from_course": ce_from_course,
    # 04 sequence-parallel layer norm
    "sp_sliced_not_reduced": _sp_class(backward="slice"),
    "sp_grads_not_reduced": _sp_class(finish="none"),
    "sp_bias_not_reduced": _sp_class(finish="weight_only"),
    "sp_grads_averaged": _sp_class(finish="mean"),
    "sp_grads_over_world": _sp_class(finish="world"),
    "sp_gather_over_world": _sp_class(gather_group=False),
    "sp_from_course": sp_from_course(),
}


@pytest.mark.parametrize("task_id, clause", clause_cases("tensor_parallel"))
def test_every_clause_has_a_wrong_answer_that_fails_with_its_reason(task_id, clause, capsys):
    clause_fails(task_id, clause, WRONG, capsys)
