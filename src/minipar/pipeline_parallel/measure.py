"""A schedule's bubble measured on ranks: the library half of ``minipar bench pp``.

:func:`measure_bubble` runs ``schedule`` on ``p`` gloo ranks with stages that wait a fixed time
per action (:mod:`.timed`) and returns the measured bubble next to the closed form and the
simulator's bubble when every message takes the measured hop latency. The chapter's notebook
(:func:`.experiments.bubble_runs`) and the command line (:mod:`minipar.bench.pipeline_parallel`)
both call it; the library never imports the command-line layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model_bubble import bubble_fraction
from .schedules import schedule as make
from .simulate import simulate


@dataclass(frozen=True)
class StageTimes:
    """Seconds one stage (all v chunks of a rank together) spends on a micro-batch's forward
    t_F, input-gradient backward t_B and weight-gradient backward t_W."""

    t_f: float = 0.05
    t_b: float = 0.05
    t_w: float = 0.05


def measure_bubble(
    schedule: str,
    p: int,
    m: int,
    v: int = 1,
    times: StageTimes = StageTimes(),
    steps: int = 3,
    layers: str = "timed",
    backend: str = "gloo",
) -> dict:
    """One JSON-ready dict: measured and model bubble, step time, hop latency, timeline.
    ``times``: the timed stages' t_F, t_B, t_W (``layers="gpt"``: real GPT layers instead).
    ``backend``: gloo (the chapter's default: stages only wait, nothing needs a GPU) or NCCL."""
    from minipar.runtime.launch import run  # noqa: PLC0415 (lazy: launcher)

    from .timed import bench_rank, hop_latency, measured_bubble  # noqa: PLC0415 (lazy: torch)

    make(schedule, p, m, v)  # validates the arguments before any rank starts
    per_rank = run(
        bench_rank, p, schedule, m, v, times, steps, layers, backend=backend, timeout=600
    )
    measured, timeline = measured_bubble(per_rank)
    span = max(e for *_, e in timeline)
    hop = hop_latency(timeline, p)
    t_f, t_b, t_w = times.t_f, times.t_b, times.t_w
    sim = simulate(make(schedule, p, m, v), m, t_f, t_b, t_w, comm=hop)
    return {
        "schedule": schedule,
        "backend": backend,
        "p": p,
        "m": m,
        "v": v,
        "layers": layers,
        "steps": steps,
        **({"t_forward": t_f, "t_backward": t_b, "t_weight": t_w} if layers == "timed" else {}),
        "measured_bubble": measured,
        "model_bubble": bubble_fraction(schedule, p, m, v, t_f, t_b, t_w),
        "step_seconds": span,
        "hop_latency": hop,
        "model_bubble_with_latency": sim.bubble,
        "timeline": [[r, str(a), s, e] for r, a, s, e in timeline],
    }
