"""The tracer attributes every call to its process group by identity (global ranks and name),
so two groups of the same size moving the same bytes are told apart."""

import pytest

from minipar.runtime.launch import run

pytestmark = pytest.mark.slow


def _two_groups_of_two(rank, world_size):
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol

    from minipar.runtime.tracer import trace

    # a 2 × 2 grid: "tp" pairs {0,1}, {2,3}; "dp" pairs {0,2}, {1,3} (same size, same bytes)
    tp = [dist.new_group([0, 1]), dist.new_group([2, 3])][rank // 2]
    dp = [dist.new_group([0, 2]), dist.new_group([1, 3])][rank % 2]
    x = torch.ones(4)  # 16 bytes
    with trace({"tp": tp, "dp": dp}) as tr:
        dist.all_reduce(x, group=tp)
        dist.all_reduce(x, group=dp)
        dist.all_reduce(x, group=dp)
        dist.barrier()
        funcol.all_reduce(torch.ones(2), "sum", tp).wait()  # DTensor's path: 8 bytes
    with trace() as unnamed:  # no names: global ranks
        dist.all_reduce(x, group=dp)
    return {
        "events": [(e.op, e.bytes, e.group_size, e.group) for e in tr.events],
        "by_group": tr.by_group(),
        "unnamed": unnamed.by_group(),
    }


def test_events_carry_their_group_and_by_group_tells_same_size_groups_apart():
    out = run(_two_groups_of_two, 4, backend="gloo")
    r0, r3 = out[0], out[3]
    assert r0["events"][:3] == [
        ("all_reduce", 16, 2, (0, 1)),
        ("all_reduce", 16, 2, (0, 2)),
        ("all_reduce", 16, 2, (0, 2)),
    ]
    assert r3["events"][0][3] == (2, 3) and r3["events"][1][3] == (1, 3)
    assert r0["by_group"][("tp", "all_reduce")] == [2, 24]  # one c10d + one functional
    assert r0["by_group"][("dp", "all_reduce")] == [2, 32]
    assert r0["by_group"][("world", "barrier")][0] == 1
    assert r3["unnamed"] == {("1,3", "all_reduce"): [1, 16]}
    # negative control: what attribution by size and bytes would see cannot separate the groups
    sizes = {(op, b, g) for op, b, g, _ in r0["events"][:3]}
    assert len(sizes) == 1
