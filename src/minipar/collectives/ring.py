"""Ring reduce-scatter, all-gather and all-reduce from send/recv (Patarasuk & Yuan 2009).

The n ranks of the group form a ring; each step every rank sends one chunk (S/n bytes) to its
right neighbour and receives one from its left neighbour, so every link is busy in both
directions at once. All-reduce = reduce-scatter (n−1 steps, rank r ends owning the full sum of
chunk r) + all-gather (n−1 steps, every rank ends with every summed chunk): 2(n−1) steps, each
rank sends 2(n−1)/n·S bytes, independent of n for large n. Cost 2(n−1)α + 2(n−1)/n·Sβ
(Thakur, Rabenseifner & Gropp 2005).

Sizes not divisible by n: ``tensor_split`` makes the first (numel mod n) chunks one element
longer, so a rank sends 2S − |chunk r| − |chunk r+1| bytes, within 2 elements of 2(n−1)/n·S; the
total over all ranks is exactly 2(n−1)·S.

Each step's send and receive are posted together in one ``dist.batch_isend_irecv`` call: on
NCCL a send completes only once its receiver has posted, so separate ``isend``-then-``irecv``
pairs would leave every rank's send waiting for a receive its neighbour queued behind its own
send (``tests/test_collectives_ring_p2p.py`` pins this call pattern).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _ring_neighbours(group):
    """(rank, size, right neighbour, left neighbour), all group ranks."""
    r, n = dist.get_rank(group), dist.get_world_size(group)
    return r, n, (r + 1) % n, (r - 1) % n


def _exchange(send_buf, recv_buf, right, left, group):
    """Send ``send_buf`` to ``right`` while receiving ``recv_buf`` from ``left``: one paired
    ``batch_isend_irecv`` call (the function is looked up at call time, since
    ``minipar.runtime.tracer`` wraps ``isend``/``irecv`` and ``P2POp`` accepts only the current one)."""
    c10d = dist.distributed_c10d
    ops = [
        dist.P2POp(c10d.isend, send_buf, group=group, group_peer=right),
        dist.P2POp(c10d.irecv, recv_buf, group=group, group_peer=left),
    ]
    for req in dist.batch_isend_irecv(ops):
        req.wait()


def reduce_scatter_step(r: int, n: int, k: int) -> tuple[int, int]:
    """(chunk rank ``r`` sends to its right neighbour, chunk it receives from its left and adds
    in) at reduce-scatter step ``k`` = 0 … n−2 of an ``n``-rank ring: (r−k−1, r−k−2) mod n.
    After the n−1 steps rank r holds the full sum of chunk r."""
    return (r - k - 1) % n, (r - k - 2) % n


def all_gather_step(r: int, n: int, k: int) -> tuple[int, int]:
    """(chunk rank ``r`` sends, chunk it receives into place) at all-gather step ``k`` = 0 …
    n−2: (r−k, r−k−1) mod n. Rank r starts owning chunk r and ends holding every chunk."""
    return (r - k) % n, (r - k - 1) % n


def ring_all_reduce_contributions(n: int) -> list[tuple[str, int, list[list[frozenset]]]]:
    """The ring all-reduce on ``n`` ranks without tensors (pure Python, for the book's figure):
    ``[(phase, k, held)]``, first ``("start", -1, held)``, then one entry per step of the
    reduce-scatter and of the all-gather (the indices of :func:`reduce_scatter_step` and
    :func:`all_gather_step`), ``held[r][c]`` the ranks summed into chunk ``c`` on rank ``r``."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"ranks n ({n}) must be an integer >= 1")
    held = [[frozenset({r}) for _ in range(n)] for r in range(n)]
    out = [("start", -1, [row[:] for row in held])]
    for phase, step in (("reduce-scatter", reduce_scatter_step), ("all-gather", all_gather_step)):
        for k in range(n - 1):
            sent = [held[r][step(r, n, k)[0]] for r in range(n)]  # every rank sends at once
            for r in range(n):
                recv, left = step(r, n, k)[1], (r - 1) % n
                incoming = sent[left]
                held[r][recv] = held[r][recv] | incoming if phase == "reduce-scatter" else incoming
            out.append((phase, k, [row[:] for row in held]))
    return out


def _chunks(flat: torch.Tensor, n: int) -> list[torch.Tensor]:
    return list(flat.tensor_split(n))  # n views of (numel/n,) (first numel % n one longer)


def ring_reduce_scatter(tensor: torch.Tensor, group=None, on_step=None) -> torch.Tensor:
    """In place: afterwards chunk r of ``tensor`` (contiguous) on rank r holds the sum over
    ranks of chunk r; returns it (a view; the other chunks hold unspecified partial sums).
    ``on_step(phase, k)``, if given, is called after each step (the notebook snapshots there)."""
    r, n, right, left = _ring_neighbours(group)
    chunks = _chunks(tensor.view(-1), n)  # n × (S/n,)
    if n == 1:
        return chunks[0]
    buf = torch.empty_like(chunks[0])  # (⌈S/n⌉,) receive buffer
    for k in range(n - 1):
        i_send, i_recv = reduce_scatter_step(r, n, k)
        send, recv = chunks[i_send], chunks[i_recv]
        _exchange(send, buf[: recv.numel()], right, left, group)
        recv += buf[: recv.numel()]
        if on_step:
            on_step("reduce-scatter", k)
    return chunks[r]


def ring_all_gather(tensor: torch.Tensor, group=None, on_step=None) -> torch.Tensor:
    """In place: rank r's chunk r of ``tensor`` is copied to chunk r of every rank."""
    r, n, right, left = _ring_neighbours(group)
    chunks = _chunks(tensor.view(-1), n)  # n × (S/n,)
    for k in range(n - 1):
        i_send, i_recv = all_gather_step(r, n, k)
        _exchange(chunks[i_send], chunks[i_recv], right, left, group)
        if on_step:
            on_step("all-gather", k)
    return tensor


def ring_all_reduce(tensor: torch.Tensor, group=None, on_step=None) -> torch.Tensor:
    """In-place sum over the group's ranks, like ``dist.all_reduce(tensor)``; returns ``tensor``
    (``on_step``: :func:`ring_reduce_scatter`'s)."""
    if dist.get_world_size(group) == 1:
        return tensor
    work = tensor if tensor.is_contiguous() else tensor.contiguous()
    ring_reduce_scatter(work, group, on_step)  # rank r: chunk r summed
    ring_all_gather(work, group, on_step)  # every rank: every chunk summed
    if work is not tensor:
        tensor.copy_(work)
    return tensor
