"""Point-to-point messages between pipeline stages, and the tied-embedding all-reduce.

Forward, stage s sends its output activation (b, s, h) to stage s+1; backward, stage s+1 sends
the gradient of that activation back. Two rules make this correct on gloo *and* NCCL:

1. **Matching is by posting order, not by tag.** NCCL ignores point-to-point tags: the k-th
   send from rank a to rank b meets the k-th receive on b from a (we pass no tags, so gloo
   tests the same matching). Both ends must post a link's messages in the same order, even
   when two ranks exchange activations and gradients both ways (interleaved, p = 2).
2. **No cycle of waiting sends.** On NCCL a send completes only once the receiver has posted
   its receive, and a rank's point-to-point calls run one after another; posted in action-list
   order, 1F1B's steady state would start with every rank sending to a neighbour that is
   itself sending: a deadlock (``message_order`` shows it).

Both follow from one global order: every rank posts its messages sorted by the time each is
produced when the schedule runs on paper (``simulate``, equal action times), ties broken by
(sender, receiver, stage, micro-batch, kind). Both ends sort a message by the same key, and the
smallest key is at the head of both its ends' queues, so something always progresses; a receive
due before a send is prefetched. The messages a rank posts at one moment go in one
``dist.batch_isend_irecv`` call, as Megatron-LM's ``p2p_communication`` does. A schedule that
cannot run on paper (a learner's deadlocking list) falls back to posting in call order. A
message between two stages on the same rank never touches the network.

On NCCL a receive's ``wait()`` only makes the CUDA stream wait, so :meth:`P2P.recv` also calls
:func:`minipar.runtime.device.synchronize`: a timed stage would otherwise start its clock before
its input arrived and measure the launch order's bubble, not the schedule's.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from minipar.runtime.device import get_device, synchronize

from .schedules import Action, num_stages
from .simulate import ScheduleError, simulate

ACTIVATION, GRADIENT = 0, 1


def messages(actions, p: int, num_stages: int) -> list[tuple]:
    """Every cross-rank message of one rank's action list, in list order:
    ("recv" | "send", peer rank, (to_stage, micro-batch, kind), action index)."""
    out = []
    for k, a in enumerate(actions):
        s, i, rank = a.stage, a.microbatch, a.stage % p
        if a.op not in ("F", "B"):
            continue
        src, dst, kind = (s - 1, s + 1, ACTIVATION) if a.op == "F" else (s + 1, s - 1, GRADIENT)
        if 0 <= src < num_stages and src % p != rank:
            out.append(("recv", src % p, (s, i, kind), k))
        if 0 <= dst < num_stages and dst % p != rank:
            out.append(("send", dst % p, (dst, i, kind), k))
    return out


def message_order(all_actions, rank: int, m: int | None = None) -> list[tuple] | None:
    """This rank's messages sorted by the global key (module docstring): a list of
    (op, peer, (to_stage, micro-batch, kind)). None when the schedule cannot run on paper."""
    p, n_st = len(all_actions), num_stages(all_actions)
    try:
        sim = simulate(all_actions, m)
    except ScheduleError:
        return None
    end = {a: t1 for _, a, _, t1 in sim.timeline}

    def key(op, peer, msg):
        s, i, kind = msg  # s: the receiving stage
        made_by = Action("F", s - 1, i) if kind == ACTIVATION else Action("B", s + 1, i)
        src, dst = (rank, peer) if op == "send" else (peer, rank)
        return (end[made_by], src, dst, s, i, kind)

    mine = [(op, peer, msg) for op, peer, msg, _ in messages(all_actions[rank], p, n_st)]
    return sorted(mine, key=lambda e: key(*e))


def _p2p_op(op: str, t: torch.Tensor, peer: int, group):
    # looked up at call time: minipar.runtime.tracer wraps isend/irecv, and P2POp accepts only the
    # function torch.distributed currently holds
    fn = dist.distributed_c10d.isend if op == "send" else dist.distributed_c10d.irecv
    return dist.P2POp(fn, t, group=group, group_peer=peer)


class _Batch:
    """The works of one ``batch_isend_irecv`` call, each waited at most once (a gloo receive's
    work waited a second time blocks for a message that never comes). ``wait(i)`` waits for
    operation i only where the backend returned one work per operation (gloo): a receive then
    does not also wait for a send in its batch, whose receiver may still be busy (gloo's sends
    are rendezvous too). Where the batch is one coalesced work (NCCL), it waits for that."""

    def __init__(self, works, n_ops: int):
        self.works, self.n_ops, self.done = list(works), n_ops, set()

    def wait(self, i: int | None = None) -> None:
        todo = range(len(self.works)) if i is None or len(self.works) != self.n_ops else [i]
        for k in todo:
            if k not in self.done:
                self.works[k].wait()
                self.done.add(k)


class P2P:
    """Sends and receives of one rank; ``owner(stage)`` is the rank holding a stage.

    ``set_order(order)`` (from :func:`message_order`) switches on the global posting order;
    without it every call posts its own message at once (the order of the action list)."""

    def __init__(self, rank: int, p: int, m: int, group=None):
        self.rank, self.p, self.m, self.group = rank, p, m, group
        self.local: dict[tuple, torch.Tensor] = {}  # same-rank hand-offs
        self.pending: list = []  # (batch, tensor) of sends in flight
        self.order: list | None = None  # (op, peer, msg) in posting order
        self.next = 0  # first entry of ``order`` not yet posted
        self.posted: dict[tuple, tuple] = {}  # recv msg -> (buffer, batch, index in it)
        self.calls: list[tuple] = []  # ("post", [(op, peer, msg)]) / ("wait", msg)
        self.like = None  # (shape, dtype) of every message

    def owner(self, stage: int) -> int:
        return stage % self.p

    def set_order(self, order: list | None, like: tuple | None = None) -> None:
        self.order, self.next, self.like = order, 0, like
        self.posted.clear()

    def _post(self, entries: list, tensors: list) -> _Batch:
        """One ``batch_isend_irecv`` call for ``entries`` (op, group peer, msg)."""
        self.calls.append(("post", [(op, peer, msg) for op, peer, msg in entries]))
        return _Batch(
            dist.batch_isend_irecv(
                [_p2p_op(op, t, peer, self.group) for (op, peer, _), t in zip(entries, tensors)]
            ),
            len(entries),
        )

    def _post_until(self, target: tuple, send: torch.Tensor | None = None) -> None:
        """Post every message of ``order`` up to ``target`` (op, peer, msg) in one batch:
        the receives before it are prefetched into fresh buffers."""
        entries, tensors, recvs = [], [], []
        while True:
            if self.next >= len(self.order):
                raise RuntimeError(
                    f"rank {self.rank}: {target[0]} of {target[2]} (stage, "
                    "micro-batch, kind) is not in this schedule's messages"
                )
            e = self.order[self.next]
            self.next += 1
            op, peer, msg = e
            if e == target and op == "send":
                t = send
            elif op == "recv":
                shape, dtype = self.like
                t = torch.empty(shape, dtype=dtype, device=get_device())  # (b, s, h)
                recvs.append((msg, t, len(entries)))
            else:
                raise RuntimeError(
                    f"rank {self.rank}: the send of {msg} (stage, micro-batch, "
                    f"kind) is due before {target[2]}; the executor must run "
                    "the schedule it was planned for"
                )
            entries.append(e)
            tensors.append(t)
            if e == target:
                break
        batch = self._post(entries, tensors)
        for msg, t, i in recvs:
            self.posted[msg] = (t, batch, i)
        if send is not None:
            self.pending.append((batch, send))

    def send(self, t: torch.Tensor, to_stage: int, microbatch: int, kind: int) -> None:
        """Send ``t`` (detached: only its values cross) to ``to_stage``."""
        t = t.detach().contiguous()  # (b, s, h)
        dst = self.owner(to_stage)
        if dst == self.rank:
            self.local[to_stage, microbatch, kind] = t.clone()
            return
        msg = (to_stage, microbatch, kind)
        if self.order is not None:
            self._post_until(("send", dst, msg), send=t)
            return
        self.pending.append((self._post([("send", dst, msg)], [t]), t))

    def recv(
        self, like: tuple, dtype, stage: int, from_stage: int, microbatch: int, kind: int
    ) -> torch.Tensor:
        """Receive the message for ``stage`` from ``from_stage`` (shape ``like``)."""
        src = self.owner(from_stage)
        if src == self.rank:
            return self.local.pop((stage, microbatch, kind))
        msg = (stage, microbatch, kind)
        if self.order is not None:
            if msg not in self.posted:
                self._post_until(("recv", src, msg))
            buf, batch, i = self.posted.pop(msg)
        else:
            buf = torch.empty(like, dtype=dtype, device=get_device())  # (b, s, h)
            batch, i = self._post([("recv", src, msg)], [buf]), 0
        self.calls.append(("wait", msg))
        batch.wait(i)  # this receive (its whole batch on NCCL)
        synchronize()  # NCCL: the wait above did not block this thread
        return buf

    def wait_all(self) -> None:
        for batch, _ in self.pending:
            batch.wait()
        self.pending.clear()
        if self.order is not None and self.next != len(self.order):
            raise RuntimeError(
                f"rank {self.rank}: {len(self.order) - self.next} planned "
                f"messages never posted, first {self.order[self.next]}"
            )


def all_reduce_tied_gradient(weight: torch.Tensor | None, group) -> None:
    """Sum the tied embedding's gradient over the embedding group (first and last stage's
    ranks), so both copies take the same step. No-op without a group or for one rank."""
    if weight is None or group is None or dist.get_world_size(group) == 1:
        return
    if weight.grad is None:
        weight.grad = torch.zeros_like(weight)
    dist.all_reduce(weight.grad, group=group)  # (V, h)
