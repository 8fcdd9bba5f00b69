"""The ring all-reduce on 4 ranks, step by step: which chunk every rank sends, and which ranks'
values each chunk holds after every step (reduce-scatter, then all-gather).

Data: per step, the chunk each rank sends right and the chunk it receives from the left, from
:func:`minipar.collectives.ring.reduce_scatter_step` and :func:`~minipar.collectives.ring.all_gather_step`,
the functions ``ring_reduce_scatter`` and ``ring_all_gather`` index their chunks with. Frames: the
sets of contributing ranks from :func:`~minipar.collectives.ring.ring_all_reduce_contributions`.
"""

from __future__ import annotations

from animations.kit import animation
from minipar.collectives import ring

N = 4  # ranks (and chunks)


@animation(
    draws=[
        "minipar.collectives.ring.reduce_scatter_step",
        "minipar.collectives.ring.all_gather_step",
        "minipar.collectives.ring.ring_all_reduce_contributions",
    ]
)
def ring_all_reduce():
    steps = []
    for phase, step in (
        ("reduce-scatter", ring.reduce_scatter_step),
        ("all-gather", ring.all_gather_step),
    ):
        for k in range(N - 1):
            moves = [step(r, N, k) for r in range(N)]
            steps.append(
                {
                    "phase": phase,
                    "k": k,
                    "send": [s for s, _ in moves],
                    "recv": [c for _, c in moves],
                }
            )
    data = {"kind": "ring", "title": f"Ring all-reduce on {N} ranks", "n": N, "steps": steps}
    frames = [
        {
            "phase": phase,
            "k": k,
            "held": [[sorted(chunk) for chunk in row] for row in held],
        }
        for phase, k, held in ring.ring_all_reduce_contributions(N)
    ]
    return data, frames
