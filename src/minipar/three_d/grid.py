"""The 3D chapter's view of the course's rank grid (:class:`minipar.grid.Grid` with cp = ep = 1):
data × tensor × pipeline parallelism, N = d·t·p ranks laid out as a (p, d, t) array,

    rank = pp_index·(d·t) + dp_index·t + tp_index

``tp`` innermost (a TP group of t ≤ GPUs per node stays on NVLink), ``pp`` outermost (pipeline
traffic is the smallest, so it takes the slowest links): Megatron-LM's order (Narayanan et al.
2021 §3.3); torchtitan's DeviceMesh (pp, dp_replicate, dp_shard, cp, tp) is the same physical
order, while picotron's (dp, pp, tp) puts DP outermost.

Groups (lists of global ranks): ``tp`` (same (pp, dp), consecutive), ``dp`` (same (pp, tp),
stride t), ``pp`` (same (dp, tp), stride d·t: one pipeline), ``embedding`` (first and last
stage of each pipeline, where the tied embedding's gradients are all-reduced, Shoeybi et al.
2019; one rank when p = 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from minipar import grid as _grid


class Coord(NamedTuple):
    pp: int
    dp: int
    tp: int


@dataclass(frozen=True)
class RankGrid(_grid.Grid):
    """``RankGrid(d, t, p)``: :class:`minipar.grid.Grid` with cp = ep = 1."""

    kinds = ("tp", "dp", "pp", "embedding")

    def __post_init__(self):
        super().__post_init__()
        if (self.cp, self.ep) != (1, 1):
            raise ValueError(
                f"the 3D grid has cp = ep = 1, got cp ({self.cp}), ep ({self.ep}): "
                "use minipar.grid.Grid"
            )

    def coord(self, rank: int) -> Coord:
        """(pp, dp, tp) indices of ``rank``."""
        c = super().coord(rank)
        return Coord(c.pp, c.dp, c.tp)

    def rank(self, pp: int, dp: int, tp: int) -> int:
        return super().rank(pp=pp, dp=dp, tp=tp)

    def groups(self, kind: str) -> list[list[int]]:
        if kind not in self.kinds:
            raise ValueError(f"group kind ({kind!r}) must be one of {', '.join(self.kinds)}")
        return super().groups(kind)

    def _title(self) -> str:
        return (
            f"(d, t, p) = ({self.d}, {self.t}, {self.p}): {self.world_size} ranks; "
            "tp innermost, then dp, pp outermost (Megatron's order)"
        )

    def _columns(self, rank: int) -> dict[str, int]:
        return self.coord(rank)._asdict()


class Groups(NamedTuple):
    """This rank's process groups (None for the embedding group of a middle stage)."""

    tp: object
    dp: object
    pp: object
    embedding: object


def new_groups(grid: RankGrid) -> Groups:
    """This rank's tp, dp, pp and embedding groups (:func:`minipar.grid.new_groups` for these
    four kinds: every rank creates every group, in the same order). Call it once, after the
    default group exists, with ``grid.world_size`` equal to the world size."""
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    if dist.get_world_size() != grid.world_size:
        raise ValueError(
            f"world size ({dist.get_world_size()}) must equal d·t·p ({grid.d}·"
            f"{grid.t}·{grid.p} = {grid.world_size})"
        )
    return Groups(**_grid.new_groups(grid, Groups._fields))
