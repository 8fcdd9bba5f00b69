"""Checkers for the expert-parallel exercises (``exercises/expert_parallel``).

Exercises 1 (top-K gates) and 4 (capacity dropping) run in this process; 2 (dispatch), 3
(combine) and 5 (dropless dispatch) run on gloo ranks in float64 on every layout of
:data:`RANKS`, the ranks holding different numbers of tokens (5 + group rank), the dispatches
under every routing of :data:`ROUTINGS`. A wrong answer is diagnosed from the actual result: the
checker recomputes what each classic mistake would give and names the one the answer matches,
with the rank, token or element where it shows. Every returned tensor's dtype and shape are
checked against what the exercise states (a 0/1 int64 mask is not a bool mask: indexing with it
gathers rows 0 and 1). Answers that call the course's ``minipar.expert_parallel`` are rejected
(:mod:`minipar.grading.imports`), except its ``all_to_all`` in exercise 3, which the exercise
hands the learner.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter

from minipar.grading import GradeFailure
from minipar.grading.compare import err as _err
from minipar.grading.compare import randn as _randn
from minipar.grading.compare import same as _same
from minipar.grading.compare import type_error
from minipar.grading.declare import Chapter, current_case, not_whole_world_hint

CHAPTER = "expert_parallel"
_A2A = ("all_to_all", "_AllToAll")
E, K2, H = 6, 2, 4  # experts (divisible by 1, 2, 3), top-2, hidden
CH = Chapter(CHAPTER)  # its tasks' PASS lines and named mistakes: clauses/expert_parallel.toml


# ----------------------------------------------------------------------------- helpers
ROUTINGS = CH.data["routings"]  # name -> label: the routings exercises 2 and 5 run on
EMPTY_EXPERTS = (E - 2, E - 1)


def _tokens(gr: int, routing: str = "random") -> int:
    if routing == "no_tokens":
        return 0 if gr == 0 else 5 + gr
    return 5 + gr if routing == "random" else 24 + 3 * gr


def _choices(gr: int, k: int = K2, routing: str = "random"):
    """This group rank's tokens x (n, H) and distinct expert choices (n, k), deterministic."""

    n = _tokens(gr, routing)
    logits = _randn(n, E, seed=50 + gr)
    if routing == "skewed":
        logits[:, 0] += 4.0  # expert 0 is nearly every token's first choice
        logits[:, list(EMPTY_EXPERTS)] = -float("inf")  # and experts 4, 5 nobody's
    return _randn(n, H, seed=10 + gr), logits.topk(k, dim=-1).indices


def _assignments(experts, order="slot", sort=True):
    """(token, expert) of every assignment: slot-major (a = j·n + i) or token-major, then a
    stable sort by expert unless ``sort`` is False."""
    import torch  # noqa: PLC0415 (lazy: torch)

    n, k = experts.shape
    if order == "slot":
        token, expert = torch.arange(n).repeat(k), experts.T.reshape(-1)
    else:
        token, expert = torch.arange(n).repeat_interleave(k), experts.reshape(-1)
    if sort:
        o = torch.argsort(expert, stable=True)
        token, expert = token[o], expert[o]
    return token, expert


def _expected_rows(gr: int, t: int, order="slot", sort=True, routing="random", k=K2):
    """Rows group rank ``gr`` receives from every source (and recv counts (t, E/t))."""
    import torch  # noqa: PLC0415 (lazy: torch)

    per = E // t
    rows, counts = [], torch.zeros(t, per, dtype=torch.long)
    for s in range(t):
        x, experts = _choices(s, k, routing)
        token, expert = _assignments(experts, order, sort)
        if sort:
            mine = (expert >= gr * per) & (expert < (gr + 1) * per)
        else:  # unsorted rows cut by the right split sizes
            c = torch.bincount(expert, minlength=E).view(t, per).sum(1).tolist()
            lo = sum(c[:gr])
            mine = torch.zeros_like(expert, dtype=torch.bool)
            mine[lo : lo + c[gr]] = True
        rows.append(x[token[mine]])
        for e in expert[(expert >= gr * per) & (expert < (gr + 1) * per)].tolist():
            counts[s, e - gr * per] += 1
    return torch.cat(rows), counts


def _dtype(x) -> str:
    return str(x.dtype)[6:]


# ----------------------------------------------------------------------------- ranks
def _hint(case: str, msg: str) -> str:
    """Words for a rank's exception: the first hint whose symptom shows in the case or message."""
    shows = {
        "receive buffer dtype hint": "different dtypes" in msg,
        "counts not a multiple hint": "in->size % context->size" in msg,
        "group": "of group" in case,
        "counts short hint": "get none" in case and "invalid for input of size" in msg,
        "splits disagree hint": "expected size" in msg or "split" in msg.lower(),
    }
    hint = next((name for name, hit in shows.items() if hit), None)
    if hint == "group":
        return not_whole_world_hint("EP")(case, msg)
    return CH.why(hint, lo=EMPTY_EXPERTS[0], hi=EMPTY_EXPERTS[1]) if hint else ""


RANKS = CH.layouts(size="t", hint=_hint, deadlock_note=lambda world: CH.why("deadlock note"))


# ----------------------------------------------------------------------------- 01 gates
def _ref_gates(logits, k):
    import torch  # noqa: PLC0415 (lazy: torch)

    p = torch.softmax(logits, -1)
    top, idx = p.topk(k, dim=-1)
    return top / top.sum(-1, keepdim=True), idx


@CH.task("top_k_gates")
def check_top_k_gates(fn, **_):
    import torch  # noqa: PLC0415 (lazy: torch)

    for n, e, k in ((7, 4, 2), (16, 8, 1), (1, 8, 3), (16, 8, 2)):
        logits = (2 * _randn(n, e, seed=n * 10 + e)).requires_grad_()
        got = fn(logits, k)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise GradeFailure("return a pair (gates, experts)")
        gates, experts = got
        where = f"n = {n}, E = {e}, K = {k}"
        if not isinstance(experts, torch.Tensor) or tuple(experts.shape) != (n, k):
            got = getattr(experts, "shape", type(experts).__name__)
            raise CH.fail("experts shape", where, n=n, k=k, got=got)
        if experts.dtype != torch.int64:
            raise CH.fail("experts dtype", where, dt=_dtype(experts))
        if isinstance(gates, torch.Tensor) and gates.dtype != logits.dtype:
            raise CH.fail("gates dtype", where, dt=_dtype(gates), want=_dtype(logits))
        _check_experts(where, experts, logits.detach(), k)
        _check_gates(where, gates, logits, k)


def _check_experts(where, experts, lg, k) -> None:
    """The chosen experts (an int64 (n, K) tensor) against the reference's."""
    import torch  # noqa: PLC0415 (lazy: torch)

    ref = _ref_gates(lg, k)[1]
    if torch.equal(experts, ref):
        return
    i = int((experts != ref).any(-1).nonzero()[0])
    slips = {
        "least likely": torch.equal(experts, lg.softmax(-1).topk(k, -1, largest=False).indices),
        "experts order": torch.equal(experts.sort(-1).values, ref.sort(-1).values),
        "softmax over tokens": torch.equal(experts, torch.softmax(lg, 0).topk(k, -1).indices),
    }
    got, want = experts[i].tolist(), ref[i].tolist()
    raise CH.first_slip(where, slips, "experts differ", i=i, k=k, got=got, want=want)


def _check_gates(where, gates, logits, k) -> None:
    """The gates' values against the reference's (the experts are right), then their gradient."""
    import torch  # noqa: PLC0415 (lazy: torch)

    lg = logits.detach()
    ref_g, ref_e = _ref_gates(lg, k)
    if not _same(gates, ref_g):
        if type_error(gates, ref_g):  # none of the slips below has another type
            raise CH.fail("gates differ", where, err=_err(gates, ref_g))
        chosen, over_tokens = (torch.softmax(lg, dim).gather(-1, ref_e) for dim in (-1, 0))
        slips = {
            "not renormalised": k > 1 and _same(gates, chosen),
            "softmax over tokens": _same(gates, over_tokens / over_tokens.sum(-1, keepdim=True)),
            "K = 1 not renormalised": k == 1 and _same(gates, chosen),
        }
        total = gates[0].sum().item()
        raise CH.first_slip(where, slips, "gates differ", total=total, err=_err(gates, ref_g))
    if not gates.requires_grad:
        raise CH.fail("gates detached", where)
    w = _randn(len(lg), k, seed=3)
    (g_got,) = torch.autograd.grad((gates * w).sum(), logits)
    lg = lg.requires_grad_()
    (g_ref,) = torch.autograd.grad((_ref_gates(lg, k)[0] * w).sum(), lg)
    if not _same(g_got, g_ref):
        raise CH.fail("gates' gradient differs", where, err=_err(g_got, g_ref))


# ----------------------------------------------------------------------------- 02 dispatch
def _routed(body):
    """Run ``body(gr, t, group, fn, routing)`` for every routing, each announced on stderr (a
    rank that raises names the routing)."""

    def on_case(gr, t, group, fn):
        out = {}
        for routing, label in ROUTINGS.items():
            os.write(2, f"minipar check: running case {current_case()}, {label}\n".encode())
            out[routing] = body(gr, t, group, fn, routing)
        return out

    return on_case


def _pair_body(gr, t, group, fn, routing):
    """The answer's pair (rows, counts or group sizes) on this rank's tokens."""
    import torch  # noqa: PLC0415 (lazy: torch)

    x, experts = _choices(gr, routing=routing)
    got = fn(x.clone(), experts.clone(), E, group)
    ok = isinstance(got, (tuple, list)) and len(got) == 2
    keep = lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v
    return {
        "rows": keep(got[0]) if ok else None,
        "counts": keep(got[1]) if ok else None,
        "pair": ok,
    }


def _reordered(rows, want, blocks) -> int:
    """When each block of ``want`` (sizes ``blocks``) holds the right rows of ``rows`` in
    another order, the largest block reordered, else 0."""
    import torch  # noqa: PLC0415 (lazy: torch)

    if rows.shape != want.shape:
        return 0
    pairs = list(zip(rows.split(blocks), want.split(blocks)))
    key = lambda m: m[torch.argsort(m[:, 0])] if len(m) else m
    if not all(torch.equal(key(a), key(b)) for a, b in pairs):
        return 0
    return max((len(b) for a, b in pairs if not torch.equal(a, b)), default=0)


@CH.task("dispatch")
def check_dispatch(fn, **_):
    for c in RANKS.launch(_routed(_pair_body), fn):
        for routing, label in ROUTINGS.items():
            _check_dispatch_case(c[routing], f"{c['where']}, {label}", c["gr"], c["t"], routing)


def _check_dispatch_case(r, where, gr, t, routing):
    import torch  # noqa: PLC0415 (lazy: torch)

    if not r["pair"]:
        raise GradeFailure(f"{where}: return a pair (rows, recv_counts)")
    want_rows, want = _expected_rows(gr, t, routing=routing)
    counts, rows = r["counts"], r["rows"]
    if not isinstance(counts, torch.Tensor) or tuple(counts.shape) != tuple(want.shape):
        got = tuple(getattr(counts, "shape", ()))
        raise CH.fail("counts shape", where, want=tuple(want.shape), got=got)
    if counts.dtype != torch.int64:
        raise CH.fail("counts dtype", where, dt=_dtype(counts))
    if not torch.equal(counts, want):
        sent = torch.bincount(_choices(gr, routing=routing)[1].reshape(-1), minlength=E)
        s, e = (int(v) for v in (counts != want).nonzero()[0])
        slips = {"counts sent": t > 1 and torch.equal(counts, sent.view(t, E // t))}
        got, want = int(counts[s, e]), int(want[s, e])
        raise CH.first_slip(where, slips, "counts differ", s=s, e=e, got=got, want=want)
    if not isinstance(rows, torch.Tensor) or rows.dtype != want_rows.dtype:
        dt, shape, got = _dtype(want_rows), tuple(want_rows.shape), getattr(rows, "dtype", None)
        raise CH.fail("rows type", where, dt=dt, shape=shape, got=got)
    if _same(rows, want_rows, atol=0):
        return
    rows_of = lambda **how: _expected_rows(gr, t, routing=routing, **how)[0]
    size = _reordered(rows, want_rows, want.flatten().tolist())
    slips = {
        "rows unsorted": t > 1 and _same(rows, rows_of(sort=False), atol=0),
        "rows token-major": _same(rows, rows_of(order="token"), atol=0),
        "rows reordered": size > 0,
    }
    raise CH.first_slip(where, slips, "rows received differ", size=size, err=_err(rows, want_rows))


# ----------------------------------------------------------------------------- 03 combine
def _combine_inputs(gr, t, k):
    """This rank's dispatch (as the course's reference does it), gates and the received rows
    through a fixed per-expert map, so the combine is all that is being checked."""
    import torch  # noqa: PLC0415 (lazy: torch)

    x, experts = _choices(gr, k)
    token, expert = _assignments(experts)
    gate = _randn(len(token), seed=70 + gr).abs() + 0.1  # (A,) positive gates
    send = torch.bincount(expert, minlength=E).view(t, E // t)
    rows, recv = _expected_rows(gr, t, k=k)
    return x, token, gate, send, recv, rows


def _expert_map(rows):
    """A stand-in for the experts: a fixed smooth function of each row."""
    return rows.tanh() * 2 + 0.5


def _combine_body(gr, t, group, fn):
    import torch  # noqa: PLC0415 (lazy: torch)

    out = {}
    for k in (1, K2):
        x, token, gate, send, recv, rows = _combine_inputs(gr, t, k)
        o = _expert_map(rows).requires_grad_()
        g = gate.clone().requires_grad_()
        y = fn(o, send.clone(), recv.clone(), token.clone(), g, len(x), group)
        out[k] = res = {"y": None, "dgate": None, "dout": None}
        if isinstance(y, torch.Tensor):
            res["y"] = y.detach().clone()
            with contextlib.suppress(RuntimeError):  # no graph: reported as no gradient
                (y * _randn(len(x), H, seed=90 + gr)).sum().backward()
                res["dgate"], res["dout"] = (
                    None if v.grad is None else v.grad.clone() for v in (g, o)
                )
    return out


@CH.task("combine", allow=_A2A)
def check_combine(fn, **_):
    for c in RANKS.launch(_combine_body, fn, allow=_A2A):
        for k in (1, K2):
            _check_combine_case(c[k], f"{c['where']}, top-{k}", c["gr"], c["t"], k)


def _check_combine_case(r, where, gr, t, k):
    import torch  # noqa: PLC0415 (lazy: torch)

    x, token, gate, _, _, _ = _combine_inputs(gr, t, k)
    n, back = len(x), _expert_map(x[token])  # rows back in dispatch order
    gated = gate[:, None] * back  # (A, h) dispatch order
    by_token = lambda rows: torch.zeros(n, H, dtype=torch.float64).index_add(0, token, rows)
    want, y = by_token(gated), r["y"]
    if y is None or y.dtype != want.dtype:
        raise CH.fail("y type", where, dt=_dtype(want), n=n, h=H)
    if not _same(y, want):
        in_dispatch_order = [gated] + ([gated.view(k, n, H).sum(0)] if len(token) == k * n else [])
        slips = {
            "no gates": _same(y, by_token(back)),
            "dispatch order": any(_same(y, d) for d in in_dispatch_order),
            "averaged": k > 1 and _same(y, want / k),
        }
        i = int((y - want).abs().amax(-1).argmax()) if y.shape == want.shape else 0
        raise CH.first_slip(where, slips, "y differs", err=_err(y, want), i=i)
    if r["dgate"] is None or r["dout"] is None:
        which = "the gates" if r["dgate"] is None else "the expert outputs"
        raise CH.fail("no gradient", where, which=which)
    want_dgate = (_randn(n, H, seed=90 + gr)[token] * back).sum(-1)  # dy as the ranks drew it
    if not _same(r["dgate"], want_dgate):
        raise CH.fail("dgate differs", where, err=_err(r["dgate"], want_dgate))


# ----------------------------------------------------------------------------- 04 capacity
def _ref_keep(experts, num_experts, capacity, order="slot", le=False, per_slot=False):
    """Keep each assignment whose place in its expert's queue (slot-major or token-major) is
    below C; the slips: ``le`` keeps place C too, ``per_slot`` restarts the queues each slot."""
    import torch  # noqa: PLC0415 (lazy: torch)

    n, k = experts.shape
    pairs = (
        [(i, j) for j in range(k) for i in range(n)]
        if order == "slot"
        else [(i, j) for i in range(n) for j in range(k)]
    )
    seen, keep = Counter(), torch.zeros(n, k, dtype=torch.bool)
    for i, j in pairs:
        queue = (int(experts[i, j]), j if per_slot else None)
        keep[i, j] = seen[queue] <= capacity if le else seen[queue] < capacity
        seen[queue] += 1
    return keep


@CH.task("keep_mask")
def check_keep_mask(fn, **_):
    import torch  # noqa: PLC0415 (lazy: torch)

    for n, e, k, cap in ((12, 4, 2, 3), (12, 4, 1, 2), (9, 3, 2, 1), (8, 4, 2, 100), (20, 5, 2, 5)):
        experts = _randn(n, e, seed=n + 7 * e).topk(k, dim=-1).indices
        where = f"n = {n}, E = {e}, K = {k}, C = {cap}"
        got = fn(experts.clone(), e, cap)
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != (n, k):
            raise CH.fail(
                "mask shape", where, n=n, k=k, got=getattr(got, "shape", type(got).__name__)
            )
        if got.dtype != torch.bool:
            raise CH.fail("mask dtype", where, dt=_dtype(got))
        if not torch.equal(got, _ref_keep(experts, e, cap)):
            _name_keep_slip(where, got, experts, e, cap)


def _name_keep_slip(where, got, experts, e, cap):
    """Raise why the mask ``got`` is not the first C of every expert's queue."""
    import torch  # noqa: PLC0415 (lazy: torch)

    want, k = _ref_keep(experts, e, cap), experts.shape[1]
    queue = lambda **rule: torch.equal(got, _ref_keep(experts, e, cap, **rule))
    kept = torch.bincount(experts[got], minlength=e)
    over = int(kept.max()) > cap  # an expert keeps more than C
    slips = {
        "keeps C + 1": over and queue(le=True),
        "capacity per slot": over and k > 1 and queue(per_slot=True),
        "keeps more than C": over,
        "queue token-major": queue(order="token"),
    }
    i, j = (int(v) for v in (got != want).nonzero()[0])
    ex = int(kept.argmax())
    was, should = ("kept" if m[i, j] else "dropped" for m in (got, want))
    fields = dict(ex=ex, kept=int(kept[ex]), cap=cap, i=i, j=j, chosen=int(experts[i, j]))
    raise CH.first_slip(where, slips, "mask differs", was=was, should=should, **fields)


# ----------------------------------------------------------------------------- 05 dropless
def _expert_major(rows, recv):
    """Source-major received rows -> expert-major (stable: sources in order within an expert)."""
    import torch  # noqa: PLC0415 (lazy: torch)

    t, per = recv.shape
    local = torch.arange(per).repeat(t).repeat_interleave(recv.flatten())
    return rows[torch.argsort(local, stable=True)]


@CH.task("dropless_dispatch")
def check_dropless_dispatch(fn, **_):
    for c in RANKS.launch(_routed(_pair_body), fn):
        for routing, label in ROUTINGS.items():
            r, where = c[routing], f"{c['where']}, {label}"
            if not r["pair"]:
                raise GradeFailure(f"{where}: return a pair (rows, sizes)")
            src_rows, recv = _expected_rows(c["gr"], c["t"], routing=routing)
            _check_group_sizes(where, r["counts"], recv, c["gr"], routing)
            _check_grouped_rows(where, r["rows"], src_rows, recv, c["gr"], routing)


def _check_group_sizes(where, sizes, recv, gr, routing):
    """The (E/ep,) int64 count of rows each local expert receives."""
    import torch  # noqa: PLC0415 (lazy: torch)

    t, want = len(recv), recv.sum(0)
    if not isinstance(sizes, torch.Tensor) or tuple(sizes.shape) != tuple(want.shape):
        if isinstance(sizes, torch.Tensor) and tuple(sizes.shape) == tuple(recv.shape) and t > 1:
            raise CH.fail("sizes per source", where, shape=tuple(recv.shape))
        m = len(sizes) if isinstance(sizes, torch.Tensor) and sizes.dim() == 1 else len(want)
        if m < len(want) and torch.equal(sizes.long(), want[:m]) and not want[m:].any():
            raise CH.fail("sizes short", where, m=m, per=len(want))
        got = getattr(sizes, "shape", type(sizes).__name__)
        raise CH.fail("sizes shape", where, want=tuple(want.shape), got=got)
    if sizes.dtype != torch.int64:
        raise CH.fail("sizes dtype", where, dt=_dtype(sizes))
    if torch.equal(sizes, want):
        return
    sent = torch.bincount(_choices(gr, routing=routing)[1].reshape(-1), minlength=E).view(t, -1)
    e = int((sizes != want).nonzero()[0])
    slips = {
        "sizes sent": torch.equal(sizes, sent.sum(0)) or (t > 1 and torch.equal(sizes, sent[gr]))
    }
    raise CH.first_slip(where, slips, "sizes differ", e=e, got=int(sizes[e]), want=int(want[e]))


def _check_grouped_rows(where, rows, src_rows, recv, gr, routing):
    """The received rows expert-major (sources in order within an expert), for one grouped GEMM."""
    import torch  # noqa: PLC0415 (lazy: torch)

    t, want = len(recv), _expert_major(src_rows, recv)
    if type_error(rows, want):
        got = f"{getattr(rows, 'dtype', type(rows).__name__)} {tuple(getattr(rows, 'shape', ()))}"
        raise CH.fail("grouped rows type", where, dt=_dtype(want), shape=tuple(want.shape), got=got)
    if torch.equal(rows, want):
        return
    rows_of = lambda **how: _expected_rows(gr, t, routing=routing, **how)
    in_assignment_order = (rows_of(order=o, sort=False)[0] for o in ("slot", "token"))
    size = _reordered(rows, want, recv.T.flatten().tolist())  # blocks expert-major
    slips = {
        "rows source-major": t > 1 and torch.equal(rows, src_rows),
        "rows unsorted": t > 1 and torch.equal(rows, _expert_major(*rows_of(sort=False))),
        "one rank unsorted": t == 1 and any(torch.equal(rows, a) for a in in_assignment_order),
        "rows token-major": torch.equal(rows, _expert_major(*rows_of(order="token"))),
        "rows reordered": size > 0,
        "sources reordered": _reordered(rows, want, recv.sum(0).tolist()) > 0,
    }
    biggest = int(recv.sum(0).max())
    raise CH.first_slip(
        where, slips, "rows differ", size=size, biggest=biggest, err=_err(rows, want)
    )
