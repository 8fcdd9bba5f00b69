"""Pipeline schedules as data: for each of the p ranks, the ordered list of its actions.

An action is ``(op, stage, microbatch)``: op "F" (forward), "B" (backward; the whole backward,
or only the input gradient when the schedule also has "W"), "W" (weight gradient, zero-bubble
schedules only). ``stage`` is the global stage index 0..v·p−1; rank r owns stages r, r+p, ...,
r+(v−1)p (Megatron's interleaved placement; v = 1 is one stage per rank). ``microbatch`` is
0..m−1. A schedule is correct when every rank can run its list in order (checked by
:func:`minipar.pipeline_parallel.simulate.simulate`) and every (F, B[, W]) appears exactly once.

    gpipe        all forwards, then all backwards (Huang et al. 2019, GPipe)
    1f1b         p−r−1 warm-up forwards, then one forward / one backward, then the cool-down
                 backwards (Narayanan et al. 2019, PipeDream-Flush; Narayanan et al. 2021 §2.2.1)
    interleaved  1F1B over v model chunks per rank in Megatron-LM's order (Narayanan et al. 2021
                 §2.2.2); needs v >= 2 and m a multiple of p
    zb-h1        1F1B with the backward split into B (input gradient) and W (weight gradient);
                 the W's the cool-down leaves idle are deferred into it (Qi et al. 2024, ZB-H1)
"""

from __future__ import annotations

from typing import NamedTuple

NAMES = ("gpipe", "1f1b", "interleaved", "zb-h1")


class Action(NamedTuple):
    op: str  # "F", "B" or "W"
    stage: int  # global stage 0 .. v·p − 1
    microbatch: int  # 0 .. m − 1

    def __str__(self) -> str:
        return f"{self.op}{self.stage}.{self.microbatch}"


def _check(name: str, p: int, m: int, v: int) -> None:
    if name not in NAMES:
        raise ValueError(f"schedule ({name!r}) must be one of {', '.join(NAMES)}")
    for k, x in (("p", p), ("m", m), ("v", v)):
        if not isinstance(x, int) or isinstance(x, bool) or x < 1:
            raise ValueError(f"{k} ({x!r}) must be an integer >= 1")
    if name == "interleaved":
        if v < 2:
            raise ValueError(f"interleaved schedule needs chunks v ({v}) >= 2")
        if m % p:
            raise ValueError(
                f"interleaved schedule needs microbatches m ({m}) to be a multiple of p ({p})"
            )
    elif v != 1:
        raise ValueError(f"chunks v ({v}) apply only to the interleaved schedule, not {name}")


def gpipe_schedule(rank: int, p: int, m: int) -> list[Action]:
    """All m forwards of the rank's stage, then all m backwards (GPipe; AFAB in picotron)."""
    return [Action("F", rank, i) for i in range(m)] + [Action("B", rank, i) for i in range(m)]


def one_f_one_b_schedule(rank: int, p: int, m: int) -> list[Action]:
    """Warm-up of min(p−r−1, m) forwards, steady one-forward-one-backward, cool-down backwards.

    Rank r then holds at most min(p−r, m) micro-batches' activations (PipeDream-Flush).
    """
    warmup = min(p - rank - 1, m)
    acts = [Action("F", rank, i) for i in range(warmup)]
    for i in range(m - warmup):  # steady state
        acts += [Action("F", rank, warmup + i), Action("B", rank, i)]
    acts += [Action("B", rank, i) for i in range(m - warmup, m)]  # cool-down
    return acts


def _interleaved_unit(k: int, p: int, v: int, forward: bool) -> tuple[int, int]:
    """Megatron-LM's k-th (chunk, microbatch) of a rank: groups of p micro-batches per chunk."""
    chunk = (k // p) % v
    if not forward:
        chunk = v - 1 - chunk
    return chunk, (k // (p * v)) * p + k % p


def interleaved_schedule(rank: int, p: int, m: int, v: int) -> list[Action]:
    """Megatron-LM's interleaved 1F1B (``forward_backward_pipelining_with_interleaving``).

    The rank walks m·v (chunk, micro-batch) units in groups of p micro-batches per chunk;
    warm-up 2(p−r−1) + (v−1)p units (capped at m·v), then 1F1B over units, then cool-down.
    """
    total = m * v
    warmup = min(2 * (p - rank - 1) + (v - 1) * p, total)

    def f(k):
        c, i = _interleaved_unit(k, p, v, True)
        return Action("F", rank + c * p, i)

    def b(k):
        c, i = _interleaved_unit(k, p, v, False)
        return Action("B", rank + c * p, i)

    acts = [f(k) for k in range(warmup)]
    for k in range(total - warmup):
        acts += [f(warmup + k), b(k)]
    acts += [b(k) for k in range(total - warmup, total)]
    return acts


def zb_h1_schedule(rank: int, p: int, m: int) -> list[Action]:
    """ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism" §3): 1F1B's order of F and B (B
    only the input gradient), rank r keeping up to r weight gradients W pending (the oldest runs
    after a B once more than r wait; the rest close the list). The last rank defers most, so
    the B's the others wait for come sooner, and deferred W's fill 1F1B's idle cool-down: every
    rank holds at most min(p, m) micro-batches, and the bubble falls from 1F1B's
    (p−1)(t_F+t_B+t_W) to (p−1)(t_F+t_B−t_W)."""
    warmup = min(p - rank - 1, m)
    acts = [Action("F", rank, i) for i in range(warmup)]
    next_w = 0

    def backward(i):
        nonlocal next_w
        acts.append(Action("B", rank, i))
        if i + 1 - next_w > rank:  # more than r W's pending: run the oldest now
            acts.append(Action("W", rank, next_w))
            next_w += 1

    for i in range(m - warmup):  # steady: F, B (and maybe W)
        acts.append(Action("F", rank, warmup + i))
        backward(i)
    for i in range(m - warmup, m):  # cool-down
        backward(i)
    acts += [Action("W", rank, j) for j in range(next_w, m)]
    return acts


def schedule(name: str, p: int, m: int, v: int = 1) -> list[list[Action]]:
    """Per rank, the ordered actions of schedule ``name`` for p ranks, m micro-batches and v
    chunks per rank (v only for "interleaved"). ``schedule("1f1b", 2, 3)[1]`` is the last rank's
    list: [F1.0, B1.0, F1.1, B1.1, F1.2, B1.2]."""
    _check(name, p, m, v)
    if name == "gpipe":
        return [gpipe_schedule(r, p, m) for r in range(p)]
    if name == "1f1b":
        return [one_f_one_b_schedule(r, p, m) for r in range(p)]
    if name == "interleaved":
        return [interleaved_schedule(r, p, m, v) for r in range(p)]
    return [zb_h1_schedule(r, p, m) for r in range(p)]


def splits_backward(actions: list[list[Action]]) -> bool:
    """True when the schedule has W actions (B is then the input gradient only)."""
    return any(a.op == "W" for acts in actions for a in acts)


def num_stages(actions: list[list[Action]]) -> int:
    return 1 + max(a.stage for acts in actions for a in acts)


def table(actions: list[list[Action]]) -> str:
    """The schedule as text, one row per rank: ``rank 0 | F0.0 F0.1 B0.0 ...``."""
    return "\n".join(
        f"rank {r} | " + " ".join(str(a) for a in acts) for r, acts in enumerate(actions)
    )
