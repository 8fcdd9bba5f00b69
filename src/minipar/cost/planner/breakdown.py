"""Per-GPU training memory: model states plus the activations of the busiest pipeline stage.

Combines, without new formulas, :func:`minipar.cost.model.param_count` (Narayanan et al. 2021
Eq. 2), :func:`minipar.cost.chapters.memory_time.model_state_bytes` (ZeRO, Rajbhandari et al. 2020 §5) and
:func:`minipar.cost.chapters.memory_time.pipeline_first_stage_activation_bytes` (Korthikanti et al. 2022
Table 2 and §4.2.3, 1F1B). Assumptions: mixed-precision Adam (16Ψ bytes before sharding), the
parameters spread evenly over t·p devices (the embedding really sits on the first and last
stages), and nothing else: no communication buffers, no temporary workspace, no
fragmentation, no logits. Real runs need headroom on top.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import NamedTuple

from ..chapters.memory_time import (
    check_zero_stage,
    model_state_bytes,
    pipeline_first_stage_activation_bytes,
)
from ..model import param_count
from .term_table import BUBBLE, MEMORY, SLOT, STEP, TERMS, TIME_GROUPS


class MemoryBreakdown(NamedTuple):
    weights: float
    gradients: float
    optimizer: float
    activations: float
    total: float
    psi: int


def check_layout(
    L: int, h: int, a: int, *, d: int = 1, t: int = 1, p: int = 1, zero: int = 0
) -> None:
    """Raise ``ValueError`` naming the rule an impossible layout breaks (the one statement of
    these rules: ``minipar memory`` and the other cost commands call it too)."""
    for k, v in (("L", L), ("h", h), ("a", a), ("d", d), ("t", t), ("p", p)):
        if int(v) != v or v < 1:
            raise ValueError(f"{k} ({v}) must be a positive integer")
    if h % a:
        raise ValueError(f"hidden size ({h}) must be divisible by heads ({a})")
    if a % t:
        raise ValueError(f"heads ({a}) must be divisible by t ({t})")
    if L % p:
        raise ValueError(f"layers ({L}) must be divisible by p ({p})")
    check_zero_stage(zero)


@dataclass(frozen=True)
class MemoryLayout:
    """The keywords of :func:`per_gpu_memory`: micro-batch b, the d × t × p grid, the ZeRO
    stage, sequence parallelism, the recomputation and the micro-batches m (``None``: m ≥ p)."""

    b: int = 1
    d: int = 1
    t: int = 1
    p: int = 1
    zero: int = 0
    sp: bool = False
    recompute: str = "none"
    m: int | None = None


def per_gpu_memory(L: int, h: int, a: int, s: int, V: int, **kw) -> MemoryBreakdown:
    """Bytes on the first pipeline stage (the fullest) of a d × t × p layout (``kw``: the
    keywords of :class:`MemoryLayout`).

    Model states: 16Ψ/(t·p), then ZeRO-``zero`` divides the sharded part by d. Activations:
    under 1F1B the first stage holds min(p, m) micro-batches of L/p layers, i.e. L layers' worth
    of one micro-batch of b sequences when m ≥ p (``m=None``); ZeRO does not touch them.
    """
    layout = MemoryLayout(**kw)
    d, t, p, zero = layout.d, layout.t, layout.p, layout.zero
    check_layout(L, h, a, d=d, t=t, p=p, zero=zero)
    psi = param_count(L, h, V, s)
    w, g, o, _ = model_state_bytes(psi, d=d, t=t, p=p, zero=zero)
    act = pipeline_first_stage_activation_bytes(
        s,
        layout.b,
        h,
        a,
        L,
        p,
        m=layout.m,
        t=t,
        sp=layout.sp,
        recompute=layout.recompute,
        schedule="1f1b",
    )
    return MemoryBreakdown(w, g, o, act, w + g + o + act, psi)


SLOT_TERMS = SLOT
"""The terms inside one pipeline slot (seconds per micro-batch on the slowest stage)."""


@dataclass(frozen=True)
class StepBreakdown:
    """The 3D planner's named terms of one layout (:func:`minipar.cost.planner.three_d_terms.breakdown`).

    ``values`` holds every term of :data:`minipar.cost.planner.term_table.TERMS` by name: seconds per
    micro-batch on the slowest stage for the terms of one pipeline slot (:data:`SLOT_TERMS`),
    seconds per step for those after the last micro-batch, bytes on the fullest stage for
    memory; a term is also read as an attribute (``br.tp``). The step is
    m·slot·(1 + r) + the step terms, r the bubble relative to the ideal time (Narayanan et al.
    2021 §2.2); memory is the sum of the memory terms."""

    microbatches: int
    bubble_relative: float
    bubble_fraction: float
    memory_limit: float
    values: dict
    margin_limit: float = float("inf")  # above it (and within memory_limit): "tight"
    dp: float = 0.0  # the whole DP reduction (exposed or not), per step
    tp_link: str = "-"
    pp_link: str = "-"
    dp_link: str = "-"

    def __getattr__(self, name: str):
        values = self.__dict__.get("values")
        if values is not None and name in values:
            return values[name]
        raise AttributeError(name)

    @property
    def slot(self) -> float:
        """Seconds of one micro-batch on the slowest stage, every slot term added."""
        return sum(self.values[k] for k in SLOT)

    def per_step(self, term: str) -> float:
        """A term over the whole step: a slot term m times, stretched by the bubble (compute
        alone is not: its bubble is :attr:`bubble_seconds`); a step term as it is."""
        if term in STEP:
            return self.values[term]
        m, r = self.microbatches, self.bubble_relative
        x = self.values[term]
        return m * x if term == "compute" else m * (1 + r) * x

    def group_seconds(self) -> dict[str, float]:
        """Seconds per step of each part of :data:`~minipar.cost.planner.term_table.TIME_GROUPS`
        (the term table's ``group`` column): every time term's :meth:`per_step` in its group,
        and the compute's share of the bubble (m·compute·r) as :data:`BUBBLE`. They sum to
        :attr:`step_seconds`: the other slot terms' per-step seconds carry their own bubble."""
        out = dict.fromkeys(TIME_GROUPS, 0.0)
        for t in TERMS:
            if t.where != "memory":
                out[t.group] += self.per_step(t.name)
        out[BUBBLE] = self.microbatches * self.values["compute"] * self.bubble_relative
        return out

    @property
    def bubble_seconds(self) -> float:
        return self.microbatches * self.slot * self.bubble_relative

    @property
    def step_seconds(self) -> float:
        pipe = self.microbatches * self.slot * (1 + self.bubble_relative)
        return pipe + sum(self.values[k] for k in STEP)

    @property
    def bytes_per_gpu(self) -> float:
        return sum(self.values[k] for k in MEMORY)

    @property
    def fits(self) -> bool:
        return self.bytes_per_gpu <= self.memory_limit

    @property
    def tight(self) -> bool:
        """Fits, but inside the allocator margin: the caching allocator may not leave room."""
        return self.fits and self.bytes_per_gpu > self.margin_limit

    def as_dict(self) -> dict:
        """Flat: the scalars, then every term by name (what the JavaScript ``planTerms``
        returns)."""
        head = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "values"}
        links = {k: head.pop(k) for k in ("tp_link", "pp_link", "dp_link")}
        return head | dict(self.values) | links
