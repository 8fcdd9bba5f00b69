"""Checkers for the expert-parallel exercises (``exercises/expert_parallel``).

Exercises 1 (top-K gates) and 4 (capacity dropping) run in this process against a reference
written here. Exercises 2 (dispatch) and 3 (combine) run on gloo ranks
(:func:`minipar.grading.limits.run_ranks`) in float64 in four layouts of the EP group, since an
EP group is rarely the whole world: the whole world of 3 ranks; on the same 3 ranks the groups
{0} and {1, 2}; on 4 ranks both groups {0, 1} and {2, 3} of a 2 × 2 grid, then {0, 3} and
{1, 2} (not consecutive). Ranks hold different numbers of tokens (5 + group rank), so every
split is uneven; exercises 2 and 5 also route 24 + 3·rank tokens away from the two
highest-numbered experts (:data:`ROUTINGS`).

A wrong answer is diagnosed from the actual result: the checker recomputes what each classic
mistake would give (gates not renormalised, the smallest experts, softmax over the tokens;
rows not sorted by expert, token-major instead of slot-major order, counts not exchanged; the
combine without gates, in dispatch order, with the splits not swapped; a capacity applied
token-major, with ≤ C, per slot; dropless rows left in source order, group sizes per source or
as sent) and names the one the answer matches, with the rank, token or element where it shows.
Every returned tensor's dtype and shape are checked against what the exercise states (a 0/1
int64 mask is not a bool mask: indexing with it gathers rows 0 and 1). Exercise 5 (dropless
dispatch, expert-major rows and group sizes for one grouped GEMM) runs on ranks like 2 and 3.
Answers that call the course's ``minipar.expert_parallel`` are rejected
(:mod:`minipar.grading.imports`), except its ``all_to_all`` in exercise 3, which the exercise
hands the learner.
"""

from __future__ import annotations

import os

from minipar.grading import GradeFailure, task
from minipar.grading.compare import err as _err
from minipar.grading.compare import randn as _randn
from minipar.grading.compare import same as _same
from minipar.grading.declare import Layouts, current_case, not_whole_world_hint
from minipar.grading.imports import forbid_course_code

CHAPTER = "expert_parallel"
_A2A = ("all_to_all", "_AllToAll")
E, K2, H = 6, 2, 4  # experts (divisible by 1, 2, 3), top-2, hidden

LAYOUTS = {
    3: [
        ("the whole world of 3 ranks", None),
        ("EP groups {0} and {1, 2} of 3 ranks", [[0], [1, 2]]),
    ],
    4: [
        ("both EP groups {0, 1} and {2, 3} of a 2 × 2 grid", [[0, 1], [2, 3]]),
        ("EP groups {0, 3} and {1, 2} of 4 ranks (not consecutive)", [[0, 3], [1, 2]]),
    ],
}


# ----------------------------------------------------------------------------- helpers
# the routings exercises 2 and 5 run on every layout: a random one (every expert chosen), and a
# skewed one that leaves the two highest-numbered experts without a token (counts shorter than
# E betray a bincount without minlength) and sends most tokens to expert 0, so that a local
# expert receives more rows from one source than an unstable sort keeps in order
# (tests/test_grading_expert_parallel.py measures that count on the installed torch); and one
# where the group's rank 0 holds no token at all (n = 0: it sends nothing, but still receives)
ROUTINGS = {
    "random": "top-2 routing of 5 + rank tokens",
    "skewed": "skewed routing of 24 + 3·rank tokens (experts 4 and 5 get none, expert 0 most)",
    "no_tokens": "top-2 routing of 5 + rank tokens, except group rank 0, which holds no token "
    "(n = 0)",
}
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
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _assignments needs it)

    n, k = experts.shape
    if order == "slot":
        token, expert = torch.arange(n).repeat(k), experts.T.reshape(-1)
    else:
        token, expert = torch.arange(n).repeat_interleave(k), experts.reshape(-1)
    if sort:
        o = torch.argsort(expert, stable=True)
        token, expert = token[o], expert[o]
    return token, expert


def _expected_rows(gr: int, t: int, order="slot", sort=True, routing="random"):
    """Rows group rank ``gr`` receives from every source (and recv counts (t, E/t))."""
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _expected_rows needs it)

    per = E // t
    rows, counts = [], torch.zeros(t, per, dtype=torch.long)
    for s in range(t):
        x, experts = _choices(s, routing=routing)
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


# ----------------------------------------------------------------------------- ranks
def _hint(case: str, msg: str) -> str:
    if "different dtypes" in msg:
        return (
            " -- the receive buffer's dtype is not the rows' (the message names both): "
            "allocate the all-to-all's output in the input's dtype (x.new_empty, or "
            "dtype=x.dtype; the check's rows are float64), since torch.empty defaults to float32"
        )
    if "in->size % context->size" in msg:
        return (
            " -- the counts are short: their length is not a multiple of the group's size, "
            "because torch.bincount returns max + 1 bins, and here the highest-numbered "
            "experts receive no token: pass bincount minlength=E, one count per expert"
        )
    if "of group" in case:
        return not_whole_world_hint("EP")(case, msg)
    if "get none" in case and "invalid for input of size" in msg:
        return (
            " -- the counts have fewer than E entries: torch.bincount returns max + 1 bins, and "
            f"here experts {EMPTY_EXPERTS[0]} and {EMPTY_EXPERTS[1]} receive no token (give "
            "bincount the number of bins)"
        )
    if "expected size" in msg or "split" in msg.lower():
        return (
            " -- the split sizes disagree between ranks: a rank's output splits must be what "
            "the others send it (exchange the counts with an all-to-all first; the combine "
            "swaps the two lists)"
        )
    return ""


def _deadlock_note(world: int) -> str:
    return (
        " (in the dispatch exercises one routing gives each group's rank 0 no token: a rank "
        "that holds no token (n = 0) still receives rows, so it must make every collective "
        "call too)"
    )


RANKS = Layouts(CHAPTER, LAYOUTS, size="t", hint=_hint, deadlock_note=_deadlock_note)


# ----------------------------------------------------------------------------- 01 gates
def _ref_gates(logits, k):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _ref_gates needs it)

    p = torch.softmax(logits, -1)
    top, idx = p.topk(k, dim=-1)
    return top / top.sum(-1, keepdim=True), idx


@task(
    "expert_parallel.top_k_gates",
    "gates are the top-K softmax probabilities renormalised to 1, largest first, with the "
    "reference's gradients (n = 1, 7, 16; E = 4, 8; K = 1, 2, 3)",
)
def check_top_k_gates(fn, **_):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only check_top_k_gates needs it)

    forbid_course_code(fn, CHAPTER, what="write the gating")
    for n, e, k in ((7, 4, 2), (16, 8, 1), (1, 8, 3), (16, 8, 2)):
        logits = (2 * _randn(n, e, seed=n * 10 + e)).requires_grad_()
        got = fn(logits, k)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            raise GradeFailure("return a pair (gates, experts)")
        gates, experts = got
        ref_g, ref_e = _ref_gates(logits.detach(), k)
        where = f"n = {n}, E = {e}, K = {k}"
        if not isinstance(experts, torch.Tensor) or tuple(experts.shape) != (n, k):
            raise GradeFailure(
                f"{where}: experts must be a tensor of shape ({n}, {k}), got "
                f"{getattr(experts, 'shape', type(experts).__name__)}"
            )
        if experts.dtype != torch.int64:
            raise GradeFailure(
                f"{where}: experts has dtype {str(experts.dtype)[6:]}, expected "
                "int64 (expert indices, as topk returns them)"
            )
        if isinstance(gates, torch.Tensor) and gates.dtype != logits.dtype:
            raise GradeFailure(
                f"{where}: gates have dtype {str(gates.dtype)[6:]}, expected "
                f"{str(logits.dtype)[6:]}, the logits' (no .float())"
            )
        if not torch.equal(experts.long(), ref_e):
            p = torch.softmax(logits.detach(), -1)
            i = int((experts.long() != ref_e).any(-1).nonzero()[0])
            if torch.equal(experts.long(), p.topk(k, dim=-1, largest=False).indices):
                raise GradeFailure(
                    f"{where}: token {i} was sent to its {k} LEAST likely "
                    "experts: take the largest probabilities (topk's default)"
                )
            if torch.equal(experts.long().sort(-1).values, ref_e.sort(-1).values):
                raise GradeFailure(
                    f"{where}: token {i}'s experts are right but not in order: "
                    "list them largest probability first"
                )
            if torch.equal(experts.long(), torch.softmax(logits.detach(), 0).topk(k, -1).indices):
                raise GradeFailure(
                    f"{where}: the softmax ran over the tokens (dim 0): take it "
                    "over the experts, the last dimension"
                )
            raise GradeFailure(
                f"{where}: token {i} chose experts {experts[i].tolist()}, "
                f"expected {ref_e[i].tolist()}"
            )
        if not isinstance(gates, torch.Tensor) or not _same(gates, ref_g):
            if (
                isinstance(gates, torch.Tensor)
                and k > 1
                and _same(gates, torch.softmax(logits.detach(), -1).gather(-1, ref_e))
            ):
                raise GradeFailure(
                    f"{where}: the gates are the softmax probabilities of the "
                    f"chosen experts, not renormalised: token 0's sum to "
                    f"{gates[0].sum().item():.3f}; divide by their sum"
                )
            if isinstance(gates, torch.Tensor) and _same(
                gates,
                torch.softmax(logits.detach(), 0).gather(-1, ref_e)
                / torch.softmax(logits.detach(), 0).gather(-1, ref_e).sum(-1, keepdim=True),
            ):
                raise GradeFailure(
                    f"{where}: the softmax ran over the tokens (dim 0): take it "
                    "over the experts, the last dimension"
                )
            if (
                isinstance(gates, torch.Tensor)
                and k == 1
                and _same(gates, torch.softmax(logits.detach(), -1).gather(-1, ref_e))
            ):
                raise GradeFailure(
                    f"{where}: with K = 1 the renormalised gate is 1 (the "
                    "probability divided by itself): divide by the sum"
                )
            raise GradeFailure(f"{where}: gates differ from the reference ({_err(gates, ref_g)})")
        if not gates.requires_grad:
            raise GradeFailure(
                f"{where}: the gates carry no gradient: do not detach them or "
                "build them outside autograd (the router learns through them)"
            )
        w = _randn(n, k, seed=3)
        (g_got,) = torch.autograd.grad((gates * w).sum(), logits)
        lg = logits.detach().requires_grad_()
        (g_ref,) = torch.autograd.grad((_ref_gates(lg, k)[0] * w).sum(), lg)
        if not _same(g_got, g_ref):
            raise GradeFailure(
                f"{where}: the gradient with respect to the logits differs ({_err(g_got, g_ref)})"
            )


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


def _dispatch_body(gr, t, group, fn, routing):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _dispatch_body needs it)

    x, experts = _choices(gr, routing=routing)
    got = fn(x.clone(), experts.clone(), E, group)
    ok = isinstance(got, (tuple, list)) and len(got) == 2
    tensor = lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else None
    return {
        "rows": tensor(got[0]) if ok else None,
        "counts": tensor(got[1]) if ok else None,
        "pair": ok,
    }


def _order_fault(where, rows, want, blocks, what) -> None:
    """Raise the unstable-sort reason when every block of ``want`` (sizes ``blocks``: one source's
    rows for one expert) holds the right rows in another order."""
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _order_fault needs it)

    if rows.shape != want.shape:
        return
    pairs = list(zip(rows.split(blocks), want.split(blocks)))
    key = lambda m: m[torch.argsort(m[:, 0])] if len(m) else m
    if all(torch.equal(key(a), key(b)) for a, b in pairs):
        size = max(len(b) for a, b in pairs if not torch.equal(a, b))
        raise GradeFailure(
            f"{where}: {what} are the right rows in another order ({size} rows share one "
            "expert there): a sort that is not stable reorders equal keys once there are "
            "more than a few; the assignments' order must survive every sort by expert"
        )


@task(
    "expert_parallel.dispatch",
    "each rank receives its experts' rows from every source, by source then local expert, in "
    "priority order, and the (ep, E/ep) counts (ep = 1, 2, 3; the whole world, a subgroup, "
    "both groups of a 2 × 2 grid, groups not consecutive; uneven token counts, top-2; a "
    "routing that leaves experts 4 and 5 empty; a rank with no token)",
)
def check_dispatch(fn, **_):
    forbid_course_code(fn, CHAPTER, what="write the dispatch")
    for c in RANKS.launch(_routed(_dispatch_body), fn):
        for routing, label in ROUTINGS.items():
            _check_dispatch_case(c[routing], f"{c['where']}, {label}", c["gr"], c["t"], routing)


def _check_dispatch_case(r, where, gr, t, routing):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _check_dispatch_case needs it)

    if not r["pair"]:
        raise GradeFailure(f"{where}: return a pair (rows, recv_counts)")
    want_rows, want_counts = _expected_rows(gr, t, routing=routing)
    counts = r["counts"]
    if not isinstance(counts, torch.Tensor) or tuple(counts.shape) != tuple(want_counts.shape):
        raise GradeFailure(
            f"{where}: recv_counts must have shape (ep, E/ep) = "
            f"{tuple(want_counts.shape)}, got "
            f"{tuple(getattr(counts, 'shape', ()))}"
        )
    if counts.dtype != torch.int64:
        raise GradeFailure(
            f"{where}: recv_counts has dtype {str(counts.dtype)[6:]}, "
            "expected int64 (counts, as bincount returns them)"
        )
    if not torch.equal(counts.long(), want_counts):
        sent = torch.bincount(_choices(gr, routing=routing)[1].reshape(-1), minlength=E)
        if t > 1 and torch.equal(counts.long(), sent.view(t, E // t)):
            raise GradeFailure(
                f"{where}: recv_counts are the counts this rank SENDS: "
                "exchange them with an all-to-all to learn what it receives"
            )
        s, e = (int(v) for v in (counts.long() != want_counts).nonzero()[0])
        raise GradeFailure(
            f"{where}: recv_counts[{s}, {e}] = {int(counts[s, e])}, but source "
            f"rank {s} sends {int(want_counts[s, e])} rows to local expert {e}"
        )
    rows = r["rows"]
    if rows is None or rows.dtype != want_rows.dtype:
        raise GradeFailure(
            f"{where}: rows must be a {str(want_rows.dtype)[6:]} tensor (the "
            f"input's dtype) of shape {tuple(want_rows.shape)}, got "
            f"{getattr(rows, 'dtype', None)}"
        )
    if _same(rows, want_rows, atol=0):
        return
    if t > 1 and _same(rows, _expected_rows(gr, t, sort=False, routing=routing)[0], atol=0):
        raise GradeFailure(
            f"{where}: the rows were sent in token order, not sorted by "
            "expert: sort the assignments by expert (so by destination) "
            "before the all-to-all"
        )
    if _same(rows, _expected_rows(gr, t, order="token", routing=routing)[0], atol=0):
        raise GradeFailure(
            f"{where}: within an expert the rows are in token-major order "
            "(token 0's choices, then token 1's): number the assignments "
            "slot-major, a = j·n + i, before the stable sort"
        )
    _order_fault(
        where,
        rows,
        want_rows,
        want_counts.flatten().tolist(),
        "the rows one source sent one expert",
    )
    raise GradeFailure(f"{where}: the rows received differ ({_err(rows, want_rows)})")


# ----------------------------------------------------------------------------- 03 combine
def _combine_inputs(gr, t, k):
    """This rank's dispatch (as the course's reference does it), gates and the received rows
    through a fixed per-expert map, so the combine is all that is being checked."""
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _combine_inputs needs it)

    x, experts = _choices(gr, k)
    per = E // t
    token, expert = _assignments(experts)
    gate = _randn(len(token), seed=70 + gr).abs() + 0.1  # (A,) positive gates
    send = torch.bincount(expert, minlength=E).view(t, per)
    rows, recv = _expected_rows(gr, t) if k == K2 else _rows_k(gr, t, k)
    return x, token, expert, gate, send, recv, rows


def _rows_k(gr, t, k):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _rows_k needs it)

    per = E // t
    rows, counts = [], torch.zeros(t, per, dtype=torch.long)
    for s in range(t):
        x, experts = _choices(s, k)
        token, expert = _assignments(experts)
        mine = (expert >= gr * per) & (expert < (gr + 1) * per)
        rows.append(x[token[mine]])
        for e in expert[mine].tolist():
            counts[s, e - gr * per] += 1
    return torch.cat(rows), counts


def _expert_map(rows):
    """A stand-in for the experts: a fixed smooth function of each row."""
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _expert_map needs it)

    return torch.tanh(rows) * 2 + 0.5


def _combine_body(gr, t, group, fn):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _combine_body needs it)

    out = {}
    for k in (1, K2):
        x, token, expert, gate, send, recv, rows = _combine_inputs(gr, t, k)
        o = _expert_map(rows).requires_grad_()
        g = gate.clone().requires_grad_()
        y = fn(o, send.clone(), recv.clone(), token.clone(), g, len(x), group)
        dy = _randn(len(x), H, seed=90 + gr)
        if not isinstance(y, torch.Tensor):
            out[k] = {"y": None, "dgate": None, "dout": None}
            continue
        res = {"y": y.detach().clone()}
        try:
            (y * dy).sum().backward()
            res["dgate"] = None if g.grad is None else g.grad.clone()
            res["dout"] = None if o.grad is None else o.grad.clone()
        except RuntimeError as e:  # no graph: reported as no gradient
            res["dgate"] = res["dout"] = None
            res["no graph"] = str(e)[:120]
        out[k] = res
    return out


@task(
    "expert_parallel.combine",
    "the combine returns Σ gate · expert output in the original token order, with the "
    "gradients of the gates and the expert outputs (ep = 1, 2, 3; the whole world, a "
    "subgroup, both groups of a 2 × 2 grid, groups not consecutive; top-1 and top-2)",
)
def check_combine(fn, **_):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only check_combine needs it)

    forbid_course_code(fn, CHAPTER, allow=_A2A, what="write the combine")
    for c in RANKS.launch(_combine_body, fn, allow=_A2A):
        where, gr, t = c["where"], c["gr"], c["t"]
        for k in (1, K2):
            r = c[k]
            x, token, expert, gate, send, recv, rows = _combine_inputs(gr, t, k)
            back = _expert_map(x[token])  # rows back in dispatch order
            n = len(x)
            want = torch.zeros(n, H, dtype=torch.float64).index_add(0, token, gate[:, None] * back)
            y, case = r["y"], f"{where}, top-{k}"
            if y is None or y.dtype != want.dtype:
                raise GradeFailure(
                    f"{case}: return y, a {str(want.dtype)[6:]} tensor (the "
                    f"input's dtype) of shape ({n}, {H})"
                )
            if not _same(y, want):
                no_gate = torch.zeros(n, H, dtype=torch.float64).index_add(0, token, back)
                if _same(y, no_gate):
                    raise GradeFailure(
                        f"{case}: the outputs were added without their gates: "
                        "scale row a by gate[a] before adding it to its token"
                    )
                rows_g = gate[:, None] * back  # (A, h) dispatch order
                in_dispatch_order = [rows_g] + (
                    [rows_g.view(k, n, H).sum(0)] if len(token) == k * n else []
                )
                if any(_same(y, d) for d in in_dispatch_order):
                    raise GradeFailure(
                        f"{case}: the rows are in dispatch (expert-sorted) "
                        "order, not token order: add row a to y[token[a]] "
                        "(index_add)"
                    )
                if k > 1 and _same(y, want / k):
                    raise GradeFailure(
                        f"{case}: the output is the gated sum divided by K: the "
                        "gates already sum to one per token; add, do not average"
                    )
                i = int((y - want).abs().amax(-1).argmax()) if y.shape == want.shape else 0
                raise GradeFailure(
                    f"{case}: y differs from Σ gate · expert output ({_err(y, want)}; token {i})"
                )
            if r["dgate"] is None or r["dout"] is None:
                which = "the gates" if r["dgate"] is None else "the expert outputs"
                raise GradeFailure(
                    f"{case}: no gradient reached {which}: build y with "
                    "differentiable operations and the course's all_to_all (not "
                    "dist.all_to_all_single, which autograd does not see)"
                )
            dy = _randn(n, H, seed=90 + gr)
            want_dgate = (dy[token] * back).sum(-1)
            if not _same(r["dgate"], want_dgate):
                raise GradeFailure(
                    f"{case}: the gates' gradient differs ({_err(r['dgate'], want_dgate)})"
                )


# ----------------------------------------------------------------------------- 04 capacity
def _ref_keep(experts, num_experts, capacity, order="slot", le=False, per_slot=False):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _ref_keep needs it)

    n, k = experts.shape
    seen = torch.zeros(num_experts, dtype=torch.long)
    keep = torch.zeros(n, k, dtype=torch.bool)
    pairs = (
        [(i, j) for j in range(k) for i in range(n)]
        if order == "slot"
        else [(i, j) for i in range(n) for j in range(k)]
    )
    last_j = 0
    for i, j in pairs:
        if per_slot and j != last_j:
            seen.zero_()
            last_j = j
        e = int(experts[i, j])
        keep[i, j] = bool(seen[e] <= capacity) if le else bool(seen[e] < capacity)
        seen[e] += 1
    return keep


@task(
    "expert_parallel.keep_mask",
    "the kept assignments are the first C of each expert's queue in priority order (slot, "
    "then token): top-1 and top-2, C = 1 up to no drop",
)
def check_keep_mask(fn, **_):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only check_keep_mask needs it)

    forbid_course_code(fn, CHAPTER, what="write the capacity rule")
    for n, e, k, cap in ((12, 4, 2, 3), (12, 4, 1, 2), (9, 3, 2, 1), (8, 4, 2, 100), (20, 5, 2, 5)):
        experts = _randn(n, e, seed=n + 7 * e).topk(k, dim=-1).indices
        want = _ref_keep(experts, e, cap)
        where = f"n = {n}, E = {e}, K = {k}, C = {cap}"
        got = fn(experts.clone(), e, cap)
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != (n, k):
            raise GradeFailure(
                f"{where}: return a bool tensor of shape ({n}, {k}), got "
                f"{getattr(got, 'shape', type(got).__name__)}"
            )
        if got.dtype != torch.bool:
            raise GradeFailure(
                f"{where}: the mask has dtype {str(got.dtype)[6:]}, expected bool: "
                "indexing with a 0/1 integer tensor gathers rows 0 and 1 "
                "instead of selecting the kept ones"
            )
        if torch.equal(got, want):
            continue
        kept = torch.bincount(experts[got], minlength=e)
        if int(kept.max()) > cap:
            ex = int(kept.argmax())
            if torch.equal(got, _ref_keep(experts, e, cap, le=True)):
                raise GradeFailure(
                    f"{where}: expert {ex} keeps {int(kept[ex])} assignments, "
                    f"C + 1: keep positions 0 … C−1 (position < C, not ≤ C)"
                )
            if k > 1 and torch.equal(got, _ref_keep(experts, e, cap, per_slot=True)):
                raise GradeFailure(
                    f"{where}: expert {ex} keeps {int(kept[ex])} > C: the count "
                    "restarts for each slot; the capacity covers all slots"
                )
            raise GradeFailure(
                f"{where}: expert {ex} keeps {int(kept[ex])} assignments, more than C = {cap}"
            )
        if torch.equal(got, _ref_keep(experts, e, cap, order="token")):
            i, j = (int(v) for v in (got != want).nonzero()[0])
            raise GradeFailure(
                f"{where}: the queue is token-major (token 0's choices, then "
                f"token 1's): token {i}'s choice {j} is {'kept' if got[i, j] else 'dropped'} "
                "but every first choice must queue before any second choice"
            )
        i, j = (int(v) for v in (got != want).nonzero()[0])
        raise GradeFailure(
            f"{where}: token {i}'s choice {j} (expert {int(experts[i, j])}) "
            f"should be {'kept' if want[i, j] else 'dropped'}"
        )


# ----------------------------------------------------------------------------- 05 dropless
def _dropless_body(gr, t, group, fn, routing):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _dropless_body needs it)

    x, experts = _choices(gr, routing=routing)
    got = fn(x.clone(), experts.clone(), E, group)
    ok = isinstance(got, (tuple, list)) and len(got) == 2
    keep = lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v
    return {"rows": keep(got[0]) if ok else None, "sizes": keep(got[1]) if ok else None, "pair": ok}


def _expert_major(rows, recv):
    """Source-major received rows -> expert-major (stable: sources in order within an expert)."""
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _expert_major needs it)

    t, per = recv.shape
    local = torch.arange(per).repeat(t).repeat_interleave(recv.flatten())
    return rows[torch.argsort(local, stable=True)]


def _same_groups_any_order(rows, want, sizes) -> bool:
    """Each expert's group holds the right rows, in some order."""
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _same_groups_any_order needs it)

    if rows.shape != want.shape:
        return False
    for a, b in zip(rows.split(sizes), want.split(sizes)):
        key = lambda m: m[torch.argsort(m[:, 0])] if len(m) else m
        if not torch.equal(key(a), key(b)):
            return False
    return True


@task(
    "expert_parallel.dropless_dispatch",
    "each rank receives its experts' rows expert-major (sources in order within an expert), "
    "ready for one grouped GEMM, and the (E/ep,) int64 group sizes (ep = 1, 2, 3; the whole "
    "world, a subgroup, both groups of a 2 × 2 grid, groups not consecutive; uneven token "
    "counts, top-2; a routing that leaves experts 4 and 5 empty; a rank with no token)",
)
def check_dropless_dispatch(fn, **_):
    forbid_course_code(fn, CHAPTER, what="write the dispatch")
    for c in RANKS.launch(_routed(_dropless_body), fn):
        for routing, label in ROUTINGS.items():
            _check_dropless_case(c[routing], f"{c['where']}, {label}", c["gr"], c["t"], routing)


def _check_dropless_case(r, where, gr, t, routing):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _check_dropless_case needs it)

    if not r["pair"]:
        raise GradeFailure(f"{where}: return a pair (rows, sizes)")
    src_rows, recv = _expected_rows(gr, t, routing=routing)
    want_sizes, want_rows = recv.sum(0), _expert_major(src_rows, recv)
    sizes, rows = r["sizes"], r["rows"]
    if isinstance(sizes, torch.Tensor) and tuple(sizes.shape) == tuple(recv.shape) and t > 1:
        raise GradeFailure(
            f"{where}: sizes has shape (ep, E/ep) = {tuple(recv.shape)}, the "
            "received counts per source: a grouped GEMM needs one size per "
            "local expert, (E/ep,): sum them over the sources"
        )
    if (
        isinstance(sizes, torch.Tensor)
        and sizes.dim() == 1
        and len(sizes) < len(want_sizes)
        and torch.equal(sizes.long(), want_sizes[: len(sizes)])
        and not want_sizes[len(sizes) :].any()
    ):
        raise GradeFailure(
            f"{where}: sizes has {len(sizes)} entries, not E/ep = {len(want_sizes)}: this "
            "rank's last experts receive no row here, and torch.bincount returns max + 1 "
            "bins (give it the number of bins)"
        )
    if not isinstance(sizes, torch.Tensor) or tuple(sizes.shape) != tuple(want_sizes.shape):
        raise GradeFailure(
            f"{where}: sizes must be a tensor of shape (E/ep,) = "
            f"{tuple(want_sizes.shape)}, got "
            f"{getattr(sizes, 'shape', type(sizes).__name__)}"
        )
    if sizes.dtype != torch.int64:
        raise GradeFailure(
            f"{where}: sizes has dtype {str(sizes.dtype)[6:]}, expected int64 "
            "(group sizes are counts: keep bincount's dtype)"
        )
    if not torch.equal(sizes, want_sizes):
        sent = torch.bincount(_choices(gr, routing=routing)[1].reshape(-1), minlength=E)
        sent = sent.view(t, E // t)
        if torch.equal(sizes, sent.sum(0)) or (t > 1 and torch.equal(sizes, sent[gr])):
            raise GradeFailure(
                f"{where}: sizes count rows this rank SENDS, not those its "
                "experts receive: exchange the counts with an all-to-all first"
            )
        e = int((sizes != want_sizes).nonzero()[0])
        raise GradeFailure(
            f"{where}: sizes[{e}] = {int(sizes[e])}, but local expert {e} "
            f"receives {int(want_sizes[e])} rows"
        )
    if (
        not isinstance(rows, torch.Tensor)
        or rows.dtype != want_rows.dtype
        or tuple(rows.shape) != tuple(want_rows.shape)
    ):
        raise GradeFailure(
            f"{where}: rows must be a {str(want_rows.dtype)[6:]} tensor of "
            f"shape {tuple(want_rows.shape)} (the input's dtype), got "
            f"{getattr(rows, 'dtype', type(rows).__name__)} "
            f"{tuple(getattr(rows, 'shape', ()))}"
        )
    if torch.equal(rows, want_rows):
        return
    if t > 1 and torch.equal(rows, src_rows):
        raise GradeFailure(
            f"{where}: the rows are grouped by source rank (the order the "
            "all-to-all delivers), not by local expert: permute them "
            "expert-major before the grouped GEMM"
        )
    unsorted = _expected_rows(gr, t, sort=False, routing=routing)
    if t > 1 and torch.equal(rows, _expert_major(*unsorted)):
        raise GradeFailure(
            f"{where}: the rows were sent in token order, not sorted by "
            "expert: sort the assignments by expert (so by destination) "
            "before the all-to-all"
        )
    if t == 1 and any(
        torch.equal(rows, _expected_rows(gr, 1, order=o, sort=False, routing=routing)[0])
        for o in ("slot", "token")
    ):
        raise GradeFailure(
            f"{where}: with one rank the rows are in the order of the assignments, not "
            "grouped by expert: nothing is sent, but the grouped GEMM still needs expert 0's "
            "rows first, then expert 1's: sort them by expert (stably) with ep = 1 too"
        )
    if torch.equal(rows, _expert_major(*_expected_rows(gr, t, order="token", routing=routing))):
        raise GradeFailure(
            f"{where}: within an expert the rows are in token-major order "
            "(token 0's choices, then token 1's): number the assignments "
            "slot-major, a = j·n + i, before the stable sort"
        )
    blocks = recv.T.flatten().tolist()  # expert-major: expert 0's sources, then expert 1's...
    _order_fault(where, rows, want_rows, blocks, "the rows one source sent one expert")
    if _same_groups_any_order(rows, want_rows, want_sizes.tolist()):
        biggest = int(want_sizes.max())
        raise GradeFailure(
            f"{where}: every expert has the right rows but not in source "
            f"order (up to {biggest} rows share one expert here): permute with a "
            "sort that keeps the order of equal keys, so the sources keep their order"
        )
    raise GradeFailure(f"{where}: the rows differ ({_err(rows, want_rows)})")
