"""A ring-attention pass step by step (causal, cp = 4 ranks of 2 tokens), on the zigzag layout
(each rank holds global chunks r and 2·cp − 1 − r) and, switchable, the contiguous one (rank r
holds chunk r): which K/V block each rank holds at each step, which chunk pairs it computes
against it, and, for the rank's last query, the online-softmax state (running max m, running
sum ℓ of e^{z − m}, lse = m + log ℓ, output o) after merging that step's blocks.

Data: per layout, step and rank, the block held and the chunk pairs computed, from
:func:`minipar.context_parallel.ring.ring_steps` (the forward loop's own :func:`block_source` and
:func:`plan`), and the statistics of each computed pair that holds the tracked query, from
:func:`minipar.context_parallel.online_softmax.block_attention` (its o and lse; m is the pair's
largest visible score, ℓ = e^{lse − m}). Frames: the running state from
:func:`~minipar.context_parallel.online_softmax.merge_blocks`, checked against
:func:`~minipar.context_parallel.online_softmax.full_attention` at the end. Float64.
"""

from __future__ import annotations

import math

from animations.kit import animation
from minipar.context_parallel.online_softmax import block_attention, full_attention, merge_blocks
from minipar.context_parallel.ring import ring_steps
from minipar.context_parallel.sharding import chunk_ids, chunks_per_rank

CP, TOKENS, D = 4, 2, 2  # ranks, tokens per rank, head dimension
LAYOUTS = (("zigzag", "zigzag layout (balanced)"), ("contiguous", "contiguous layout"))


def _inputs():
    import torch  # noqa: PLC0415 (lazy: torch)

    g = torch.Generator().manual_seed(0)
    s = CP * TOKENS
    q, k, v = (torch.randn(1, 1, s, D, generator=g, dtype=torch.float64) * 1.5 for _ in range(3))
    return q, k, v  # (b, a, s, d) each


def _layout(layout: str, q, k, v):
    """(variant data, frames) of one layout; asserts the last step equals full attention."""
    size = TOKENS // chunks_per_rank(layout)  # tokens per global chunk
    chunk = lambda x, c: x[:, :, c * size : (c + 1) * size]  # (b, a, size, d)
    tracked = [
        chunk_ids(r, CP, layout)[-1] for r in range(CP)
    ]  # the chunk of the rank's last query
    steps, frames = [], []
    state = [None] * CP  # per rank: (o, lse, m) of its tracked query
    for i, row in enumerate(ring_steps(CP, layout, causal=True)):
        out, frame = [], {"step": i, "src": [], "pairs": [], "m": [], "l": [], "lse": [], "o": []}
        for r, cell in enumerate(row):
            blocks = []
            for qc, kc, mask in cell["pairs"]:
                if qc != tracked[r]:
                    continue  # the rank's other query chunk: computed, not tracked
                o, lse = block_attention(chunk(q, qc), chunk(k, kc), chunk(v, kc), mask)
                o, lse = o[..., -1:, :], lse[..., -1:]  # the tracked query: the chunk's last
                z = chunk(q, qc)[0, 0, -1] @ chunk(k, kc)[0, 0].T / math.sqrt(D)  # (size,)
                m = float(z.max())  # the last query sees every key of its own chunk too
                blocks.append(
                    {"q": qc, "k": kc, "mask": mask, "m": m, "l": math.exp(float(lse) - m)}
                    | {"o": [float(x) for x in o[0, 0, 0]]}
                )
                if state[r] is None:
                    state[r] = (o, lse, m)
                else:
                    o0, lse0, m0 = state[r]
                    o1, lse1 = merge_blocks(o0, lse0, o, lse)
                    state[r] = (o1, lse1, max(m0, m))
            pairs = [[qc, kc, mask] for qc, kc, mask in cell["pairs"]]
            out.append({"src": cell["src"], "pairs": pairs, "blocks": blocks})
            frame["src"].append(cell["src"])
            frame["pairs"].append(pairs)
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
        want = ref[0, 0, (tracked[r] + 1) * size - 1]
        assert float((state[r][0][0, 0, 0] - want).abs().max()) < 1e-12, (layout, r)
    holds = [chunk_ids(r, CP, layout) for r in range(CP)]
    return {"name": layout, "chunks": holds, "tracked": tracked, "steps": steps}, frames


@animation(
    draws=[
        "minipar.context_parallel.ring.ring_steps",
        "minipar.context_parallel.online_softmax.block_attention",
        "minipar.context_parallel.online_softmax.merge_blocks",
    ]
)
def ring_attention():
    q, k, v = _inputs()
    variants, frames = [], {}
    for layout, label in LAYOUTS:
        variant, frames[layout] = _layout(layout, q, k, v)
        variants.append({**variant, "label": label})
    data = {
        "kind": "ring_attention",
        "title": f"Ring attention, causal, cp = {CP}",
        "cp": CP,
        "tokens": TOKENS,
        "variants": variants,
    }
    return data, frames
