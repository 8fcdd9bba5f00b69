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
answer matches, with the rank, token or parameter where it shows: each check is a table of
``(what the mistake gives, reason)`` (:func:`expect`). Answers that use the course's
own ``minipar.tensor_parallel`` (other than f and g, which exercise 1 builds and the later
exercises use) are rejected (:mod:`minipar.grading.imports`).
"""

from __future__ import annotations

import copy
import os
from functools import partial

from minipar.grading import GradeFailure, task
from minipar.grading.compare import err as _err
from minipar.grading.compare import expect, named_mistake
from minipar.grading.compare import randn as _randn
from minipar.grading.compare import same as _same
from minipar.grading.declare import Layouts, after_whole, current_case, not_whole_world_hint
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


# ----------------------------------------------------------------------------- diagnosis
# ----------------------------------------------------------------------------- running
def _deadlock_note(world):
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


def _grad(t):
    """A copy of a rank's gradient of ``t``, to send back (None if none reached it)."""
    return None if t.grad is None else t.grad.clone()


def _not_whole(c) -> str:
    """Context for a case whose TP group is not the whole world, once the whole world passed."""
    if not c["after_whole"]:
        return ""
    return (
        f" (the whole-world case passed; here the TP group is {c['members']} and rank "
        f"{c['rank']} is its rank {c['gr']}: use dist.get_rank(group) and "
        "dist.get_world_size(group), and pass group= to every collective)"
    )


def _over_world(c, what: str) -> str:
    return (
        f"{what} summed over all {c['world']} ranks of the world, not over its group "
        f"{c['members']}: honour the group argument (all_reduce(..., group=group))"
    )


# ----------------------------------------------------------------------------- 01 f and g
def _fg_body(gr, t, group, fn, *, is_f: bool):
    import torch  # noqa: PLC0415 (lazy: torch)

    # f: x the same on every rank, each rank using y differently; g: x this rank's partial
    # result, y replicated (the same use everywhere)
    seed_x, seed_w = (1, 100 + gr) if is_f else (10 + gr, 7)
    x = _randn(4, 6, seed=seed_x).requires_grad_()
    y = fn(x, group)
    unchanged = torch.equal(x.detach(), _randn(4, 6, seed=seed_x))
    (y * _randn(4, 6, seed=seed_w)).sum().backward()
    return dict(y=y.detach(), grad=_grad(x), unchanged=unchanged)


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
    x = _randn(4, 6, seed=1)
    for c in after_whole(RANKS.launch(partial(_fg_body, is_f=True), fn, allow=())):
        t, where, g = c["t"], c["where"], c["grad"]
        if not c["unchanged"]:
            raise GradeFailure(f"{where}: f modified its input x in place")
        reduced = (
            "f's forward all-reduced x: the forward is the identity, every rank already holds x"
        )
        expect(where, c["y"], x, [(t * x, reduced)], f"f's forward changed x ({_err(c['y'], x)})")
        if g is None:
            raise GradeFailure(f"{where}: no gradient reached x: return the gradient from backward")
        total, world_total = _group_sum(100, c)
        own = (
            "x.grad is this rank's own partial gradient: f's backward must all-reduce (sum) it "
            f"over the group's {t} ranks"
        )
        mean = f"x.grad is the MEAN over the {t} ranks: f's backward is the sum, not the average"
        mistakes = [
            (_randn(4, 6, seed=100 + c["gr"]), own),
            (world_total, _over_world(c, "f's backward")),
            (total / t, mean),
        ]
        otherwise = f"x.grad differs from the sum of the group's gradients ({_err(g, total)})"
        expect(where, g, total, mistakes, otherwise + _not_whole(c))


@task(
    "tensor_parallel.reduce_from_tp_region",
    "g sums the partial results over its group forward and is the identity backward (t = 1, "
    "2, 3; the whole world, both groups of a 2 × 2 grid, a subgroup)",
)
def check_reduce_from_tp_region(fn, **_):
    forbid_course_code(fn, CHAPTER, what="write g")
    w = _randn(4, 6, seed=7)
    for c in after_whole(RANKS.launch(partial(_fg_body, is_f=False), fn, allow=())):
        t, where, y = c["t"], c["where"], c["y"]
        total, world_total = _group_sum(10, c)
        if not c["unchanged"]:
            raise GradeFailure(
                f"{where}: g reduced its input in place: all-reduce a copy, the caller's tensor "
                "must not change"
            )
        own = (
            "g's forward returned this rank's partial result: it must all-reduce (sum) over the "
            f"group's {t} ranks"
        )
        mistakes = [
            (_randn(4, 6, seed=10 + c["gr"]), own),
            (world_total, _over_world(c, "g's forward")),
            (total / t, "g's forward is the mean, not the sum"),
        ]
        otherwise = f"g's forward differs from the group's sum ({_err(y, total)})"
        expect(where, y, total, mistakes, otherwise + _not_whole(c))
        if c["grad"] is None:
            raise GradeFailure(f"{where}: no gradient reached the input")
        again = (
            f"the gradient is {t} times too large: g's backward all-reduced again; it must be "
            "the identity"
        )
        otherwise = f"g's backward changed the gradient ({_err(c['grad'], w)}): it is the identity"
        expect(where, c["grad"], w, [(t * w, again)], otherwise)


# ----------------------------------------------------------------------------- 02 MLP
H = 12


def _mlp_full():
    import torch  # noqa: PLC0415 (lazy: torch)
    import torch.nn as nn  # noqa: PLC0415 (lazy: torch)

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
        dx=_grad(x),
        grads=grads,
        stored=stored,
        storage_bytes=sum(storages.values()),
        per_param=per_param,
    )


def _mlp_storage(c) -> None:
    """A rank keeps only its shards: 1/t of the weights, in tensors of their own."""
    t, where = c["t"], c["where"]
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


def _mlp_own_dx(fc1, fc2, x, dy, sl):
    """This rank's own contribution to dL/dx (what a missing f leaves)."""
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    u = F.linear(x.detach(), fc1.weight[sl].detach(), fc1.bias[sl].detach()).requires_grad_()
    (F.linear(F.gelu(u), fc2.weight[:, sl].detach()) * dy).sum().backward()
    return u.grad @ fc1.weight[sl].detach()


@task(
    "tensor_parallel.column_row_mlp",
    "the column→row MLP equals the unsharded one (output, input and weight gradients) for "
    "t = 1, 2, 3 (the whole world, both groups of a 2 × 2 grid, a subgroup), each rank's "
    "parameters holding 1/t of the weights in storage",
)
def check_column_row_mlp(cls, **_):
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    forbid_course_code(cls, CHAPTER, allow=_FG, what="write the parallel MLP")
    fc1, fc2 = _mlp_full()
    x = _randn(2, 5, H, seed=4).requires_grad_()
    dy = _randn(2, 5, H, seed=5)
    ref = fc2(F.gelu(fc1(x)))
    (ref * dy).sum().backward()
    ref = ref.detach()
    bias_per_rank = (
        "the output is off by (t−1)·bias: fc2's bias was added on every rank before the "
        "all-reduce; add it once, after"
    )
    without_f = (
        "the input gradient is this rank's partial sum: put f (copy_to_tp_region) before fc1 "
        "so that backward all-reduces it"
    )
    for c in after_whole(RANKS.launch(_mlp_body, cls)):
        t, gr, where = c["t"], c["gr"], c["where"]
        k = 4 * H // t
        sl = slice(gr * k, (gr + 1) * k)
        _mlp_storage(c)
        mistakes = [(ref + (t - 1) * fc2.bias.detach(), bias_per_rank)]
        otherwise = (
            f"output differs from the unsharded MLP ({_err(c['y'], ref)}): fc1 keeps rows "
            "(output features) r·4h/t…, fc2 columns (input features), then g sums"
        )
        expect(where, c["y"], ref, mistakes, otherwise + _not_whole(c))
        mistakes = [(partial(_mlp_own_dx, fc1, fc2, x, dy, sl) if t > 1 else None, without_f)]
        otherwise = f"the input gradient differs ({_err(c['dx'], x.grad)})"
        expect(where, c["dx"], x.grad, mistakes, otherwise + _not_whole(c))
        want = {
            "fc1.weight rows": fc1.weight.grad[sl],
            "fc1.bias slice": fc1.bias.grad[sl],
            "fc2.weight columns": fc2.weight.grad[:, sl],
            "fc2.bias": fc2.bias.grad,
        }
        for name, w in want.items():
            if not any(_same(g, w) for g in c["grads"]):
                raise GradeFailure(
                    f"{where}: no parameter has the gradient of the {name} of "
                    f"this rank (t = {t})" + _not_whole(c)
                )


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
    import torch  # noqa: PLC0415 (lazy: torch)

    logits = scale * _randn(N, V, seed=6) + shift  # (N, V); exp() overflows at 1000
    return logits, torch.tensor(TARGETS)


def _ce_body(gr, t, group, fn):
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    members = (
        list(range(dist.get_world_size())) if group is None else dist.get_process_group_ranks(group)
    )
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
        out[label] = dict(loss=loss.detach() if hasattr(loss, "detach") else loss, grad=_grad(ll))
    return dict(ce=out)


def _ce_refs():
    """(label, shift) -> (logits, target, loss, logit gradient) of one process's cross-entropy."""
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    refs = {}
    for label, scale in CE_SCALES:
        for shift in {_ce_shift(label, []), _ce_shift(label, [0])}:
            logits, target = _ce_data(scale, shift)
            full = logits.clone().requires_grad_()
            loss = F.cross_entropy(full, target)
            loss.backward()
            refs[label, shift] = (logits, target, loss.detach(), full.grad)
    return refs


def _ce_variants(logits, target, t, gr):
    """The classic mistakes' losses on rank gr of t (one process), as :func:`expect`'s table."""
    import torch  # noqa: PLC0415 (lazy: torch)

    per = V // t
    z = logits - logits.max(-1, keepdim=True).values  # (N, V), the global max subtracted
    shards = logits.view(N, t, per)
    zl = (shards - shards.max(-1, keepdim=True).values).view(N, V)  # each rank's own max
    pick = lambda z: z.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (N,)
    owned = (target >= gr * per) & (target < (gr + 1) * per)
    return [
        (
            (z[:, gr * per : (gr + 1) * per].exp().sum(-1).log() - pick(z)).mean(),
            "the sum of exponentials is this rank's own: sum exp(logit − max) over "
            "the group's ranks (reduce_from_tp_region) before the log",
        ),
        (
            (z.exp().sum(-1).log() - torch.where(owned, pick(z), 0.0)).mean(),
            "the target logit is taken on its owner only and never summed over the "
            "ranks, so the other ranks miss it: sum it over the group "
            "(reduce_from_tp_region)",
        ),
        (  # picked and sums on different scales
            (zl.exp().sum(-1).log() - pick(zl)).mean(),
            "each rank subtracted its own max, so the ranks' exp-sums are on "
            "different scales: all-reduce the max with ReduceOp.MAX so every rank "
            "uses the global one",
        ),
    ]


def _picks(grad_full, logits, target):
    """Per token, the vocabulary ids whose logit was taken as the target's, read from the
    gradient (softmax − one-hot)/N; None if the gradient is not of that form."""
    import torch  # noqa: PLC0415 (lazy: torch)

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
    """What is wrong with the ids whose logits were taken as the targets', or None."""
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


def _ce_picks_reason(c, label, logits, target):
    """What is wrong with the ids whose logits the case's group took as the targets' (read from
    the group's gathered logit gradients), or None."""
    import torch  # noqa: PLC0415 (lazy: torch)

    group = [m for m in c["batch"] if m["label"] == c["label"] and m["members"] == c["members"]]
    grads = [m["ce"][label]["grad"] for m in sorted(group, key=lambda m: m["gr"])]
    if any(g is None for g in grads):
        return None
    picks = _picks(torch.cat(grads, -1), logits, target)  # (N, V)
    return picks and _diagnose_picks(picks, target, c["t"])


def _ce_loss_fault(c, label, loss, ref, logits, target) -> str:
    """Why the case's loss under ``label`` is not ``ref``: the first classic mistake it shows."""
    import torch  # noqa: PLC0415 (lazy: torch)

    if label == SHIFTED and not c["whole"]:  # right when every group's were ~1
        held = "~1000" if _ce_shift(label, c["members"]) else "of size ~1"
        return (
            f"the loss is {loss.item():.6g}, expected {ref.item():.6g}, while it was right when "
            f"every group held logits of size ~1: here TP group {c['members']} holds logits "
            f"{held} and another group's differ by ~1000, so a value taken over the whole "
            "world (the max above all) is not this group's and exp(logit − max) under- or "
            "overflows: pass group= to every all-reduce, the MAX one too"
        )
    if not torch.isfinite(loss):
        if label != CE_SCALES[0][0]:  # the ~1 case passed
            return (
                f"the loss is {loss.item()}, while it was right with logits of size ~1: exp "
                "overflows; subtract the global max (all-reduce the max with ReduceOp.MAX) "
                "before exp"
            )
        return f"the loss is {loss.item()}"
    if _same(loss, N * ref):
        return f"the loss is the SUM over the {N} tokens: return the mean"
    why = _ce_picks_reason(c, label, logits, target)
    if why:
        return why + _not_whole(c)
    variants = _ce_variants(logits, target, c["t"], c["gr"]) if c["t"] > 1 else ()
    return named_mistake(loss, variants) or (
        f"the loss differs from F.cross_entropy on the gathered logits ({_err(loss, ref)})"
        + _not_whole(c)
    )


def _ce_grad_fault(c, label, got, want, logits, target) -> str:
    """Why the case's logit gradient under ``label`` (its loss right) is not ``want``."""
    import torch  # noqa: PLC0415 (lazy: torch)

    t, gr, per = c["t"], c["gr"], V // c["t"]
    # the max not detached: backward sends −Σ(this rank's gradient) to its largest local logit
    through_max = want.clone()
    through_max[torch.arange(N), logits[:, gr * per : (gr + 1) * per].argmax(-1)] -= want.sum(-1)
    mistakes = [
        (
            t * want,
            f"the loss is right but the logit gradient is {t} times too large: the sums' "
            "all-reduce also ran in backward; with g (reduce_from_tp_region) backward is the "
            "identity",
        ),
        (
            through_max if t > 1 else None,
            "the loss is right but the gradient also flows through the max (to each token's "
            "largest local logit): compute the max on a detached tensor; it cancels out of "
            "the loss",
        ),
    ]
    why = named_mistake(got, mistakes)
    if why:
        return why
    why = _ce_picks_reason(c, label, logits, target)
    if why:
        return f"the loss is right but the gradient is not: {why}" + _not_whole(c)
    return f"the loss is right but the logit gradient is not ({_err(got, want)})" + _not_whole(c)


@task(
    "tensor_parallel.vocab_parallel_cross_entropy",
    "the loss and logit gradients equal one process's cross-entropy for t = 1, 2, 3 (the "
    "whole world, both groups of a 2 × 2 grid, a subgroup), with targets on every shard "
    "boundary, logits of size ~1 and ~1000, and groups whose logits differ by ~1000",
)
def check_vocab_parallel_cross_entropy(fn, **_):
    import torch  # noqa: PLC0415 (lazy: torch)

    forbid_course_code(fn, CHAPTER, allow=_FG, what="write the cross-entropy")
    refs = _ce_refs()
    for c in after_whole(RANKS.launch(_ce_body, fn)):
        per, gr = V // c["t"], c["gr"]
        for label, _scale in CE_SCALES:
            logits, target, ref, ref_grad = refs[label, _ce_shift(label, c["members"])]
            r = c["ce"][label]
            where, loss, got = f"{c['where']}, {label}", r["loss"], r["grad"]
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss)
                raise GradeFailure(
                    f"{where}: the loss is {shape}: return the mean over the tokens, a scalar "
                    "tensor"
                )
            if not _same(loss, ref):
                raise GradeFailure(
                    f"{where}: {_ce_loss_fault(c, label, loss, ref, logits, target)}"
                )
            want = ref_grad[:, gr * per : (gr + 1) * per]
            if got is None:
                raise GradeFailure(f"{where}: the loss is right but no gradient reached the logits")
            if not _same(got, want):
                raise GradeFailure(
                    f"{where}: {_ce_grad_fault(c, label, got, want, logits, target)}"
                )


# ----------------------------------------------------------------------------- 04 SP layer norm
S, HS, OUT = 6, 8, 12


def _sp_full():
    import torch  # noqa: PLC0415 (lazy: torch)
    import torch.nn as nn  # noqa: PLC0415 (lazy: torch)

    torch.manual_seed(8)
    ln = nn.LayerNorm(HS).double()
    with torch.no_grad():
        ln.weight.add_(_randn(HS, seed=9)), ln.bias.add_(_randn(HS, seed=10))
    return ln, _randn(OUT, HS, seed=11)  # column layer's full weight (out, h)


def _sp_body(gr, t, group, cls):
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

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
    return dict(g=g.detach(), dx=_grad(x), dw=_grad(m.ln.weight), db=_grad(m.ln.bias))


def _sp_partials(x, go, t):
    """Per group rank: the layer-norm (weight, bias) gradients from its s/t tokens only."""
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    k, wb = S // t, (F.layer_norm(x.detach(), (HS,)) * go, go)  # the weight's, the bias's terms
    return [tuple(d[:, r * k : (r + 1) * k].sum((0, 1)) for d in wb) for r in range(t)]


def _sp_sliced_dx(ln, A, x, dy, t, gr):
    """The gradient of x from a backward that only slices its own gradient (no reduction)."""
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    k, cc = S // t, OUT // t
    xs = x.detach()[:, gr * k : (gr + 1) * k].clone().requires_grad_()
    o = F.layer_norm(xs, (HS,), ln.weight.detach(), ln.bias.detach())
    mine = dy[..., gr * cc : (gr + 1) * cc] @ A[gr * cc : (gr + 1) * cc]
    (o * mine[:, gr * k : (gr + 1) * k]).sum().backward()
    return xs.grad


def _sp_grad_mistakes(c, what, want, own, over_world):
    """The classic mistakes of a layer-norm parameter's gradient, as :func:`expect`'s table."""
    t = c["t"]
    return [
        (
            want / t,
            f"{what} is the MEAN over the group's {t} ranks: each rank's gradient covers "
            "different tokens, so they add up -- sum them, do not average",
        ),
        (
            own if t > 1 else None,
            f"{what} is this rank's partial sum over its s/t = {S // t} tokens: all-reduce (sum) "
            "it over the group in finish_grads",
        ),
        (
            over_world,
            f"{what} is summed over all {c['world']} ranks of the world, not over its group "
            f"{c['members']}: pass group= to the all-reduce",
        ),
    ]


@task(
    "tensor_parallel.sp_layernorm",
    "the sequence-parallel layer-norm region equals one process (gathered output, input and "
    "layer-norm gradients) for t = 1, 2, 3 (the whole world, both groups of a 2 × 2 grid, a "
    "subgroup)",
)
def check_sp_layernorm(cls, **_):
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    forbid_course_code(cls, CHAPTER, allow=_FG, what="write the sequence-parallel region")
    ln, A = _sp_full()
    x = _randn(2, S, HS, seed=12).requires_grad_()
    dy = _randn(2, S, OUT, seed=13)
    out = ln(x)
    (F.linear(out, A) * dy).sum().backward()
    out, go = out.detach(), dy @ A  # go: (b, s, h) gradient of the gather
    sliced = (
        "backward kept this rank's slice of its own gradient: the column layer's ranks each "
        "contribute a part, reduce-scatter (sum, then slice) along s"
    )
    for c in after_whole(RANKS.launch(_sp_body, cls)):
        t, gr, where = c["t"], c["gr"], c["where"]
        otherwise = (
            f"the gathered output differs from the layer norm of the whole sequence "
            f"({_err(c['g'], out)}): all-gather along dim 1, slices in rank order"
        )
        expect(where, c["g"], out, (), otherwise + _not_whole(c))
        want_dx = x.grad[:, gr * S // t : (gr + 1) * S // t]
        mistakes = [(partial(_sp_sliced_dx, ln, A, x, dy, t, gr) if t > 1 else None, sliced)]
        otherwise = f"the gradient of x differs ({_err(c['dx'], want_dx)})"
        expect(where, c["dx"], want_dx, mistakes, otherwise + _not_whole(c))
        own = _sp_partials(x, go, t)[gr]
        world = None
        if not c["whole"]:
            each = [_sp_partials(x, go, tr)[g] for g, tr in zip(c["gr_of"], c["size_of"])]
            world = [sum(e[i] for e in each) for i in range(2)]
        params = (("weight", c["dw"], ln.weight.grad), ("bias", c["db"], ln.bias.grad))
        for i, (name, got, want) in enumerate(params):
            what = f"the layer-norm {name} gradient"
            if got is None:
                raise GradeFailure(f"{where}: {what} is None")
            mistakes = _sp_grad_mistakes(c, what, want, own[i], world and world[i])
            expect(
                where, got, want, mistakes, f"{what} differs ({_err(got, want)})" + _not_whole(c)
            )
