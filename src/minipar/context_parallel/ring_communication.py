"""The one communication pattern of ring attention: pass a tensor to the next rank of the ring
while receiving the previous rank's, without waiting (so the caller computes meanwhile).

Each shift is one ``isend`` to rank r+1 and one ``irecv`` from rank r−1 (group ranks, mod cp),
posted together with ``batch_isend_irecv``, which works on gloo and on NCCL (NCCL needs the pair
posted as one group or it can deadlock when cp = 2 and both peers are the same rank). The bytes of
one shift per rank are the tensor's bytes (what :mod:`minipar.runtime.tracer` records for a send).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.dist import group_rank, group_size


class RingShift:
    """``RingShift(x, group)`` posts the send of ``x`` to the next rank and the receive of the
    previous rank's tensor of the same shape; ``wait()`` returns the received tensor."""

    def __init__(self, x: torch.Tensor, group=None):
        cp, r = group_size(group), group_rank(group)
        if cp == 1:  # a ring of one: what we send is what we get back
            self.works, self.buf = [], x
            return
        send = x.contiguous()
        self.buf = torch.empty_like(send)
        nxt, prv = (r + 1) % cp, (r - 1) % cp
        if group is not None:  # P2POp takes global ranks
            nxt, prv = dist.get_global_rank(group, nxt), dist.get_global_rank(group, prv)
        c10d = dist.distributed_c10d  # P2POp checks its op against these names, looked up
        ops = [
            dist.P2POp(c10d.isend, send, nxt, group),  # now (a tracer may have wrapped them)
            dist.P2POp(c10d.irecv, self.buf, prv, group),
        ]
        self._keep = send  # the send buffer must live until the send is done
        self.works = dist.batch_isend_irecv(ops)

    def wait(self) -> torch.Tensor:
        for w in self.works:
            w.wait()
        self.works = []
        return self.buf
