"""Pipeline-parallel exercises: solutions pass, starters fail, realistic mistakes get named."""

import re
import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist
from grading_support import exercise_function, failure

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


@pytest.mark.parametrize(
    "fn, reason",
    [
        (
            warmup_too_long,
            r"p = 1, m = 3: rank 0 runs 2 forwards before its first backward, "
            r"expected 1 \(warm-up min\(p−r−1, m\) = min\(0, 3\) = 0 forwards, then "
            r"the steady phase's first forward\)",
        ),
        (
            warmup_uncapped,
            r"p = 4, m = 2: rank 0 runs 3 forwards before its first backward, "
            r"expected 2 \(warm-up min\(p−r−1, m\) = min\(3, 2\) = 2: capped, so all 2 "
            r"forwards run before the first backward\)",
        ),
        (schedule_from_course, r"course's own minipar\.pipeline_parallel"),
        (wrong_stage, r"rank 1 runs F0\.0 but owns stage 1"),
        (mirrored, r"forwards before its first backward"),
        (gpipe_order, r"forwards before its first backward"),
    ],
)
def test_one_f_one_b_mistakes(fn, reason, capsys):
    line = failure("pipeline_parallel.one_f_one_b", fn, capsys)
    assert re.search(reason, line), line


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


@pytest.mark.slow
@pytest.mark.parametrize(
    "fn, reason",
    [
        (unscaled, "m = 3 times too large: divide each micro-batch's loss by m"),
        (no_requires_grad, "does the received activation require grad"),
        (gpipe_with_course_p2p, "course's own minipar.pipeline_parallel.communication (P2P)"),
    ],
)
def test_send_recv_mistakes(fn, reason, capsys):
    line = failure("pipeline_parallel.gpipe_send_recv", fn, capsys)
    assert reason in line, line


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


@pytest.mark.parametrize(
    "fns, reason",
    [
        ((b_with_backward, w_ok), "backward_input filled .grad of "),
        ((b_without_retain, w_ok), "backward_weight found the graph already freed"),
        ((b_ok, w_overwrites), "must add to .grad, not overwrite it"),
        ((b_ok, w_from_course), "course's own minipar.pipeline_parallel.executor (_accumulate)"),
        ((b_float32, w_ok), "gradient of x: dtype float32, expected float64"),
        ((b_flat, w_ok), "gradient of x: shape (2, 32), expected (2, 4, 8)"),
    ],
)
def test_bw_split_mistakes(fns, reason, capsys):
    line = failure("pipeline_parallel.bw_split", fns, capsys)
    assert reason in line, line
    for code in ("autograd.grad(", "retain_graph=True", ".backward("):  # no solution code
        assert code not in line, line


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


@pytest.mark.parametrize(
    "fn, reason",
    [
        (
            lambda r, p, m, v: _megatron(r, p, m, v, owner=lambda r, c, p, v: r * v + c),
            "but owns stages",
        ),
        (
            lambda r, p, m, v: _megatron(r, p, m, v, warm_extra=-1),
            "forwards before its first backward",
        ),
        (lambda r, p, m, v: _megatron(r, p, m, v, rev=False), "p = "),
        (
            lambda r, p, m, v: _megatron(r, p, m, v, cap=False),
            "p = 4, m = 4, v = 2: rank 0 runs 10 forwards before its first backward, expected 8 "
            "(warm-up min(2(p−r−1)+(v−1)p, m·v) = min(2·3+1·4, 4·2) = min(10, 8) = 8: capped, so all "
            "8 forward units run before the first backward)",
        ),
    ],
)
def test_interleaved_mistakes(fn, reason, capsys):
    line = failure("pipeline_parallel.interleaved", fn, capsys)
    assert reason in line, line
