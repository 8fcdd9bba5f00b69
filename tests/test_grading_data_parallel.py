"""Data-parallel exercises: solutions pass, starters fail, realistic mistakes get named."""

import contextlib
import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist
from grading_support import clause_cases, clause_fails, exercise_function

from minipar.grading import check

# The wrong answers below reach the ranks by value, as a learner's notebook functions do: a rank
# then does not import this module (pytest, nbformat: about 1 CPU-s per rank, more than the
# check itself).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

TASKS = {
    "01_average_gradients": ("data_parallel.average_gradients", "average_gradients"),
    "02_bucketed": ("data_parallel.bucketed", "Bucketed"),
    "03_accumulation": ("data_parallel.accumulation", "accumulation_step"),
    "04_zero1_step": ("data_parallel.zero1_step", "zero1_step"),
}


def solution(stem):
    return exercise_function("data_parallel", stem, TASKS[stem][1], solved=True)


def starter(stem):
    return exercise_function("data_parallel", stem, TASKS[stem][1], solved=False)


@pytest.mark.slow
@pytest.mark.parametrize("stem", TASKS)
def test_solution_passes_and_starter_fails(stem, capsys):
    task_id = TASKS[stem][0]
    assert check(task_id, solution(stem))
    assert not check(task_id, starter(stem))
    assert "not implemented yet" in capsys.readouterr().out.splitlines()[-1]


# ------------------------------------------------------------------ 01
def summing(model, group=None):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)


def averaging_parameters(model, group=None):
    for p in model.parameters():
        dist.all_reduce(p.data, group=group)
        p.data.div_(dist.get_world_size(group))


def nothing(model, group=None):
    pass


def ignores_group(model, group=None):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(dist.get_world_size())


def divides_by_world(model, group=None):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad.div_(dist.get_world_size())


def hard_coded_two(model, group=None):
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, group=group)
            p.grad.div_(2)


# ------------------------------------------------------------------ 02
def bucketed_variant(mistake):
    Good = solution("02_bucketed")

    class Wrong(Good):
        def __init__(self, model, cap):
            if mistake == "tied_twice":  # parameters listed without deduplication
                self.model = model
            super().__init__(model, 0 if mistake == "per_parameter" else cap)
            if mistake == "forward_order":  # buckets in forward order: the first bucket holds
                self.buckets.reverse()  # the gradient that is ready last
                self.where = {id(p): i for i, b in enumerate(self.buckets) for p in b}
                self.reset()
            if mistake == "tied_twice":
                tied = model.head.weight
                self.buckets[-1].append(tied)
                self.missing[-1] += 1
                self.reset = lambda: (
                    Good.reset(self),
                    self.missing.__setitem__(-1, len(self.buckets[-1])),
                )

        def hook(self, p):
            if mistake == "params":
                dist.all_reduce(p.data)
                p.data.div_(self.n)
                return
            if mistake == "no_overlap":
                return
            if mistake == "tied_twice" and p is self.model.head.weight:
                self.missing[-1] -= 1  # counted for both of its "uses"
            Good.hook(self, p)

        def finish(self):
            if mistake == "halve":
                self.n = 2  # hard-coded for the 2 ranks the author tried
            if mistake == "no_overlap":  # everything reduced after backward
                for i in range(len(self.buckets)):
                    self.missing[i] = 0
                Good.hook.__wrapped__(self) if hasattr(Good.hook, "__wrapped__") else None
                while self.next < len(self.buckets):
                    flat = torch.cat([q.grad.reshape(-1) for q in self.buckets[self.next]])
                    self.inflight.append((dist.all_reduce(flat, async_op=True), flat, self.next))
                    self.next += 1
            if mistake == "sum":
                self.n = 1
            Good.finish(self)

    return Wrong


# ------------------------------------------------------------------ 03
def sync_every_step(model, dp, micro_batches, loss_fn):
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
        dp.finish()


def loss_not_divided(model, dp, micro_batches, loss_fn):
    for i, (x, y) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == len(micro_batches) - 1 else dp.no_sync():
            loss_fn(model(x), y).backward()
    dp.finish()


def one_big_backward(model, dp, micro_batches, loss_fn):
    x = torch.cat([x for x, _ in micro_batches])
    y = torch.cat([y for _, y in micro_batches])
    loss_fn(model(x), y).backward()
    dp.finish()


def no_finish(model, dp, micro_batches, loss_fn):
    with dp.no_sync():
        for x, y in micro_batches:
            (loss_fn(model(x), y) / len(micro_batches)).backward()


# ------------------------------------------------------------------ 04
def zero1_no_gather(flat, grad, shard, optimizer, group=None):
    n, r = dist.get_world_size(group), dist.get_rank(group)
    mine = torch.empty_like(shard)
    dist.reduce_scatter_single(mine, grad, group=group)
    shard.grad = mine / n
    optimizer.step()
    flat[r * shard.numel() : (r + 1) * shard.numel()] = shard.detach()


def zero1_sum(flat, grad, shard, optimizer, group=None):
    mine = torch.empty_like(shard)
    dist.reduce_scatter_single(mine, grad, group=group)
    shard.grad = mine
    optimizer.step()
    dist.all_gather_single(flat, shard.detach().clone(), group=group)


def zero1_local_grad(flat, grad, shard, optimizer, group=None):
    r = dist.get_rank(group)
    shard.grad = grad[r * shard.numel() : (r + 1) * shard.numel()].clone()
    optimizer.step()
    dist.all_gather_single(flat, shard.detach().clone(), group=group)


def zero1_grad_accumulates(flat, grad, shard, optimizer, group=None):
    """shard.grad added to, as autograd does, and never zeroed between the steps."""
    n = dist.get_world_size(group)
    mine = torch.empty_like(shard)
    dist.reduce_scatter_single(mine, grad, group=group)
    shard.grad = mine / n if shard.grad is None else shard.grad + mine / n
    optimizer.step()
    dist.all_gather_single(flat, shard.detach().clone(), group=group)


def zero1_all_reduce(flat, grad, shard, optimizer, group=None):
    n, r = dist.get_world_size(group), dist.get_rank(group)
    g = grad.clone()
    dist.all_reduce(g, group=group)  # everyone gets every shard's sum
    shard.grad = g[r * shard.numel() : (r + 1) * shard.numel()] / n
    optimizer.step()
    dist.all_gather_single(flat, shard.detach().clone(), group=group)


def zero1_assumes_view(flat, grad, shard, optimizer, group=None):
    """Takes shard for a view of flat: gathers flat's own (stale) slices after the step."""
    n, r = dist.get_world_size(group), dist.get_rank(group)
    mine = torch.empty_like(shard)
    dist.reduce_scatter_single(mine, grad, group=group)
    shard.grad = mine / n
    optimizer.step()
    k = shard.numel()
    dist.all_gather_single(flat, flat[r * k : (r + 1) * k].clone(), group=group)


def zero1_ignores_group(flat, grad, shard, optimizer, group=None):
    """Right on the whole world; every collective on the whole world, whatever group is."""
    n = dist.get_world_size()
    mine = torch.empty_like(shard)
    dist.reduce_scatter_single(mine, grad)
    shard.grad = mine / n
    optimizer.step()
    dist.all_gather_single(flat, shard.detach().clone())


# ------------------------------------------------------------------ the clause table's wrong answers
WRONG = {
    # 01 average gradients
    "summing": summing,
    "averaging_parameters": averaging_parameters,
    "nothing": nothing,
    "ignores_group": ignores_group,
    "divides_by_world": divides_by_world,
    "hard_coded_two": hard_coded_two,
    # 03 accumulation
    "sync_every_step": sync_every_step,
    "loss_not_divided": loss_not_divided,
    "no_finish": no_finish,
    "one_big_backward": one_big_backward,
    # 04 ZeRO-1
    "zero1_all_reduce": zero1_all_reduce,
    "zero1_no_gather": zero1_no_gather,
    "zero1_sum": zero1_sum,
    "zero1_assumes_view": zero1_assumes_view,
    "zero1_ignores_group": zero1_ignores_group,
    "zero1_local_grad": zero1_local_grad,
    "zero1_grad_accumulates": zero1_grad_accumulates,
}
LAZY_WRONG = {  # 02 bucketed: the solution's class with one mistake, built when graded
    f"bucketed_{m}": (lambda m=m: bucketed_variant(m))
    for m in (
        "params",
        "sum",
        "no_overlap",
        "tied_twice",
        "forward_order",
        "per_parameter",
        "halve",
    )
}


@pytest.mark.parametrize("task_id, clause", clause_cases("data_parallel"))
def test_every_clause_has_a_wrong_answer_that_fails_with_its_reason(task_id, clause, capsys):
    wrong = WRONG if clause.wrong in WRONG else {clause.wrong: LAZY_WRONG[clause.wrong]()}
    clause_fails(task_id, clause, wrong, capsys)
