"""All-reduce through one parameter server (Li et al. 2014): gather, sum, send back.

Every worker sends its S bytes to the server (rank ``server`` of the group), the server sums and
sends the result back to each worker. The server receives (n−1)·S and sends (n−1)·S bytes, while
a ring rank sends 2(n−1)/n·S < 2S: the server's link is the bottleneck, and it grows with n.
A reference to compare against, not something to use.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def parameter_server_all_reduce(tensor: torch.Tensor, group=None, server: int = 0) -> torch.Tensor:
    """In-place sum over the group's ranks via one server rank; returns ``tensor``."""
    r, n = dist.get_rank(group), dist.get_world_size(group)
    if n == 1:
        return tensor
    if r != server:
        dist.send(tensor.contiguous(), group=group, group_dst=server)  # push gradient (S,)
        dist.recv(tensor, group=group, group_src=server)  # pull the sum  (S,)
        return tensor
    buf = torch.empty_like(tensor)
    for w in range(n):  # fixed order: the sum is the same on every run
        if w != server:
            dist.recv(buf, group=group, group_src=w)
            tensor += buf
    for w in range(n):
        if w != server:
            dist.send(tensor, group=group, group_dst=w)
    return tensor
