"""Checkers for the tensor-parallel exercises (``exercises/tensor_parallel``).

Each runs the learner's code on gloo ranks (:func:`minipar.grading.limits.run_ranks`) in float64
and compares with one process on the unsharded computation. Every answer runs in three layouts
of the tensor-parallel group, because a TP group is rarely the whole world (inside a 3D grid it
is one of several):

* the whole world of 3 ranks (``group=None``, t = 3), then on the same ranks a group of one
  rank each (t = 1);
* on 4 ranks, both TP groups of a 2 × 2 grid ({0, 1} and {2, 3}) at once, then groups {0, 3}
  and {1, 2} (not consecutive ranks).

A wrong answer is diagnosed from the actual difference: the checker recomputes in one process
what each classic mistake would give on that rank (f without its backward all-reduce, a sum
over the whole world instead of the group, the row bias added per rank, a shard that is a view
of the full weight, a cross-entropy without the global max, with a local one, with the sum of
exponentials or the target logit not reduced, with the max not detached, a target owned by no
rank or by two; the sequence-parallel gradients averaged or not reduced) and names the one the
answer matches, with the rank, token or parameter where it shows. Answers that use the course's
own ``minipar.tensor_parallel`` (other than f and g, which exercise 1 builds and the later
exercises use) are rejected (:mod:`minipar.grading.imports`).
"""

from __future__ import annotations

import copy
import os

from minipar.grading import GradeFailure, task
from minipar.grading.compare import err as _err
from minipar.grading.compare import randn as _randn
from minipar.grading.compare import same as _same
from minipar.grading.declare import Layouts, current_case, not_whole_world_hint
from minipar.grading.imports import forbid_course_code

CHAPTER = "tensor_parallel"
_FG = ("copy_to_tp_region", "reduce_from_tp_region", "_CopyToTPRegion", "_ReduceFromTPRegion")

# world size -> [(label, TP groups or None for the whole world)], run in this order. In each
# layout every group has the same size, so code that ignores its group makes the same calls on
# every rank: it sums over the world (a wrong value, named) instead of waiting for a rank that
# never joins (a deadlock, which would hide which layout broke it)
LAYOUTS = {
    3: [
        ("the whole world of 3 ranks", None),
        ("TP groups {0}, {1} and {2} of 3 ranks", [[0], [1], [2]]),
    ],
    4: [
        ("both TP groups {0, 1} and {2, 3} of a 2 × 2 grid", [[0, 1], [2, 3]]),
        ("TP groups {0, 3} and {1, 2} of 4 ranks", [[0, 3], [1, 2]]),
    ],
}


# ----------------------------------------------------------------------------- running
def _deadlock_note(world):
    if not any(g for _, g in LAYOUTS[world]):
        return ""
    return (
        f" (this launch runs TP groups {[g for _, g in LAYOUTS[world]]} inside "
        f"a world of {world} ranks: a collective without group= waits for "
        "ranks of other groups)"
    )


def _hint(case: str, msg: str) -> str:
    if "out of bounds" in msg and "target" in case:
        return (
            " -- the targets include every shard boundary, 0 and V−1: is a target outside "
            "this rank's ids lo ≤ target < hi masked before it is used as an index?"
        )
    return not_whole_world_hint("TP")(case, msg)


RANKS = Layouts(CHAPTER, LAYOUTS, size="t", allow=_FG, hint=_hint, deadlock_note=_deadlock_note)


def _not_whole(case, passed_whole: bool) -> str:
    """Context for a case whose TP group is not the whole world."""
    if case["whole"] or not passed_whole:
        return ""
    return (
        f" (the whole-world case passed; here the TP group is {case['members']} and rank "
        f"{case['rank']} is its rank {case['gr']}: use dist.get_rank(group) and "
        "dist.get_world_size(group), and pass group= to every collective)"
    )


# ----------------------------------------------------------------------------- 01 f and g
def _f_body(gr, t, group, fn):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _f_body needs it)

    x = _randn(4, 6, seed=1).requires_grad_()  # (4, 6) the same on every rank
    y = fn(x, group)
    unchanged = torch.equal(x.detach(), _randn(4, 6, seed=1))
    (y * _randn(4, 6, seed=100 + gr)).sum().backward()  # each rank uses x differently
    return dict(y=y.detach(), grad=None if x.grad is None else x.grad.clone(), unchanged=unchanged)


def _group_sum(seed0, case):
    """(sum over the case's group, sum over the whole world) of _randn(4, 6, seed0 + group rank)."""
    group = sum(_randn(4, 6, seed=seed0 + k) for k in range(case["t"]))
    world = sum(_randn(4, 6, seed=seed0 + k) for k in case["gr_of"])
    return group, world


@task(
    "tensor_parallel.copy_to_tp_region",
    "f is the identity forward and sums the gradient over its group backward (t = 1, 2, 3; "
    "the whole world, both groups of a 2 × 2 grid, a subgroup)",
)
def check_copy_to_tp_region(fn, **_):
    forbid_course_code(fn, CHAPTER, what="write f")
    passed_whole = False
    for c in RANKS.launch(_f_body, fn, allow=()):
        _rank, t, where = c["rank"], c["t"], c["where"]
        x = _randn(4, 6, seed=1)
        if not c["unchanged"]:
            raise GradeFailure(f"{where}: f modified its input x in place")
        if not _same(c["y"], x):
            if t > 1 and _same(c["y"], t * x):
                raise GradeFailure(
                    f"{where}: f's forward all-reduced x: the forward is the "
                    "identity, every rank already holds x"
                )
            raise GradeFailure(f"{where}: f's forward changed x ({_err(c['y'], x)})")
        g = c["grad"]
        if g is None:
            raise GradeFailure(f"{where}: no gradient reached x: return the gradient from backward")
        total, world_total = _group_sum(100, c)
        own = _randn(4, 6, seed=100 + c["gr"])
        if _same(g, total):
            passed_whole = passed_whole or c["whole"]
            continue
        if t > 1 and _same(g, own):
            raise GradeFailure(
                f"{where}: x.grad is this rank's own partial gradient: f's "
                f"backward must all-reduce (sum) it over the group's {t} ranks"
            )
        if not c["whole"] and _same(g, world_total):
            raise GradeFailure(
                f"{where}: f's backward summed over all {c['world']} ranks of "
                f"the world, not over its group {c['members']}: honour the "
                "group argument (all_reduce(..., group=group))"
            )
        if t > 1 and _same(g, total / t):
            raise GradeFailure(
                f"{where}: x.grad is the MEAN over the {t} ranks: f's backward "
                "is the sum, not the average"
            )
        raise GradeFailure(
            f"{where}: x.grad differs from the sum of the group's gradients "
            f"({_err(g, total)})" + _not_whole(c, passed_whole)
        )


def _g_body(gr, t, group, fn):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _g_body needs it)

    x = _randn(4, 6, seed=10 + gr).requires_grad_()  # this rank's partial result
    y = fn(x, group)
    unchanged = torch.equal(x.detach(), _randn(4, 6, seed=10 + gr))
    (y * _randn(4, 6, seed=7)).sum().backward()  # y is replicated: same use everywhere
    return dict(y=y.detach(), grad=None if x.grad is None else x.grad.clone(), unchanged=unchanged)


@task(
    "tensor_parallel.reduce_from_tp_region",
    "g sums the partial results over its group forward and is the identity backward (t = 1, "
    "2, 3; the whole world, both groups of a 2 × 2 grid, a subgroup)",
)
def check_reduce_from_tp_region(fn, **_):
    forbid_course_code(fn, CHAPTER, what="write g")
    passed_whole = False
    for c in RANKS.launch(_g_body, fn, allow=()):
        t, where = c["t"], c["where"]
        total, world_total = _group_sum(10, c)
        own, w = _randn(4, 6, seed=10 + c["gr"]), _randn(4, 6, seed=7)
        if not c["unchanged"]:
            raise GradeFailure(
                f"{where}: g reduced its input in place: all-reduce a copy, the "
                "caller's tensor must not change"
            )
        if not _same(c["y"], total):
            if t > 1 and _same(c["y"], own):
                raise GradeFailure(
                    f"{where}: g's forward returned this rank's partial result: "
                    f"it must all-reduce (sum) over the group's {t} ranks"
                )
            if not c["whole"] and _same(c["y"], world_total):
                raise GradeFailure(
                    f"{where}: g's forward summed over all {c['world']} ranks "
                    f"of the world, not over its group {c['members']}: honour "
                    "the group argument (all_reduce(..., group=group))"
                )
            if t > 1 and _same(c["y"], total / t):
                raise GradeFailure(f"{where}: g's forward is the mean, not the sum")
            raise GradeFailure(
                f"{where}: g's forward differs from the group's sum "
                f"({_err(c['y'], total)})" + _not_whole(c, passed_whole)
            )
        g = c["grad"]
        if g is None:
            raise GradeFailure(f"{where}: no gradient reached the input")
        if _same(g, w):
            passed_whole = passed_whole or c["whole"]
            continue
        if t > 1 and _same(g, t * w):
            raise GradeFailure(
                f"{where}: the gradient is {t} times too large: g's backward "
                "all-reduced again; it must be the identity"
            )
        raise GradeFailure(
            f"{where}: g's backward changed the gradient ({_err(g, w)}): it is the identity"
        )


# ----------------------------------------------------------------------------- 02 MLP
H = 12


def _mlp_full():
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _mlp_full needs it)
    import torch.nn as nn  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _mlp_full needs it)

    torch.manual_seed(3)
    fc1, fc2 = nn.Linear(H, 4 * H).double(), nn.Linear(4 * H, H).double()
    with torch.no_grad():
        fc2.bias.add_(1.0)  # a bias large enough to see twice
    return fc1, fc2


def _mlp_body(gr, t, group, cls):
    fc1, fc2 = _mlp_full()
    m = cls(copy.deepcopy(fc1), copy.deepcopy(fc2), group).double()
    params = [(name, q) for name, q in m.named_parameters()]
    stored = sum(q.numel() for _, q in params)
    storages, per_param = {}, []
    for name, q in params:  # bytes kept alive, per storage
        st = q.untyped_storage()
        storages[st.data_ptr()] = st.nbytes()
        per_param.append((name, tuple(q.shape), q.numel() * q.element_size(), st.nbytes()))
    x = _randn(2, 5, H, seed=4).requires_grad_()  # (b, s, h)
    y = m(x)
    (y * _randn(2, 5, H, seed=5)).sum().backward()
    grads = [q.grad.clone() for _, q in params if q.grad is not None]
    return dict(
        y=y.detach(),
        dx=None if x.grad is None else x.grad.clone(),
        grads=grads,
        stored=stored,
        storage_bytes=sum(storages.values()),
        per_param=per_param,
    )


@task(
    "tensor_parallel.column_row_mlp",
    "the column→row MLP equals the unsharded one (output, input and weight gradients) for "
    "t = 1, 2, 3 (the whole world, both groups of a 2 × 2 grid, a subgroup), each rank's "
    "parameters holding 1/t of the weights in storage",
)
def check_column_row_mlp(cls, **_):
    import torch.nn.functional as F  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only check_column_row_mlp needs it)

    forbid_course_code(cls, CHAPTER, allow=_FG, what="write the parallel MLP")
    fc1, fc2 = _mlp_full()
    x = _randn(2, 5, H, seed=4).requires_grad_()
    dy = _randn(2, 5, H, seed=5)
    ref = fc2(F.gelu(fc1(x)))
    (ref * dy).sum().backward()
    passed_whole = False
    for c in RANKS.launch(_mlp_body, cls):
        t, gr, where = c["t"], c["gr"], c["where"]
        k = 4 * H // t
        sl = slice(gr * k, (gr + 1) * k)
        want_stored = (4 * H * H + 4 * H + H * 4 * H) // t + H
        if t > 1 and c["stored"] >= 2 * H * 4 * H:
            raise GradeFailure(
                f"{where} stores {c['stored']} parameters, the whole MLP: keep "
                f"only this rank's shards ({want_stored} with t = {t})"
            )
        if c["storage_bytes"] > 8 * want_stored:
            name, shape, own, nbytes = max(c["per_param"], key=lambda p: p[3] - p[2])
            raise GradeFailure(
                f"{where}: parameter {name} {list(shape)} uses {own} bytes but keeps a storage "
                f"of {nbytes} bytes alive: it is a view of the full weight, so the rank still "
                f"stores all of it ({c['storage_bytes']} bytes of parameter storage, a 1/t "
                f"share is {8 * want_stored}); copy the shard into its own tensor"
            )
        if not _same(c["y"], ref.detach()):
            if t > 1 and _same(c["y"], ref.detach() + (t - 1) * fc2.bias.detach()):
                raise GradeFailure(
                    f"{where}: the output is off by (t−1)·bias: fc2's bias was "
                    "added on every rank before the all-reduce; add it once, "
                    "after"
                )
            raise GradeFailure(
                f"{where}: output differs from the unsharded MLP "
                f"({_err(c['y'], ref)}): fc1 keeps rows (output features) "
                "r·4h/t…, fc2 columns (input features), then g sums" + _not_whole(c, passed_whole)
            )
        # this rank's own contribution to dL/dx (what a missing f leaves)
        u = F.linear(x.detach(), fc1.weight[sl].detach(), fc1.bias[sl].detach())
        u.requires_grad_()
        part = F.linear(F.gelu(u), fc2.weight[:, sl].detach())
        (part * dy).sum().backward()
        own = u.grad @ fc1.weight[sl].detach()
        if not _same(c["dx"], x.grad):
            if t > 1 and _same(c["dx"], own):
                raise GradeFailure(
                    f"{where}: the input gradient is this rank's partial sum: "
                    "put f (copy_to_tp_region) before fc1 so that backward "
                    "all-reduces it"
                )
            raise GradeFailure(
                f"{where}: the input gradient differs ({_err(c['dx'], x.grad)})"
                + _not_whole(c, passed_whole)
            )
        want = [fc1.weight.grad[sl], fc1.bias.grad[sl], fc2.weight.grad[:, sl], fc2.bias.grad]
        names = ["fc1.weight rows", "fc1.bias slice", "fc2.weight columns", "fc2.bias"]
        for name, w in zip(names, want):
            if not any(_same(g, w) for g in c["grads"]):
                raise GradeFailure(
                    f"{where}: no parameter has the gradient of the {name} of "
                    f"this rank (t = {t})" + _not_whole(c, passed_whole)
                )
        passed_whole = passed_whole or c["whole"]


# ----------------------------------------------------------------------------- 03 cross-entropy
V = 24
# every shard boundary for t = 2 and 3 (last id of a shard, first of the next), 0 and V−1,
# and two ids inside shards
TARGETS = [0, 7, 8, 11, 12, 15, 16, V - 1, 5, 19]
N = len(TARGETS)
# the last case shifts the logits of the TP group holding world rank 0 by +1000 and leaves the
# other groups' at size ~1: the loss does not change (a shift cancels out of a softmax), but a
# max taken over the whole world instead of the group is ~1000 above a ~1 group's logits, and
# exp(logit − max) underflows to 0 there
SHIFTED = "logits +1000 in the TP group holding rank 0, of size ~1 in the others"
SHIFT = 1000.0
CE_SCALES = (("logits of size ~1", 1.0), ("logits of size ~1000", 1000.0), (SHIFTED, 1.0))


def _ce_shift(label, members) -> float:
    """The constant added to every logit of a group of ``members`` (world ranks) in ``label``."""
    return SHIFT if label == SHIFTED and 0 in members else 0.0


def _ce_data(scale, shift=0.0):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _ce_data needs it)

    logits = scale * _randn(N, V, seed=6) + shift  # (N, V); exp() overflows at 1000
    return logits, torch.tensor(TARGETS)


def _ce_body(gr, t, group, fn):
    import torch.distributed as dist  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _ce_body needs it)

    members = list(range(dist.get_world_size())) if group is None else None
    members = members or dist.get_process_group_ranks(group)
    out = {}
    for label, scale in CE_SCALES:
        os.write(
            2,
            f"minipar check: running case {current_case()}, {label}, targets {TARGETS}\n".encode(),
        )
        logits, target = _ce_data(scale, _ce_shift(label, members))
        per = V // t
        ll = logits[:, gr * per : (gr + 1) * per].clone().requires_grad_()  # (N, V/t)
        loss = fn(ll, target.clone(), group)
        if hasattr(loss, "backward") and loss.requires_grad and loss.numel() == 1:
            loss.backward()
        out[label] = dict(
            loss=loss.detach() if hasattr(loss, "detach") else loss,
            grad=None if ll.grad is None else ll.grad.clone(),
        )
    return dict(ce=out)


def _ce_variants(logits, target, t, gr):
    """What rank gr of t returns for the classic mistakes (loss values, one process)."""
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _ce_variants needs it)

    per = V // t
    lo = gr * per
    gmax = logits.max(-1, keepdim=True).values
    z = logits - gmax  # (N, V)
    shard = slice(lo, lo + per)
    owned = (target >= lo) & (target < lo + per)
    picked = z.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (N,)
    sum_e = z.exp().sum(-1)
    local_sum = z[:, shard].exp().sum(-1)
    local_pick = torch.where(owned, picked, torch.zeros_like(picked))
    # each rank's own max: picked and sums on different scales
    lp, ls = 0.0, 0.0
    for r in range(t):
        zr = logits[:, r * per : (r + 1) * per]
        zr = zr - zr.max(-1, keepdim=True).values
        own = (target >= r * per) & (target < (r + 1) * per)
        lp = (
            lp + zr.gather(-1, (target - r * per).clamp(0, per - 1).unsqueeze(-1)).squeeze(-1) * own
        )
        ls = ls + zr.exp().sum(-1)
    return {
        "exp_sum": (
            (local_sum.log() - picked).mean(),
            "the sum of exponentials is this rank's own: sum exp(logit − max) over "
            "the group's ranks (reduce_from_tp_region) before the log",
        ),
        "picked": (
            (sum_e.log() - local_pick).mean(),
            "the target logit is taken on its owner only and never summed over the "
            "ranks, so the other ranks miss it: sum it over the group "
            "(reduce_from_tp_region)",
        ),
        "local_max": (
            (ls.log() - lp).mean(),
            "each rank subtracted its own max, so the ranks' exp-sums are on "
            "different scales: all-reduce the max with ReduceOp.MAX so every rank "
            "uses the global one",
        ),
    }


def _picks(grad_full, logits, target, t):
    """Per token, the vocabulary ids whose logit was taken as the target's, read from the
    gradient (softmax − one-hot)/N; None if the gradient is not of that form."""
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _picks needs it)

    if grad_full is None:
        return None
    soft = torch.softmax(logits, -1)
    d = grad_full * N - soft  # −1 where a target logit was taken
    if not torch.allclose(d, d.round(), atol=1e-6) or bool((d.round() > 0).any()):
        return None
    k = (-d.round()).long()  # how often each id was taken
    return [[j for j in range(d.shape[1]) for _ in range(int(k[i, j]))] for i in range(N)]


def _owner_text(T, t):
    per = V // t
    r = T // per
    lo, hi = r * per, (r + 1) * per - 1
    edge = " (its first id)" if T == lo else " (its last id)" if T == hi else ""
    return f"rank {r}'s ids {lo}…{hi}{edge}"


def _diagnose_picks(picks, target, t):
    per = V // t
    for i, got in enumerate(picks):
        T = int(target[i])
        if got == [T]:
            continue
        who = ", ".join(f"rank {j // per} (id {j})" for j in got)
        head = f"token {i}, target {T} ({_owner_text(T, t)})"
        if not got:
            return (
                f"{head}: no rank took the target's logit: the ownership test misses it; "
                "a rank owns lo ≤ target < hi = lo + V/t"
            )
        if len(got) == 1:
            return (
                f"{head}: the logit taken for it is {who}'s: a rank's first id is lo = "
                "(its rank in the group)·V/t, and the target's column there is target − lo"
            )
        if len(got) == t and t > 1:
            return (
                f"{head}: the target's logit was taken on every rank ({who}): take it only "
                "where the rank owns the target, 0 elsewhere"
            )
        return (
            f"{head}: the target's logit was taken {len(got)} times, by {who}: a rank owns "
            "lo ≤ target < hi = lo + V/t (the boundary id belongs to one rank only)"
        )
    return None


@task(
    "tensor_parallel.vocab_parallel_cross_entropy",
    "the loss and logit gradients equal one process's cross-entropy for t = 1, 2, 3 (the "
    "whole world, both groups of a 2 × 2 grid, a subgroup), with targets on every shard "
    "boundary, logits of size ~1 and ~1000, and groups whose logits differ by ~1000",
)
def check_vocab_parallel_cross_entropy(fn, **_):
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only check_vocab_parallel_cross_entropy needs it)
    import torch.nn.functional as F  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only check_vocab_parallel_cross_entropy needs it)

    forbid_course_code(fn, CHAPTER, allow=_FG, what="write the cross-entropy")
    refs = {}
    for label, scale in CE_SCALES:
        for shift in {_ce_shift(label, []), _ce_shift(label, [0])}:
            logits, target = _ce_data(scale, shift)
            full = logits.clone().requires_grad_()
            loss = F.cross_entropy(full, target)
            loss.backward()
            refs[label, shift] = (logits, target, loss.detach(), full.grad)
    passed_whole = False
    for c in RANKS.launch(_ce_body, fn):
        t, gr = c["t"], c["gr"]
        per = V // t
        for label, _scale in CE_SCALES:
            logits, target, ref, ref_grad = refs[label, _ce_shift(label, c["members"])]
            where = f"{c['where']}, {label}"
            r = c["ce"][label]
            loss = r["loss"]
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss)
                raise GradeFailure(
                    f"{where}: the loss is {shape}: return the mean over the "
                    "tokens, a scalar tensor"
                )
            group_grad = None
            members = [
                m for m in c["batch"] if m["label"] == c["label"] and m["members"] == c["members"]
            ]
            if all(m["ce"][label]["grad"] is not None for m in members):
                group_grad = torch.cat(
                    [m["ce"][label]["grad"] for m in sorted(members, key=lambda m: m["gr"])], -1
                )  # (N, V)
            if not _same(loss, ref):
                if label == SHIFTED and not c["whole"]:  # right when every group's were ~1
                    held = "~1000" if _ce_shift(label, c["members"]) else "of size ~1"
                    raise GradeFailure(
                        f"{where}: the loss is {loss.item():.6g}, expected {ref.item():.6g}, "
                        f"while it was right when every group held logits of size ~1: here "
                        f"TP group {c['members']} holds logits {held} and another group's "
                        "differ by ~1000, so a value taken over the whole world (the max "
                        "above all) is not this group's and exp(logit − max) under- or "
                        "overflows: pass group= to every all-reduce, the MAX one too"
                    )
                if not torch.isfinite(loss):
                    if label != CE_SCALES[0][0]:  # the ~1 case passed
                        raise GradeFailure(
                            f"{where}: the loss is {loss.item()}, while it was "
                            "right with logits of size ~1: exp overflows; "
                            "subtract the global max (all-reduce the max with "
                            "ReduceOp.MAX) before exp"
                        )
                    raise GradeFailure(f"{where}: the loss is {loss.item()}")
                if _same(loss, N * ref):
                    raise GradeFailure(
                        f"{where}: the loss is the SUM over the {N} tokens: return the mean"
                    )
                picks = _picks(group_grad, logits, target, t)
                why = picks and _diagnose_picks(picks, target, t)
                if why:
                    raise GradeFailure(f"{where}: {why}" + _not_whole(c, passed_whole))
                for value, reason in _ce_variants(logits, target, t, gr).values():
                    if t > 1 and _same(loss, value):
                        raise GradeFailure(f"{where}: {reason}")
                raise GradeFailure(
                    f"{where}: the loss differs from F.cross_entropy on the "
                    f"gathered logits ({_err(loss, ref)})" + _not_whole(c, passed_whole)
                )
            want = ref_grad[:, gr * per : (gr + 1) * per]
            got = r["grad"]
            if got is None:
                raise GradeFailure(f"{where}: the loss is right but no gradient reached the logits")
            if not _same(got, want):
                if t > 1 and _same(got, t * want):
                    raise GradeFailure(
                        f"{where}: the loss is right but the logit gradient is "
                        f"{t} times too large: the sums' all-reduce also ran in "
                        "backward; with g (reduce_from_tp_region) backward is "
                        "the identity"
                    )
                # the max not detached: backward sends −Σ(this rank's gradient) to its argmax
                pred = want.clone()
                idx = logits[:, gr * per : (gr + 1) * per].argmax(-1)
                pred[torch.arange(N), idx] -= want.sum(-1)
                if t > 1 and _same(got, pred):
                    raise GradeFailure(
                        f"{where}: the loss is right but the gradient also flows "
                        "through the max (to each token's largest local logit): "
                        "compute the max on a detached tensor; it cancels out "
                        "of the loss"
                    )
                picks = _picks(group_grad, logits, target, t)
                why = picks and _diagnose_picks(picks, target, t)
                if why:
                    raise GradeFailure(
                        f"{where}: the loss is right but the gradient is not: "
                        f"{why}" + _not_whole(c, passed_whole)
                    )
                raise GradeFailure(
                    f"{where}: the loss is right but the logit gradient is not "
                    f"({_err(got, want)})" + _not_whole(c, passed_whole)
                )
        passed_whole = passed_whole or c["whole"]


# ----------------------------------------------------------------------------- 04 SP layer norm
S, HS, OUT = 6, 8, 12


def _sp_full():
    import torch  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _sp_full needs it)
    import torch.nn as nn  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _sp_full needs it)

    torch.manual_seed(8)
    ln = nn.LayerNorm(HS).double()
    with torch.no_grad():
        ln.weight.add_(_randn(HS, seed=9)), ln.bias.add_(_randn(HS, seed=10))
    return ln, _randn(OUT, HS, seed=11)  # column layer's full weight (out, h)


def _sp_body(gr, t, group, cls):
    import torch.nn.functional as F  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _sp_body needs it)

    ln, A = _sp_full()
    m = cls(HS, group).double()
    m.ln.load_state_dict(ln.state_dict())
    k, c = S // t, OUT // t
    x = _randn(2, S, HS, seed=12)[:, gr * k : (gr + 1) * k].clone().requires_grad_()  # (b, s/t, h)
    g = m(x)  # (b, s, h)
    if tuple(g.shape) != (2, S, HS):  # the checker names the shape
        return dict(g=g.detach(), dx=None, dw=None, db=None)
    y = F.linear(g, A[gr * c : (gr + 1) * c])  # (b, s, out/t) column-parallel
    (y * _randn(2, S, OUT, seed=13)[..., gr * c : (gr + 1) * c]).sum().backward()
    m.finish_grads()
    return dict(
        g=g.detach(),
        dx=None if x.grad is None else x.grad.clone(),
        dw=None if m.ln.weight.grad is None else m.ln.weight.grad.clone(),
        db=None if m.ln.bias.grad is None else m.ln.bias.grad.clone(),
    )


def _sp_partials(ln, x, go, t):
    """Per group rank: the layer-norm (weight, bias) gradients from its s/t tokens only."""
    import torch.nn.functional as F  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only _sp_partials needs it)

    k, out = S // t, []
    for r in range(t):
        w = ln.weight.detach().clone().requires_grad_()
        b = ln.bias.detach().clone().requires_grad_()
        o = F.layer_norm(x.detach()[:, r * k : (r + 1) * k], (HS,), w, b)
        (o * go[:, r * k : (r + 1) * k]).sum().backward()
        out.append((w.grad, b.grad))
    return out


@task(
    "tensor_parallel.sp_layernorm",
    "the sequence-parallel layer-norm region equals one process (gathered output, input and "
    "layer-norm gradients) for t = 1, 2, 3 (the whole world, both groups of a 2 × 2 grid, a "
    "subgroup)",
)
def check_sp_layernorm(cls, **_):
    import torch.nn.functional as F  # noqa: PLC0415 (torch ~1.5 s: this module loads without torch; only check_sp_layernorm needs it)

    forbid_course_code(cls, CHAPTER, allow=_FG, what="write the sequence-parallel region")
    ln, A = _sp_full()
    x = _randn(2, S, HS, seed=12).requires_grad_()
    dy = _randn(2, S, OUT, seed=13)
    out = ln(x)
    (F.linear(out, A) * dy).sum().backward()
    go = dy @ A  # (b, s, h) gradient of the gather
    passed_whole = False
    for c in RANKS.launch(_sp_body, cls):
        t, gr, where = c["t"], c["gr"], c["where"]
        k, cc = S // t, OUT // t
        if not _same(c["g"], out.detach()):
            raise GradeFailure(
                f"{where}: the gathered output differs from the layer norm of the "
                f"whole sequence ({_err(c['g'], out)}): all-gather along dim 1, "
                "slices in rank order" + _not_whole(c, passed_whole)
            )
        want_dx = x.grad[:, gr * k : (gr + 1) * k]
        if not _same(c["dx"], want_dx):
            # what a backward that only slices its own gradient gives
            xs = x.detach()[:, gr * k : (gr + 1) * k].clone().requires_grad_()
            o = F.layer_norm(xs, (HS,), ln.weight.detach(), ln.bias.detach())
            mine = dy[..., gr * cc : (gr + 1) * cc] @ A[gr * cc : (gr + 1) * cc]
            (o * mine[:, gr * k : (gr + 1) * k]).sum().backward()
            if t > 1 and _same(c["dx"], xs.grad):
                raise GradeFailure(
                    f"{where}: backward kept this rank's slice of its own "
                    "gradient: the column layer's ranks each contribute a "
                    "part, reduce-scatter (sum, then slice) along s"
                )
            raise GradeFailure(
                f"{where}: the gradient of x differs "
                f"({_err(c['dx'], want_dx)})" + _not_whole(c, passed_whole)
            )
        partial = _sp_partials(ln, x, go, t)[gr]
        world_sum = None
        if not c["whole"]:
            each = [_sp_partials(ln, x, go, tr)[g] for g, tr in zip(c["gr_of"], c["size_of"])]
            world_sum = [sum(e[i] for e in each) for i in range(2)]
        for i, (name, got, want) in enumerate(
            (("weight", c["dw"], ln.weight.grad), ("bias", c["db"], ln.bias.grad))
        ):
            if _same(got, want):
                continue
            what = f"{where}: the layer-norm {name} gradient"
            if got is None:
                raise GradeFailure(f"{what} is None")
            if t > 1 and _same(got, want / t):
                raise GradeFailure(
                    f"{what} is the MEAN over the group's {t} ranks: each rank's "
                    "gradient covers different tokens, so they add up -- sum "
                    "them, do not average"
                )
            if t > 1 and _same(got, partial[i]):
                raise GradeFailure(
                    f"{what} is this rank's partial sum over its s/t = {k} "
                    "tokens: all-reduce (sum) it over the group in "
                    "finish_grads"
                )
            if world_sum is not None and _same(got, world_sum[i]):
                raise GradeFailure(
                    f"{what} is summed over all {c['world']} ranks of the world, "
                    f"not over its group {c['members']}: pass group= to the "
                    "all-reduce"
                )
            raise GradeFailure(f"{what} differs ({_err(got, want)})" + _not_whole(c, passed_whole))
        passed_whole = passed_whole or c["whole"]
