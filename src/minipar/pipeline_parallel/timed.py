"""Stages whose compute takes a fixed, calibrated time, to measure a schedule's bubble.

On a shared 2-core machine, p ranks doing real matmuls slow each other down and the measured
idle time says more about the machine than about the schedule. A :class:`TimedStage` instead
*waits* a fixed time in its forward (t_F), its input-gradient backward (t_B) and its
weight-gradient backward (t_W), so the ranks do not compete for cores, and whatever the step
takes beyond the work is the schedule's bubble (plus send/receive overhead, which the
measurement includes). :func:`precise_wait` sleeps, then spins the last half millisecond
(the kernel's sleep overshoots by ~0.1 ms).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from minipar.runtime.device import get_device

from .executor import LastStageLoss, PipelineExecutor
from .schedules import num_stages, schedule
from .simulate import _deps, op_durations, play
from .stage import build_stages
from .train import small_config, token_batches

SPIN = 0.0


def precise_wait(seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    if seconds > SPIN:
        time.sleep(seconds - SPIN)
    while time.perf_counter() < deadline:
        pass


class _Timed(torch.autograd.Function):
    """Identity on x; waits t_F forward and t_B backward (the input gradient)."""

    @staticmethod
    def forward(ctx, x, t_f, t_b):
        ctx.t_b = t_b
        precise_wait(t_f)
        return x.clone()  # (b, s, h)

    @staticmethod
    def backward(ctx, g):
        precise_wait(ctx.t_b)
        return g, None, None


class _WeightWork(torch.autograd.Function):
    """A zero scalar that depends on w; its backward (the weight gradient) waits t_W."""

    @staticmethod
    def forward(ctx, w, t_w):
        ctx.t_w = t_w
        return w.new_zeros(())

    @staticmethod
    def backward(ctx, g):
        precise_wait(ctx.t_w)
        return g.new_zeros(1), None  # on w's device, like g


class TimedStage(nn.Module):
    """forward(x) = x after t_F; backward: t_B for the input gradient, t_W for the weights'.
    A full backward (torch.autograd.backward) takes t_B + t_W; ``torch.autograd.grad`` with
    only the input (B) or only the weight (W) runs only that part."""

    def __init__(self, t_f: float, t_b: float, t_w: float):
        super().__init__()
        self.t_f, self.t_b, self.t_w = t_f, t_b, t_w
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return _Timed.apply(x, self.t_f, self.t_b) + _WeightWork.apply(self.w, self.t_w)


def _zero_loss(y, _targets):
    return (y * 0).sum()


BENCH_SHAPE = (1, 16, 64)  # (b, s, h) of every message


def bench_rank(
    rank: int, p: int, name: str, m: int, v: int, times, steps: int, layers: str = "timed"
):
    """On each rank: run the schedule ``steps`` + 1 times (the first is a warm-up) with timed
    stages (``layers="timed"``, waiting ``times``, a :class:`.measure.StageTimes`) or real GPT
    layers (``"gpt"``: 2 layers per stage, h = 64); returns per step (busy seconds, end second
    from the common start, timeline)."""
    shape = BENCH_SHAPE
    t_f, t_b, t_w = times.t_f, times.t_b, times.t_w
    b, dev = shape[0], get_device()
    if layers == "timed":
        stages = {s: TimedStage(t_f / v, t_b / v, t_w / v).to(dev) for s in range(rank, v * p, p)}
        ex = PipelineExecutor(stages, v * p, rank, p, m, loss=LastStageLoss(_zero_loss))
        inputs, targets = [torch.zeros(shape, device=dev) for _ in range(m)], [None] * m
        dtype = torch.float32
    elif layers == "gpt":
        c = small_config(L=2 * v * p)
        c.h, c.a, c.s, c.V = shape[2], 4, shape[1], 256
        stages = {
            s: st.to(dev) for s, st in build_stages(c, rank, p, v, dtype=torch.float32).items()
        }
        ex = PipelineExecutor(stages, v * p, rank, p, m)
        x, y = (t.to(dev) for t in token_batches(1, b * m, c)[0])
        inputs, targets, dtype = list(x.chunk(m)), list(y.chunk(m)), torch.float32
    else:
        raise ValueError(f"layers ({layers!r}) must be 'timed' or 'gpt'")
    acts = schedule(name, p, m, v)[rank]
    out = []
    for _ in range(steps + 1):
        dist.barrier()
        t0 = torch.tensor([time.perf_counter()], dtype=torch.float64, device=dev)
        dist.all_reduce(t0, op=dist.ReduceOp.MAX)  # one start for all ranks (same clock)
        rec = ex.run(acts, inputs, targets, shape, dtype, t0=t0.item())
        for st in stages.values():
            st.zero_grad()
        busy = sum(e - s for _, _, s, e in rec.timeline)
        out.append((busy, max(e for *_, e in rec.timeline), rec.timeline))
    return out[1:]


def measured_bubble(per_rank: list) -> tuple[float, list]:
    """(median over steps of the mean over ranks of the idle fraction, that step's timeline)."""
    steps = len(per_rank[0])
    bubbles, timelines = [], []
    for k in range(steps):
        span = max(r[k][1] for r in per_rank)
        bubbles.append(sum(1 - r[k][0] / span for r in per_rank) / len(per_rank))
        timelines.append([ev for r in per_rank for ev in r[k][2]])
    med = statistics.median(bubbles)
    return med, timelines[bubbles.index(min(bubbles, key=lambda b: abs(b - med)))]


def hop_latency(timeline, p: int) -> float:
    """Median delay between a message's sender finishing and its waiting receiver starting:
    for F(s, i) after F(s−1, i) and B(s, i) after B(s+1, i) on another rank, when the receiver
    was idle (its previous action had ended before the sender's). A sender stamps its end
    after posting the message, so a receiver can start a few µs before that stamp; such a
    gap counts as no delay, never a negative one."""
    end = {a: e for _, a, _, e in timeline}
    prev_end, by_rank = {}, {}
    for r, a, _s, e in sorted(timeline, key=lambda ev: ev[2]):
        prev_end[a] = by_rank.get(r, 0.0)
        by_rank[r] = e
    n_st = 1 + max(a.stage for _, a, _, _ in timeline)
    gaps = []
    for r, a, s, _ in timeline:
        src = next((d for d in _deps(a, n_st) if d.stage != a.stage), None)  # its message
        if src is None or src.stage % p == r or src not in end:
            continue
        if prev_end[a] <= end[src]:
            gaps.append(max(0.0, s - end[src]))
    return statistics.median(gaps) if gaps else 0.0


def _replay(actions, dur, wait) -> float:
    """Bubble of ``actions`` when action a takes ``dur[a]`` and, if it receives a message,
    starts ``wait`` after both its rank is free and the message's sender has finished."""
    p = len(actions)
    free, busy = [0.0] * p, [0.0] * p  # per rank: its last action's end, its busy seconds
    for r, a, _, end in play(actions, dur.__getitem__, wait=wait):
        free[r] = end
        busy[r] += dur[a]
    span = max(free)
    return sum(1 - b / span for b in busy) / p


def bubble_breakdown(timeline, actions, t_f: float, t_b: float, t_w: float) -> dict:
    """Where a measured bubble's excess over the model comes from, replayed step by step
    through the simulator on the run's own ``timeline`` (rank, action, start, end):

      model        nominal durations (t_F, t_B [+ t_W], t_W; /v per chunk), free messages
      durations    each action's measured duration, free messages
      messages     + each receiving action starting the run's median receive wait after its
                   rank was free and its sender done (the handshake of a rendezvous send)
      measured     the timeline itself; the rest is ranks that were ready and started late

    Also the mean overrun of the actions over their nominal time, and that median wait."""
    p, n_st = len(actions), num_stages(actions)
    nominal = op_durations(actions, t_f, t_b, t_w)
    start = {a: s for _, a, s, _ in timeline}
    end = {a: e for _, a, _, e in timeline}
    owner = {a: r for r, a, _, _ in timeline}
    dur = {a: end[a] - start[a] for a in start}
    last, waits = {}, []
    for r, a, s, e in sorted(timeline, key=lambda ev: ev[2]):
        deps = _deps(a, n_st)
        if any(owner[d] != r for d in deps):
            waits.append(s - max([last.get(r, 0.0)] + [end[d] for d in deps]))
        last[r] = e
    wait = statistics.median(waits) if waits else 0.0
    span = max(end.values())
    busy = [sum(e - s for rr, _, s, e in timeline if rr == r) for r in range(p)]
    nom = {a: nominal[a.op] for a in dur}
    return {
        "model": _replay(actions, nom, 0.0),
        "durations": _replay(actions, dur, 0.0),
        "messages": _replay(actions, dur, wait),
        "measured": sum(1 - b / span for b in busy) / p,
        "overrun": sum(dur.values()) / sum(nom.values()) - 1,
        "receive_wait": wait,
    }
