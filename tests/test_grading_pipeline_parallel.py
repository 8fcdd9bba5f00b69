"""Pipeline-parallel exercises: solutions pass, starters fail, realistic mistakes get named."""

import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist
from grading_support import clause_cases, clause_fails, exercise_function

from minipar.grading import check

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # wrong answers go by value

CH = "pipeline_parallel"
TASKS = {
    "01_one_f_one_b": ("pipeline_parallel.one_f_one_b", ("one_f_one_b",)),
    "02_gpipe_send_recv": ("pipeline_parallel.gpipe_send_recv", ("gpipe_step",)),
    "03_bw_split": ("pipeline_parallel.bw_split", ("backward_input", "backward_weight")),
    "04_interleaved": ("pipeline_parallel.interleaved", ("interleaved",)),
}


def load(stem, solved):
    fns = tuple(exercise_function(CH, stem, n, solved=solved) for n in TASKS[stem][1])
    return fns if len(fns) > 1 else fns[0]


@pytest.mark.slow
@pytest.mark.parametrize("stem", TASKS)
def test_solution_passes_and_starter_fails(stem, capsys):
    task_id = TASKS[stem][0]
    assert check(task_id, load(stem, True))
    assert not check(task_id, load(stem, False))
    assert "not implemented yet" in capsys.readouterr().out.splitlines()[-1]


# ------------------------------------------------------------------ 01 1F1B
def warmup_too_long(rank, p, m):
    w = min(p - rank, m)  # off by one
    acts = [("F", rank, i) for i in range(w)]
    for i in range(m - w):
        acts += [("F", rank, w + i), ("B", rank, i)]
    return acts + [("B", rank, i) for i in range(m - w, m)]


def wrong_stage(rank, p, m):
    return [(op, 0, i) for i in range(m) for op in "FB"]


def mirrored(rank, p, m):
    w = min(rank, m)  # counted from the wrong end
    acts = [("F", rank, i) for i in range(w)]
    for i in range(m - w):
        acts += [("F", rank, w + i), ("B", rank, i)]
    return acts + [("B", rank, i) for i in range(m - w, m)]


def gpipe_order(rank, p, m):
    return [("F", rank, i) for i in range(m)] + [("B", rank, i) for i in range(m)]


def warmup_uncapped(rank, p, m):
    """The warm-up p−r−1 without the cap at m: right until m < p − 1."""
    w = p - rank - 1
    acts = [("F", rank, i) for i in range(w)]
    for i in range(m - w):
        acts += [("F", rank, w + i), ("B", rank, i)]
    return acts + [("B", rank, i) for i in range(max(m - w, 0), m)]


def schedule_from_course(rank, p, m):
    from minipar.pipeline_parallel import schedule

    return [tuple(a) for a in schedule("1f1b", p, m)[rank]]


# ------------------------------------------------------------------ 02 send/recv
def _loss(logits, targets):
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _gpipe(stage, rank, p, microbatches, targets, shape, *, divide_by_m=True, mark_received=True):
    """A learner's GPipe step (backwards in reverse order, one loss per micro-batch), with one
    classic mistake switched on by a False flag."""
    first, last = rank == 0, rank == p - 1
    inputs, outputs = [], []
    for i in range(len(microbatches)):
        if first:
            inp = microbatches[i]
        else:
            inp = torch.zeros(shape, dtype=torch.float64)
            dist.recv(inp, src=rank - 1)
            inp.requires_grad = mark_received
        out = stage(inp)
        if last:
            out = _loss(out, targets[i])
            if divide_by_m:
                out = out / len(microbatches)
        else:
            dist.send(out, dst=rank + 1)  # values only: autograd stays local
        inputs.append(inp)
        outputs.append(out)
    for i in reversed(range(len(microbatches))):
        if last:
            outputs[i].backward()
        else:
            grad = torch.zeros(shape, dtype=torch.float64)
            dist.recv(grad, src=rank + 1)
            outputs[i].backward(grad)
        if not first:
            g = inputs[i].grad
            dist.send(g if g is not None else torch.zeros(shape, dtype=torch.float64), dst=rank - 1)


def unscaled(*args):
    return _gpipe(*args, divide_by_m=False)  # loss not divided by m


def no_requires_grad(*args):
    return _gpipe(*args, mark_received=False)  # forgot requires_grad


def gpipe_with_course_p2p(stage, rank, p, microbatches, targets, shape):
    from minipar.pipeline_parallel.communication import P2P

    P2P(rank, p, len(microbatches))
    return _gpipe(stage, rank, p, microbatches, targets, shape)


@pytest.mark.slow
def test_send_recv_learner_version_passes(capsys):
    """The learner-style step above, without a mistake, passes (so the failures below are the
    mistakes', and a send of y itself, not y.detach(), is accepted: dist.send copies values)."""
    assert check("pipeline_parallel.gpipe_send_recv", _gpipe)


# ------------------------------------------------------------------ 03 B/W split
def b_with_backward(y, x, grad_y):
    y.backward(grad_y, retain_graph=True)  # also fills the weights' .grad
    return x.grad


def b_without_retain(y, x, grad_y):
    return torch.autograd.grad(y, [x], grad_y)[0]


def w_overwrites(y, params, grad_y):
    for q, g in zip(params, torch.autograd.grad(y, params, grad_y)):
        q.grad = g


def b_ok(y, x, grad_y):
    return torch.autograd.grad(y, [x], grad_y, retain_graph=True)[0]


def w_ok(y, params, grad_y):
    for q, g in zip(params, torch.autograd.grad(y, params, grad_y)):
        q.grad = g if q.grad is None else q.grad + g


def b_float32(y, x, grad_y):
    return torch.autograd.grad(y, [x], grad_y, retain_graph=True)[0].float()  # dtype changed


def b_flat(y, x, grad_y):
    return torch.autograd.grad(y, [x], grad_y, retain_graph=True)[0].flatten(1)  # (2, s·h)


def w_from_course(y, params, grad_y):
    from minipar.pipeline_parallel.executor import _accumulate

    _accumulate(params, torch.autograd.grad(y, params, grad_y))


# ------------------------------------------------------------------ 04 interleaved
def _megatron(rank, p, m, v, warm_extra=0, owner=lambda r, c, p, v: r + c * p, rev=True, cap=True):
    total = m * v
    warmup = 2 * (p - rank - 1) + (v - 1) * p + warm_extra
    warmup = min(warmup, total) if cap else warmup

    def unit(k, fwd):
        c = (k // p) % v
        if not fwd and rev:
            c = v - 1 - c
        return owner(rank, c, p, v), (k // (p * v)) * p + k % p

    acts = [("F", *unit(k, True)) for k in range(warmup)]
    for k in range(total - warmup):
        acts += [("F", *unit(warmup + k, True)), ("B", *unit(k, False))]
    return acts + [("B", *unit(k, False)) for k in range(total - warmup, total)]


def interleaved_chunk_major_owner(r, p, m, v):  # rank r owns chunks r·v … r·v+v−1
    return _megatron(r, p, m, v, owner=lambda r, c, p, v: r * v + c)


def interleaved_short_warmup(r, p, m, v):
    return _megatron(r, p, m, v, warm_extra=-1)


def interleaved_backward_forward_order(r, p, m, v):  # backward visits chunk 0 first
    return _megatron(r, p, m, v, rev=False)


def interleaved_uncapped(r, p, m, v):
    return _megatron(r, p, m, v, cap=False)


# ------------------------------------------------------------------ the clause table's wrong answers
WRONG = {
    # 01 1F1B
    "warmup_too_long": warmup_too_long,
    "warmup_uncapped": warmup_uncapped,
    "schedule_from_course": schedule_from_course,
    "wrong_stage": wrong_stage,
    "mirrored": mirrored,
    "gpipe_order": gpipe_order,
    # 02 GPipe send/recv
    "unscaled": unscaled,
    "no_requires_grad": no_requires_grad,
    "gpipe_with_course_p2p": gpipe_with_course_p2p,
    # 03 B/W split (pairs of functions)
    "b_with_backward": (b_with_backward, w_ok),
    "b_without_retain": (b_without_retain, w_ok),
    "w_overwrites": (b_ok, w_overwrites),
    "w_from_course": (b_ok, w_from_course),
    "b_float32": (b_float32, w_ok),
    "b_flat": (b_flat, w_ok),
    # 04 interleaved
    "interleaved_chunk_major_owner": interleaved_chunk_major_owner,
    "interleaved_short_warmup": interleaved_short_warmup,
    "interleaved_backward_forward_order": interleaved_backward_forward_order,
    "interleaved_uncapped": interleaved_uncapped,
}


@pytest.mark.parametrize(
    "task_id, clause",
    clause_cases(CH, slow=lambda t: t.split(".")[1] in ("one_f_one_b", "gpipe_send_recv")),
)
def test_every_clause_has_a_wrong_answer_that_fails_with_its_reason(task_id, clause, capsys):
    clause_fails(task_id, clause, WRONG, capsys)
