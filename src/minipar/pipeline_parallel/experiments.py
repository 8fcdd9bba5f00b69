"""What the chapter's notebook runs: one launch for parity, traffic and memory of every
schedule, and the timed-stage bubble measurements.

``chapter_runs(p, m)`` trains the small GPT for 3 Adam steps in float64 with each schedule on p
gloo ranks, tracing the first step's p2p messages; ``bubble_runs`` calls the benchmark.
"""

from __future__ import annotations

from minipar.cost.chapters.pipeline_parallel import pp_p2p_bytes_per_microbatch
from minipar.runtime.launch import run

from .measure import StageTimes, measure_bubble
from .model_bubble import peak_in_flight
from .schedules import Action, schedule
from .timed import bubble_breakdown
from .train import TrainOptions, max_error, small_config, token_batches, train_rank, train_reference

SCHEDULES = (("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1))
STEPS, B_MICRO = 3, 2
TRACED = TrainOptions(trace_first_step=True)  # the first step's p2p messages


def _chapter_rank(rank, p, m):
    c = small_config(L=8)
    return {
        name: train_rank(rank, p, name, m, v, c, token_batches(STEPS, B_MICRO * m, c), TRACED)
        for name, v in SCHEDULES
    }


def chapter_runs(p: int = 4, m: int = 8) -> dict:
    """Per schedule: parity with one process, in-flight high-water and p2p bytes vs the model."""
    c = small_config(L=8)
    batches = token_batches(STEPS, B_MICRO * m, c)
    ref_losses, ref_grads, ref_params = train_reference(c, batches)
    # gloo/CPU: train.py keeps stages and micro-batches on the CPU and measures saved bytes there
    per_rank = run(_chapter_rank, p, m, backend="gloo", timeout=600)
    out = {}
    for name, v in SCHEDULES:
        ranks = [r[name] for r in per_rank]
        boundaries = v * p - 1
        out[name] = {
            "v": v,
            "grad_error": max_error(ranks, ref_grads, "grads"),
            "param_error": max_error(ranks, ref_params, "params"),
            "loss_error": max(abs(a - b) for a, b in zip(ranks[-1].losses, ref_losses)),
            "peak": [r.peak_in_flight for r in ranks],
            "peak_model": [peak_in_flight(name, r, p, m, v) for r in range(p)],
            "peak_bytes": [r.peak_saved_bytes for r in ranks],
            "messages": sum(r.sends[0] for r in ranks),
            "messages_model": 2 * boundaries * m,
            "bytes": sum(r.sends[1] for r in ranks),
            "bytes_model": boundaries * m * pp_p2p_bytes_per_microbatch(B_MICRO, c.s, c.h, 8),
            "timeline": [ev for r in ranks for ev in r.timeline],
        }
    return out


def bubble_runs(p: int = 4, m: int = 8, t: float = 0.05, steps: int = 2) -> dict:
    """``minipar bench pp`` for each schedule with t_F = t_B = t_W = ``t`` seconds (stages
    that sleep a fixed time: gloo on the CPU, since there is no GPU work to time); each result
    also holds ``breakdown``, :func:`.timed.bubble_breakdown` of its timeline."""
    out = {}
    for name, v in SCHEDULES:
        r = measure_bubble(name, p, m, v, StageTimes(t, t, t), steps)
        r["breakdown"] = bubble_breakdown(
            parse_timeline(r["timeline"]), schedule(name, p, m, v), t, t, t
        )
        out[name] = r
    return out


def parse_timeline(rows) -> list:
    """The benchmark's JSON timeline ``[rank, "F0.3", start, end]`` back to Action tuples."""
    out = []
    for r, a, s, e in rows:
        stage, mb = a[1:].split(".")
        out.append((r, Action(a[0], int(stage), int(mb)), s, e))
    return out
