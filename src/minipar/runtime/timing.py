"""The timing loops the chapters and ``minipar bench`` share. Every interval waits for the
device at both ends (:func:`minipar.runtime.device.synchronize`: a GPU's kernels are queued, not
done); on several ranks a timed call starts right after a barrier, so the slowest rank decides
when the step is done, and a variant's figure is the median over rounds of the slowest rank
(:func:`slowest`). Nothing here asserts a speed: a benchmark reports ratios measured in one run.
"""

from __future__ import annotations

import statistics
import time

from minipar.runtime import device


def timed(fn, iters: int, warmup: int = 0, *, barrier: bool = True, inner: int = 1) -> list[float]:
    """Seconds of each of ``iters`` calls of ``fn`` after ``warmup`` untimed ones, each after a
    barrier of the default group unless ``barrier`` is False; a call is the mean over ``inner``
    back-to-back calls (one rank leaving the barrier late then costs 1/inner of a call)."""
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    out = []
    for i in range(warmup + iters):
        if barrier:
            dist.barrier()
        device.synchronize()  # earlier queued work is not this call's
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        device.synchronize()
        if i >= warmup:
            out.append((time.perf_counter() - t0) / inner)
    return out


def interleaved(
    fns: dict, rounds: int, *, inner: int = 1, barrier_after: bool = False
) -> dict[str, list[float]]:
    """``{name: [seconds per round]}``: every function of ``fns`` in turn each round (machine
    noise hits all alike) after a warm-up round, a round's time the mean over ``inner`` calls;
    ``barrier_after``: the ranks also meet after each call (for a function some ranks skip)."""
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    out = {name: [] for name in fns}
    for r in range(rounds + 1):  # round 0: warm-up
        for name, fn in fns.items():
            (t,) = timed(fn, 1, inner=inner)
            if barrier_after:
                dist.barrier()
            if r:
                out[name].append(t)
    return out


def slowest(per_rank: list, key=None) -> float:
    """The median over rounds of the slowest rank: ``per_rank[r][key][i]`` (``key`` None:
    ``per_rank[r][i]``) is rank r's seconds in round i."""
    rows = [r if key is None else r[key] for r in per_rank]
    return statistics.median(max(row[i] for row in rows) for i in range(len(rows[0])))


def one_rank_at_a_time(fn):
    """``fn()`` on each rank of the default group in turn while the others wait at a barrier,
    so ranks that share a machine's cores do not slow each other down; this rank's result."""
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    out = None
    for turn in range(dist.get_world_size()):
        dist.barrier()
        if turn == dist.get_rank():
            out = fn()
    dist.barrier()
    return out
