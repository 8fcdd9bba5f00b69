"""Context-parallel cost per transformer layer: traffic, α-β time, causal balance, activations.

Pure Python. Symbols as on the notation page: b micro-batch, s sequence, h hidden, a heads,
cp context-parallel ranks; h_kv is the width of K (and of V): h without grouped-query attention,
h·(KV heads)/a with it. Sizes are BYTES unless a name says elements; e is bytes per element of
the activations, e_acc of the dK/dV accumulators.

* Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers for
  Near-Infinite Context", §3): a rank's K/V block is KV = 2·b·(s/cp)·h_kv·e bytes. Forward: cp−1
  blocks pass through each rank. Backward (:mod:`minipar.context_parallel.ring`): the K/V
  blocks again (cp−1) and a dK/dV accumulator cp times (the last hop takes it home), of
  2·b·(s/cp)·h_kv·e_acc bytes. Implementations differ: some ring-flash implementations
  (zhuzilin's ring-flash-attention) accumulate dK/dV in float32 (e_acc = 4 for bf16
  training), while Transformer Engine's ring (Megatron-Core) keeps K/V and dK/dV in the input
  dtype (bf16: e_acc = 2). ``accum_bytes_per_elem`` takes either; the default, max(e, 4), is
  the float32 one, an upper bound for Transformer Engine.
* All-gather CP (Llama 3, Dubey et al. 2024 §3.3.2; PyTorch ``context_parallel``'s default
  rotate method): forward one all-gather of the K/V blocks (S = cp·KV), backward the same
  all-gather again and one reduce-scatter of the dK/dV contributions (S = cp·KV_acc); each
  rank sends (cp−1)/cp·S of each (Thakur et al. 2005). The gather is exposed (attention waits
  for it); its compute is one kernel per layer, so the slowest rank's *total* work counts, not
  each step's slowest rank as in the ring.
* Ulysses (Jacobs et al. 2023, "DeepSpeed Ulysses", §3.1): one all-to-all of q, k, v packed
  together and one of the output forward (2), their adjoints backward (2); input sizes
  b·(s/cp)·(h + 2·h_kv′)·e and b·(s/cp)·h·e, h_kv′ = h_kv, or h_kv·cp/a_kv when a_kv < cp and
  K/V heads are replicated; a rank sends (cp−1)/cp of each.
* Time: the α-β model of :mod:`minipar.cost.network.collectives` (Thakur et al. 2005); one ring step
  sends and receives one block at once (full duplex): α + block/bandwidth. The overlap
  threshold (:func:`min_tokens_per_rank_for_overlap`) and the ring-against-all-gather times
  (:func:`ring_attention_time`, :func:`allgather_attention_time`,
  :func:`document_attention_times`) are the FORWARD pass only; the backward moves the K/V
  blocks again plus the dK/dV blocks (:func:`ring_sent_bytes_per_layer`) against about twice
  the forward's attention FLOPs, so its balance differs and these figures do not decide it.
  They take the layer as one :class:`AttentionShape`, checked once, and the link's rates.
* Causal work: attention FLOPs of one (query chunk, key chunk) pair are 4·n_q·n_k·h (QKᵀ and
  PV, Narayanan et al. 2021's 4bs²h term split by chunks); pairs planned as in
  :func:`minipar.context_parallel.ring.plan`. ``diagonal`` names the kernel: "whole" computes a
  diagonal pair whole and masks it (minipar's plain-torch blocks; what ``FlopCounterMode``
  counts), "half" skips the masked triangle (FlashAttention's causal kernel, Dao 2023; the
  default), counted as half a pair (exact to O(1/n) for chunks of n tokens).
* Activations: Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
  Models", Table 2): 34·sbh + 5·as²b bytes per layer with 16-bit activations; blockwise
  attention (flash / ring) keeps no s² term, and CP divides every token's share by cp.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

from ..model import check_counts as _check
from ..network.collectives import collective_time

LAYOUTS = ("contiguous", "zigzag", "striped")
DIAGONALS = ("half", "whole")


def check_shape(s: int, cp: int, layout: str = "contiguous") -> None:
    """The rules a sequence shard must satisfy, as errors naming the rule and the values."""
    _check(s=s, cp=cp)
    if layout not in LAYOUTS:
        raise ValueError(f"layout ({layout!r}) must be one of {', '.join(LAYOUTS)}")
    n = 2 * cp if layout == "zigzag" else cp
    if s % n:
        rule = "2·cp" if layout == "zigzag" else "cp"
        raise ValueError(f"sequence length s ({s}) must be divisible by {rule} ({n})")


def _check_rates(
    flops: float | None = None, bandwidth: float | None = None, alpha: float | None = None
) -> None:
    if flops is not None and not flops > 0:
        raise ValueError(f"flops ({flops}) must be > 0 FLOP/s")
    if bandwidth is not None and not bandwidth > 0:
        raise ValueError(f"bandwidth ({bandwidth}) must be > 0 bytes/s")
    if alpha is not None and not alpha >= 0:
        raise ValueError(f"alpha ({alpha}) must be >= 0 s")


@dataclass(frozen=True)
class AttentionShape:
    """One attention layer split over ``cp`` ranks, the arguments the forward-time models
    share, checked once: ``b`` sequences of ``s`` tokens, width ``h``; K/V width ``h_kv`` (None:
    h, no grouped-query attention) and ``a_kv`` K/V heads (None: no head rule, only Ulysses
    reads it); shards in ``layout``; a ``causal`` mask and its ``diagonal`` kernel ("half":
    FlashAttention's causal kernel, "whole": computed and masked); ``bytes_per_elem`` of the
    activations. Errors name the rule and the value (:func:`check_shape`)."""

    b: int
    s: int
    h: int
    cp: int
    layout: str = "zigzag"
    causal: bool = True
    diagonal: str = "half"
    bytes_per_elem: float = 2
    h_kv: int | None = None
    a_kv: int | None = None

    def __post_init__(self) -> None:
        check_shape(self.s, self.cp, self.layout)
        if self.h_kv is None:
            object.__setattr__(self, "h_kv", self.h)
        _check(b=self.b, h=self.h, h_kv=self.h_kv)
        if self.a_kv is not None:
            _check(a_kv=self.a_kv)
        _check_diagonal(self.diagonal)

    @property
    def chunk(self) -> float:
        """Tokens of one chunk: s/(2cp) zigzag, s/cp otherwise."""
        return self.s / (2 * self.cp if self.layout == "zigzag" else self.cp)

    @property
    def kv_block(self) -> float:
        """Bytes of one rank's K and V shards (:func:`kv_block_bytes`)."""
        return kv_block_bytes(self.b, self.s, self.h_kv, self.cp, self.bytes_per_elem)


def kv_block_bytes(b: int, s: int, h_kv: int, cp: int, bytes_per_elem: float = 2) -> float:
    """Bytes of one rank's K and V shards together: 2·b·(s/cp)·h_kv·bytes."""
    _check(b=b, s=s, h_kv=h_kv, cp=cp)
    return 2 * b * (s / cp) * h_kv * bytes_per_elem


def accum_bytes(bytes_per_elem: float = 2, accum_bytes_per_elem: float | None = None) -> float:
    """Bytes per element of the dK/dV blocks the backward circulates: as given, else max(e, 4)
    (float32 or wider, what some ring-flash implementations accumulate in; Transformer
    Engine keeps K/V and dK/dV in the input dtype, bf16: pass 2 for it)."""
    if accum_bytes_per_elem is None:
        return max(bytes_per_elem, 4)
    if not accum_bytes_per_elem > 0:
        raise ValueError(f"accum_bytes_per_elem ({accum_bytes_per_elem}) must be > 0")
    return accum_bytes_per_elem


def ring_sent_bytes_per_layer(
    b: int,
    s: int,
    h_kv: int,
    cp: int,
    bytes_per_elem: float = 2,
    accum_bytes_per_elem: float | None = None,
) -> dict[str, float]:
    """Bytes one rank sends per layer per micro-batch under ring attention:
    forward (cp−1)·KV, backward (cp−1)·KV + cp·dKV, KV = :func:`kv_block_bytes` at e bytes,
    dKV the same block at e_acc = :func:`accum_bytes`; 0 for cp = 1."""
    kv = kv_block_bytes(b, s, h_kv, cp, bytes_per_elem)
    dkv = kv_block_bytes(b, s, h_kv, cp, accum_bytes(bytes_per_elem, accum_bytes_per_elem))
    if cp == 1:
        return {"forward": 0.0, "backward": 0.0, "total": 0.0}
    fwd, bwd = (cp - 1) * kv, (cp - 1) * kv + cp * dkv
    return {"forward": fwd, "backward": bwd, "total": fwd + bwd}


def allgather_collectives_per_layer(
    b: int,
    s: int,
    h_kv: int,
    cp: int,
    bytes_per_elem: float = 2,
    accum_bytes_per_elem: float | None = None,
) -> dict:
    """All-gather CP's collectives per layer, each (op, S bytes as nccl-tests counts it: the
    gathered output, the reduced input): forward [all-gather cp·KV]; backward [all-gather
    cp·KV, reduce-scatter cp·dKV]. Empty lists for cp = 1."""
    kv = kv_block_bytes(b, s, h_kv, cp, bytes_per_elem)
    dkv = kv_block_bytes(b, s, h_kv, cp, accum_bytes(bytes_per_elem, accum_bytes_per_elem))
    if cp == 1:
        return {"forward": [], "backward": []}
    return {
        "forward": [("all-gather", cp * kv)],
        "backward": [("all-gather", cp * kv), ("reduce-scatter", cp * dkv)],
    }


def allgather_sent_bytes_per_layer(
    b: int,
    s: int,
    h_kv: int,
    cp: int,
    bytes_per_elem: float = 2,
    accum_bytes_per_elem: float | None = None,
) -> dict[str, float]:
    """Bytes one rank sends per layer under all-gather CP: (cp−1)/cp of every collective's S
    (ring algorithms): forward (cp−1)·KV, backward (cp−1)·KV + (cp−1)·dKV."""
    c = allgather_collectives_per_layer(b, s, h_kv, cp, bytes_per_elem, accum_bytes_per_elem)
    fwd, bwd = (sum((cp - 1) / cp * S for _, S in c[k]) for k in ("forward", "backward"))
    return {"forward": fwd, "backward": bwd, "total": fwd + bwd}


def ring_sends_per_layer(cp: int) -> dict[str, int]:
    """Messages one rank sends per layer: forward cp−1, backward (cp−1) + cp."""
    _check(cp=cp)
    return {"forward": cp - 1, "backward": 2 * cp - 1 if cp > 1 else 0}


def ulysses_kv_width(h_kv: int, cp: int, a_kv: int | None = None) -> float:
    """Width of K (and V) in Ulysses' all-to-all: h_kv, or h_kv·cp/a_kv when the a_kv K/V heads
    are fewer than cp and each is repeated cp/a_kv times (then cp must be divisible by a_kv;
    otherwise a_kv by cp). ``a_kv`` None: no head rule checked."""
    _check(h_kv=h_kv, cp=cp)
    if a_kv is None:
        return h_kv
    _check(a_kv=a_kv)
    if a_kv % cp and cp % a_kv:
        raise ValueError(f"K/V heads ({a_kv}) must be divisible by cp ({cp}), or cp by them")
    return h_kv * cp / a_kv if cp > a_kv else h_kv


def ulysses_all_to_alls_per_layer(
    b: int,
    s: int,
    h: int,
    cp: int,
    bytes_per_elem: float = 2,
    h_kv: int | None = None,
    a_kv: int | None = None,
) -> list[tuple[str, float]]:
    """(tensor, all-to-all input size S in bytes) per layer forward: q, k, v packed in one, the
    output in the other; the backward repeats the list (each all-to-all's adjoint is one
    all-to-all of the same size). Empty for cp = 1."""
    h_kv = h if h_kv is None else h_kv
    _check(b=b, s=s, h=h, h_kv=h_kv, cp=cp)
    w = ulysses_kv_width(h_kv, cp, a_kv)
    if cp == 1:
        return []
    q = b * (s / cp) * h * bytes_per_elem
    return [("qkv", b * (s / cp) * (h + 2 * w) * bytes_per_elem), ("out", q)]


def ulysses_sent_bytes_per_layer(
    b: int,
    s: int,
    h: int,
    cp: int,
    bytes_per_elem: float = 2,
    h_kv: int | None = None,
    a_kv: int | None = None,
) -> dict[str, float]:
    """Bytes one rank sends per layer: (cp−1)/cp of every all-to-all's input, forward and
    backward."""
    a2a = ulysses_all_to_alls_per_layer(b, s, h, cp, bytes_per_elem, h_kv, a_kv)
    fwd = sum((cp - 1) / cp * S for _, S in a2a)
    return {"forward": fwd, "backward": fwd, "total": 2 * fwd}


def chunk_ids(rank: int, cp: int, layout: str) -> list[int]:
    """Global chunks rank ``rank`` holds: [r] (contiguous), [r, 2cp−1−r] (zigzag)."""
    return [rank] if layout == "contiguous" else [rank, 2 * cp - 1 - rank]


def _check_diagonal(diagonal: str) -> None:
    if diagonal not in DIAGONALS:
        raise ValueError(f"diagonal ({diagonal!r}) must be one of {', '.join(DIAGONALS)}")


def step_pairs(
    rank: int, cp: int, layout: str = "zigzag", causal: bool = True, diagonal: str = "half"
) -> list[float]:
    """Block pairs rank ``rank`` computes at each ring step i (it holds rank r−i's K/V), in
    pairs of chunks (s/cp tokens contiguous and striped, s/2cp zigzag). A diagonal pair counts
    1 ("whole") or 1/2 ("half"); striped: every causal pair straddles the diagonal
    (Brandon et al. 2023, "Striped Attention", §3: about half a block per step)."""
    check_shape(2 * cp, cp, layout)
    _check_diagonal(diagonal)
    half = 0.5 if diagonal == "half" else 1
    if layout == "striped":
        return [half if causal else 1] * cp
    out = []
    for i in range(cp):
        src = (rank - i) % cp
        w = 0.0
        for qc in chunk_ids(rank, cp, layout):
            for kc in chunk_ids(src, cp, layout):
                w += 1 if not causal or kc < qc else half if kc == qc else 0
        out.append(w)
    return out


def pairs_per_rank(
    cp: int, layout: str = "contiguous", causal: bool = True, diagonal: str = "whole"
) -> list[float]:
    """(query chunk, key chunk) pairs each rank computes over the whole ring (sum of
    :func:`step_pairs`).

    Contiguous causal: rank r computes r full pairs and the diagonal one; zigzag: 2cp − 1 full
    pairs and two diagonal ones on every rank (chunk r sees r+1 key chunks, chunk 2cp−1−r sees
    2cp−r: 2cp + 1 in all, two of them diagonal), so 2cp + 1 counted whole and 2cp with a
    causal kernel on the diagonals ("half"). Not causal: every pair (1 per step contiguous, 4
    per step zigzag)."""
    check_shape(2 * cp, cp, layout)
    _check_diagonal(diagonal)
    return [sum(step_pairs(r, cp, layout, causal, diagonal)) for r in range(cp)]


def attention_flops_per_rank(
    b: int,
    s: int,
    h: int,
    cp: int,
    layout: str = "contiguous",
    causal: bool = True,
    diagonal: str = "whole",
) -> list[float]:
    """Forward attention FLOPs (QKᵀ and PV) of each rank: pairs × 4·b·n²·h, n = chunk length."""
    check_shape(s, cp, layout)
    _check(b=b, h=h)
    n = s / (2 * cp if layout == "zigzag" else cp)
    return [p * 4 * b * n * n * h for p in pairs_per_rank(cp, layout, causal, diagonal)]


def imbalance(
    cp: int, layout: str = "contiguous", causal: bool = True, diagonal: str = "half"
) -> float:
    """Slowest rank's attention work over the mean. Contiguous causal: (2cp−1)/cp with a
    causal kernel on the diagonal ("half"), 2cp/(cp+1) with the diagonal computed whole and
    masked ("whole"); zigzag and striped: 1."""
    w = pairs_per_rank(cp, layout, causal, diagonal)
    return max(w) / (sum(w) / len(w))


def min_tokens_per_rank_for_overlap(
    flops: float,
    bandwidth: float,
    bytes_per_elem: float = 2,
    kv_fraction: float = 1.0,
    causal: bool = True,
    layout: str = "zigzag",
) -> float:
    """Smallest s/cp for which one ring step's block compute hides its K/V transfer (α ignored).

    A step computes a fraction f of a full block pair: 4·f·b·(s/cp)²·h / F ≥ transfer
    2·b·(s/cp)·h_kv·bytes / B  ⇔  s/cp ≥ F·bytes·(h_kv/h) / (2·f·B); F in FLOP/s, B in bytes/s
    per direction, ``kv_fraction`` = h_kv/h. f = 1 without a mask or with contiguous shards (the
    slowest rank computes whole blocks); f = 1/2 for causal zigzag or striped shards, whose
    every step after the first computes half a block pair, which doubles the threshold
    (Liu et al. 2023 §3 state the unmasked condition as block ≥ F/B). Forward only: the
    backward sends the K/V block again plus its dK/dV block per step against about twice the
    forward's FLOPs, a threshold of its own not computed here."""
    _check_rates(flops=flops, bandwidth=bandwidth)
    check_shape(2, 1, layout)
    f = 0.5 if causal and layout != "contiguous" else 1.0
    return flops * bytes_per_elem * kv_fraction / (2 * f * bandwidth)


def ring_time_from_steps(step_compute: list[float], step_comm: float) -> float:
    """Ring time: every step but the last overlaps its compute with the next block's transfer
    and ends when both have (the ring waits for its slowest rank at every step): Liu et al.
    2023 §3's overlap of blockwise compute and communication, step by step."""
    return sum(max(c, step_comm) for c in step_compute[:-1]) + step_compute[-1]


def ring_attention_time(
    shape: AttentionShape, *, flops: float, bandwidth: float, alpha: float = 0.0
) -> dict[str, float]:
    """Forward seconds of ring attention, α-β link, compute at ``flops``.

    Step i computes the largest of the ranks' step-i pairs (:func:`step_pairs`) and transfers
    α + KV/B (:func:`ring_time_from_steps`). Returns compute (the slowest rank's total), comm
    (its transfers), time (with overlap) and step (the slowest step's compute after the
    first)."""
    _check_rates(flops, bandwidth, alpha)
    sh, cp, n = shape, shape.cp, shape.chunk
    unit = 4 * sh.b * n * n * sh.h / flops  # seconds of one chunk pair
    per_rank = [step_pairs(r, cp, sh.layout, sh.causal, sh.diagonal) for r in range(cp)]
    steps = [unit * max(w[i] for w in per_rank) for i in range(cp)]
    step_comm = alpha + sh.kv_block / bandwidth if cp > 1 else 0.0
    return {
        "compute": unit * max(sum(w) for w in per_rank),
        "comm": (cp - 1) * step_comm,
        "time": ring_time_from_steps(steps, step_comm),
        "step": max(steps[1:]) if cp > 1 else steps[0],
    }


def _gather_time(shape: AttentionShape, alpha: float, bandwidth: float, algorithm: str) -> float:
    """The exposed K/V all-gather of all-gather CP: S = cp·KV, ``algorithm`` of
    :func:`collective_time`; 0 for cp = 1."""
    cp = shape.cp
    if cp == 1:
        return 0.0
    return collective_time("all-gather", algorithm, cp, cp * shape.kv_block, alpha, bandwidth)


def allgather_attention_time(
    shape: AttentionShape,
    *,
    flops: float,
    bandwidth: float,
    alpha: float = 0.0,
    algorithm: str = "ring",
) -> dict[str, float]:
    """Forward seconds of all-gather CP: the K/V all-gather (S = cp·KV, ``algorithm`` of
    :func:`collective_time`), exposed, then the slowest rank's whole attention compute."""
    _check_rates(flops, bandwidth, alpha)
    sh = shape
    comp = max(attention_flops_per_rank(sh.b, sh.s, sh.h, sh.cp, sh.layout, sh.causal, sh.diagonal))
    gather = _gather_time(sh, alpha, bandwidth, algorithm)
    return {"compute": comp / flops, "gather": gather, "time": gather + comp / flops}


def _pairs_below(a: int, b: int, c: int, e: int) -> int:
    """#{(i, j): a ≤ i < b, c ≤ j < e, j ≤ i} (a causal block of queries [a, b), keys [c, e))."""
    if a >= b or c >= e:
        return 0
    L = e - c

    def S(T):  # Σ_{t ≤ T} clamp(t, 0, L)
        if T <= 0:
            return 0
        if T <= L:
            return T * (T + 1) // 2
        return L * (L + 1) // 2 + (T - L) * L

    return S(b - c) - S(a - c)


def document_step_work(s: int, cp: int, layout: str, documents: list[int]) -> list[list[int]]:
    """Visible (query, key) entries each rank computes at each ring step under a causal
    document mask: work[step][rank], entries of a causal kernel that skips masked ones
    (FlashAttention's varlen kernels). ``documents``: lengths packed into the sequence, in
    order. Contiguous and zigzag layouts (chunks are intervals)."""
    check_shape(s, cp, layout)
    if layout == "striped":
        raise ValueError("layout ('striped') must be contiguous or zigzag for document work")
    if any(not isinstance(n, int) or n < 1 for n in documents) or sum(documents) != s:
        raise ValueError(
            f"document lengths ({list(documents)}) must be integers >= 1 summing to s ({s})"
        )
    n = s // (2 * cp if layout == "zigzag" else cp)
    starts = list(itertools.accumulate(documents, initial=0))
    bounds = list(zip(starts, starts[1:]))

    def entries(r, src):  # rank r's queries against rank src's keys, document by document
        total = 0
        for qc in chunk_ids(r, cp, layout):
            q0, q1 = qc * n, (qc + 1) * n
            # a document outside this query chunk holds none of its entries: only those from
            # the one holding q0 to the last that starts before q1
            near = bounds[bisect.bisect_right(starts, q0) - 1 : bisect.bisect_left(starts, q1)]
            total += sum(
                _pairs_below(max(q0, d0), min(q1, d1), max(kc * n, d0), min((kc + 1) * n, d1))
                for kc in chunk_ids(src, cp, layout)
                for d0, d1 in near
            )
        return total

    return [[entries(r, (r - i) % cp) for r in range(cp)] for i in range(cp)]


def document_attention_times(
    shape: AttentionShape,
    documents: list[int],
    *,
    flops: float,
    bandwidth: float,
    alpha: float = 0.0,
    algorithm: str = "ring",
) -> dict[str, float]:
    """Forward seconds of ring and of all-gather CP under a causal document mask
    (:func:`document_step_work`, 4·b·h FLOPs per visible entry). The ring pays, at every step,
    its slowest rank's work at that step (Σ_steps max_ranks); the all-gather pays its exposed
    gather and then its slowest rank's total (max_ranks Σ_steps). The mask is causal whatever
    ``shape.causal`` and ``shape.diagonal`` say (every visible entry counted once)."""
    _check_rates(flops, bandwidth, alpha)
    cp = shape.cp
    work = document_step_work(shape.s, cp, shape.layout, documents)
    unit = 4 * shape.b * shape.h / flops
    steps = [unit * max(w) for w in work]
    step_comm = alpha + shape.kv_block / bandwidth if cp > 1 else 0.0
    gather = _gather_time(shape, alpha, bandwidth, algorithm)
    total = [unit * sum(work[i][r] for i in range(cp)) for r in range(cp)]
    return {
        "ring": ring_time_from_steps(steps, step_comm),
        "ring_compute": sum(steps),
        "allgather": gather + max(total),
        "allgather_compute": max(total),
        "gather": gather,
        "imbalance": max(total) / (sum(total) / cp),
    }


def ulysses_time(shape: AttentionShape, *, alpha: float, bandwidth: float) -> float:
    """Forward seconds of Ulysses' two all-to-alls (pairwise exchange, α-β), not overlapped."""
    sh = shape
    return sum(
        collective_time("all-to-all", "pairwise-exchange", sh.cp, S, alpha, bandwidth)
        for _, S in ulysses_all_to_alls_per_layer(
            sh.b, sh.s, sh.h, sh.cp, sh.bytes_per_elem, sh.h_kv, sh.a_kv
        )
    )


def activation_bytes_per_rank(
    s: int, b: int, h: int, a: int, cp: int = 1, *, blockwise: bool = True
) -> float:
    """Activation bytes per layer per rank (Korthikanti Table 2, 16-bit): (34·sbh + 5·as²b)/cp,
    without the 5·as²b term of the materialised scores when attention is blockwise."""
    _check(s=s, b=b, h=h, a=a, cp=cp)
    total = 34 * s * b * h + (0 if blockwise else 5 * a * s * s * b)
    return total / cp
