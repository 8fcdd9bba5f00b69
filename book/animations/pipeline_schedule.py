"""A pipeline schedule step by step: which (op, stage, micro-batch) each rank runs at each moment,
and how many micro-batches' activations it holds, for 1F1B and interleaved 1F1B (v = 2) on
p = 4 ranks with m = 8 micro-batches (t_F = t_B = t_W = 1, an unsplit backward takes 2).

Data: each schedule's timeline from :func:`minipar.pipeline_parallel.simulate.simulate` of
:func:`minipar.pipeline_parallel.schedules.schedule`'s lists. Frames: at every time an action
starts or ends, each rank's running action and its count of held activations, from the same
timeline (Python's reading of it; the player's is checked against it).
"""

from __future__ import annotations

from animations.kit import animation
from minipar.pipeline_parallel.schedules import schedule
from minipar.pipeline_parallel.simulate import simulate

P, M = 4, 8
RUNS = (("1f1b", 1, "1F1B"), ("interleaved", 2, "interleaved, v = 2"))


def timeline_frames(timeline, p: int) -> list[dict]:
    """At each event time t (sorted): per rank the label of the action running in [t, t'), or
    None; per rank the micro-batch activations held at t (a forward's count from its start, a
    backward's release at its end, in chunks for interleaved)."""
    times = sorted({t for *_, t0, t1 in timeline for t in (t0, t1)})
    frames = []
    for t in times:
        busy, held = [None] * p, [0] * p
        for r, a, t0, t1 in timeline:
            if t0 <= t < t1:
                busy[r] = f"{a.op}{a.stage}.{a.microbatch}"
            if a.op == "F" and t0 <= t:
                held[r] += 1
            if a.op == "B" and t1 <= t:
                held[r] -= 1
        frames.append({"t": t, "busy": busy, "held": held})
    return frames


@animation(
    draws=[
        "minipar.pipeline_parallel.schedules.schedule",
        "minipar.pipeline_parallel.simulate.simulate",
    ]
)
def pipeline_schedule():
    variants, frames = [], {}
    for name, v, label in RUNS:
        sim = simulate(schedule(name, P, M, v), M, t_f=1.0, t_b=1.0, t_w=1.0)
        timeline = sorted(sim.timeline, key=lambda e: (e[2], e[0]))
        variants.append(
            {
                "name": name,
                "label": label,
                "v": v,
                "makespan": sim.makespan,
                "bubble": sim.bubble,
                "timeline": [[r, a.op, a.stage, a.microbatch, t0, t1] for r, a, t0, t1 in timeline],
            }
        )
        frames[name] = timeline_frames(timeline, P)
    data = {
        "kind": "pipeline",
        "title": f"Pipeline schedules, p = {P}, m = {M}",
        "p": P,
        "m": M,
        "variants": variants,
    }
    return data, frames
