"""Runs on ranks for the chapter's notebook and tests (start them with ``minipar.runtime.launch.run``)."""

from __future__ import annotations

from minipar.runtime.device import get_device

from .grid import RankGrid, new_groups


def group_members_on_rank(rank: int, world_size: int, d: int, t: int, p: int) -> dict:
    """In each of this rank's groups of the grid, all-reduce the rank's own number (→ the sum of
    the members) and all-gather it (→ the members, in group order): ``{kind: {"sum": int,
    "members": [ranks]}}``, without the kinds this rank has no group of (embedding on a middle
    stage). The numbers live on the rank's device, so this runs on NCCL as well as on gloo."""
    import torch  # noqa: PLC0415 (lazy: torch)
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    dev = get_device()
    grid = RankGrid(d, t, p)
    groups = new_groups(grid)
    out = {}
    for kind, group in groups._asdict().items():
        if group is None:
            continue
        x = torch.tensor([rank], dtype=torch.int64, device=dev)
        got = [torch.zeros_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(got, x, group=group)  # the members, in group order
        dist.all_reduce(x, group=group)  # (1,) sum over the group
        out[kind] = {"sum": int(x), "members": [int(g) for g in got]}
    return out


def check_members(grid: RankGrid, results: list[dict]) -> list[str]:
    """Compare what the ranks saw with the grid's groups; return the mismatches (empty: all ok)."""
    problems = []
    for rank, seen in enumerate(results):
        for kind in ("tp", "dp", "pp", "embedding"):
            want, got = grid.group_of(kind, rank), seen.get(kind)
            if want:
                ok = got is not None and got["members"] == want and got["sum"] == sum(want)
            else:
                ok = got is None
            if not ok:
                members = got and got["members"]
                problems.append(f"rank {rank}: {kind} group {members}, expected {want or 'none'}")
    return problems
