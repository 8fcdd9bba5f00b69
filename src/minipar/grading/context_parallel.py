"""Checkers for the context-parallel exercises (``exercises/context_parallel``).

Exercise 1 (merging two softmax blocks) runs in this process; exercises 2-5 run on gloo ranks in
float64 on every layout of :data:`RANKS` (a CP group is rarely the whole world: in a grid with
TP innermost it is strided). The inputs encode where each element came from (a token's global
position, a head's index), so the checker names the positions, heads or source rank a rank got
and the classic mistake that gives them; exercise 5 names a wrong output by the
:class:`Semantics` it matches. Answers that use the course's own ``minipar.context_parallel``
are rejected (:mod:`minipar.grading.imports`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from minipar.grading import GradeFailure
from minipar.grading.compare import err, expect, randn, same
from minipar.grading.declare import Chapter, after_whole

CHAPTER = "context_parallel"
CH = Chapter(CHAPTER)  # its tasks' PASS lines and named mistakes: clauses/context_parallel.toml


# ----------------------------------------------------------------------------- running
def _hint(case: str, msg: str) -> str:
    if "Group None is not registered" in msg:  # dist.get_global_rank(None, r), torch 2.13
        return CH.why("group None hint")
    if "not connected" in msg and re.search(r"of group \[\d+\]\)", case):  # a send to itself
        return CH.why("one-rank group hint")
    if "of group" in case and ("rank" in msg.lower() or "peer" in msg.lower()):
        return CH.why("subgroup hint")
    return ""


RANKS = CH.layouts(size="cp", hint=_hint)


def _tensor(x, what: str):
    import torch  # noqa: PLC0415 (lazy: torch)

    if not isinstance(x, torch.Tensor):
        raise GradeFailure(f"{what}: expected a tensor, got {type(x).__name__}")
    return x


# ----------------------------------------------------------------------------- 01 merge
def _blocks(logit: float, seed: int):
    """Two disjoint key blocks of one attention problem: (q, k, v, block results, full result)."""
    import torch  # noqa: PLC0415 (lazy: torch)

    q, k, v = (randn(2, 3, 5, 4, seed=seed + i) for i in range(3))
    k = torch.cat([k, randn(2, 3, 7, 4, seed=seed + 9)], dim=2)  # 12 keys
    v = torch.cat([v, randn(2, 3, 7, 4, seed=seed + 10)], dim=2)
    z = q @ k.transpose(-2, -1) / 2.0  # (2, 3, 5, 12)
    z = z * (logit / z.abs().max())
    out = []
    for sl in (slice(0, 5), slice(5, 12)):
        lse = torch.logsumexp(z[..., sl], -1)
        out.append((torch.exp(z[..., sl] - lse.unsqueeze(-1)) @ v[:, :, sl], lse))
    lse = torch.logsumexp(z, -1)
    return out, (torch.exp(z - lse.unsqueeze(-1)) @ v, lse)


def _call_merge(fn, a, b, case):
    """(o, lse) of ``fn`` merging blocks ``a`` and ``b`` (each (o, lse)), which it must not change."""
    import torch  # noqa: PLC0415 (lazy: torch)

    args = [t.clone() for t in (*a, *b)]
    res = fn(*args)
    if not all(torch.equal(x, y) for x, y in zip(args, (*a, *b))):
        raise GradeFailure(f"{case}: merge changed one of its inputs in place")
    if not isinstance(res, (tuple, list)) or len(res) != 2:
        raise GradeFailure(
            CH.why("merge return", case=case, kind=type(res).__name__)
            + (f" of length {len(res)}" if isinstance(res, (tuple, list)) else "")
        )
    return _tensor(res[0], f"{case}: o"), _tensor(res[1], f"{case}: lse")


def _check_merge(fn, case, a, b, want) -> None:
    """Merging blocks ``a`` and ``b`` (each (o, lse)) must give ``want`` (o, lse)."""
    import torch  # noqa: PLC0415 (lazy: torch)

    (o_a, l_a), (o_b, l_b), (want_o, want_lse) = a, b, want
    o, lse = _call_merge(fn, a, b, case)
    if not torch.isfinite(o).all():
        bad = "NaN" if torch.isnan(o).any() else "inf"
        raise GradeFailure(
            f"{case}: o contains {bad}: "
            + (CH.why("masked block NaN") if torch.isneginf(l_b).any() else CH.why("lse overflows"))
        )
    as_max = "lse is max(lse_a, lse_b); it must be log(e^lse_a + e^lse_b) (torch.logaddexp)"
    otherwise = f"lse differs from the log-sum-exp over both blocks ({err(lse, want_lse)})"
    expect(case, lse, want_lse, [(torch.maximum(l_a, l_b), as_max)], otherwise)
    wa, wb = torch.exp(l_a - want_lse).unsqueeze(-1), torch.exp(l_b - want_lse).unsqueeze(-1)
    mistakes = [
        ((o_a + o_b) / 2, CH.why("blocks averaged")),
        (o_a + o_b, CH.why("blocks added unweighted")),
        (wb * o_a + wa * o_b, CH.why("weights swapped")),
    ]
    otherwise = f"o differs from softmax attention over both blocks ({err(o, want_o)})"
    expect(case, o, want_o, mistakes, otherwise)


@CH.task("merge_softmax_blocks")
def check_merge_softmax_blocks(fn, **_):
    import torch  # noqa: PLC0415 (lazy: torch)

    for logit, case in ((3.0, "small logits"), (1e3, "logits of size ~1000")):
        (a, b), want = _blocks(logit, seed=1)
        _check_merge(fn, case, a, b, want)
    # a fully masked block: lse = -inf, o = 0; merging it changes nothing
    (a, _), _ = _blocks(10.0, seed=2)
    masked = (torch.zeros_like(a[0]), torch.full_like(a[1], float("-inf")))
    case = "block b fully masked (lse_b = -inf, o_b = 0)"
    _check_merge(fn, case, a, masked, a)
    _check_merge(fn, case.replace("block b", "block a"), masked, a, a)
    _check_merge(
        fn, "both blocks fully masked (lse = -inf, o = 0 on both sides)", masked, masked, masked
    )


# ----------------------------------------------------------------------------- 02 zigzag
S = 12  # divisible by 2·cp for cp = 1, 2, 3


def _zigzag_body(gr, cp, group, fn):
    import torch  # noqa: PLC0415 (lazy: torch)

    out = {}
    for dim in (1, 2):
        shape = [2, 3, 4]
        shape[dim] = S
        pos = torch.arange(S, dtype=torch.float64).view([S if d == dim else 1 for d in range(3)])
        x = pos.expand(shape).clone()  # x.select(dim, p) == p
        y = fn(x.clone(), dim, group)
        out[dim] = y.detach().clone() if isinstance(y, torch.Tensor) else y
    return out


def _zigzag_positions(s, cp, r):
    n = s // (2 * cp)
    return list(range(r * n, (r + 1) * n)) + list(range((2 * cp - 1 - r) * n, (2 * cp - r) * n))


def _positions_got(y, dim, where):
    """The global positions a returned shard holds, read from its values."""
    import torch  # noqa: PLC0415 (lazy: torch)

    y = _tensor(y, f"{where}: the shard")
    if y.dim() != 3:
        raise GradeFailure(f"{where}: the shard has {y.dim()} dimensions, expected 3 (same as x)")
    first = y.movedim(dim, 0).reshape(y.shape[dim], -1)
    if not torch.equal(first, first[:, :1].expand_as(first)):
        raise CH.fail("positions mixed across dims", where, dim=dim)
    return [int(v) for v in first[:, 0].tolist()]


def _zigzag_mistake(got, cp, r, world_rank, world) -> str:
    """The classic mistake whose positions rank r of cp got, or ""."""
    n = S // (2 * cp)
    chunk = lambda i: list(range(i * n, (i + 1) * n))  # chunk i of 2cp
    global_rank = (world_rank, world) != (r, cp) and S % (2 * world) == 0
    named = [
        (chunk(2 * r) + chunk(2 * r + 1), CH.why("contiguous chunk")),
        (chunk(2 * cp - 1 - r) + chunk(r), CH.why("chunks in the wrong order")),
        (chunk(r) + chunk(2 * cp - r) if r > 0 else None, CH.why("second chunk off by one")),
        (
            _zigzag_positions(S, world, world_rank) if global_rank else None,
            CH.why("zigzag of the global rank", world_rank=world_rank, world=world),
        ),
    ]
    return next((why for positions, why in named if got == positions), "")


@CH.task("zigzag_shard")
def check_zigzag_shard(fn, **_):
    for c in RANKS.launch(_zigzag_body, fn):
        for dim in (1, 2):
            where = f"{c['where']}, dim={dim}"
            dtype = getattr(c[dim], "dtype", None)
            if dtype is not None and str(dtype) != "torch.float64":
                raise CH.fail("shard dtype", where, dtype=str(dtype)[6:])
            got = _positions_got(c[dim], dim, where)
            want = _zigzag_positions(S, c["cp"], c["gr"])
            if got != want:
                why = _zigzag_mistake(got, c["cp"], c["gr"], c["rank"], c["world"])
                raise GradeFailure(
                    CH.why(
                        "zigzag positions differ", case=where, cp=c["cp"], S=S, got=got, want=want
                    )
                    + (f": {why}" if why else "")
                )


# ----------------------------------------------------------------------------- 03 ring step
B, A, N, D = 1, 2, 3, 4  # per rank: q, k, v (b, a, n, d)


def _full_qkv(cp):
    q, k, v = (randn(B, A, N * cp, D, seed=40 + i) for i in range(3))
    z = (q @ k.transpose(-2, -1)).abs().max() / math.sqrt(D)
    scale = math.sqrt(100.0 / float(z))  # largest logit ~100
    return q * scale, k * scale, v


def _ring_body(gr, cp, group, fn):
    import torch  # noqa: PLC0415 (lazy: torch)

    q, k, v = _full_qkv(cp)
    sl = slice(gr * N, (gr + 1) * N)
    ql, kl, vl = q[:, :, sl].clone(), k[:, :, sl].clone(), v[:, :, sl].clone()
    o = lse = None
    sources = []
    for _ in range(cp):
        res = fn(ql, kl, vl, o, lse, group)
        if not isinstance(res, (tuple, list)) or len(res) != 4:
            return {
                "bad return": f"{type(res).__name__}"
                + (f" of length {len(res)}" if isinstance(res, (tuple, list)) else "")
            }
        o, lse, kl, vl = res
        is_block = isinstance(kl, torch.Tensor) and tuple(kl.shape) == (B, A, N, D)
        blocks = k.split(N, dim=2) if is_block else ()  # every rank's K block
        sources.append(next((j for j, blk in enumerate(blocks) if torch.equal(kl, blk)), None))
    return {"o": o.detach().clone() if isinstance(o, torch.Tensor) else o, "sources": sources}


def _ring_reference(cp, r):
    """The correct output of rank r, and what the classic mistakes give."""
    import torch  # noqa: PLC0415 (lazy: torch)

    q, k, v = _full_qkv(cp)
    ql = q[:, :, r * N : (r + 1) * N]
    z = ql @ k.transpose(-2, -1) / math.sqrt(D)  # (b, a, n, s)
    want = torch.softmax(z, -1) @ v
    blocks = []
    for j in range(cp):
        zj = z[..., j * N : (j + 1) * N]
        blocks.append(torch.softmax(zj, -1) @ v[:, :, j * N : (j + 1) * N])
    return want, blocks


@CH.task("ring_step")
def check_ring_step(fn, **_):
    for c in after_whole(RANKS.launch(_ring_body, fn)):
        where, cp, r = c["where"], c["cp"], c["gr"]
        if "bad return" in c:
            raise CH.fail("ring step return", where, bad_return=c["bad return"])
        want_src = [(r - i - 1) % cp for i in range(cp)]
        if c["sources"] != want_src:
            raise GradeFailure(f"{where}: {_ring_sources_fault(c, want_src)}")
        o = _tensor(c["o"], f"{where}: o")
        want, blocks = _ring_reference(cp, r)
        replaced = CH.why("merge, do not replace")
        mistakes = [
            (sum(blocks) / cp, CH.why("ring blocks averaged", cp=cp)),
            (sum(blocks), CH.why("ring blocks added")),
            *(
                (blk, CH.why("one rank's block only", j=j, replaced=replaced))
                for j, blk in enumerate(blocks)
            ),
        ]
        otherwise = f"o differs from attention over the whole sequence ({err(o, want)})"
        expect(where, o, want, mistakes, otherwise)


def _ring_sources_fault(c, want_src) -> str:
    """Why rank r received the K/V blocks of group ranks ``c["sources"]``, not ``want_src``."""
    got, r, cp = c["sources"], c["gr"], c["cp"]
    if None in got:
        return CH.why("k_next not a block", step=got.index(None))
    if got == [(r + i + 1) % cp for i in range(cp)]:
        return CH.why("ring turns the wrong way", r=r, first=got[0])
    if c["after_whole"]:
        return CH.why("group ranks as global", got=got, want_src=want_src)
    return f"received blocks from ranks {got}, expected {want_src}"


# ----------------------------------------------------------------------------- 04 Ulysses
UA, US = 6, 12  # heads, sequence: divisible by cp = 1, 2, 3


def _ulysses_full():
    import torch  # noqa: PLC0415 (lazy: torch)

    h = torch.arange(UA, dtype=torch.float64).view(1, UA, 1, 1)
    p = torch.arange(US, dtype=torch.float64).view(1, 1, US, 1)
    d = torch.arange(2, dtype=torch.float64).view(1, 1, 1, 2)
    return (1000 * h + p + 0.25 * d).expand(2, UA, US, 2).clone()  # value = 1000·head + pos


def _ulysses_body(gr, cp, group, fn):
    import torch  # noqa: PLC0415 (lazy: torch)

    n = US // cp
    x = _ulysses_full()[:, :, gr * n : (gr + 1) * n].clone()  # (b, a, s/cp, d)
    y = fn(x, group)
    out = {"y": y.detach().clone() if isinstance(y, torch.Tensor) else y}
    if cp > 1:  # 5 heads: not divisible
        try:
            fn(torch.zeros(2, 5, n, 2, dtype=torch.float64), group)
            out["error"] = None
        except ValueError as e:
            out["error"] = str(e)
        except Exception as e:
            out["error"] = f"{type(e).__name__}: {e}"
    return out


@CH.task("seq_to_heads")
def check_seq_to_heads(fn, **_):
    full = _ulysses_full()
    for c in RANKS.launch(_ulysses_body, fn):
        where, cp, r = c["where"], c["cp"], c["gr"]
        y = _tensor(c["y"], f"{where}: the result")
        ah = UA // cp
        want = full[:, r * ah : (r + 1) * ah]
        if tuple(y.shape) != tuple(want.shape):
            raise CH.fail(
                "heads shape", case=where, cp=cp, shape=tuple(y.shape), want=tuple(want.shape)
            )
        if not same(y, want):
            raise GradeFailure(f"{where} (cp = {cp}): {_ulysses_fault(y, want, cp, r)}")
        want_msg = f"heads (5) must be divisible by cp ({cp})"
        if cp > 1 and c["error"] != want_msg:
            said = (
                f'raised "{c["error"][:120]}", expected'
                if c["error"] is not None
                else "gave no error: raise"
            )
            raise CH.fail("heads not divisible", where, cp=cp, said=said, want_msg=want_msg)


def _ulysses_fault(y, want, cp, r) -> str:
    """What rank r of cp got instead of its a/cp heads of all tokens, read from the values."""
    ah = UA // cp
    heads, mine = (
        sorted({int(v) // 1000 for v in y[0, :, 0, 0].tolist()}),
        list(range(r * ah, (r + 1) * ah)),
    )
    if heads != mine:
        why = f"got heads {heads}: rank r keeps the contiguous heads [r·a/cp, (r+1)·a/cp) = {mine}"
        if heads == list(range(r, UA, cp)):
            why += "; these are every cp-th head (split the head dim as (cp, a/cp), not (a/cp, cp))"
        return why
    pos = [int(round(float(v) % 1000)) for v in y[0, 0, :, 0].tolist()]
    if pos != list(range(US)):
        return CH.why("chunks out of order", pos=pos)
    return f"values differ ({err(y, want)})"


# ----------------------------------------------------------------------------- 05 all-gather, documents
GB, GA, GKV, GN, GD = 1, 4, 2, 4, 4  # per rank: q (b, a, n, d), k and v (b, a_kv, n, d)
DOCS = {1: [1, 3], 2: [3, 2, 3], 3: [5, 4, 3]}  # document lengths per cp: boundaries cross shards
DOCS_AS_TENSOR = (2,)  # the cp for which `documents` comes as a 1-D int64 tensor, not a list


def _docs_text(cp) -> str:
    kind = "a 1-D int64 tensor" if cp in DOCS_AS_TENSOR else "a list"
    return f"documents {DOCS[cp]} as {kind}"


def _doc_qkv(cp):
    q = randn(GB, GA, GN * cp, GD, seed=60) * 1.5
    k = randn(GB, GKV, GN * cp, GD, seed=61) * 1.5
    v = randn(GB, GKV, GN * cp, GD, seed=62)
    return q, k, v


@dataclass(frozen=True)
class Semantics:
    """What an answer to exercise 5 computes: the right attention with the defaults, else one
    mistake, by which the checker names a wrong answer. ``q_rank``: the rank whose positions
    the queries take (None: their own); ``heads``: "interleave" (query head i reads K/V head
    i // (a/a_kv)) or "repeat" (i % a_kv); ``q_doc_local``: the queries' document ids read at
    local positions 0…n−1; ``boundary``: every document id moved one position later (+1: a
    document's first token counted in the one before) or earlier (−1); ``dtype``: the
    arithmetic in that dtype, the result cast back to q's."""

    docs: bool = True  # keys of other documents masked
    causal: bool = True  # later keys masked ...
    strict: bool = False  # ... and the query's own key too
    q_rank: int | None = None
    heads: str = "interleave"
    scale: bool = True  # scores divided by √d
    q_doc_local: bool = False
    boundary: int = 0
    dtype: object = None


def _doc_attention(cp, r, sem: Semantics = Semantics()):
    """Rank r's output under the semantics ``sem``."""
    import torch  # noqa: PLC0415 (lazy: torch)

    q, k, v = _doc_qkv(cp)
    out_dtype = q.dtype
    if sem.dtype is not None:
        q, k, v = q.to(sem.dtype), k.to(sem.dtype), v.to(sem.dtype)
    s = GN * cp
    q_rank = r if sem.q_rank is None else sem.q_rank
    q = q[:, :, r * GN : (r + 1) * GN]
    g = GA // GKV  # query heads per K/V head
    k, v = (
        t.repeat_interleave(g, 1) if sem.heads == "interleave" else t.repeat(1, g, 1, 1)
        for t in (k, v)
    )
    doc = torch.repeat_interleave(torch.arange(len(DOCS[cp])), torch.tensor(DOCS[cp]))
    if sem.boundary > 0:  # (s,) position p gets position p−1's document
        doc = torch.cat([doc[:1], doc[:-1]])
    elif sem.boundary < 0:  # position p gets position p+1's document
        doc = torch.cat([doc[1:], doc[-1:]])
    qp, kp = torch.arange(q_rank * GN, (q_rank + 1) * GN), torch.arange(s)
    keep = torch.ones(GN, s, dtype=torch.bool)
    if sem.causal:
        keep &= (kp[None] < qp[:, None]) if sem.strict else (kp[None] <= qp[:, None])
    if sem.docs:
        keep &= doc[kp][None] == doc[qp - q_rank * GN if sem.q_doc_local else qp][:, None]
    z = q @ k.transpose(-2, -1) / (math.sqrt(GD) if sem.scale else 1.0)
    return (torch.softmax(z.masked_fill(~keep, float("-inf")), -1) @ v).to(out_dtype)


def _doc_body(gr, cp, group, fn):
    import torch  # noqa: PLC0415 (lazy: torch)

    q, k, v = _doc_qkv(cp)
    sl = slice(gr * GN, (gr + 1) * GN)
    try:
        docs = torch.tensor(DOCS[cp]) if cp in DOCS_AS_TENSOR else list(DOCS[cp])
        y = fn(q[:, :, sl].clone(), k[:, :, sl].clone(), v[:, :, sl].clone(), docs, group)
    except Exception as e:  # named in the verdict, with the case
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
    return {"y": y.detach().clone() if isinstance(y, torch.Tensor) else y}


_BOUNDARY = CH.why("boundary off by one")
# (the semantics of a classic mistake, its reason), tried in this order: [mistakes] of its clauses
DOC_MISTAKES = tuple(
    (Semantics(**sem), CH.why(name, boundary=_BOUNDARY))
    for sem, name in CH.data["mistakes"]["allgather_documents"]
)


def _doc_mistake(y, cp, r, world_rank) -> str:
    """The one-line reason of a wrong output, from the semantics it matches."""
    import torch  # noqa: PLC0415 (lazy: torch)

    if not torch.isfinite(y).all():
        strict = torch.nan_to_num(_doc_attention(cp, r, Semantics(strict=True)), nan=0.0)
        if same(torch.nan_to_num(y, nan=0.0), strict):
            return CH.why("strict causal mask")
        return "the output contains NaN or inf"
    global_rank = CH.why("global rank positions", world_rank=world_rank)
    named = [
        *DOC_MISTAKES,
        *([(Semantics(q_rank=world_rank), global_rank)] if world_rank != r else []),
    ]
    for sem, why in named:
        try:
            if same(y, _doc_attention(cp, r, sem)):
                return why
        except (IndexError, RuntimeError):
            continue
    want = _doc_attention(cp, r)
    if y.dtype == want.dtype and same(
        y, _doc_attention(cp, r, Semantics(dtype=torch.float32)), atol=1e-5, rtol=1e-5
    ):
        return CH.why(
            "computed in float32", dtype=str(want.dtype).removeprefix("torch."), err=err(y, want)
        )
    return ""


@CH.task("allgather_documents")
def check_allgather_documents(fn, **_):
    for c in after_whole(RANKS.launch(_doc_body, fn)):
        where, cp, r = c["where"], c["cp"], c["gr"]
        if "error" in c:
            hint = CH.why("whole world passed hint") if c["after_whole"] else ""
            if "'list' object" in c["error"] or "'Tensor' object" in c["error"]:
                hint = CH.why("documents list or tensor hint")
            raise GradeFailure(f"{where} (cp = {cp}, {_docs_text(cp)}): {c['error']}{hint}")
        y = _tensor(c["y"], f"{where}: the output")
        want = _doc_attention(cp, r)
        if tuple(y.shape) != tuple(want.shape):
            raise CH.fail(
                "output shape", case=where, cp=cp, shape=tuple(y.shape), want=tuple(want.shape)
            )
        if same(y, want):
            continue
        why = _doc_mistake(y, cp, r, c["rank"])
        raise GradeFailure(
            f"{where} (cp = {cp}, {_docs_text(cp)}): "
            + (why if why else f"the output differs ({err(y, want)})")
        )
