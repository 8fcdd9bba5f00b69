"""A ring-attention pass step by step (causal, contiguous shards, cp = 4 ranks of 2 tokens): which
K/V block each rank holds and computes at each step, and, for the last query of each rank, the
online-softmax state (running max m, running sum ℓ of e^{z − m}, lse = m + log ℓ, output o)
after merging that step's block.

Data: per step and rank, the block held and the chunk pairs computed, from
:func:`minipar.context_parallel.ring.ring_steps` (the forward loop's own :func:`block_source` and
:func:`plan`), and each computed block's statistics for the tracked query from
:func:`minipar.context_parallel.online_softmax.block_attention` (its o and lse; m is the block's
largest visible score, ℓ = e^{lse − m}). Frames: the running state from
:func:`~minipar.context_parallel.online_softmax.merge_blocks`, checked against
:func:`~minipar.context_parallel.online_softmax.full_attention` at the end. Float64.
"""

from __future__ import annotations

import math

from animations.kit import animation
from minipar.context_parallel.online_softmax import block_attention, full_attention, merge_blocks
from minipar.context_parallel.ring import ring_steps

CP, TOKENS, D = 4, 2, 2  # ranks, tokens per rank, head dimension


def _inputs():
    import torch  # noqa: PLC0415 (lazy: torch)

    g = torch.Generator().manual_seed(0)
    s = CP * TOKENS
    q, k, v = (torch.randn(1, 1, s, D, generator=g, dtype=torch.float64) * 1.5 for _ in range(3))
    return q, k, v  # (b, a, s, d) each


@animation(
    draws=[
        "minipar.context_parallel.ring.ring_steps",
        "minipar.context_parallel.online_softmax.block_attention",
        "minipar.context_parallel.online_softmax.merge_blocks",
    ]
)
def ring_attention():
    import torch  # noqa: PLC0415 (lazy: torch)

    q, k, v = _inputs()
    chunk = lambda x, c: x[:, :, c * TOKENS : (c + 1) * TOKENS]  # (b, a, TOKENS, d)
    plan = ring_steps(CP, "contiguous", causal=True)
    steps, frames = [], []
    state = [None] * CP  # per rank: (o, lse, m) of its tracked (last) query
    for i, row in enumerate(plan):
        out, frame = [], {"step": i, "src": [], "mask": [], "m": [], "l": [], "lse": [], "o": []}
        for r, cell in enumerate(row):
            blk = None
            for qc, kc, mask in cell["pairs"]:  # contiguous: at most one pair
                o, lse = block_attention(chunk(q, qc), chunk(k, kc), chunk(v, kc), mask)
                o, lse = o[..., -1:, :], lse[..., -1:]  # the tracked query: the chunk's last
                z = chunk(q, qc)[0, 0, -1] @ chunk(k, kc)[0, 0].T / math.sqrt(D)  # (TOKENS,)
                m = float(z.max())  # the last query sees every key of its own chunk too
                blk = {
                    "q": qc,
                    "k": kc,
                    "mask": mask,
                    "m": m,
                    "l": math.exp(float(lse) - m),
                    "o": [float(x) for x in o[0, 0, 0]],
                }
                if state[r] is None:
                    state[r] = (o, lse, m)
                else:
                    o0, lse0, m0 = state[r]
                    o1, lse1 = merge_blocks(o0, lse0, o, lse)
                    state[r] = (o1, lse1, max(m0, m))
            out.append({"src": cell["src"], "block": blk})
            frame["src"].append(cell["src"])
            frame["mask"].append(blk["mask"] if blk else None)
            if state[r] is None:
                for key in ("m", "l", "lse", "o"):
                    frame[key].append(None)
            else:
                o_run, lse_run, m_run = state[r]
                frame["m"].append(m_run)
                frame["l"].append(math.exp(float(lse_run) - m_run))
                frame["lse"].append(float(lse_run))
                frame["o"].append([float(x) for x in o_run[0, 0, 0]])
        steps.append(out)
        frames.append(frame)
    ref = full_attention(q, k, v, causal=True)  # (1, 1, s, d): the single-process answer
    for r in range(CP):
        want = ref[0, 0, (r + 1) * TOKENS - 1]
        assert torch.allclose(state[r][0][0, 0, 0], want, atol=1e-12), r
    data = {
        "kind": "ring_attention",
        "title": f"Ring attention, causal, cp = {CP}",
        "cp": CP,
        "tokens": TOKENS,
        "steps": steps,
    }
    return data, frames
