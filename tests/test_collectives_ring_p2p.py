"""The ring collectives' point-to-point call pattern is safe on NCCL: every step's send and
receive go in one ``batch_isend_irecv`` call (NCCL ignores tags and runs a rank's calls one
after another; a lone send waits for its receiver). Each rank's calls are recorded in this
process and played on the NCCL model of ``test_pipeline_parallel_p2p``; the control (the
same messages as separate isend, irecv calls) deadlocks there."""

import pytest
import torch
import torch.distributed as dist
from test_pipeline_parallel_p2p import nccl_model

from minipar.collectives import ring


class _Op:
    def __init__(self, fn, tensor, group=None, group_peer=None):
        self.op = "send" if fn is dist.distributed_c10d.isend else "recv"
        self.peer = group_peer


class _Done:
    def wait(self):
        return True


def calls_of(monkeypatch, rank, n, numel, paired=True):
    """Rank ``rank``'s calls during ``ring_all_reduce`` of ``numel`` elements on n ranks."""
    calls = []

    def batch(ops):
        calls.append([(o.op, o.peer) for o in ops])
        return [_Done() for _ in ops]

    monkeypatch.setattr(dist, "P2POp", _Op)
    monkeypatch.setattr(
        dist,
        "batch_isend_irecv",
        batch if paired else lambda ops: [x for o in ops for x in batch([o])],
    )
    monkeypatch.setattr(dist, "get_rank", lambda group=None: rank)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: n)
    ring.ring_all_reduce(torch.zeros(numel))
    return calls


def program(calls, rank):
    """As ``nccl_model`` reads it: each call posted, then waited; messages named by link and
    step (the k-th message on a link is its k-th)."""
    prog, count = [], {}
    for batch in calls:
        msgs = []
        for op, peer in batch:
            link = (rank, peer) if op == "send" else (peer, rank)
            count[link] = count.get(link, 0) + 1
            msgs.append((op, peer, (link, count[link])))
        prog.append(("post", msgs))
        prog += [("wait", msg) for _, _, msg in msgs]
    return prog


@pytest.mark.parametrize("n", [2, 3, 4])
def test_ring_steps_are_paired_batches(monkeypatch, n):
    progs = []
    for r in range(n):
        calls = calls_of(monkeypatch, r, n, 7)
        assert calls == [[("send", (r + 1) % n), ("recv", (r - 1) % n)]] * (2 * (n - 1))
        progs.append(program(calls, r))
    assert nccl_model(progs) is None


def test_control_unpaired_ring_deadlocks_on_nccl(monkeypatch):
    n = 3
    progs = [program(calls_of(monkeypatch, r, n, 7, paired=False), r) for r in range(n)]
    stuck = nccl_model(progs)
    assert stuck is not None and stuck.count("send") == n  # every rank waits on its send
