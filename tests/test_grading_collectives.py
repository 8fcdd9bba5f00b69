"""Collectives exercises: solutions pass, starters fail, realistic mistakes get a named reason."""

import sys
from pathlib import Path

import cloudpickle
import pytest
import torch
import torch.distributed as dist
from grading_support import assert_no_solution_code, clause_cases

from minipar.grading import check
from minipar.grading.notebooks import exercise_namespace

# Ship this module's wrong answers to the ranks by value (workers cannot import a test module).
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SOL = Path(__file__).resolve().parents[1] / "exercises" / "collectives" / "solutions"


def solution(stem):
    return exercise_namespace(SOL / f"{stem}.py", solved=True)


def starter(stem):
    return exercise_namespace(SOL / f"{stem}.py", solved=False)


def verdict(capsys, task_id, candidate, **options):
    passed = check(task_id, candidate, **options)
    line = capsys.readouterr().out.strip()
    if not passed:
        assert_no_solution_code(line, candidate)
    return passed, line


# ----------------------------------------------------------------------------- wrong answers
def _ring(tensor, rs_steps=None, add_own_again=False, recv_from_right=False):
    """A ring all-reduce with one configurable learner mistake."""
    r, n = dist.get_rank(), dist.get_world_size()
    right, left = (r + 1) % n, ((r + 1) if recv_from_right else (r - 1)) % n
    chunks = tensor.view(-1).tensor_split(n)
    own = [c.clone() for c in chunks]
    buf = torch.empty_like(chunks[0])

    def exchange(send, recv):
        reqs = [dist.isend(send, dst=right), dist.irecv(recv, src=left)]
        for q in reqs:
            q.wait()

    for k in range(n - 1 if rs_steps is None else rs_steps(n)):
        send, recv = chunks[(r - k - 1) % n], chunks[(r - k - 2) % n]
        exchange(send, buf[: recv.numel()])
        recv += buf[: recv.numel()]
    if add_own_again:
        chunks[r].add_(own[r])
    for k in range(n - 1):
        exchange(chunks[(r - k) % n], chunks[(r - k - 1) % n])
    return tensor


def own_chunk_twice(t):
    return _ring(t, add_own_again=True)


def off_by_one(t):
    return _ring(t, rs_steps=lambda n: n - 2)


def wrong_peer(t):
    return _ring(t, recv_from_right=True)


def calls_dist(t):
    dist.all_reduce(t)
    return t


def everyone_sends_everything(t):
    """Right sum, wrong algorithm: each rank sends its whole tensor to every other rank."""
    r, n = dist.get_rank(), dist.get_world_size()
    mine, buf = t.clone(), torch.empty_like(t)
    for k in range(1, n):
        reqs = [dist.isend(mine, dst=(r + k) % n), dist.irecv(buf, src=(r - k) % n)]
        for q in reqs:
            q.wait()
        t += buf
    return t


def gather_wrong_block(chunk):
    r, n = dist.get_rank(), dist.get_world_size()
    out = torch.zeros(n * chunk.numel(), dtype=chunk.dtype)
    blocks = out.view(n, -1)
    blocks[r] = chunk
    for k in range(n - 1):
        reqs = [
            dist.isend(blocks[(r + k) % n].clone(), dst=(r + 1) % n),
            dist.irecv(blocks[(r + k + 1) % n], src=(r - 1) % n),
        ]  # indices run backwards
        for q in reqs:
            q.wait()
    return out


def gather_too_few_steps(chunk):
    r, n = dist.get_rank(), dist.get_world_size()
    out = torch.zeros(n * chunk.numel())
    blocks = out.view(n, -1)
    blocks[r] = chunk
    for k in range(n - 2):
        reqs = [
            dist.isend(blocks[(r - k) % n], dst=(r + 1) % n),
            dist.irecv(blocks[(r - k - 1) % n], src=(r - 1) % n),
        ]
        for q in reqs:
            q.wait()
    return out


def gather_blocking_send_first(chunk):
    r, n = dist.get_rank(), dist.get_world_size()
    out = torch.zeros(n * chunk.numel())
    blocks = out.view(n, -1)
    blocks[r] = chunk
    for k in range(n - 1):
        dist.send(blocks[(r - k) % n], dst=(r + 1) % n)  # every rank sends first: deadlock
        dist.recv(blocks[(r - k - 1) % n], src=(r - 1) % n)
    return out


def chunk_ring(tensor):
    """The reference ring with .chunk(n): fewer than n chunks when n does not divide the size."""
    r, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.view(-1).chunk(n)
    buf = torch.empty_like(chunks[0])
    for k in range(n - 1):
        send, recv = chunks[(r - k - 1) % n], chunks[(r - k - 2) % n]
        reqs = [dist.isend(send, dst=(r + 1) % n), dist.irecv(buf[: recv.numel()], src=(r - 1) % n)]
        for q in reqs:
            q.wait()
        recv += buf[: recv.numel()]
    for k in range(n - 1):
        reqs = [
            dist.isend(chunks[(r - k) % n], dst=(r + 1) % n),
            dist.irecv(chunks[(r - k - 1) % n], src=(r - 1) % n),
        ]
        for q in reqs:
            q.wait()
    return tensor


def float32_buffers(tensor):
    """Right for float32 inputs only: the receive buffer ignores the input's dtype."""
    r, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.view(-1).tensor_split(n)
    buf = torch.empty(chunks[0].numel())  # float32, whatever the input
    for k in range(n - 1):
        send, recv = chunks[(r - k - 1) % n], chunks[(r - k - 2) % n]
        reqs = [dist.isend(send, dst=(r + 1) % n), dist.irecv(buf[: recv.numel()], src=(r - 1) % n)]
        for q in reqs:
            q.wait()
        recv += buf[: recv.numel()].to(recv.dtype)
    for k in range(n - 1):
        reqs = [
            dist.isend(chunks[(r - k) % n], dst=(r + 1) % n),
            dist.irecv(chunks[(r - k - 1) % n], src=(r - 1) % n),
        ]
        for q in reqs:
            q.wait()
    return tensor


def returns_none(tensor):
    _ring(tensor)  # right sum, forgets to return


def returns_float32(tensor):
    return _ring(tensor).float()  # right sum, another dtype back


def direct_exchange(tensor):
    """Right sum and the ring's bytes, but every rank talks to every other rank: each chunk goes
    straight to its owner, then each owner sends its finished chunk straight to everyone."""
    r, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.view(-1).tensor_split(n)
    mine = chunks[r]
    bufs = [torch.empty_like(mine) for _ in range(n)]
    reqs = []
    for k in range(1, n):
        reqs += [
            dist.isend(chunks[(r + k) % n], dst=(r + k) % n),
            dist.irecv(bufs[(r - k) % n], src=(r - k) % n),
        ]
    for q in reqs:
        q.wait()
    for k in range(1, n):
        mine += bufs[(r - k) % n]
    reqs = []
    for k in range(1, n):
        reqs += [
            dist.isend(mine, dst=(r + k) % n),
            dist.irecv(chunks[(r - k) % n], src=(r - k) % n),
        ]
    for q in reqs:
        q.wait()
    return tensor


def course_ring(tensor):
    from minipar.collectives.ring import ring_all_reduce

    return ring_all_reduce(tensor)


def gather_via_rank0(chunk):
    """Right result, but everything goes through rank 0: rank 0 sends n·(n−1) chunks."""
    r, n = dist.get_rank(), dist.get_world_size()
    out = torch.empty(n * chunk.numel(), dtype=chunk.dtype)
    blocks = out.view(n, -1)
    if r == 0:
        blocks[0] = chunk
        for k in range(1, n):
            dist.recv(blocks[k], src=k)
        for k in range(1, n):
            dist.send(out, dst=k)
    else:
        dist.send(chunk, dst=0)
        dist.recv(out, src=0)
    return out


def gather_float32_out(chunk):
    """Right for float32 chunks only: the output is always float32."""
    r, n = dist.get_rank(), dist.get_world_size()
    out = torch.zeros(n * chunk.numel())
    blocks = out.view(n, -1)
    blocks[r] = chunk
    for k in range(n - 1):
        reqs = [
            dist.isend(blocks[(r - k) % n], dst=(r + 1) % n),
            dist.irecv(blocks[(r - k - 1) % n], src=(r - 1) % n),
        ]
        for q in reqs:
            q.wait()
    return out


def gather_course(chunk):
    from minipar.collectives.ring import ring_all_gather

    return ring_all_gather(chunk)


# ----------------------------------------------------------------------------- tests
TASKS = {
    "01_ring_all_reduce": [("collectives.ring_all_reduce", "ring_all_reduce")],
    "02_all_gather": [("collectives.all_gather", "all_gather")],
    "03_alpha_beta": [
        ("collectives.alpha_beta_time", "ring_all_reduce_time"),
        ("collectives.busbw", "bus_bandwidth"),
        ("collectives.gradient_sync", "gradient_sync"),
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("stem", TASKS)
def test_solution_passes_and_starter_fails(stem, capsys):
    sol, start = solution(stem), starter(stem)
    for task_id, name in TASKS[stem]:
        assert verdict(capsys, task_id, sol[name]) == (
            True,
            f"PASS {task_id}: " + check.__globals__["get_task"](task_id).summary,
        )
        passed, line = verdict(capsys, task_id, start[name])
        assert not passed and "not implemented yet" in line, line


# ------------------------------------------------------------------ the clause table's wrong answers
WRONG = {
    # 01 ring all-reduce
    "own_chunk_twice": own_chunk_twice,
    "off_by_one": off_by_one,
    "calls_dist": calls_dist,
    "everyone_sends_everything": everyone_sends_everything,
    "chunk_ring": chunk_ring,
    "float32_buffers": float32_buffers,
    "returns_none": returns_none,
    "returns_float32": returns_float32,
    "direct_exchange": direct_exchange,
    "course_ring": course_ring,
    # 02 all-gather
    "gather_wrong_block": gather_wrong_block,
    "gather_too_few_steps": gather_too_few_steps,
    "gather_via_rank0": gather_via_rank0,
    "gather_float32_out": gather_float32_out,
    "gather_course": gather_course,
    # 03 the α-β arithmetic
    "ab_one_phase": lambda n, S, a, bw: (n - 1) * (a + S / n / bw),
    "ab_whole_message_per_step": lambda n, S, a, bw: 2 * (n - 1) * (a + S / bw),
    "busbw_is_algbw": lambda op, n, S, t: S / t,
    "busbw_one_phase_factor": lambda op, n, S, t: S / t * (n - 1) / n,
    "busbw_underscore_ops": lambda op, n, S, t: (
        S
        / t
        * {
            "all_reduce": 2 * (n - 1) / n,
            "all_gather": (n - 1) / n,
            "reduce_scatter": (n - 1) / n,
            "broadcast": 1.0,
        }[op]
    ),
    "sync_elements": lambda: dict(S_bytes=1.5e9, bandwidth=450e9, seconds=0.0117),
    "sync_bidirectional": lambda: dict(S_bytes=6e9, bandwidth=900e9, seconds=0.0117),
    "sync_gib": lambda: dict(S_bytes=6e9, bandwidth=450 * 2**30, seconds=0.0217),
    "sync_milliseconds": lambda: dict(S_bytes=6e9, bandwidth=450e9, seconds=23.36),
}


@pytest.mark.parametrize(
    "task_id, clause",
    clause_cases(
        "collectives", slow=lambda t: t.split(".")[1] in ("ring_all_reduce", "all_gather")
    ),
)
def test_every_clause_has_a_wrong_answer_that_fails_with_its_reason(task_id, clause, capsys):
    passed, line = verdict(capsys, task_id, WRONG[clause.wrong])
    assert not passed and clause.reason in line, line


@pytest.mark.slow
def test_ring_with_wrong_peer_times_out_with_a_reason(capsys, short_stall_window):
    with short_stall_window() as stall_s:  # a true deadlock (the 10-s window: framework)
        passed, line = verdict(capsys, "collectives.ring_all_reduce", wrong_peer)
    assert not passed and "never matched" in line, line  # at n = 2 both sides are right
    assert line.split(": ", 1)[1].startswith(
        f"n=3, 12 elements, float32: deadlock on 3 ranks: for {stall_s:g} s no rank made progress"
    ), line
    assert all(f"rank {r} waiting at line" in line for r in range(3)), line


@pytest.mark.slow
def test_all_gather_blocking_sends_time_out_with_a_reason(capsys, short_stall_window):
    with short_stall_window():
        passed, line = verdict(capsys, "collectives.all_gather", gather_blocking_send_first)
    assert not passed and "deadlock on 2 ranks" in line, line
    assert "(in send)" in line, line


def aborts(t):
    """A rank that dies in C++ without a Python exception (what a dtype mismatch does in gloo)."""
    import os

    if dist.get_rank() == 1:
        os.write(2, b"about to abort: learner's last words\n")
        os.abort()
    return _ring(t)


@pytest.mark.slow
def test_a_rank_abort_is_reported_with_its_stderr(capsys):
    passed, line = verdict(capsys, "collectives.ring_all_reduce", aborts)
    assert not passed, line
    assert "n=2, 8 elements, float32: rank 1 died" in line, line
    assert "about to abort: learner's last words" in line, line
