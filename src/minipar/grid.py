"""One named rank grid for the five parallelisms, and the process groups cut from it.

N = t·cp·d·p ranks in Megatron-LM's order, innermost (consecutive ranks) first:

    tp → cp → dp → pp        rank = i_pp·(d·cp·t) + i_dp·(cp·t) + i_cp·t + i_tp

TP talks most (four activation all-reduces per layer), so its t ranks stay inside one node; CP
next (a ring of K/V blocks per layer), DP next (one gradient reduction per step), PP outermost
(one activation per micro-batch and boundary: the least traffic takes the slowest links).
Narayanan et al. 2021 §3.3 derive this order for tp, dp, pp; Megatron-Core keeps it with cp
between tp and dp.

**Experts are folded** (Megatron-Core's "MoE parallel folding": Liu et al. 2025, "MoE Parallel
Folding: Heterogeneous Parallelism Mappings for Efficient Large-Scale MoE Model Training with
Megatron Core", arXiv 2504.14960): the expert layers see the t·cp·d ranks of one pipeline stage
(``stage_size``) as a second grid, ETP = 1 × EP × EDP, ep innermost: expert rank =
i_pp·(t·cp·d) + i_edp·ep + i_ep. So ep must divide t·cp·d, not d: the experts may reuse the
attention's t and cp ranks. (torchtitan builds a separate "sparse" DeviceMesh for the same.)

Groups, each a list of global ranks in increasing order:

  tp         same (pp, dp, cp): t consecutive ranks
  cp         same (pp, dp, tp): stride t, size cp
  dp         same (pp, cp, tp): stride t·cp, size d
  dp_cp      same (pp, tp): size d·cp; dense weight gradients are reduced here (every rank of it
             saw different tokens: other sequences over dp, other positions over cp)
  pp         same (dp, cp, tp): stride t·cp·d, size p (one pipeline)
  ep         ep consecutive ranks of one stage: the experts of one MoE layer are split over them
  edp        ranks of one stage with the same expert slice (stride ep, size t·cp·d/ep): expert weight
             gradients are reduced here
  embedding  first and last stage of each pipeline (the tied embedding's gradient)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

DIMS = ("tp", "cp", "dp", "pp")  # innermost first: Megatron's order
KINDS = ("tp", "cp", "dp", "dp_cp", "pp", "ep", "edp", "embedding")


class Coord(NamedTuple):
    pp: int
    dp: int
    cp: int
    tp: int


@dataclass(frozen=True)
class Grid:
    """Sizes ``d`` (data), ``t`` (tensor), ``p`` (pipeline), ``cp`` (context), ``ep`` (expert,
    folded over the t·cp·d ranks of a stage)."""

    d: int = 1
    t: int = 1
    p: int = 1
    cp: int = 1
    ep: int = 1

    def __post_init__(self):
        for k in ("d", "t", "p", "cp", "ep"):
            v = getattr(self, k)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{k} ({v!r}) must be an integer >= 1")
        if self.stage_size % self.ep:
            raise ValueError(
                f"ep ({self.ep}) must divide the ranks of one pipeline stage, "
                f"t·cp·d = {self.t}·{self.cp}·{self.d} = {self.stage_size} "
                "(MoE parallel folding)"
            )

    @property
    def world_size(self) -> int:
        return self.stage_size * self.p

    @property
    def stage_size(self) -> int:
        """t·cp·d ranks per pipeline stage."""
        return self.t * self.cp * self.d

    def sizes(self) -> dict[str, int]:
        return {"tp": self.t, "cp": self.cp, "dp": self.d, "pp": self.p}

    def strides(self) -> dict[str, int]:
        """Rank distance between neighbours along each dimension: tp 1, cp t, dp t·cp, pp t·cp·d."""
        return {"tp": 1, "cp": self.t, "dp": self.t * self.cp, "pp": self.stage_size}

    def coord(self, rank: int) -> Coord:
        if not isinstance(rank, int) or not 0 <= rank < self.world_size:
            raise ValueError(f"rank ({rank}) must be in [0, {self.world_size})")
        pp, rest = divmod(rank, self.stage_size)
        dp, rest = divmod(rest, self.t * self.cp)
        cp, tp = divmod(rest, self.t)
        return Coord(pp, dp, cp, tp)

    def rank(self, pp: int = 0, dp: int = 0, cp: int = 0, tp: int = 0) -> int:
        s = self.strides()
        return pp * s["pp"] + dp * s["dp"] + cp * s["cp"] + tp

    def expert_coord(self, rank: int) -> tuple[int, int, int]:
        """(pp, edp, ep) indices of ``rank`` on the folded expert grid."""
        Grid.coord(self, rank)  # checks the range
        pp, i = divmod(rank, self.stage_size)
        edp, ep = divmod(i, self.ep)
        return pp, edp, ep

    def _by(self, key) -> list[list[int]]:
        """Groups of the ranks with equal ``key(rank)``, ordered by first member."""
        out: dict[tuple, list[int]] = {}
        for r in range(self.world_size):
            out.setdefault(key(r), []).append(r)
        return list(out.values())

    def _along(self, dims: tuple[str, ...]) -> list[list[int]]:
        """Groups of ranks whose coordinates differ only along ``dims``."""
        return self._by(
            lambda r: tuple(v for k, v in Grid.coord(self, r)._asdict().items() if k not in dims)
        )

    def groups(self, kind: str) -> list[list[int]]:
        """Every group of ``kind`` (one of :data:`KINDS`), ordered by first member."""
        if kind in DIMS:
            return self._along((kind,))
        if kind == "dp_cp":
            return self._along(("dp", "cp"))
        if kind == "ep":  # same (pp, edp)
            return self._by(lambda r: self.expert_coord(r)[:2])
        if kind == "edp":  # same (pp, ep)
            return self._by(lambda r: self.expert_coord(r)[::2])
        if kind == "embedding":
            return [sorted({g[0], g[-1]}) for g in self._along(("pp",))]
        raise ValueError(f"group kind ({kind!r}) must be one of {', '.join(KINDS)}")

    def group_of(self, kind: str, rank: int) -> list[int]:
        """The ``kind`` group of ``rank`` ([] for the embedding group of a middle stage)."""
        self.coord(rank)
        return next((g for g in self.groups(kind) if rank in g), [])

    kinds = KINDS  # the kinds :meth:`describe` lists

    def _title(self) -> str:
        return (
            f"(d, t, p, cp, ep) = ({self.d}, {self.t}, {self.p}, {self.cp}, {self.ep}): "
            f"{self.world_size} ranks; tp innermost, then cp, dp, pp outermost (Megatron's "
            f"order); experts folded as ep × edp = {self.ep} × {self.stage_size // self.ep} "
            f"over the {self.stage_size} ranks of a stage"
        )

    def _columns(self, rank: int) -> dict[str, int]:
        _, edp, ep = self.expert_coord(rank)
        return {**Grid.coord(self, rank)._asdict(), "edp": edp, "ep": ep}

    def describe(self, gpus_per_node: int | None = None) -> str:
        """Every rank's coordinates and every group, as text for a reader; with
        ``gpus_per_node``, each rank's node and how many groups of each kind leave a node."""
        names = list(self._columns(0))
        lines = [
            self._title(),
            "rank" + "".join(f"{n:>4}" for n in names) + ("  node" if gpus_per_node else ""),
        ]
        for r in range(self.world_size):
            node = f"  {r // gpus_per_node:>4}" if gpus_per_node else ""
            lines.append(f"{r:>4}" + "".join(f"{v:>4}" for v in self._columns(r).values()) + node)
        for kind in self.kinds:
            gs = self.groups(kind)
            text = " ".join(str(g) for g in gs)
            if gpus_per_node:
                crossing = sum(len({r // gpus_per_node for r in g}) > 1 for g in gs)
                text += f"   ({crossing} of {len(gs)} span more than one node)"
            lines.append(f"{kind + ' groups:':<18}{text}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


def new_groups(grid: Grid, kinds: tuple[str, ...] = KINDS) -> dict:
    """Create every group of each kind in ``kinds`` with ``torch.distributed.new_group`` (a
    collective: every rank creates every group, in the same order) and return {kind: this rank's
    group} (None for a middle stage's embedding group). Call it once, on ``grid.world_size``
    ranks, after the default group exists."""
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    n, me = dist.get_world_size(), dist.get_rank()
    if n != grid.world_size:
        raise ValueError(
            f"world size ({n}) must equal t·cp·d·p ({grid.t}·{grid.cp}·{grid.d}·"
            f"{grid.p} = {grid.world_size})"
        )
    mine = {}
    for kind in kinds:
        mine[kind] = None
        for ranks in grid.groups(kind):
            g = dist.new_group(ranks)
            if me in ranks:
                mine[kind] = g
    return mine
