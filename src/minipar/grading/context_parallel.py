"""Checkers for the context-parallel exercises (``exercises/context_parallel``).

Exercise 1 (merging two softmax blocks) runs in this process under the grader's CPU-time limit.
Exercises 2-5 run the learner's code on gloo ranks (:func:`minipar.grading.limits.run_ranks`) in
float64, in three layouts of the CP group, because a CP group is rarely the whole world (in a
grid with TP innermost it is strided):

* the whole world of 3 ranks (``group=None``, cp = 3);
* on the same 3 ranks, a group of one rank ({0}, cp = 1) next to the group {1, 2} (cp = 2);
* on 4 ranks, both CP groups {0, 2} and {1, 3} of a (cp = 2, t = 2) grid at once.

The inputs encode where each element came from (a token's global position, a head's index), so a
wrong answer is diagnosed from what it actually returned: the checker names the positions, heads
or source rank a rank got and the classic mistake that gives them (a contiguous split, the
mirrored chunk off by one, chunks in the wrong order, global instead of group ranks, the ring
turning the wrong way, blocks merged without their log-sum-exp weights, heads interleaved). Exercise
5 (all-gather attention over packed documents) names a wrong output by the semantics it matches:
no document mask, no causal mask, a strict causal mask, local or global-rank positions, K/V heads
repeated instead of interleaved, scores not scaled.
Answers that use the course's own ``minipar.context_parallel`` are rejected
(:mod:`minipar.grading.imports`).
"""

from __future__ import annotations

import math

from minipar.grading import GradeFailure, task
from minipar.grading.compare import err, randn, same
from minipar.grading.declare import Layouts
from minipar.grading.imports import forbid_course_code

CHAPTER = "context_parallel"

# world size -> [(label, CP groups or None for the whole world)], run in this order
LAYOUTS = {
    3: [
        ("the whole world of 3 ranks", None),
        ("CP groups {0} and {1, 2} of 3 ranks", [[0], [1, 2]]),
    ],
    4: [("both CP groups {0, 2} and {1, 3} of a (cp = 2, t = 2) grid", [[0, 2], [1, 3]])],
}


# ----------------------------------------------------------------------------- running
def _hint(case: str, msg: str) -> str:
    if "of group" in case and ("rank" in msg.lower() or "peer" in msg.lower()):
        return (
            " -- this case's CP group is not the whole world: use dist.get_rank(group), "
            "dist.get_world_size(group), and global ranks (dist.get_global_rank(group, r)) "
            "where torch asks for them"
        )
    return ""


RANKS = Layouts(CHAPTER, LAYOUTS, size="cp", hint=_hint)


def _tensor(x, what: str):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _tensor needs it)

    if not isinstance(x, torch.Tensor):
        raise GradeFailure(f"{what}: expected a tensor, got {type(x).__name__}")
    return x


# ----------------------------------------------------------------------------- 01 merge
def _blocks(logit: float, seed: int):
    """Two disjoint key blocks of one attention problem: (q, k, v, block results, full result)."""
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _blocks needs it)

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


def _call_merge(fn, o_a, l_a, o_b, l_b, case):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _call_merge needs it)

    args = [t.clone() for t in (o_a, l_a, o_b, l_b)]
    res = fn(*args)
    if not all(torch.equal(a, b) for a, b in zip(args, (o_a, l_a, o_b, l_b))):
        raise GradeFailure(f"{case}: merge changed one of its inputs in place")
    if not isinstance(res, (tuple, list)) or len(res) != 2:
        raise GradeFailure(
            f"{case}: merge must return (o, lse), got {type(res).__name__}"
            + (f" of length {len(res)}" if isinstance(res, (tuple, list)) else "")
        )
    return _tensor(res[0], f"{case}: o"), _tensor(res[1], f"{case}: lse")


def _merge_diagnosis(o, lse, o_a, l_a, o_b, l_b, want_o, want_lse, case) -> None:
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _merge_diagnosis needs it)

    if same(o, want_o) and same(lse, want_lse):
        return
    if not torch.isfinite(o).all():
        bad = "NaN" if torch.isnan(o).any() else "inf"
        raise GradeFailure(
            f"{case}: o contains {bad}: "
            + (
                "a fully masked block has lse = -inf, and -inf - (-inf) is NaN: use weights "
                "exp(lse_x - lse) with lse = logaddexp(lse_a, lse_b), guarding lse = -inf"
                if torch.isneginf(l_b).any()
                else "the logits are ~1000, so exp(lse) overflows: exponentiate only lse_x - lse, "
                "which is <= 0"
            )
        )
    if same(lse, torch.maximum(l_a, l_b)) and not same(lse, want_lse):
        raise GradeFailure(
            f"{case}: lse is max(lse_a, lse_b); it must be log(e^lse_a + e^lse_b) (torch.logaddexp)"
        )
    if not same(lse, want_lse):
        raise GradeFailure(
            f"{case}: lse differs from the log-sum-exp over both blocks ({err(lse, want_lse)})"
        )
    if same(o, (o_a + o_b) / 2):
        raise GradeFailure(
            f"{case}: o is the average of o_a and o_b: weight each block by its "
            "share of the softmax mass, exp(lse_x - lse)"
        )
    if same(o, o_a + o_b):
        raise GradeFailure(
            f"{case}: o is o_a + o_b: each block's output is normalised by its "
            "own sum; rescale it by exp(lse_x - lse) before adding"
        )
    wa, wb = torch.exp(l_a - want_lse).unsqueeze(-1), torch.exp(l_b - want_lse).unsqueeze(-1)
    if same(o, wb * o_a + wa * o_b):
        raise GradeFailure(f"{case}: the two weights are swapped: o_a takes exp(lse_a - lse)")
    if not same(o, want_o):
        raise GradeFailure(
            f"{case}: o differs from softmax attention over both blocks ({err(o, want_o)})"
        )


@task(
    "context_parallel.merge_softmax_blocks",
    "merging two blocks' (o, lse) equals softmax attention over both, at logits ~1000 and "
    "with a fully masked block",
)
def check_merge_softmax_blocks(fn, **_):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only check_merge_softmax_blocks needs it)

    forbid_course_code(fn, CHAPTER, what="write the merge")
    for logit, case in ((3.0, "small logits"), (1e3, "logits of size ~1000")):
        ((o_a, l_a), (o_b, l_b)), (want_o, want_lse) = _blocks(logit, seed=1)
        o, lse = _call_merge(fn, o_a, l_a, o_b, l_b, case)
        _merge_diagnosis(o, lse, o_a, l_a, o_b, l_b, want_o, want_lse, case)
    # a fully masked block: lse = -inf, o = 0; merging it changes nothing
    ((o_a, l_a), _), _ = _blocks(10.0, seed=2)
    o_b, l_b = torch.zeros_like(o_a), torch.full_like(l_a, float("-inf"))
    case = "block b fully masked (lse_b = -inf, o_b = 0)"
    o, lse = _call_merge(fn, o_a, l_a, o_b, l_b, case)
    _merge_diagnosis(o, lse, o_a, l_a, o_b, l_b, o_a, l_a, case)
    o, lse = _call_merge(fn, o_b, l_b, o_a, l_a, case.replace("block b", "block a"))
    _merge_diagnosis(o, lse, o_b, l_b, o_a, l_a, o_a, l_a, case.replace("block b", "block a"))


# ----------------------------------------------------------------------------- 02 zigzag
S = 12  # divisible by 2·cp for cp = 1, 2, 3


def _zigzag_body(gr, cp, group, fn):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _zigzag_body needs it)

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
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _positions_got needs it)

    y = _tensor(y, f"{where}: the shard")
    if y.dim() != 3:
        raise GradeFailure(f"{where}: the shard has {y.dim()} dimensions, expected 3 (same as x)")
    first = y.movedim(dim, 0).reshape(y.shape[dim], -1)
    if not torch.equal(first, first[:, :1].expand_as(first)):
        raise GradeFailure(
            f"{where}: the shard mixes positions across dimension {dim}: "
            f"split x along dim={dim} only"
        )
    return [int(v) for v in first[:, 0].tolist()]


def _zigzag_mistake(got, cp, r, world_rank, world) -> str:
    n = S // (2 * cp)
    if got == list(range(r * 2 * n, (r + 1) * 2 * n)):
        return "that is chunk r of cp contiguous chunks: zigzag takes chunks r and 2cp−1−r of 2cp"
    if got == _zigzag_positions(S, cp, r)[n:] + _zigzag_positions(S, cp, r)[:n]:
        return "the two chunks are in the wrong order: chunk r first, then chunk 2cp−1−r"
    if 2 * cp - r < 2 * cp and got == list(range(r * n, (r + 1) * n)) + list(
        range((2 * cp - r) * n, (2 * cp - r + 1) * n)
    ):
        return "the second chunk is 2cp−r: it is 2cp−1−r (chunks are numbered from 0)"
    if world_rank != r or world != cp:
        wn = S // (2 * world) if S % (2 * world) == 0 else None
        if wn and got == _zigzag_positions(S, world, world_rank):
            return (
                f"that is the zigzag shard of global rank {world_rank} of {world}: use the group's rank and "
                "size (dist.get_rank(group), dist.get_world_size(group))"
            )
    return ""


@task(
    "context_parallel.zigzag_shard",
    "zigzag_shard gives rank r chunks r and 2cp−1−r of 2cp (cp = 1, 2, 3; the whole world, "
    "subgroups, both CP groups of a 2 × 2 grid; dims 1 and 2)",
)
def check_zigzag_shard(fn, **_):
    forbid_course_code(fn, CHAPTER, what="write the zigzag shard")
    for c in RANKS.launch(_zigzag_body, fn, what="write the zigzag shard"):
        for dim in (1, 2):
            where = f"{c['where']}, dim={dim}"
            dtype = getattr(c[dim], "dtype", None)
            if dtype is not None and str(dtype) != "torch.float64":
                raise GradeFailure(
                    f"{where}: dtype {str(dtype)[6:]}, expected float64, x's dtype (a shard "
                    "is a part of x: no .float())"
                )
            got = _positions_got(c[dim], dim, where)
            want = _zigzag_positions(S, c["cp"], c["gr"])
            if got != want:
                why = _zigzag_mistake(got, c["cp"], c["gr"], c["rank"], c["world"])
                raise GradeFailure(
                    f"{where} (cp = {c['cp']}, s = {S}): got positions {got}, "
                    f"expected {want}" + (f": {why}" if why else "")
                )


# ----------------------------------------------------------------------------- 03 ring step
B, A, N, D = 1, 2, 3, 4  # per rank: q, k, v (b, a, n, d)


def _full_qkv(cp):
    q, k, v = (randn(B, A, N * cp, D, seed=40 + i) for i in range(3))
    z = (q @ k.transpose(-2, -1)).abs().max() / math.sqrt(D)
    scale = math.sqrt(100.0 / float(z))  # largest logit ~100
    return q * scale, k * scale, v


def _ring_body(gr, cp, group, fn):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _ring_body needs it)

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
        src = next(
            (
                j
                for j in range(cp)
                if isinstance(kl, torch.Tensor)
                and tuple(kl.shape) == (B, A, N, D)
                and torch.equal(kl, k[:, :, j * N : (j + 1) * N])
            ),
            None,
        )
        sources.append(src)
    return {"o": o.detach().clone() if isinstance(o, torch.Tensor) else o, "sources": sources}


def _ring_reference(cp, r):
    """The correct output of rank r, and what the classic mistakes give."""
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _ring_reference needs it)

    q, k, v = _full_qkv(cp)
    ql = q[:, :, r * N : (r + 1) * N]
    z = ql @ k.transpose(-2, -1) / math.sqrt(D)  # (b, a, n, s)
    want = torch.softmax(z, -1) @ v
    blocks = []
    for j in range(cp):
        zj = z[..., j * N : (j + 1) * N]
        blocks.append(torch.softmax(zj, -1) @ v[:, :, j * N : (j + 1) * N])
    return want, blocks


@task(
    "context_parallel.ring_step",
    "cp ring steps give exact attention, each block received from the previous rank "
    "(cp = 1, 2, 3; the whole world, subgroups, both CP groups of a 2 × 2 grid)",
)
def check_ring_step(fn, **_):
    forbid_course_code(fn, CHAPTER, what="write the ring step")
    passed_whole = False
    for c in RANKS.launch(_ring_body, fn, what="write the ring step"):
        where, cp, r = c["where"], c["cp"], c["gr"]
        if "bad return" in c:
            raise GradeFailure(
                f"{where}: ring_step must return (o, lse, k_next, v_next), got {c['bad return']}"
            )
        want_src = [(r - i - 1) % cp for i in range(cp)]
        got = c["sources"]
        if got != want_src:
            if None in got:
                i = got.index(None)
                raise GradeFailure(
                    f"{where}: after step {i} the returned k_next is not any "
                    "rank's K block: return the block received from the "
                    "previous rank, unchanged"
                )
            if got == [(r + i + 1) % cp for i in range(cp)]:
                raise GradeFailure(
                    f"{where}: the ring turns the wrong way: rank {r} received "
                    f"the block of rank {got[0]} first; send to rank r+1, "
                    "receive from rank r−1"
                )
            if not c["whole"] and passed_whole:
                raise GradeFailure(
                    f"{where}: received blocks from group ranks {got}, expected "
                    f"{want_src} (the whole-world case passed: P2POp takes "
                    "global ranks; translate with dist.get_global_rank(group, r))"
                )
            raise GradeFailure(f"{where}: received blocks from ranks {got}, expected {want_src}")
        o = _tensor(c["o"], f"{where}: o")
        want, blocks = _ring_reference(cp, r)
        if same(o, want):
            passed_whole = passed_whole or c["whole"]
            continue
        if cp > 1 and same(o, sum(blocks) / cp):
            raise GradeFailure(
                f"{where}: o is the average of the {cp} blocks' outputs: merge "
                "with the log-sum-exp weights exp(lse_x − lse)"
            )
        if cp > 1 and same(o, sum(blocks)):
            raise GradeFailure(
                f"{where}: o is the sum of the blocks' normalised outputs: merge "
                "with the log-sum-exp weights"
            )
        for j, blk in enumerate(blocks):
            if cp > 1 and same(o, blk):
                raise GradeFailure(
                    f"{where}: o is attention over rank {j}'s block only: merge "
                    "each step's block result into the running (o, lse) instead "
                    "of replacing it"
                )
        raise GradeFailure(
            f"{where}: o differs from attention over the whole sequence ({err(o, want)})"
        )


# ----------------------------------------------------------------------------- 04 Ulysses
UA, US = 6, 12  # heads, sequence: divisible by cp = 1, 2, 3


def _ulysses_full():
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _ulysses_full needs it)

    h = torch.arange(UA, dtype=torch.float64).view(1, UA, 1, 1)
    p = torch.arange(US, dtype=torch.float64).view(1, 1, US, 1)
    d = torch.arange(2, dtype=torch.float64).view(1, 1, 1, 2)
    return (1000 * h + p + 0.25 * d).expand(2, UA, US, 2).clone()  # value = 1000·head + pos


def _ulysses_body(gr, cp, group, fn):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _ulysses_body needs it)

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


@task(
    "context_parallel.seq_to_heads",
    "seq_to_heads turns (b, a, s/cp, d) into this rank's a/cp heads of all s tokens, and "
    "rejects heads not divisible by cp (cp = 1, 2, 3; the whole world, subgroups, both CP "
    "groups of a 2 × 2 grid)",
)
def check_seq_to_heads(fn, **_):
    forbid_course_code(fn, CHAPTER, what="write the all-to-all")
    full = _ulysses_full()
    for c in RANKS.launch(_ulysses_body, fn, what="write the all-to-all"):
        where, cp, r = c["where"], c["cp"], c["gr"]
        y = _tensor(c["y"], f"{where}: the result")
        ah = UA // cp
        want = full[:, r * ah : (r + 1) * ah]
        if tuple(y.shape) != tuple(want.shape):
            raise GradeFailure(
                f"{where} (cp = {cp}): shape {tuple(y.shape)}, expected "
                f"{tuple(want.shape)} = (b, a/cp, s, d)"
            )
        if not same(y, want):
            heads = sorted({int(v) // 1000 for v in y[0, :, 0, 0].tolist()})
            pos = [int(round(float(v) % 1000)) for v in y[0, 0, :, 0].tolist()]
            if heads != list(range(r * ah, (r + 1) * ah)):
                why = (
                    f"heads {heads}: rank r keeps the contiguous heads "
                    f"[r·a/cp, (r+1)·a/cp) = {list(range(r * ah, (r + 1) * ah))}"
                )
                if heads == list(range(r, UA, cp)):
                    why += "; these are every cp-th head (split the head dim as (cp, a/cp), not (a/cp, cp))"
                raise GradeFailure(f"{where} (cp = {cp}): got {why}")
            if pos != list(range(US)):
                raise GradeFailure(
                    f"{where} (cp = {cp}): token positions along s are {pos}, "
                    "expected 0…s−1 in order: the parts received from ranks "
                    "0…cp−1 are consecutive sequence chunks, stack them in that order"
                )
            raise GradeFailure(f"{where} (cp = {cp}): values differ ({err(y, want)})")
        if cp > 1:
            want_msg = f"heads (5) must be divisible by cp ({cp})"
            if c["error"] is None:
                raise GradeFailure(
                    f"{where}: 5 heads on cp = {cp} ranks gave no error: raise "
                    f'ValueError("{want_msg}")'
                )
            if c["error"] != want_msg:
                raise GradeFailure(
                    f"{where}: 5 heads on cp = {cp} ranks raised "
                    f'"{c["error"][:120]}", expected ValueError("{want_msg}")'
                )


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


def _doc_attention(
    cp,
    r,
    *,
    docs=True,
    causal=True,
    strict=False,
    q_rank=None,
    heads="interleave",
    scale=True,
    q_doc_local=False,
    boundary=0,
    dtype=None,
):
    """Rank r's output under a stated semantics (the right one with the defaults): the checker
    names a wrong answer by the semantics it matches. ``q_doc_local``: the queries' document
    ids read at local positions 0…n−1; ``boundary``: every document id moved one position later
    (+1: a document's first token counted in the one before) or earlier (−1); ``dtype``: the
    arithmetic in that dtype, the result cast back to q's."""
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _doc_attention needs it)

    q, k, v = _doc_qkv(cp)
    out_dtype = q.dtype
    if dtype is not None:
        q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    s = GN * cp
    q_rank = r if q_rank is None else q_rank
    q = q[:, :, r * GN : (r + 1) * GN]
    rep = (
        (lambda t: t.repeat_interleave(GA // GKV, 1))
        if heads == "interleave"
        else (lambda t: t.repeat(1, GA // GKV, 1, 1))
    )
    k, v = rep(k), rep(v)
    doc = torch.repeat_interleave(torch.arange(len(DOCS[cp])), torch.tensor(DOCS[cp]))
    if boundary > 0:  # (s,) position p gets position p−1's document
        doc = torch.cat([doc[:1], doc[:-1]])
    elif boundary < 0:  # position p gets position p+1's document
        doc = torch.cat([doc[1:], doc[-1:]])
    qp, kp = torch.arange(q_rank * GN, (q_rank + 1) * GN), torch.arange(s)
    keep = torch.ones(GN, s, dtype=torch.bool)
    if causal:
        keep &= (kp[None] < qp[:, None]) if strict else (kp[None] <= qp[:, None])
    if docs:
        keep &= doc[kp][None] == doc[qp - q_rank * GN if q_doc_local else qp][:, None]
    z = q @ k.transpose(-2, -1) / (math.sqrt(GD) if scale else 1.0)
    return (torch.softmax(z.masked_fill(~keep, float("-inf")), -1) @ v).to(out_dtype)


def _doc_body(gr, cp, group, fn):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _doc_body needs it)

    q, k, v = _doc_qkv(cp)
    sl = slice(gr * GN, (gr + 1) * GN)
    try:
        docs = torch.tensor(DOCS[cp]) if cp in DOCS_AS_TENSOR else list(DOCS[cp])
        y = fn(q[:, :, sl].clone(), k[:, :, sl].clone(), v[:, :, sl].clone(), docs, group)
    except Exception as e:  # named in the verdict, with the case
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
    return {"y": y.detach().clone() if isinstance(y, torch.Tensor) else y}


def _doc_mistake(y, cp, r, world_rank) -> str:
    """The one-line reason of a wrong output, from the semantics it matches."""
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _doc_mistake needs it)

    if not torch.isfinite(y).all():
        if same(
            torch.nan_to_num(y, nan=0.0),
            torch.nan_to_num(_doc_attention(cp, r, strict=True), nan=0.0),
        ):
            return (
                "NaN where a query sees no key: a query must see its own key (j ≤ i, not "
                "j < i); the first token of a document sees only itself"
            )
        return "the output contains NaN or inf"
    named = [
        (
            dict(docs=False),
            "attention crosses document boundaries: keys of other "
            "documents must be masked, not only future keys",
        ),
        (
            dict(causal=False),
            "queries see later keys of their document: the mask must "
            "also be causal (key position ≤ query position)",
        ),
        (
            dict(q_rank=0),
            "the mask uses local query positions 0…n−1: rank r's queries sit "
            "at global positions r·n … r·n+n−1",
        ),
        (
            dict(heads="repeat"),
            "query head i must read K/V head i // (a/a_kv) "
            "(repeat_interleave), not i % a_kv (repeat)",
        ),
        (dict(scale=False), "the scores are not divided by √d"),
        (
            dict(q_doc_local=True),
            "the queries' document ids are read at their local positions 0…n−1 (the causal "
            "mask is right): rank r's query i is at global position r·n + i, and its "
            "document is that position's",
        ),
        (
            dict(boundary=1),
            "each document's first token is counted in the document before it (an "
            "off-by-one at the boundaries): a document of start p0 and length L holds "
            "positions p0 ≤ p < p0 + L",
        ),
        (
            dict(boundary=-1),
            "each document's last token is counted in the document after it (an "
            "off-by-one at the boundaries): a document of start p0 and length L holds "
            "positions p0 ≤ p < p0 + L",
        ),
    ]
    if world_rank != r:
        named.append(
            (
                dict(q_rank=world_rank),
                f"the mask places the queries at global rank "
                f"{world_rank}'s positions: use the group's rank, dist.get_rank(group)",
            )
        )
    for kw, why in named:
        try:
            if same(y, _doc_attention(cp, r, **kw)):
                return why
        except (IndexError, RuntimeError):
            continue
    want = _doc_attention(cp, r)
    if y.dtype == want.dtype and same(
        y, _doc_attention(cp, r, dtype=torch.float32), atol=1e-5, rtol=1e-5
    ):
        return (
            f"the output is {_dtype_name(want)} but matches the attention computed in float32 "
            f"and cast back ({err(y, want)}, float32's rounding): compute in q's dtype, "
            "float64 here, within 1e-7"
        )
    return ""


def _dtype_name(t) -> str:
    return str(t.dtype).removeprefix("torch.")


@task(
    "context_parallel.allgather_documents",
    "all-gather K/V, then causal attention within each packed document by global position, "
    "with grouped-query attention (cp = 1, 2, 3; the whole world, subgroups, both CP groups "
    "of a 2 × 2 grid)",
)
def check_allgather_documents(fn, **_):
    forbid_course_code(fn, CHAPTER, what="write the all-gather attention")
    passed_whole = False
    for c in RANKS.launch(_doc_body, fn, what="write the all-gather attention"):
        where, cp, r = c["where"], c["cp"], c["gr"]
        if "error" in c:
            hint = ""
            if not c["whole"] and passed_whole:
                hint = (
                    " -- the whole-world case passed: use the group's rank and size "
                    "(dist.get_rank(group), dist.get_world_size(group)) and pass group= "
                    "to the all-gather"
                )
            if "'list' object" in c["error"] or "'Tensor' object" in c["error"]:
                hint = (
                    " -- documents comes as a list in some cases and as a 1-D tensor in "
                    "others: accept both (torch.as_tensor(documents) makes either a tensor)"
                )
            raise GradeFailure(f"{where} (cp = {cp}, {_docs_text(cp)}): {c['error']}{hint}")
        y = _tensor(c["y"], f"{where}: the output")
        want = _doc_attention(cp, r)
        if tuple(y.shape) != tuple(want.shape):
            raise GradeFailure(
                f"{where} (cp = {cp}): shape {tuple(y.shape)}, expected "
                f"{tuple(want.shape)} = (b, a, n, d)"
            )
        if same(y, want):
            passed_whole = passed_whole or c["whole"]
            continue
        why = _doc_mistake(y, cp, r, c["rank"])
        raise GradeFailure(
            f"{where} (cp = {cp}, {_docs_text(cp)}): "
            + (why if why else f"the output differs ({err(y, want)})")
        )
