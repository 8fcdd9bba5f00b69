"""Context-parallel exercises: solutions pass, starters fail, and realistic wrong answers (written
as a learner would, without the solution) fail with a reason that names their mistake."""

import math
import sys

import cloudpickle
import pytest
import torch
import torch.distributed as dist
from grading_support import clause_cases, clause_fails, exercise_function, failure

from minipar.grading import check

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # wrong answers go by value:
# the ranks need not import this test module (pytest, nbformat: ~1 CPU-s per rank)

TASKS = {
    "merge_softmax_blocks": ("01_merge_softmax_blocks", "merge"),
    "zigzag_shard": ("02_zigzag_shard", "zigzag_shard"),
    "ring_step": ("03_ring_step", "ring_step"),
    "seq_to_heads": ("04_ulysses_all_to_all", "seq_to_heads"),
    "allgather_documents": ("05_allgather_documents", "allgather_document_attention"),
}


def _fn(name, solved):
    stem, attr = TASKS[name]
    return exercise_function("context_parallel", stem, attr, solved=solved)


@pytest.mark.slow
@pytest.mark.parametrize("name", TASKS)
def test_solution_passes_and_starter_fails(name, capsys):
    assert check(f"context_parallel.{name}", _fn(name, True))
    assert not check(f"context_parallel.{name}", _fn(name, False))
    assert "not implemented yet" in capsys.readouterr().out.splitlines()[-1]


# ------------------------------------------------------------------ 01 merge (no ranks)
def merge_both_masked_nan(o_a, lse_a, o_b, lse_b):
    """logaddexp's weights, unguarded: right while one side has a finite lse."""
    lse = torch.logaddexp(lse_a, lse_b)
    w_a, w_b = torch.exp(lse_a - lse).unsqueeze(-1), torch.exp(lse_b - lse).unsqueeze(-1)
    return w_a * o_a + w_b * o_b, lse


def merge_average(o_a, lse_a, o_b, lse_b):
    return (o_a + o_b) / 2, torch.logaddexp(lse_a, lse_b)


def merge_naive_exp(o_a, lse_a, o_b, lse_b):
    ea, eb = torch.exp(lse_a), torch.exp(lse_b)  # overflows at logits ~1000
    w_a, w_b = (ea / (ea + eb)).unsqueeze(-1), (eb / (ea + eb)).unsqueeze(-1)
    return w_a * o_a + w_b * o_b, torch.log(ea + eb)


def merge_lse_is_max(o_a, lse_a, o_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    return (torch.exp(lse_a - m).unsqueeze(-1) * o_a + torch.exp(lse_b - m).unsqueeze(-1) * o_b), m


def merge_swapped(o_a, lse_a, o_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return (
        torch.exp(lse_b - lse).unsqueeze(-1) * o_a + torch.exp(lse_a - lse).unsqueeze(-1) * o_b
    ), lse


# ------------------------------------------------------------------ 02 zigzag
def zigzag_contiguous(x, dim, group=None):
    cp, r = dist.get_world_size(group), dist.get_rank(group)
    return x.chunk(cp, dim=dim)[r].contiguous()


def zigzag_reversed(x, dim, group=None):
    cp, r = dist.get_world_size(group), dist.get_rank(group)
    c = x.chunk(2 * cp, dim=dim)
    return torch.cat([c[2 * cp - 1 - r], c[r]], dim=dim)


def zigzag_float32(x, dim, group=None):
    cp, r = dist.get_world_size(group), dist.get_rank(group)
    c = x.float().chunk(2 * cp, dim=dim)
    return torch.cat([c[r], c[2 * cp - 1 - r]], dim=dim)


def zigzag_global_rank(x, dim, group=None):
    cp, r = dist.get_world_size(), dist.get_rank()  # ignores the group
    c = x.chunk(2 * cp, dim=dim)
    return torch.cat([c[r], c[2 * cp - 1 - r]], dim=dim)


# ------------------------------------------------------------------ 03 ring step
def _blk(q, k, v):
    z = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(z, -1)
    return torch.exp(z - lse.unsqueeze(-1)) @ v, lse


def _shift(k, v, group, to_next=True, global_peers=True):
    cp, r = dist.get_world_size(group), dist.get_rank(group)
    if cp == 1:
        return k, v
    a, b = ((r + 1) % cp, (r - 1) % cp) if to_next else ((r - 1) % cp, (r + 1) % cp)
    if global_peers and group is not None:
        a, b = dist.get_global_rank(group, a), dist.get_global_rank(group, b)
    kv = torch.stack([k, v]).contiguous()
    buf = torch.empty_like(kv)
    for w in dist.batch_isend_irecv(
        [dist.P2POp(dist.isend, kv, a, group), dist.P2POp(dist.irecv, buf, b, group)]
    ):
        w.wait()
    return buf[0], buf[1]


def _merged(q, k, v, o, lse):
    o_b, l_b = _blk(q, k, v)
    if o is None:
        return o_b, l_b
    l = torch.logaddexp(lse, l_b)
    return torch.exp(lse - l).unsqueeze(-1) * o + torch.exp(l_b - l).unsqueeze(-1) * o_b, l


def _send_recv(k, v, nxt, prv, group):
    kv = torch.stack([k, v]).contiguous()
    buf = torch.empty_like(kv)
    for w in dist.batch_isend_irecv(
        [dist.P2POp(dist.isend, kv, nxt, group), dist.P2POp(dist.irecv, buf, prv, group)]
    ):
        w.wait()
    return buf[0], buf[1]


def ring_global_rank_of_none(q, k, v, o, lse, group=None):
    """Translates every peer, also with group=None (torch 2.13 raises for None)."""
    cp, r = dist.get_world_size(group), dist.get_rank(group)
    nxt = dist.get_global_rank(group, (r + 1) % cp)
    prv = dist.get_global_rank(group, (r - 1) % cp)
    return (*_merged(q, k, v, o, lse), *_send_recv(k, v, nxt, prv, group))


def ring_sends_to_itself(q, k, v, o, lse, group=None):
    """No special case for a one-rank group: it sends its block to itself."""
    cp, r = dist.get_world_size(group), dist.get_rank(group)
    nxt, prv = (r + 1) % cp, (r - 1) % cp
    if group is not None:
        nxt, prv = dist.get_global_rank(group, nxt), dist.get_global_rank(group, prv)
    return (*_merged(q, k, v, o, lse), *_send_recv(k, v, nxt, prv, group))


def ring_wrong_direction(q, k, v, o, lse, group=None):
    o_b, l_b = _blk(q, k, v)
    if o is not None:
        l = torch.logaddexp(lse, l_b)
        o_b, l_b = torch.exp(lse - l).unsqueeze(-1) * o + torch.exp(l_b - l).unsqueeze(-1) * o_b, l
    return (o_b, l_b, *_shift(k, v, group, to_next=False))


def ring_replace(q, k, v, o, lse, group=None):
    o_b, l_b = _blk(q, k, v)  # forgets the running result
    return (o_b, l_b, *_shift(k, v, group))


def ring_average(q, k, v, o, lse, group=None):
    o_b, l_b = _blk(q, k, v)
    cp = dist.get_world_size(group)
    o = o_b / cp if o is None else o + o_b / cp
    return (o, l_b, *_shift(k, v, group))


def ring_group_ranks_as_peers(q, k, v, o, lse, group=None):
    o_b, l_b = _blk(q, k, v)
    if o is not None:
        l = torch.logaddexp(lse, l_b)
        o_b, l_b = torch.exp(lse - l).unsqueeze(-1) * o + torch.exp(l_b - l).unsqueeze(-1) * o_b, l
    return (o_b, l_b, *_shift(k, v, group, global_peers=False))


# ------------------------------------------------------------------ 04 Ulysses
def ulysses_interleaved(x, group=None):
    cp = dist.get_world_size(group)
    b, a, n, d = x.shape
    if a % cp:
        raise ValueError(f"heads ({a}) must be divisible by cp ({cp})")
    send = x.reshape(b, a // cp, cp, n, d).permute(2, 0, 1, 3, 4).contiguous()  # heads j::cp
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return recv.permute(1, 2, 0, 3, 4).reshape(b, a // cp, cp * n, d)


def ulysses_positions_scrambled(x, group=None):
    cp = dist.get_world_size(group)
    b, a, n, d = x.shape
    if a % cp:
        raise ValueError(f"heads ({a}) must be divisible by cp ({cp})")
    send = x.reshape(b, cp, a // cp, n, d).transpose(0, 1).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return recv.permute(1, 2, 3, 0, 4).reshape(b, a // cp, cp * n, d)  # (n, cp) not (cp, n)


def ulysses_other_message(x, group=None):
    """Right values; the ValueError in its own words."""
    cp = dist.get_world_size(group)
    if x.shape[1] % cp:
        raise ValueError(f"cannot split {x.shape[1]} heads over {cp} ranks")
    return ulysses_no_check(x, group)


def ulysses_no_check(x, group=None):
    cp = dist.get_world_size(group)
    b, a, n, d = x.shape
    ah = a // cp
    send = x[:, : ah * cp].reshape(b, cp, ah, n, d).transpose(0, 1).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return recv.permute(1, 2, 0, 3, 4).reshape(b, ah, cp * n, d)


# ------------------------------------------------------------------ 05 all-gather, documents
def _gather(k, v, group, with_group=True):
    cp = dist.get_world_size(group)
    kv = torch.stack([k, v]).contiguous()
    parts = [torch.empty_like(kv) for _ in range(cp)]
    dist.all_gather(parts, kv, group=group if with_group else None)
    return torch.cat(parts, dim=3)  # (2, b, a_kv, s, d)


def _attend(
    q,
    kv,
    documents,
    q0,
    *,
    docs=True,
    causal=True,
    strict=False,
    interleave=True,
    q_doc_local=False,
    ends_left=False,
):
    a, d, n = q.shape[1], q.shape[3], q.shape[2]
    g = a // kv.shape[2]
    k, v = ((t.repeat_interleave(g, 1) if interleave else t.repeat(1, g, 1, 1)) for t in kv)
    s = k.shape[2]
    doc = torch.repeat_interleave(torch.arange(len(documents)), torch.as_tensor(documents))
    if ends_left:  # a learner's ids: searchsorted on the ends, a boundary token on its left
        doc = torch.searchsorted(torch.cumsum(torch.as_tensor(documents), 0), torch.arange(s))
    qp, kp = torch.arange(q0, q0 + n), torch.arange(s)
    keep = torch.ones(n, s, dtype=torch.bool)
    if causal:
        keep &= (kp[None] < qp[:, None]) if strict else (kp[None] <= qp[:, None])
    if docs:
        keep &= doc[kp][None] == doc[qp - q0 if q_doc_local else qp][:, None]
    z = q @ k.transpose(-2, -1) / math.sqrt(d)
    return torch.softmax(z.masked_fill(~keep, float("-inf")), -1) @ v


def docs_causal_only(q, k, v, documents, group=None):  # packs documents, masks none
    r = dist.get_rank(group)
    return _attend(q, _gather(k, v, group), documents, r * q.shape[2], docs=False)


def docs_no_causal(q, k, v, documents, group=None):  # document mask only
    r = dist.get_rank(group)
    return _attend(q, _gather(k, v, group), documents, r * q.shape[2], causal=False)


def docs_local_positions(q, k, v, documents, group=None):  # queries at 0 … n−1 on every rank
    return _attend(q, _gather(k, v, group), documents, 0)


def docs_heads_repeated(q, k, v, documents, group=None):  # head i reads K/V head i % a_kv
    r = dist.get_rank(group)
    return _attend(q, _gather(k, v, group), documents, r * q.shape[2], interleave=False)


def docs_strict_causal(q, k, v, documents, group=None):  # j < i: a query misses itself
    r = dist.get_rank(group)
    return _attend(q, _gather(k, v, group), documents, r * q.shape[2], strict=True)


def docs_global_rank(q, k, v, documents, group=None):  # positions from the world rank
    return _attend(q, _gather(k, v, group), documents, dist.get_rank() * q.shape[2])


def docs_world_gather(q, k, v, documents, group=None):  # gathers over the whole world
    r = dist.get_rank(group)
    return _attend(q, _gather(k, v, group, with_group=False), documents, r * q.shape[2])


def docs_float32(q, k, v, documents, group=None):  # computes in float32
    r = dist.get_rank(group)
    return _attend(q.float(), _gather(k, v, group).float(), documents, r * q.shape[2])


def docs_query_doc_local(q, k, v, documents, group=None):  # query doc ids at 0 … n−1
    r = dist.get_rank(group)
    return _attend(q, _gather(k, v, group), documents, r * q.shape[2], q_doc_local=True)


def docs_boundary_late(q, k, v, documents, group=None):  # first token in the previous doc
    r = dist.get_rank(group)
    return _attend(q, _gather(k, v, group), documents, r * q.shape[2], ends_left=True)


def docs_float32_cast_back(q, k, v, documents, group=None):  # float32 math, float64 result
    r = dist.get_rank(group)
    kv = _gather(k, v, group).float()
    return _attend(q.float(), kv, documents, r * q.shape[2]).to(q.dtype)


def docs_tensor_only(q, k, v, documents, group=None):  # documents.tolist(): a tensor assumed
    r = dist.get_rank(group)
    return _attend(q, _gather(k, v, group), documents.tolist(), r * q.shape[2])


def docs_two_gathers(q, k, v, documents, group=None):
    """A correct reading: K and V in two all-gathers, none at all on a one-rank group."""
    cp, r = dist.get_world_size(group), dist.get_rank(group)
    if cp == 1:
        return _attend(q, torch.stack([k, v]), documents, 0)
    ks, vs = [torch.empty_like(k) for _ in range(cp)], [torch.empty_like(v) for _ in range(cp)]
    dist.all_gather(ks, k.contiguous(), group=group)
    dist.all_gather(vs, v.contiguous(), group=group)
    kv = torch.stack([torch.cat(ks, 2), torch.cat(vs, 2)])  # (2, b, a_kv, s, d)
    return _attend(q, kv, documents, r * q.shape[2])


@pytest.mark.slow
def test_allgather_documents_two_gathers_and_no_collective_on_one_rank_pass():
    from minipar.grading import check

    assert check("context_parallel.allgather_documents", docs_two_gathers)


# ------------------------------------------------------------------ the clause table's wrong answers
WRONG = {
    # 01 merge
    "merge_both_masked_nan": merge_both_masked_nan,
    "merge_average": merge_average,
    "merge_naive_exp": merge_naive_exp,
    "merge_lse_is_max": merge_lse_is_max,
    "merge_swapped": merge_swapped,
    # 02 zigzag
    "zigzag_contiguous": zigzag_contiguous,
    "zigzag_reversed": zigzag_reversed,
    "zigzag_global_rank": zigzag_global_rank,
    "zigzag_float32": zigzag_float32,
    # 03 ring step
    "ring_wrong_direction": ring_wrong_direction,
    "ring_global_rank_of_none": ring_global_rank_of_none,
    "ring_sends_to_itself": ring_sends_to_itself,
    "ring_replace": ring_replace,
    "ring_average": ring_average,
    "ring_group_ranks_as_peers": ring_group_ranks_as_peers,
    # 04 Ulysses
    "ulysses_interleaved": ulysses_interleaved,
    "ulysses_positions_scrambled": ulysses_positions_scrambled,
    "ulysses_no_check": ulysses_no_check,
    "ulysses_other_message": ulysses_other_message,
    # 05 all-gather attention over documents
    "docs_float32": docs_float32,
    "docs_causal_only": docs_causal_only,
    "docs_no_causal": docs_no_causal,
    "docs_local_positions": docs_local_positions,
    "docs_heads_repeated": docs_heads_repeated,
    "docs_strict_causal": docs_strict_causal,
    "docs_global_rank": docs_global_rank,
    "docs_world_gather": docs_world_gather,
    "docs_query_doc_local": docs_query_doc_local,
    "docs_tensor_only": docs_tensor_only,
    "docs_boundary_late": docs_boundary_late,
    "docs_float32_cast_back": docs_float32_cast_back,
}


@pytest.mark.parametrize(
    "task_id, clause",
    clause_cases("context_parallel", slow=lambda t: not t.endswith("merge_softmax_blocks")),
)
def test_every_clause_has_a_wrong_answer_that_fails_with_its_reason(task_id, clause, capsys):
    clause_fails(task_id, clause, WRONG, capsys)


def test_course_code_is_rejected(capsys):
    from minipar.context_parallel import merge_blocks

    assert "course's own minipar.context_parallel" in failure(
        "context_parallel.merge_softmax_blocks", merge_blocks, capsys
    )
