"""The executor's point-to-point call pattern is safe on NCCL: NCCL ignores tags (a link's k-th
send meets its k-th receive) and a send waits for its receive, one call after another per rank.

Each rank's real ``PipelineExecutor`` runs in this process with ``torch.distributed``'s
``batch_isend_irecv`` replaced by a recorder, so the test sees exactly the calls a rank makes.
The recorded calls are then played on a model of NCCL: per rank one queue of batches, a batch
finishes when each of its operations has met its counterpart at the head of the peer's queue,
a rank blocks where it waits for a receive. The controls show the model catches the two
classic bugs: posting in each rank's own action order (1F1B deadlocks) and two receives swapped
(a link's orders disagree). The gloo parity tests (tests/test_pipeline_parallel.py) run the same
code on real ranks, where no tag is passed either, so they test order matching too.
"""

import pytest
import torch
import torch.distributed as dist

from minipar.pipeline_parallel import communication
from minipar.pipeline_parallel.executor import LastStageLoss, PipelineExecutor
from minipar.pipeline_parallel.schedules import schedule
from minipar.pipeline_parallel.timed import TimedStage, _zero_loss

SHAPE = (1, 2, 3)


class _Done:
    def wait(self):
        return True


@pytest.fixture
def recorder(monkeypatch):
    """Every batch_isend_irecv call (the ops' kinds and peers); direct isend/recv forbidden."""
    batches = []

    def batch(ops):
        batches.append([(op, peer) for op, peer, _ in ops])
        return [_Done() for _ in ops]

    def forbidden(*a, **k):
        raise AssertionError("a point-to-point call outside batch_isend_irecv")

    monkeypatch.setattr(communication, "_p2p_op", lambda op, t, peer, group: (op, peer, t))
    monkeypatch.setattr(dist, "batch_isend_irecv", batch)
    for name in ("isend", "irecv", "send", "recv"):
        monkeypatch.setattr(dist, name, forbidden)
    return batches


def programs(name, p, m, v, ordered=True):
    """Each rank's recorded calls: ("post", [(op, peer, msg)]) and ("wait", msg)."""
    out = []
    for rank in range(p):
        stages = {s: TimedStage(0.0, 0.0, 0.0) for s in range(rank, v * p, p)}
        ex = PipelineExecutor(stages, v * p, rank, p, m, loss=LastStageLoss(_zero_loss))
        if not ordered:  # the control: post each message when the action list reaches it
            ex.full_schedule = lambda actions: None
        ex.run(
            schedule(name, p, m, v)[rank],
            [torch.zeros(SHAPE) for _ in range(m)],
            [None] * m,
            SHAPE,
            torch.float32,
        )
        out.append(ex.comm.calls)
    return out


def link_orders(progs):
    """{(src, dst): (messages in send order, messages in receive order)}."""
    links = {}
    for r, calls in enumerate(progs):
        for kind, arg in calls:
            if kind == "post":
                for op, peer, msg in arg:
                    link = (r, peer) if op == "send" else (peer, r)
                    links.setdefault(link, ([], []))[op == "recv"].append(msg)
    return links


def nccl_model(progs) -> str | None:
    """Play ``progs`` on the NCCL model; None when every rank finishes, else who is stuck."""
    p = len(progs)
    count = {}
    batches, waits = [], []
    for r, calls in enumerate(progs):
        mine, events, where = [], [], {}
        for kind, arg in calls:
            if kind == "post":
                ops = []
                for op, peer, msg in arg:
                    link = (r, peer) if op == "send" else (peer, r)
                    k = count.get((op, link), 0)
                    count[op, link] = k + 1
                    ops.append((op, link, k))
                    where[msg] = len(mine)
                mine.append(ops)
                events.append(("post", len(mine) - 1))
            else:
                events.append(("wait", where[arg]))
        batches.append(mine)
        waits.append(events)
    pc, queue, done, met = [0] * p, [[] for _ in range(p)], [set() for _ in range(p)], set()
    while True:
        moved = False
        for r in range(p):
            while pc[r] < len(waits[r]):
                kind, b = waits[r][pc[r]]
                if kind == "post":
                    queue[r].append(b)
                elif b not in done[r]:
                    break
                pc[r] += 1
                moved = True
        head = {o for r in range(p) if queue[r] for o in batches[r][queue[r][0]]}
        for o in head - met:
            if ("recv" if o[0] == "send" else "send", o[1], o[2]) in head:
                met.add(o)
                moved = True
        for r in range(p):
            if queue[r] and all(o in met for o in batches[r][queue[r][0]]):
                done[r].add(queue[r].pop(0))
                moved = True
        if all(pc[r] == len(waits[r]) and not queue[r] for r in range(p)):
            return None
        if not moved:
            return "; ".join(
                f"rank {r} at batch {batches[r][queue[r][0]]}" for r in range(p) if queue[r]
            )


CASES = [
    (name, p, m, v)
    for name, v in (("gpipe", 1), ("1f1b", 1), ("zb-h1", 1), ("interleaved", 2), ("interleaved", 3))
    for p in (2, 3, 4)
    for m in (p, 2 * p, 2 * p + 1)
    if not (name == "interleaved" and m % p)
]


@pytest.mark.parametrize("name, p, m, v", CASES)
def test_every_schedule_is_safe_on_the_nccl_model(recorder, name, p, m, v):
    progs = programs(name, p, m, v)
    for link, (sent, received) in link_orders(progs).items():
        assert sent == received, f"link {link}: sends {sent} but receives {received}"
    assert nccl_model(progs) is None
    # every message crossed in a batch_isend_irecv call, never a tag-matched isend/recv
    n_msgs = sum(len(arg) for calls in progs for kind, arg in calls if kind == "post")
    assert sum(len(b) for b in recorder) == n_msgs > 0


def test_1f1b_call_pattern_is_pinned(recorder):
    # 1F1B, p = 2, m = 3. Rank 1 receives the next activation and sends a gradient in one
    # batch (Megatron's send_backward_recv_forward); rank 0 sends F0.1's activation before it
    # waits for B0.0's gradient, so neither rank waits on a send its neighbour cannot meet.
    A, G = 0, 1
    rank0, rank1 = programs("1f1b", 2, 3, 1)
    assert rank0 == [
        ("post", [("send", 1, (1, 0, A))]),
        ("post", [("send", 1, (1, 1, A))]),
        ("post", [("recv", 1, (0, 0, G))]),
        ("wait", (0, 0, G)),
        ("post", [("send", 1, (1, 2, A))]),
        ("post", [("recv", 1, (0, 1, G))]),
        ("wait", (0, 1, G)),
        ("post", [("recv", 1, (0, 2, G))]),
        ("wait", (0, 2, G)),
    ]
    assert rank1 == [
        ("post", [("recv", 0, (1, 0, A))]),
        ("wait", (1, 0, A)),
        ("post", [("recv", 0, (1, 1, A)), ("send", 0, (0, 0, G))]),
        ("wait", (1, 1, A)),
        ("post", [("recv", 0, (1, 2, A)), ("send", 0, (0, 1, G))]),
        ("wait", (1, 2, A)),
        ("post", [("send", 0, (0, 2, G))]),
    ]


def test_control_action_order_deadlocks_on_nccl(recorder):
    # posting each message when the action list reaches it (the tagged-isend design) is fine
    # on gloo, where sends are buffered, and deadlocks 1F1B on NCCL: both neighbours send first
    for name, p, m, v in (("1f1b", 2, 4, 1), ("interleaved", 2, 4, 2)):
        stuck = nccl_model(programs(name, p, m, v, ordered=False))
        assert stuck is not None and "send" in stuck, (name, stuck)


def test_control_swapped_receives_are_caught(recorder):
    progs = programs("interleaved", 2, 4, 2)
    posts = [
        i
        for i, (kind, arg) in enumerate(progs[1])
        if kind == "post" and any(op == "recv" for op, _, _ in arg)
    ]
    i, j = posts[0], posts[1]
    progs[1][i], progs[1][j] = progs[1][j], progs[1][i]
    bad = [link for link, (s, r) in link_orders(progs).items() if s != r]
    assert bad == [(0, 1)]


def test_unknown_schedule_falls_back_to_call_order(recorder):
    # a list the executor cannot find among the named schedules and that cannot run on paper
    # (a learner's) is posted in call order, one message per batch, with no prefetch
    from minipar.pipeline_parallel.communication import message_order
    from minipar.pipeline_parallel.schedules import Action

    deadlocking = [[Action("B", 0, 0), Action("F", 0, 0)], [Action("F", 1, 0), Action("B", 1, 0)]]
    assert message_order(deadlocking, 0, 1) is None
