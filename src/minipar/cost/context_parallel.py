"""Context-parallel cost per transformer layer: traffic, α-β time, causal balance, activations.

Pure Python. Symbols as on the notation page: b micro-batch, s sequence, h hidden, a heads,
cp context-parallel ranks; h_kv is the width of K (and of V): h without grouped-query attention,
h·(KV heads)/a with it. Sizes are BYTES unless a name says elements.

* Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers for
  Near-Infinite Context", §3): a rank's K/V block is 2·b·(s/cp)·h_kv elements. Forward: cp−1
  blocks pass through each rank. Backward (:mod:`minipar.context_parallel.ring`): the K/V
  blocks again (cp−1) and a dK/dV accumulator of the same size cp times (the last hop takes it
  home).
* Ulysses (Jacobs et al. 2023, "DeepSpeed Ulysses", §3.1): all-to-alls of q, k, v and the
  output forward (4), their adjoints backward (4); each input buffer S = b·(s/cp)·h elements
  (for k and v: h_kv), of which a rank sends (cp−1)/cp·S.
* Time: the α-β model of :mod:`minipar.cost.collectives` (Thakur et al. 2005); one ring step
  sends and receives one block at once (full duplex): α + block/bandwidth.
* Causal work: attention FLOPs of one (query chunk, key chunk) pair are 4·n_q·n_k·h (QKᵀ and
  PV, Narayanan et al. 2021's 4bs²h term split by chunks); pairs planned as in
  :func:`minipar.context_parallel.ring.plan` (a diagonal pair is computed whole, then masked).
* Activations: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
  Models", Table 2): 34·sbh + 5·as²b bytes per layer with 16-bit activations; blockwise
  attention (flash / ring) keeps no s² term, and CP divides every token's share by cp.
"""
from __future__ import annotations

from .collectives import collective_time

LAYOUTS = ("contiguous", "zigzag")


def _check(**kw) -> None:
    for k, v in kw.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{k} ({v}) must be an integer >= 1")


def check_shape(s: int, cp: int, layout: str = "contiguous") -> None:
    """The rules a sequence shard must satisfy, as errors naming the rule and the values."""
    _check(s=s, cp=cp)
    if layout not in LAYOUTS:
        raise ValueError(f"layout ({layout!r}) must be one of {', '.join(LAYOUTS)}")
    n = cp if layout == "contiguous" else 2 * cp
    if s % n:
        rule = "cp" if layout == "contiguous" else "2·cp"
        raise ValueError(f"sequence length s ({s}) must be divisible by {rule} ({n})")


def _check_rates(flops: float | None = None, bandwidth: float | None = None,
                 alpha: float | None = None) -> None:
    if flops is not None and not flops > 0:
        raise ValueError(f"flops ({flops}) must be > 0 FLOP/s")
    if bandwidth is not None and not bandwidth > 0:
        raise ValueError(f"bandwidth ({bandwidth}) must be > 0 bytes/s")
    if alpha is not None and not alpha >= 0:
        raise ValueError(f"alpha ({alpha}) must be >= 0 s")


def kv_block_bytes(b: int, s: int, h_kv: int, cp: int, bytes_per_elem: float = 2) -> float:
    """Bytes of one rank's K and V shards together: 2·b·(s/cp)·h_kv·bytes."""
    _check(b=b, s=s, h_kv=h_kv, cp=cp)
    return 2 * b * (s / cp) * h_kv * bytes_per_elem


def ring_sent_bytes_per_layer(b: int, s: int, h_kv: int, cp: int,
                              bytes_per_elem: float = 2) -> dict[str, float]:
    """Bytes one rank sends per layer per micro-batch under ring attention:
    forward (cp−1)·KV, backward (cp−1)·KV + cp·dKV, KV = :func:`kv_block_bytes`; 0 for cp = 1."""
    kv = kv_block_bytes(b, s, h_kv, cp, bytes_per_elem)
    if cp == 1:
        return {"forward": 0.0, "backward": 0.0, "total": 0.0}
    fwd, bwd = (cp - 1) * kv, (cp - 1) * kv + cp * kv
    return {"forward": fwd, "backward": bwd, "total": fwd + bwd}


def ring_sends_per_layer(cp: int) -> dict[str, int]:
    """Messages one rank sends per layer: forward cp−1, backward (cp−1) + cp."""
    _check(cp=cp)
    return {"forward": cp - 1, "backward": 2 * cp - 1 if cp > 1 else 0}


def ulysses_all_to_alls_per_layer(b: int, s: int, h: int, cp: int, bytes_per_elem: float = 2,
                                  h_kv: int | None = None) -> list[tuple[str, float]]:
    """(tensor, all-to-all input size S in bytes) per layer forward; the backward repeats the
    list (each all-to-all's adjoint is one all-to-all of the same size). Empty for cp = 1."""
    h_kv = h if h_kv is None else h_kv
    _check(b=b, s=s, h=h, h_kv=h_kv, cp=cp)
    if cp == 1:
        return []
    q = b * (s / cp) * h * bytes_per_elem
    kv = b * (s / cp) * h_kv * bytes_per_elem
    return [("q", q), ("k", kv), ("v", kv), ("out", q)]


def ulysses_sent_bytes_per_layer(b: int, s: int, h: int, cp: int, bytes_per_elem: float = 2,
                                 h_kv: int | None = None) -> dict[str, float]:
    """Bytes one rank sends per layer: (cp−1)/cp of every all-to-all's input, forward and
    backward."""
    fwd = sum((cp - 1) / cp * S for _, S in ulysses_all_to_alls_per_layer(b, s, h, cp,
                                                                          bytes_per_elem, h_kv))
    return {"forward": fwd, "backward": fwd, "total": 2 * fwd}


def chunk_ids(rank: int, cp: int, layout: str) -> list[int]:
    """Global chunks rank ``rank`` holds: [r] (contiguous), [r, 2cp−1−r] (zigzag)."""
    return [rank] if layout == "contiguous" else [rank, 2 * cp - 1 - rank]


def pairs_per_rank(cp: int, layout: str = "contiguous", causal: bool = True) -> list[int]:
    """(query chunk, key chunk) pairs each rank computes over the whole ring.

    Contiguous causal: rank r computes r+1 pairs of (s/cp)²; zigzag: 2cp+1 pairs of (s/2cp)²
    on every rank (chunk r sees r+1 key chunks, chunk 2cp−1−r sees 2cp−r). Not causal: every
    pair (1 per step contiguous, 4 per step zigzag)."""
    check_shape(2 * cp, cp, layout)
    n = 1 if layout == "contiguous" else 2
    if not causal:
        return [cp * n * n] * cp
    return [sum(qc + 1 for qc in chunk_ids(r, cp, layout)) for r in range(cp)]


def attention_flops_per_rank(b: int, s: int, h: int, cp: int, layout: str = "contiguous",
                             causal: bool = True) -> list[float]:
    """Forward attention FLOPs (QKᵀ and PV) of each rank: pairs × 4·b·n²·h, n = chunk length."""
    check_shape(s, cp, layout)
    _check(b=b, h=h)
    n = s / (cp if layout == "contiguous" else 2 * cp)
    return [p * 4 * b * n * n * h for p in pairs_per_rank(cp, layout, causal)]


def imbalance(cp: int, layout: str = "contiguous", causal: bool = True) -> float:
    """Slowest rank's attention work over the mean: 2cp/(cp+1) contiguous causal, 1 zigzag."""
    w = pairs_per_rank(cp, layout, causal)
    return max(w) / (sum(w) / len(w))


def min_tokens_per_rank_for_overlap(flops: float, bandwidth: float, bytes_per_elem: float = 2,
                                    kv_fraction: float = 1.0) -> float:
    """Smallest s/cp for which one ring step's block compute hides its K/V transfer (α ignored).

    Block compute 4·b·(s/cp)²·h / F ≥ transfer 2·b·(s/cp)·h_kv·bytes / B  ⇔
    s/cp ≥ F·bytes·(h_kv/h) / (2·B); F in FLOP/s, B in bytes/s per direction,
    ``kv_fraction`` = h_kv/h (Liu et al. 2023 §3 state the same condition as block ≥ F/B)."""
    _check_rates(flops=flops, bandwidth=bandwidth)
    return flops * bytes_per_elem * kv_fraction / (2 * bandwidth)


def ring_attention_time(b: int, s: int, h: int, cp: int, *, flops: float, bandwidth: float,
                        alpha: float = 0.0, layout: str = "contiguous", causal: bool = True,
                        bytes_per_elem: float = 2, h_kv: int | None = None) -> dict[str, float]:
    """Forward seconds of ring attention on the slowest rank, α-β link, compute at ``flops``.

    Per step: compute of that step's pairs, transfer α + KV/B of the next block; the step takes
    the larger of the two (overlap), the last step has no transfer. Returns compute (the slowest
    rank's total), comm (its transfers) and time (with overlap)."""
    h_kv = h if h_kv is None else h_kv
    check_shape(s, cp, layout)
    _check_rates(flops, bandwidth, alpha)
    per_rank = attention_flops_per_rank(b, s, h, cp, layout, causal)
    slowest = max(range(cp), key=lambda r: per_rank[r])
    comp = per_rank[slowest] / flops
    step_comp = comp / cp  # the slowest rank's work, spread evenly over its cp steps
    step_comm = (alpha + kv_block_bytes(b, s, h_kv, cp, bytes_per_elem) / bandwidth) if cp > 1 else 0.0
    t = (cp - 1) * max(step_comp, step_comm) + step_comp
    return {"compute": comp, "comm": (cp - 1) * step_comm, "time": t}


def ulysses_time(b: int, s: int, h: int, cp: int, *, alpha: float, bandwidth: float,
                 bytes_per_elem: float = 2, h_kv: int | None = None) -> float:
    """Forward seconds of Ulysses' four all-to-alls (pairwise exchange, α-β), not overlapped."""
    return sum(collective_time("all-to-all", "pairwise-exchange", cp, S, alpha, bandwidth)
               for _, S in ulysses_all_to_alls_per_layer(b, s, h, cp, bytes_per_elem, h_kv))


def activation_bytes_per_rank(s: int, b: int, h: int, a: int, cp: int = 1, *,
                              blockwise: bool = True) -> float:
    """Activation bytes per layer per rank (Korthikanti Table 2, 16-bit): (34·sbh + 5·as²b)/cp,
    without the 5·as²b term of the materialised scores when attention is blockwise."""
    _check(s=s, b=b, h=h, a=a, cp=cp)
    total = 34 * s * b * h + (0 if blockwise else 5 * a * s * s * b)
    return total / cp
