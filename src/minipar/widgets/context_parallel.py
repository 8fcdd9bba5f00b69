"""Explorer for the context-parallel chapter: one attention layer's memory per rank, traffic,
forward time and causal imbalance as s, cp, the layout, the link and the number of packed
documents vary. ``widgets/context_parallel.js`` is the JavaScript twin of :func:`cp_layer_model`
(tests/test_context_parallel_explorer.py), which composes
:mod:`minipar.cost.chapters.context_parallel` (Liu et al. 2023 for the ring, Jacobs et al. 2023
for Ulysses, Korthikanti et al. 2022 for the activations, Dubey et al. 2024 §3.3.2 and Dao
2023's variable-length kernels for the document mask).
"""

from __future__ import annotations

from dataclasses import dataclass

from minipar.cost.chapters import context_parallel as C
from minipar.widgets import Explorer, links_and_peaks
from minipar.widgets.inputs import check_numbers, check_values

#: The most documents packed into one sequence (``CP_MAX_DOCUMENTS`` in the JavaScript, the
#: box's max): 1K-token documents at s = 1M; the document work grows with their number.
MAX_DOCUMENTS = 1024
#: The largest cp (``CP_MAX_CP``, the box's max): 1,024 GPUs on one sequence, 64 times Llama 3's
#: 16; with packed documents the work grows as cp² unless they line up with the chunks.
MAX_CP = 1024

#: The explorer's default sequence length (the s slider's value in context_parallel.js).
DEFAULT_S = 131072


def equal_documents(s: int, documents: int) -> list[int]:
    """``documents`` equal lengths packed into ``s`` tokens (1: one long document); refuses a
    count below 1, above :data:`MAX_DOCUMENTS` or not dividing s, in the explorer's words."""
    check_numbers({"integer": True, "min": 1, "max": MAX_DOCUMENTS}, documents=documents)
    documents = int(documents)
    if s % documents:
        raise ValueError(f"s ({s}) must be divisible by documents ({documents})")
    return [s // documents] * documents


@dataclass(frozen=True)
class CPLayerControls:
    """The cp-layer explorer's controls: sequence length ``s`` over ``cp`` ranks in ``layout``;
    width ``h``, ``a`` query and ``a_kv`` K/V heads, ``b`` sequences; a GPU's dense ``flops``
    (FLOP/s) and a link's per-direction ``bandwidth`` (B/s) and latency ``alpha`` (s); the
    sequence packed as ``documents`` equal documents."""

    s: int = DEFAULT_S
    cp: int = 16
    layout: str = "zigzag"
    h: int = 16384
    a: int = 128
    a_kv: int = 8
    b: int = 1
    flops: float = 989.4e12
    bandwidth: float = 50e9
    alpha: float = 5e-6
    documents: int = 1


def _check_layer(c: CPLayerControls) -> list[int]:
    """The explorer's rules on ``c``, in its words; the document lengths."""
    check_numbers({"integer": True, "min": 1, "max": MAX_CP}, cp=c.cp)
    C.check_shape(c.s, c.cp, c.layout)
    C._check(h=c.h, a=c.a, a_kv=c.a_kv, b=c.b)
    if c.a % c.a_kv:
        raise ValueError(f"heads ({c.a}) must be divisible by K/V heads ({c.a_kv})")
    return equal_documents(c.s, c.documents)


def _ulysses(c: CPLayerControls, shape: C.AttentionShape) -> dict:
    """Ulysses' bytes and all-to-all time, None when its head rules fail at this cp."""
    if not (c.a % c.cp == 0 and (c.a_kv % c.cp == 0 or c.cp % c.a_kv == 0)):
        return {"ulysses_bytes": None, "ulysses_time": None}
    b, s, h, cp, h_kv, a_kv = c.b, c.s, c.h, c.cp, shape.h_kv, c.a_kv
    return {
        "ulysses_bytes": C.ulysses_sent_bytes_per_layer(b, s, h, cp, h_kv=h_kv, a_kv=a_kv)["total"],
        "ulysses_time": C.ulysses_time(shape, alpha=c.alpha, bandwidth=c.bandwidth),
    }


def cp_layer_model(**controls) -> dict:
    """One layer, bf16 activations, float32 dK/dV accumulators, causal, a causal kernel on the
    diagonal: activation bytes per rank (blockwise attention), bytes a rank sends per layer
    (ring; all-gather; Ulysses, or None when its head rules fail), the ring's forward time
    (compute, transfers, with overlap), all-gather CP's (exposed gather, compute), Ulysses'
    all-to-all time, the causal imbalance and the overlap threshold in tokens per rank;
    ``document_times``: :func:`minipar.cost.chapters.context_parallel.document_attention_times`
    for the ``documents`` equal documents (None for striped shards, which it does not cover).
    ``controls``: :class:`CPLayerControls`'s fields by name, as the JavaScript twin takes the
    page's controls (an unknown name is a TypeError)."""
    c = CPLayerControls(**controls)
    lengths = _check_layer(c)
    b, s, h, cp, layout = c.b, c.s, c.h, c.cp, c.layout
    h_kv = h * c.a_kv // c.a
    shape = C.AttentionShape(b, s, h, cp, layout, h_kv=h_kv, a_kv=c.a_kv)
    link = dict(flops=c.flops, bandwidth=c.bandwidth, alpha=c.alpha)
    ring = C.ring_attention_time(shape, **link)
    gather = C.allgather_attention_time(shape, **link)
    docs = None if layout == "striped" else C.document_attention_times(shape, lengths, **link)
    return {
        "tokens_per_rank": s / cp,
        "activation_bytes": C.activation_bytes_per_rank(s, b, h, c.a, cp),
        "ring_bytes": C.ring_sent_bytes_per_layer(b, s, h_kv, cp)["total"],
        "ring_compute": ring["compute"],
        "ring_comm": ring["comm"],
        "ring_time": ring["time"],
        "ring_step": ring["step"],
        "allgather_bytes": C.allgather_sent_bytes_per_layer(b, s, h_kv, cp)["total"],
        "allgather_gather": gather["gather"],
        "allgather_time": gather["time"],
        **_ulysses(c, shape),
        "imbalance": C.imbalance(cp, layout),
        "overlap_min_tokens": C.min_tokens_per_rank_for_overlap(
            c.flops, c.bandwidth, 2, h_kv / h, True, layout
        ),
        "document_length": s / len(lengths),
        "document_times": docs,
    }


cp_config = links_and_peaks  # the explorer's data


def cp_explorer(**values):
    """Live explorer of :func:`cp_layer_model`; ``values`` override the default controls."""
    # the page's own input rules; s at its default so a document count is checked against it
    check_values("context_parallel", "cp-layer", {"s": DEFAULT_S, **values})
    return Explorer("context_parallel", "cp-layer", config=cp_config(), values=values)
