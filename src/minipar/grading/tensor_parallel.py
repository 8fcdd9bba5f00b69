"""Checkers for the tensor-parallel exercises (``exercises/tensor_parallel``).

Each runs the learner's code on gloo ranks in float64 on every layout of :data:`RANKS` (a TP
group is rarely the whole world: inside a 3D grid it is one of several) and compares with one
process on the unsharded computation. A wrong answer is diagnosed from the actual difference:
each check recomputes in one process what each classic mistake would give on that rank, a table
of ``(what the mistake gives, reason)`` (:func:`~minipar.grading.compare.expect`), and names
the one the answer matches, with the rank, token or parameter where it shows. Answers that use
the course's own ``minipar.tensor_parallel`` (other than f and g, which exercise 1 builds and the
later exercises use) are rejected (:mod:`minipar.grading.imports`).
"""

from __future__ import annotations

import copy
import os
from functools import partial

from minipar.grading import GradeFailure
from minipar.grading.compare import err as _err
from minipar.grading.compare import expect, named_mistake
from minipar.grading.compare import randn as _randn
from minipar.grading.compare import same as _same
from minipar.grading.declare import Chapter, after_whole, current_case, not_whole_world_hint

CHAPTER = "tensor_parallel"
CH = Chapter(CHAPTER)  # its tasks' PASS lines and named mistakes: clauses/tensor_parallel.toml
_FG = ("copy_to_tp_region", "reduce_from_tp_region", "_CopyToTPRegion", "_ReduceFromTPRegion")


# ----------------------------------------------------------------------------- running
def _deadlock_note(world):
    return CH.why("deadlock note", groups=[g for _, g in RANKS.by_world[world]], world=world)


def _hint(case: str, msg: str) -> str:
    if "out of bounds" in msg and "target" in case:
        return CH.why("target out of bounds hint")
    return not_whole_world_hint("TP")(case, msg)


RANKS = CH.layouts(size="t", allow=_FG, hint=_hint, deadlock_note=_deadlock_note)


def _grad(t):
    """A copy of a rank's gradient of ``t``, to send back (None if none reached it)."""
    return None if t.grad is None else t.grad.clone()


def _not_whole(c) -> str:
    """Context for a case whose TP group is not the whole world, once the whole world passed."""
    why = CH.why("not the whole world", members=c["members"], rank=c["rank"], gr=c["gr"])
    return why if c["after_whole"] else ""


def _over_world(c, what: str) -> str:
    return CH.why("summed over the world", what=what, world=c["world"], members=c["members"])


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


@CH.task("copy_to_tp_region")
def check_copy_to_tp_region(fn, **_):
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
        own = CH.why("f backward not reduced", t=t)
        mean = f"x.grad is the MEAN over the {t} ranks: f's backward is the sum, not the average"
        mistakes = [
            (_randn(4, 6, seed=100 + c["gr"]), own),
            (world_total, _over_world(c, "f's backward")),
            (total / t, mean),
        ]
        otherwise = f"x.grad differs from the sum of the group's gradients ({_err(g, total)})"
        expect(where, g, total, mistakes, otherwise + _not_whole(c))


@CH.task("reduce_from_tp_region")
def check_reduce_from_tp_region(fn, **_):
    w = _randn(4, 6, seed=7)
    for c in after_whole(RANKS.launch(partial(_fg_body, is_f=False), fn, allow=())):
        t, where, y = c["t"], c["where"], c["y"]
        total, world_total = _group_sum(10, c)
        if not c["unchanged"]:
            raise CH.fail("g in place", where)
        own = CH.why("g forward not reduced", t=t)
        mistakes = [
            (_randn(4, 6, seed=10 + c["gr"]), own),
            (world_total, _over_world(c, "g's forward")),
            (total / t, "g's forward is the mean, not the sum"),
        ]
        otherwise = f"g's forward differs from the group's sum ({_err(y, total)})"
        expect(where, y, total, mistakes, otherwise + _not_whole(c))
        if c["grad"] is None:
            raise GradeFailure(f"{where}: no gradient reached the input")
        again = CH.why("g backward reduced", t=t)
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
        raise CH.fail(
            "whole MLP stored", case=where, stored=c["stored"], want_stored=want_stored, t=t
        )
    if c["storage_bytes"] > 8 * want_stored:
        name, shape, own, nbytes = max(c["per_param"], key=lambda p: p[3] - p[2])
        raise CH.fail(
            "shard is a view",
            where,
            name=name,
            shape=list(shape),
            own=own,
            nbytes=nbytes,
            storage_bytes=c["storage_bytes"],
            share=8 * want_stored,
        )


def _mlp_own_dx(fc1, fc2, x, dy, sl):
    """This rank's own contribution to dL/dx (what a missing f leaves)."""
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    u = F.linear(x.detach(), fc1.weight[sl].detach(), fc1.bias[sl].detach()).requires_grad_()
    (F.linear(F.gelu(u), fc2.weight[:, sl].detach()) * dy).sum().backward()
    return u.grad @ fc1.weight[sl].detach()


@CH.task("column_row_mlp", allow=_FG)
def check_column_row_mlp(cls, **_):
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    fc1, fc2 = _mlp_full()
    x = _randn(2, 5, H, seed=4).requires_grad_()
    dy = _randn(2, 5, H, seed=5)
    ref = fc2(F.gelu(fc1(x)))
    (ref * dy).sum().backward()
    ref = ref.detach()
    bias_per_rank = CH.why("bias per rank")
    without_f = CH.why("without f")
    for c in after_whole(RANKS.launch(_mlp_body, cls)):
        t, gr, where = c["t"], c["gr"], c["where"]
        k = 4 * H // t
        sl = slice(gr * k, (gr + 1) * k)
        _mlp_storage(c)
        mistakes = [(ref + (t - 1) * fc2.bias.detach(), bias_per_rank)]
        otherwise = CH.why("MLP output differs", err=_err(c["y"], ref))
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
                    CH.why("no weight gradient", case=where, name=name, t=t) + _not_whole(c)
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
            CH.why("exp-sum not reduced"),
        ),
        (
            (z.exp().sum(-1).log() - torch.where(owned, pick(z), 0.0)).mean(),
            CH.why("target logit not reduced"),
        ),
        (  # picked and sums on different scales
            (zl.exp().sum(-1).log() - pick(zl)).mean(),
            CH.why("local max"),
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
            return CH.why("target taken by no rank", head=head)
        if len(got) == 1:
            return CH.why("target taken by another rank", head=head, who=who)
        if len(got) == t and t > 1:
            return CH.why("target taken on every rank", head=head, who=who)
        return CH.why("target taken twice", head=head, times=len(got), who=who)
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
        return CH.why(
            "max over the world", loss=loss.item(), ref=ref.item(), members=c["members"], held=held
        )
    if not torch.isfinite(loss):
        if label != CE_SCALES[0][0]:  # the ~1 case passed
            return CH.why("exp overflows", loss=loss.item())
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
        (t * want, CH.why("sums reduced in backward", t=t)),
        (through_max if t > 1 else None, CH.why("max not detached")),
    ]
    why = named_mistake(got, mistakes)
    if why:
        return why
    why = _ce_picks_reason(c, label, logits, target)
    if why:
        return f"the loss is right but the gradient is not: {why}" + _not_whole(c)
    return f"the loss is right but the logit gradient is not ({_err(got, want)})" + _not_whole(c)


@CH.task("vocab_parallel_cross_entropy", allow=_FG)
def check_vocab_parallel_cross_entropy(fn, **_):
    import torch  # noqa: PLC0415 (lazy: torch)

    refs = _ce_refs()
    for c in after_whole(RANKS.launch(_ce_body, fn)):
        per, gr = V // c["t"], c["gr"]
        for label, _scale in CE_SCALES:
            logits, target, ref, ref_grad = refs[label, _ce_shift(label, c["members"])]
            r = c["ce"][label]
            where, loss, got = f"{c['where']}, {label}", r["loss"], r["grad"]
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss)
                raise CH.fail("loss not a scalar", where, shape=shape)
            if not _same(loss, ref):
                why = _ce_loss_fault(c, label, loss, ref, logits, target)
                raise GradeFailure(f"{where}: {why}")
            want = ref_grad[:, gr * per : (gr + 1) * per]
            if got is None:
                raise GradeFailure(f"{where}: the loss is right but no gradient reached the logits")
            if not _same(got, want):
                why = _ce_grad_fault(c, label, got, want, logits, target)
                raise GradeFailure(f"{where}: {why}")


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
        (want / t, CH.why("LN gradient averaged", what=what, t=t)),
        (own if t > 1 else None, CH.why("LN gradient not reduced", what=what, tokens=S // t)),
        (
            over_world,
            CH.why("LN gradient over the world", what=what, world=c["world"], members=c["members"]),
        ),
    ]


@CH.task("sp_layernorm", allow=_FG)
def check_sp_layernorm(cls, **_):
    import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

    ln, A = _sp_full()
    x = _randn(2, S, HS, seed=12).requires_grad_()
    dy = _randn(2, S, OUT, seed=13)
    out = ln(x)
    (F.linear(out, A) * dy).sum().backward()
    out, go = out.detach(), dy @ A  # go: (b, s, h) gradient of the gather
    sliced = CH.why("sliced, not reduce-scattered")
    for c in after_whole(RANKS.launch(_sp_body, cls)):
        t, gr, where = c["t"], c["gr"], c["where"]
        otherwise = CH.why("gathered output differs", err=_err(c["g"], out))
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
