"""Expert-parallel exercises: solutions pass, starters fail, and realistic wrong answers (written
as a learner would, without the solution) fail with a reason that names their mistake."""

import contextlib
import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist
from grading_support import clause_cases, clause_fails, exercise_function, failure

from minipar.expert_parallel import all_to_all

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # wrong answers go by value:
# the ranks need not import this test module (pytest, nbformat: ~1 CPU-s per rank)

TASKS = {
    "top_k_gates": ("01_top_k_gating", "top_k_gates"),
    "dispatch": ("02_dispatch", "dispatch"),
    "combine": ("03_combine", "combine"),
    "keep_mask": ("04_capacity", "keep_mask"),
    "dropless_dispatch": ("05_dropless_dispatch", "dropless_dispatch"),
}


def _fn(name, solved):
    stem, attr = TASKS[name]
    return exercise_function("expert_parallel", stem, attr, solved=solved)


def _fail(name, fn, capsys):
    return failure(f"expert_parallel.{name}", fn, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("name", TASKS)
def test_solution_passes_and_starter_fails(name, capsys):
    from minipar.grading import check

    assert check(f"expert_parallel.{name}", _fn(name, True))
    assert "not implemented yet" in _fail(name, _fn(name, False), capsys)


# ------------------------------------------------------------------ 01 gates (one process)
def gates_not_renormalised(logits, k):
    p = torch.softmax(logits, -1)
    top, idx = p.topk(k)
    return top, idx


def gates_smallest(logits, k):
    p = torch.softmax(logits, -1)
    top, idx = p.topk(k, largest=False)
    return top / top.sum(-1, keepdim=True), idx


def gates_softmax_over_tokens(logits, k):
    p = torch.softmax(logits, 0)
    top, idx = p.topk(k)
    return top / top.sum(-1, keepdim=True), idx


def gates_detached(logits, k):
    with torch.no_grad():
        p = torch.softmax(logits, -1)
        top, idx = p.topk(k)
    return top / top.sum(-1, keepdim=True), idx


def gates_index_order(logits, k):
    p = torch.softmax(logits, -1)
    _, idx = p.topk(k)
    idx = idx.sort(-1).values
    top = p.gather(-1, idx)
    return top / top.sum(-1, keepdim=True), idx


# ------------------------------------------------------------------ 04 capacity (one process)
def keep_token_major(experts, num_experts, capacity):
    n, K = experts.shape
    seen, keep = [0] * num_experts, torch.zeros(n, K, dtype=torch.bool)
    for i in range(n):
        for j in range(K):
            e = int(experts[i, j])
            keep[i, j] = seen[e] < capacity
            seen[e] += 1
    return keep


def keep_less_equal(experts, num_experts, capacity):
    n, K = experts.shape
    seen, keep = [0] * num_experts, torch.zeros(n, K, dtype=torch.bool)
    for j in range(K):
        for i in range(n):
            e = int(experts[i, j])
            keep[i, j] = seen[e] <= capacity
            seen[e] += 1
    return keep


def keep_per_slot(experts, num_experts, capacity):
    n, K = experts.shape
    keep = torch.zeros(n, K, dtype=torch.bool)
    for j in range(K):
        seen = [0] * num_experts
        for i in range(n):
            e = int(experts[i, j])
            keep[i, j] = seen[e] < capacity
            seen[e] += 1
    return keep


def keep_from_course(experts, num_experts, capacity):
    from minipar.expert_parallel import priority_positions

    return priority_positions(experts, num_experts) < capacity


def keep_int_mask(experts, num_experts, capacity):
    n, K = experts.shape
    seen, keep = [0] * num_experts, torch.zeros(n, K, dtype=torch.int64)
    for j in range(K):
        for i in range(n):
            e = int(experts[i, j])
            keep[i, j] = int(seen[e] < capacity)
            seen[e] += 1
    return keep


def gates_float32(logits, k):
    p = torch.softmax(logits, -1)
    top, idx = p.topk(k)
    return (top / top.sum(-1, keepdim=True)).float(), idx


def gates_int32_experts(logits, k):
    p = torch.softmax(logits, -1)
    top, idx = p.topk(k)
    return top / top.sum(-1, keepdim=True), idx.int()


# ------------------------------------------------------------------ 02 dispatch (ranks)
def _dispatch(
    x,
    experts,
    num_experts,
    group,
    *,
    sort=True,
    order="slot",
    exchange=True,
    world_size=False,
    stable=True,
    minlength=True,
    recv_dtype=None,
    skip_empty=False,
):
    n, K = experts.shape
    if skip_empty and n == 0:  # "nothing to send": but this rank still receives
        return x.new_empty(0, x.shape[1]), torch.zeros(
            dist.get_world_size(group), num_experts // dist.get_world_size(group), dtype=torch.long
        )
    ep = dist.get_world_size() if world_size else dist.get_world_size(group)
    if order == "slot":
        token, expert = torch.arange(n).repeat(K), experts.T.reshape(-1)
    else:
        token, expert = torch.arange(n).repeat_interleave(K), experts.reshape(-1)
    if sort:
        o = torch.argsort(expert, stable=True) if stable else torch.argsort(expert)
        token, expert = token[o], expert[o]
    counts = torch.bincount(expert, minlength=num_experts) if minlength else torch.bincount(expert)
    send = counts.view(ep, num_experts // ep)
    if ep == 1:
        return x[token], send
    recv = torch.empty_like(send)
    if exchange:
        dist.all_to_all_single(recv, send, group=group)
    else:
        recv = send.clone()
    rows = torch.empty(int(recv.sum()), x.shape[1], dtype=recv_dtype or x.dtype)
    dist.all_to_all_single(
        rows, x[token].contiguous(), recv.sum(1).tolist(), send.sum(1).tolist(), group=group
    )
    return rows, recv


def dispatch_unsorted(x, experts, num_experts, group=None):
    return _dispatch(x, experts, num_experts, group, sort=False)


def dispatch_token_major(x, experts, num_experts, group=None):
    return _dispatch(x, experts, num_experts, group, order="token")


def dispatch_no_exchange(x, experts, num_experts, group=None):
    return _dispatch(x, experts, num_experts, group, exchange=False)


def dispatch_world_size(x, experts, num_experts, group=None):
    return _dispatch(x, experts, num_experts, group, world_size=True)


def dispatch_unstable(x, experts, num_experts, group=None):
    return _dispatch(x, experts, num_experts, group, stable=False)


def dispatch_no_minlength(x, experts, num_experts, group=None):
    return _dispatch(x, experts, num_experts, group, minlength=False)


def dispatch_recv_float32(x, experts, num_experts, group=None):
    """torch.empty for the receive buffer: float32 by default, the rows are float64."""
    return _dispatch(x, experts, num_experts, group, recv_dtype=torch.float32)


def dispatch_no_tokens_skipped(x, experts, num_experts, group=None):
    return _dispatch(x, experts, num_experts, group, skip_empty=True)


# ------------------------------------------------------------------ 03 combine (ranks)
def combine_without_gates(out, send_counts, recv_counts, token, gate, n, group=None):
    back = all_to_all(out, send_counts.sum(1).tolist(), recv_counts.sum(1).tolist(), group)
    return back.new_zeros(n, back.shape[1]).index_add(0, token, back) + 0 * gate.sum()


def combine_dispatch_order(out, send_counts, recv_counts, token, gate, n, group=None):
    back = all_to_all(out, send_counts.sum(1).tolist(), recv_counts.sum(1).tolist(), group)
    rows = gate[:, None] * back
    return rows.view(-1, n, rows.shape[1]).sum(0)


def combine_averaged(out, send_counts, recv_counts, token, gate, n, group=None):
    back = all_to_all(out, send_counts.sum(1).tolist(), recv_counts.sum(1).tolist(), group)
    k = len(token) // n
    return back.new_zeros(n, back.shape[1]).index_add(0, token, gate[:, None] * back) / k


def combine_raw_collective(out, send_counts, recv_counts, token, gate, n, group=None):
    back = out.new_empty(int(send_counts.sum()), out.shape[1])
    if dist.get_world_size(group) == 1:
        back = out.detach().clone()
    else:
        dist.all_to_all_single(
            back,
            out.detach().contiguous(),
            send_counts.sum(1).tolist(),
            recv_counts.sum(1).tolist(),
            group=group,
        )
    return back.new_zeros(n, back.shape[1]).index_add(0, token, gate.detach()[:, None] * back)


def combine_splits_not_swapped(out, send_counts, recv_counts, token, gate, n, group=None):
    back = all_to_all(out, recv_counts.sum(1).tolist(), send_counts.sum(1).tolist(), group)
    return back.new_zeros(n, back.shape[1]).index_add(0, token, gate[:, None] * back)


# ------------------------------------------------------------------ 05 dropless (ranks)
def _dropless(
    x,
    experts,
    num_experts,
    group,
    *,
    permute=True,
    sizes="recv",
    order="slot",
    stable=True,
    size_dtype=None,
    world_size=False,
    final_sort="stable",
    recv_dtype=None,
    skip_empty=False,
    one_rank_as_is=False,
):
    n, K = experts.shape
    ep = dist.get_world_size() if world_size else dist.get_world_size(group)
    per = num_experts // ep
    if skip_empty and n == 0:  # "nothing to send": but this rank still receives
        return x.new_empty(0, x.shape[1]), torch.zeros(per, dtype=torch.long)
    if one_rank_as_is and ep == 1:  # "nothing to exchange": rows left in assignment order
        return x.repeat(K, 1), torch.bincount(experts.reshape(-1), minlength=num_experts)
    if order == "slot":
        token, expert = torch.arange(n).repeat(K), experts.T.reshape(-1)
    else:
        token, expert = torch.arange(n).repeat_interleave(K), experts.reshape(-1)
    o = torch.argsort(expert, stable=True)
    token, expert = token[o], expert[o]
    send = torch.bincount(expert, minlength=num_experts).view(ep, per)
    if ep == 1:
        rows, recv = x[token], send
    else:
        recv = torch.empty_like(send)
        dist.all_to_all_single(recv, send, group=group)
        rows = torch.empty(int(recv.sum()), x.shape[1], dtype=recv_dtype or x.dtype)
        dist.all_to_all_single(
            rows, x[token].contiguous(), recv.sum(1).tolist(), send.sum(1).tolist(), group=group
        )
    if permute:
        local = torch.arange(per).repeat(ep).repeat_interleave(recv.flatten())
        if final_sort == "default":  # argsort without stable=True
            rows = rows[torch.argsort(local)]
        elif stable:
            rows = rows[torch.argsort(local, stable=True)]
        else:  # sources in reverse order within an expert
            src = torch.arange(ep).repeat_interleave(recv.sum(1))
            rows = rows[torch.argsort(local * ep + (ep - 1 - src), stable=True)]
    if sizes == "bincount":  # the group sizes counted again, without the number of bins
        local = torch.arange(per).repeat(ep).repeat_interleave(recv.flatten())
        return rows, torch.bincount(local)
    out = {"recv": recv.sum(0), "per source": recv, "sent": send.sum(0)}[sizes]
    return rows, out if size_dtype is None else out.to(size_dtype)


def dropless_source_major(x, experts, num_experts, group=None):
    return _dropless(x, experts, num_experts, group, permute=False)


def dropless_sizes_per_source(x, experts, num_experts, group=None):
    return _dropless(x, experts, num_experts, group, sizes="per source")


def dropless_sizes_sent(x, experts, num_experts, group=None):
    return _dropless(x, experts, num_experts, group, sizes="sent")


def dropless_sizes_int32(x, experts, num_experts, group=None):
    return _dropless(x, experts, num_experts, group, size_dtype=torch.int32)


def dropless_token_major(x, experts, num_experts, group=None):
    return _dropless(x, experts, num_experts, group, order="token")


def dropless_sources_reversed(x, experts, num_experts, group=None):
    return _dropless(x, experts, num_experts, group, stable=False)


def dropless_world_size(x, experts, num_experts, group=None):
    return _dropless(x, experts, num_experts, group, world_size=True)


def dropless_unstable(x, experts, num_experts, group=None):
    return _dropless(x, experts, num_experts, group, final_sort="default")


def dropless_sizes_bincount(x, experts, num_experts, group=None):
    return _dropless(x, experts, num_experts, group, sizes="bincount")


def dropless_counts_short(x, experts, num_experts, group=None):
    """bincount without minlength before the exchange: the flat counts travel as they are."""
    n, K = experts.shape
    ep = dist.get_world_size(group)
    per = num_experts // ep
    flat = experts.T.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat)  # max + 1 bins
    recv = torch.empty_like(counts)
    dist.all_to_all_single(recv, counts, group=group)
    recv = recv.view(ep, per)
    rows = x.new_empty(int(recv.sum()), x.shape[1])
    dist.all_to_all_single(
        rows,
        x[order % max(n, 1)].contiguous(),
        recv.sum(1).tolist(),
        counts.view(ep, per).sum(1).tolist(),
        group=group,
    )
    local = torch.arange(per).repeat(ep).repeat_interleave(recv.flatten())
    return rows[torch.argsort(local, stable=True)], recv.sum(0)


def dropless_recv_float32(x, experts, num_experts, group=None):
    return _dropless(x, experts, num_experts, group, recv_dtype=torch.float32)


def dropless_one_rank_unsorted(x, experts, num_experts, group=None):
    return _dropless(x, experts, num_experts, group, one_rank_as_is=True)


def dropless_no_tokens_skipped(x, experts, num_experts, group=None):
    return _dropless(x, experts, num_experts, group, skip_empty=True)


# ------------------------------------------------------------------ correct readings of the texts
def dispatch_collectives_on_one_rank(x, experts, num_experts, group=None):
    """Calls both all-to-alls even on a one-rank group (the text allows it)."""
    n, K = experts.shape
    ep = dist.get_world_size(group)
    token, expert = torch.arange(n).repeat(K), experts.T.reshape(-1)
    order = torch.sort(expert, stable=True).indices  # a stable sort by another name
    token, expert = token[order], expert[order]
    send = torch.bincount(expert, minlength=num_experts).view(ep, num_experts // ep)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    rows = x.new_empty(int(recv.sum()), x.shape[1])
    dist.all_to_all_single(
        rows, x[token].contiguous(), recv.sum(1).tolist(), send.sum(1).tolist(), group=group
    )
    return rows, recv


def dropless_from_dispatch(x, experts, num_experts, group=None):
    """Dispatch, then group rows by local expert with a stable sort of (expert, position)."""
    rows, recv = dispatch_collectives_on_one_rank(x, experts, num_experts, group)
    ep, per = recv.shape
    local = torch.arange(per).repeat(ep).repeat_interleave(recv.flatten())
    key = local * max(len(local), 1) + torch.arange(len(local))  # unique keys: any sort works
    return rows[torch.argsort(key)], recv.sum(0)


@pytest.mark.slow
@pytest.mark.parametrize(
    "task, fn",
    [("dispatch", dispatch_collectives_on_one_rank), ("dropless_dispatch", dropless_from_dispatch)],
)
def test_other_correct_readings_pass(task, fn):
    from minipar.grading import check

    assert check(f"expert_parallel.{task}", fn)


# ------------------------------------------------------------------ the clause table's wrong answers
WRONG = {
    "gates_not_renormalised": gates_not_renormalised,
    "gates_smallest": gates_smallest,
    "gates_softmax_over_tokens": gates_softmax_over_tokens,
    "gates_detached": gates_detached,
    "gates_index_order": gates_index_order,
    "keep_token_major": keep_token_major,
    "keep_less_equal": keep_less_equal,
    "keep_per_slot": keep_per_slot,
    "keep_from_course": keep_from_course,
    "keep_int_mask": keep_int_mask,
    "gates_float32": gates_float32,
    "gates_int32_experts": gates_int32_experts,
    "dispatch_unsorted": dispatch_unsorted,
    "dispatch_token_major": dispatch_token_major,
    "dispatch_no_exchange": dispatch_no_exchange,
    "dispatch_world_size": dispatch_world_size,
    "dispatch_unstable": dispatch_unstable,
    "dispatch_no_minlength": dispatch_no_minlength,
    "dispatch_recv_float32": dispatch_recv_float32,
    "dispatch_no_tokens_skipped": dispatch_no_tokens_skipped,
    "combine_without_gates": combine_without_gates,
    "combine_dispatch_order": combine_dispatch_order,
    "combine_averaged": combine_averaged,
    "combine_raw_collective": combine_raw_collective,
    "combine_splits_not_swapped": combine_splits_not_swapped,
    "dropless_source_major": dropless_source_major,
    "dropless_sizes_per_source": dropless_sizes_per_source,
    "dropless_sizes_sent": dropless_sizes_sent,
    "dropless_sizes_int32": dropless_sizes_int32,
    "dropless_token_major": dropless_token_major,
    "dropless_sources_reversed": dropless_sources_reversed,
    "dropless_world_size": dropless_world_size,
    "dropless_unstable": dropless_unstable,
    "dropless_sizes_bincount": dropless_sizes_bincount,
    "dropless_counts_short": dropless_counts_short,
    "dropless_recv_float32": dropless_recv_float32,
    "dropless_one_rank_unsorted": dropless_one_rank_unsorted,
    "dropless_no_tokens_skipped": dropless_no_tokens_skipped,
}


@pytest.mark.parametrize(
    "task_id, clause",
    clause_cases(
        "expert_parallel", slow=lambda t: t.split(".")[1] not in ("top_k_gates", "keep_mask")
    ),
)
def test_every_clause_has_a_wrong_answer_that_fails_with_its_reason(
    task_id, clause, capsys, short_stall_window
):
    # blocked for good, whatever the window: no need to wait the grader's 10 s
    window = short_stall_window() if clause.wrong in DEADLOCKS else contextlib.nullcontext()
    with window:
        clause_fails(task_id, clause, WRONG, capsys)


# the wrong answers whose ranks block for good (a rank with no token skips the all-to-alls): the
# grader names them after its deadlock window
DEADLOCKS = {"dispatch_no_tokens_skipped", "dropless_no_tokens_skipped"}


# ------------------------------------------------------------------ inputs that make clauses matter
def _unstable_threshold() -> int:
    """The fewest keys for which this torch's default CPU argsort reorders equal keys (keys laid
    out as the all-to-all delivers them: local experts 0..2 from each of two sources)."""
    for n in range(2, 200):
        keys = torch.arange(3).repeat(2).repeat_interleave(torch.full((6,), n))
        if not torch.equal(torch.argsort(keys), torch.argsort(keys, stable=True)):
            return 6 * n
    raise AssertionError("the default argsort never reordered equal keys up to 1200 keys")


def test_skewed_routing_exceeds_the_unstable_sort_threshold_and_empties_the_last_experts():
    from minipar.grading import expert_parallel as G

    threshold = _unstable_threshold()
    assert 6 < threshold <= 64  # small keys are insertion-sorted (stable); larger ones are not
    for t in (2, 3):
        rows, recv = G._expected_rows(0, t, routing="skewed")
        assert len(rows) > threshold, (t, len(rows), threshold)
        keys = torch.arange(E := recv.shape[1]).repeat(t).repeat_interleave(recv.flatten())
        assert not torch.equal(torch.argsort(keys), torch.argsort(keys, stable=True)), E
    for gr in range(3):  # no rank routes to the two highest-numbered experts
        experts = G._choices(gr, routing="skewed")[1]
        assert not torch.isin(experts, torch.tensor(G.EMPTY_EXPERTS)).any()
        assert torch.bincount(experts.T.reshape(-1)).numel() < G.E
