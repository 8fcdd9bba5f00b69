"""The context-parallel notebook's runs: one launch per cp gathers every figure the chapter
quotes, from :mod:`.experiments` (ring and Ulysses, memory, balance, traffic, timeline) and
:mod:`.practice` (all-gather, GQA, documents, striped, bf16 numerics)."""

from __future__ import annotations

from minipar.runtime.launch import run

from .experiments import (
    METHODS,
    attention_parity_on_rank,
    balance_on_rank,
    controls_on_rank,
    gpt_training_on_rank,
    memory_on_rank,
    timeline_on_rank,
    traffic_on_rank,
)
from .practice import _practice_on_rank

BALANCE = dict(b=1, a=4, s=1152, d=32)  # float32, causal: the load-balance measurement
MEMORY_S = 48  # memory_on_rank's sequence length


def _chapter_on_rank(rank, cp):
    out = {}
    if cp in (1, 2, 4):
        out["memory"] = memory_on_rank(rank, cp, s=MEMORY_S)
    if cp > 1:  # at cp = 1 nothing is sent and nothing is unbalanced: memory only
        out["traffic"] = traffic_on_rank(rank, cp)
        out["balance"] = {
            lay: balance_on_rank(rank, cp, lay, **BALANCE) for lay in ("contiguous", "zigzag")
        }
        out["parity"] = attention_parity_on_rank(rank, cp)
        out["controls"] = controls_on_rank(rank, cp)
        out["gpt"] = max(gpt_training_on_rank(rank, cp, m, lay)["params"] for m, lay in METHODS)
    if cp == 2:
        out["timeline"] = timeline_on_rank(rank, cp)
    if cp in (2, 3, 4):  # all-gather, GQA, documents, striped, bf16 (practice.py)
        out["practice"] = _practice_on_rank(rank, cp)
    return out


def chapter_runs(cps=(1, 2, 3, 4)) -> dict[int, list[dict]]:
    """One launch per cp on gloo; each value is the list of per-rank results."""
    return {cp: run(_chapter_on_rank, cp, backend="gloo") for cp in cps}
