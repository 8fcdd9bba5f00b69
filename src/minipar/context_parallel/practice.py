"""Rank functions for context parallelism as trained at scale (as :mod:`.experiments`'s):
all-gather CP beside the ring and Ulysses, grouped-query attention, document masks (packed
sequences), the striped layout, and 16-bit numerics (the log-sum-exp merge and the dK/dV
accumulators in float32).
"""

from __future__ import annotations

import functools
from unittest import mock

import torch

from . import ring as ring_module
from .experiments import errors, gpt_training_on_rank, qkv, rel_diff, run_method, traced_calls
from .online_softmax import full_attention
from .ring import Mask
from .sharding import document_ids, gather_sequence, shard_sequence

DOCUMENTS = [5, 11, 3, 5]  # a packed sequence of s = 24 tokens: four documents
A, S, D = 12, 24, 4  # query heads, sequence, head dimension of the parity runs


def gqa_qkv(a=A, a_kv=4, s=S, d=D, b=2, *, logit=30.0, seed=0, dtype=torch.float64):
    """:func:`.experiments.qkv` with grouped-query attention's shapes and this module's sizes."""
    return qkv(b, a, s, d, a_kv=a_kv, logit=logit, seed=seed, dtype=dtype)


def ulysses_kv_heads(cp: int) -> list[int]:
    """K/V head counts Ulysses is tested with at cp: one divisible by cp, one fewer than cp
    (replicated)."""
    return {2: [4, 1], 3: [3, 1], 4: [4, 2]}[cp]


CASES = [
    ("ring", "contiguous", None),
    ("ring", "zigzag", None),
    ("ring", "striped", None),
    ("ring", "zigzag", DOCUMENTS),
    ("ring", "striped", DOCUMENTS),
    ("allgather", "zigzag", None),
    ("allgather", "contiguous", DOCUMENTS),
    ("allgather", "zigzag", DOCUMENTS),
    ("allgather", "striped", DOCUMENTS),
]


def parity_on_rank(rank, cp):
    """Max error over out, dq, dk, dv of every case, GQA (12 query heads, 4 K/V heads), causal,
    float64; Ulysses with K/V heads divisible by cp and fewer than cp (replicated)."""
    out = {}
    for method, layout, docs in CASES:
        key = f"{method}/{layout}" + ("/documents" if docs else "")
        out[key] = max(errors(method, layout, gqa_qkv(), documents=docs).values())
    for a_kv in ulysses_kv_heads(cp):
        how = "K/V heads replicated" if a_kv < cp else "K/V heads split"
        out[f"ulysses/{how}"] = max(errors("ulysses", "contiguous", gqa_qkv(a_kv=a_kv)).values())
    return out


def controls_on_rank(rank, cp):
    """Plausible bugs, each against the same reference: the document mask forgotten (plain
    causal attention over a packed sequence), and documents masked by local positions in the
    ring (the mask built from the shard's own indices instead of global positions)."""
    out = {f"documents ignored/{m}": _docs_ignored(m) for m in ("ring", "allgather")}
    ok = ring_module.mask_plan

    def local_plan(q_chunks, k_chunks, causal, doc_ids=None):
        local = [torch.arange(len(c)) + i * len(c) for i, c in enumerate(q_chunks)]
        return ok(local, local, causal, doc_ids)

    with mock.patch.object(ring_module, "mask_plan", local_plan):
        out["documents by local position/ring"] = max(
            errors("ring", "zigzag", gqa_qkv(), documents=DOCUMENTS).values()
        )
    return out


def _docs_ignored(method):
    """The reference masks documents, the parallel run does not: the output's error."""
    q, k, v = gqa_qkv()
    ref = full_attention(q, k, v, True, document_ids(DOCUMENTS, S))
    qkv = tuple(shard_sequence(t, 2, None, "zigzag") for t in (q, k, v))
    out = run_method(method, qkv, Mask(True, "zigzag"))
    return rel_diff(gather_sequence(out, 2, None, "zigzag"), ref)


def traffic_on_rank(rank, cp, b=2, a=A, a_kv=4, s=S, d=D, dtype=torch.float64):
    """Calls and bytes of ring, all-gather and Ulysses attention with GQA (causal, zigzag for
    the first two, Ulysses contiguous), forward and backward, traced with
    :class:`minipar.runtime.tracer.trace`."""
    out = {}
    for method, layout in (("ring", "zigzag"), ("allgather", "zigzag"), ("ulysses", "contiguous")):
        akv = a_kv if method != "ulysses" else ulysses_kv_heads(cp)[-1]
        qkv = tuple(
            shard_sequence(t, 2, None, layout).requires_grad_()
            for t in gqa_qkv(a, akv, s, d, b, dtype=dtype)
        )
        call = functools.partial(run_method, method, qkv, Mask(True, layout))
        out.update(traced_calls(method, call))
    return out


def bf16_on_rank(rank, cp, logit=30.0):
    """Errors of bf16 ring attention against float64 on the same bf16-rounded inputs: with
    the log-sum-exp merge in float32 or in bf16, and the dK/dV accumulators in float32 or in
    bf16 (ring); the all-gather's reduce-scatter in float32 or bf16."""
    bf = torch.bfloat16
    cases = {
        "ring, fp32 merge, fp32 accumulators": dict(method="ring"),
        "ring, bf16 merge": dict(method="ring", merge_dtype=bf),
        "ring, bf16 accumulators": dict(method="ring", accum_dtype=bf),
        "allgather, fp32 accumulators": dict(method="allgather"),
        "allgather, bf16 accumulators": dict(method="allgather", accum_dtype=bf),
    }
    return {
        n: errors(kw.pop("method"), "zigzag", gqa_qkv(dtype=bf), **kw) for n, kw in cases.items()
    }


def gpt_on_rank(rank, cp):
    """The course's GPT with all-gather attention (zigzag) after three Adam steps against one
    process: the max relative parameter difference."""
    return gpt_training_on_rank(rank, cp, "allgather", "zigzag")["params"]


def _practice_on_rank(rank, cp):
    out = {
        "parity": parity_on_rank(rank, cp),
        "controls": controls_on_rank(rank, cp),
        "gpt allgather": gpt_on_rank(rank, cp),
        "traffic": traffic_on_rank(rank, cp),
        "traffic bf16": traffic_on_rank(rank, cp, dtype=torch.bfloat16),
    }
    if cp == 4:
        out["bf16"] = bf16_on_rank(rank, cp)
    return out
