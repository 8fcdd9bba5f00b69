"""The tracer sees every collective and point-to-point call, with exact bytes and group sizes."""
import pytest

from minipar.launch import run

pytestmark = pytest.mark.slow


def _traced(rank, world_size):
    import torch
    import torch.distributed as dist

    from minipar.trace import trace

    x = torch.ones(12)  # 48 bytes of fp32
    with trace() as tr:
        dist.all_reduce(x)
        dist.all_gather_into_tensor(torch.empty(12 * world_size), x)
        dist.reduce_scatter_tensor(torch.empty(12 // world_size), x)
        dist.broadcast(x, src=0)
        peer = (rank + 1) % world_size
        if rank % 2 == 0:
            dist.send(x, peer)
        else:
            dist.recv(x, (rank - 1) % world_size)
        work = dist.all_reduce(x.double(), async_op=True)
        work.wait()
        sub = dist.new_group([0, 1])
        if rank in (0, 1):
            dist.all_reduce(x, group=sub)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 2))  # 8 params
        model(torch.ones(1, 3)).sum().backward()
    return [(e.op, e.bytes, e.group_size, e.is_async, e.peer) for e in tr.events], tr.table()


def test_ops_bytes_and_group_sizes():
    events, table = run(_traced, 2)[0]
    ops = [(op, nbytes, g) for op, nbytes, g, _, _ in events]
    assert ops[:7] == [("all_reduce", 48, 2), ("all_gather", 96, 2), ("reduce_scatter", 48, 2),
                       ("broadcast", 48, 2), ("send", 48, 2), ("all_reduce", 96, 2),
                       ("all_reduce", 48, 2)]
    assert events[4][4] == 1               # the send's peer
    assert events[5][3] is False           # async call waited through the handle: timed fully
    # DDP's C++ reducer is seen too: its gradient all-reduce is the 8 parameters in fp32
    assert ("all_reduce", 32, 2) in ops[7:]
    assert "all_reduce" in table and "send" in table


def test_subgroup_size_and_recv():
    events = run(_traced, 4)[3][0]
    assert ("recv", 48, 4) in [(op, b, g) for op, b, g, _, _ in events]
    # rank 3 is not in the subgroup [0, 1]: it makes no call on it
    assert sum(1 for op, b, g, _, _ in events if g == 2) == 0
    events0 = run(_traced, 4)[0][0]
    assert ("all_reduce", 48, 2) in [(op, b, g) for op, b, g, _, _ in events0]


def test_negative_control_untraced_calls_are_not_counted():
    def fn(rank, world_size):
        import torch
        import torch.distributed as dist

        from minipar.trace import trace
        with trace() as tr:
            pass
        dist.all_reduce(torch.ones(4))  # outside the context
        return tr.count()
    assert run(fn, 2) == [0, 0]
