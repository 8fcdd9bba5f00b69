"""One rank grid for data × tensor × pipeline parallelism, and the process groups cut from it.

N = d·t·p ranks are laid out as a (p, d, t) array in row-major order, so

    rank = pp_index·(d·t) + dp_index·t + tp_index

``tp`` is innermost (consecutive ranks: a TP group of t ≤ GPUs per node stays on NVLink), ``dp``
next, ``pp`` outermost (stage neighbours are d·t ranks apart, usually on other nodes: pipeline
traffic is the smallest, so it takes the slowest links). This is Megatron-LM's order
("tp-cp-ep-dp-pp" from innermost to outermost, Narayanan et al. 2021 §3.3). torchtitan builds the
same physical order with a DeviceMesh whose dims are named (pp, dp_replicate, dp_shard, cp, tp),
last dim fastest; picotron views ``arange(world)`` as (dp, pp, tp), which keeps TP consecutive
but puts DP outermost.

Groups (each a list of global ranks):
  tp         ranks with the same (pp, dp): consecutive, size t
  dp         ranks with the same (pp, tp): stride t, size d
  pp         ranks with the same (dp, tp): stride d·t, size p (one pipeline)
  embedding  first and last stage of each pipeline (tied input/output embedding gradients are
             all-reduced here, Shoeybi et al. 2019 / Megatron-LM); one rank when p = 1
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Coord(NamedTuple):
    pp: int
    dp: int
    tp: int


@dataclass(frozen=True)
class RankGrid:
    d: int
    t: int
    p: int

    def __post_init__(self):
        for k in ("d", "t", "p"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{k} ({v!r}) must be an integer >= 1")

    @property
    def world_size(self) -> int:
        return self.d * self.t * self.p

    def coord(self, rank: int) -> Coord:
        """(pp, dp, tp) indices of ``rank``."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank ({rank}) must be in [0, {self.world_size})")
        pp, rest = divmod(rank, self.d * self.t)
        dp, tp = divmod(rest, self.t)
        return Coord(pp, dp, tp)

    def rank(self, pp: int, dp: int, tp: int) -> int:
        return pp * self.d * self.t + dp * self.t + tp

    def tp_groups(self) -> list[list[int]]:
        return [[self.rank(i, j, k) for k in range(self.t)]
                for i in range(self.p) for j in range(self.d)]

    def dp_groups(self) -> list[list[int]]:
        return [[self.rank(i, j, k) for j in range(self.d)]
                for i in range(self.p) for k in range(self.t)]

    def pp_groups(self) -> list[list[int]]:
        return [[self.rank(i, j, k) for i in range(self.p)]
                for j in range(self.d) for k in range(self.t)]

    def embedding_groups(self) -> list[list[int]]:
        return [sorted({g[0], g[-1]}) for g in self.pp_groups()]

    def groups(self, kind: str) -> list[list[int]]:
        kinds = {"tp": self.tp_groups, "dp": self.dp_groups, "pp": self.pp_groups,
                 "embedding": self.embedding_groups}
        if kind not in kinds:
            raise ValueError(f"group kind ({kind!r}) must be one of {', '.join(kinds)}")
        return kinds[kind]()

    def group_of(self, kind: str, rank: int) -> list[int]:
        """The ``kind`` group that ``rank`` belongs to ([] for a rank outside every embedding
        group, i.e. a middle pipeline stage)."""
        self.coord(rank)
        return next((g for g in self.groups(kind) if rank in g), [])

    def describe(self, gpus_per_node: int | None = None) -> str:
        """A table of every rank's coordinates and the groups, for printing."""
        lines = [f"(d, t, p) = ({self.d}, {self.t}, {self.p}): {self.world_size} ranks; "
                 "tp innermost, then dp, pp outermost (Megatron's order)"]
        head = "rank  pp  dp  tp" + ("  node" if gpus_per_node else "")
        lines.append(head)
        for r in range(self.world_size):
            c = self.coord(r)
            node = f"  {r // gpus_per_node:>4}" if gpus_per_node else ""
            lines.append(f"{r:>4}  {c.pp:>2}  {c.dp:>2}  {c.tp:>2}{node}")
        for kind in ("tp", "dp", "pp", "embedding"):
            gs = self.groups(kind)
            text = " ".join(str(g) for g in gs)
            if gpus_per_node:
                crossing = sum(len({r // gpus_per_node for r in g}) > 1 for g in gs)
                text += f"   ({crossing} of {len(gs)} span more than one node)"
            lines.append(f"{kind + ' groups:':<18}{text}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


class Groups(NamedTuple):
    """This rank's process groups (None for the embedding group of a middle stage)."""
    tp: object
    dp: object
    pp: object
    embedding: object


def new_groups(grid: RankGrid) -> Groups:
    """Create every tp, dp, pp and embedding group with ``torch.distributed.new_group`` and return
    the ones this rank belongs to.

    Every rank must call ``new_group`` for every group, in the same order (the torch rule), so
    the loop runs over all groups on all ranks. Call it once, after the default group exists
    (``minipar.runtime.launch.run`` creates it), with ``grid.world_size`` equal to the world size.
    """
    import torch.distributed as dist

    n, me = dist.get_world_size(), dist.get_rank()
    if n != grid.world_size:
        raise ValueError(f"world size ({n}) must equal d·t·p ({grid.d}·{grid.t}·{grid.p} = "
                         f"{grid.world_size})")
    mine = {}
    for kind in ("tp", "dp", "pp", "embedding"):
        mine[kind] = None
        for ranks in grid.groups(kind):
            g = dist.new_group(ranks)
            if me in ranks:
                mine[kind] = g
    return Groups(**mine)
