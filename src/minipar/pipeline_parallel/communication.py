"""Point-to-point messages between pipeline stages, and the tied-embedding all-reduce.

Forward, stage s sends its output activation (b, s, h) to stage s+1; backward, stage s+1 sends
the gradient of that activation back. Each message is tagged with (stage, micro-batch, kind) so
that the receiver gets the tensor it asked for even when two ranks exchange activations and
gradients in either direction (the interleaved schedule with p = 2 does). Sends are
non-blocking (``isend``): a rank that sends an activation and then waits for a gradient never
waits for its neighbour to post the matching receive first, which is the classic pipeline
deadlock with blocking sends. Receives block. A message between two stages on the same rank
never touches the network.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.device import get_device

ACTIVATION, GRADIENT = 0, 1


def tag(stage: int, microbatch: int, kind: int, m: int) -> int:
    """A unique tag for the message *to* ``stage`` about ``microbatch``."""
    return 2 * (stage * m + microbatch) + kind


class P2P:
    """Sends and receives of one rank; ``owner(stage)`` is the rank holding a stage."""

    def __init__(self, rank: int, p: int, m: int, group=None):
        self.rank, self.p, self.m, self.group = rank, p, m, group
        self.local: dict[tuple, torch.Tensor] = {}   # same-rank hand-offs
        self.pending: list = []                      # (work, tensor) of isends in flight

    def owner(self, stage: int) -> int:
        return stage % self.p

    def send(self, t: torch.Tensor, to_stage: int, microbatch: int, kind: int) -> None:
        """Send ``t`` (detached: only its values cross) to ``to_stage``."""
        t = t.detach().contiguous()                          # (b, s, h)
        dst = self.owner(to_stage)
        if dst == self.rank:
            self.local[to_stage, microbatch, kind] = t.clone()
            return
        dst = dst if self.group is None else dist.get_global_rank(self.group, dst)
        work = dist.isend(t, dst, group=self.group, tag=tag(to_stage, microbatch, kind, self.m))
        self.pending.append((work, t))

    def recv(self, like: tuple, dtype, stage: int, from_stage: int, microbatch: int,
             kind: int) -> torch.Tensor:
        """Receive the message for ``stage`` from ``from_stage`` (shape ``like``)."""
        src = self.owner(from_stage)
        if src == self.rank:
            return self.local.pop((stage, microbatch, kind))
        buf = torch.empty(like, dtype=dtype, device=get_device())   # (b, s, h), on this rank's device
        src = src if self.group is None else dist.get_global_rank(self.group, src)
        dist.recv(buf, src, group=self.group, tag=tag(stage, microbatch, kind, self.m))
        return buf

    def wait_all(self) -> None:
        for work, _ in self.pending:
            work.wait()
        self.pending.clear()


def all_reduce_tied_gradient(weight: torch.Tensor | None, group) -> None:
    """Sum the tied embedding's gradient over the embedding group (first and last stage's
    ranks), so both copies take the same step. No-op without a group or for one rank."""
    if weight is None or group is None or dist.get_world_size(group) == 1:
        return
    if weight.grad is None:
        weight.grad = torch.zeros_like(weight)
    dist.all_reduce(weight.grad, group=group)               # (V, h)
