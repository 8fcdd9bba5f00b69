"""Checkers for the pipeline-parallel exercises (``exercises/pipeline_parallel``).

Schedules are checked by simulation against the reference lists (stage ownership, warm-up with
its formula, min(p−r−1, m) or min(2(p−r−1)+(v−1)p, m·v), deadlock, in-flight count, then the
first difference), and the 1F1B answer also by training one step on gloo ranks with the course's
executor; the send/recv exercise (the learner's GPipe step on 2 and 3 ranks) and the B/W split
are compared with one process's gradients. Answers that use the course's own
``minipar.pipeline_parallel`` are rejected (:mod:`minipar.grading.imports`), except the stage
the checker hands the send/recv and B/W answers.
"""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

from minipar.grading import GradeFailure
from minipar.grading.compare import expect_tensor
from minipar.grading.declare import Chapter, call_own
from minipar.grading.imports import grader_code
from minipar.pipeline_parallel import Action, ScheduleError, schedule, simulate
from minipar.pipeline_parallel.model_bubble import peak_in_flight

CHAPTER = "pipeline_parallel"
CH = Chapter(CHAPTER)  # its tasks' PASS lines and named mistakes: clauses/pipeline_parallel.toml
_STAGE = ("GPTStage",)  # the stage the checker hands to the learner's code may be called
_call = partial(call_own, CHAPTER)  # fn(*args) here, rejecting calls into the course's pipeline


def _warmup_text(name, r, p, m, v, k_ref) -> str:
    """The warm-up arithmetic for rank r, with the cap at m (1F1B) or m·v (interleaved)."""
    if name == "1f1b":
        raw, cap = p - r - 1, m
        expr = f"min(p−r−1, m) = min({raw}, {m})"
    else:
        raw, cap = 2 * (p - r - 1) + (v - 1) * p, m * v
        expr = (
            f"min(2(p−r−1)+(v−1)p, m·v) = min(2·{p - r - 1}+{v - 1}·{p}, {m}·{v}) = "
            f"min({raw}, {cap})"
        )
    w = min(raw, cap)
    unit = "forwards" if name == "1f1b" else "forward units"
    if w < cap and k_ref == w + 1:
        return f"warm-up {expr} = {w} {unit}, then the steady phase's first forward"
    if w == cap and k_ref == cap:
        return f"warm-up {expr} = {w}: capped, so all {cap} {unit} run before the first backward"
    return f"warm-up {expr} = {w}"


def _as_actions(lists, what):
    if not isinstance(lists, (list, tuple)):
        raise GradeFailure(f"{what} must return a list of actions, got {type(lists).__name__}")
    out = []
    for a in lists:
        try:
            op, stage, mb = a
            out.append(Action(str(op), int(stage), int(mb)))
        except (TypeError, ValueError):
            raise CH.fail("not an action", what=what, a=a) from None
    return out


def _leading_forwards(acts) -> int:
    return next((k for k, a in enumerate(acts) if a.op != "F"), len(acts))


def _diagnose_schedule(fn, name, cases, v_of=lambda p: 1):
    """Compare fn(rank, p, m[, v]) with the reference for each (p, m); raise naming the slip:
    a stage the rank does not own, a warm-up of the wrong length, backward units in forward
    chunk order, a deadlock or too many micro-batches in flight, else the first difference."""
    for p, m in cases:
        v = v_of(p)
        args = (p, m) if name == "1f1b" else (p, m, v)
        ref = schedule(name, p, m, v)
        got = [_as_actions(_call(fn, r, *args), f"rank {r} (p = {p}, m = {m})") for r in range(p)]
        if got != ref:
            _stage_ownership(got, p, m, v)
            _warmup_lengths(got, ref, name, p, m, v)
            if v > 1:
                _backward_chunk_order(got, ref, p, m, v)
            _simulated(got, name, p, m, v)
            _first_difference(got, ref, name, p, m)


def _stage_ownership(got, p, m, v) -> None:
    """Name an action on a stage its rank does not own (rank r owns stages r + c·p)."""
    for r, acts in enumerate(got):
        owned = {r + c * p for c in range(v)}
        for a in acts:
            if a.stage not in owned:
                own = f"stage {r}" if v == 1 else f"stages {sorted(owned)} (r + c·p)"
                raise GradeFailure(f"p = {p}, m = {m}: rank {r} runs {a} but owns {own}")


def _warmup_lengths(got, ref, name, p, m, v) -> None:
    """Name a rank whose forwards before its first backward are not the warm-up's."""
    for r, (acts, want) in enumerate(zip(got, ref)):
        k, k_ref = _leading_forwards(acts), _leading_forwards(want)
        if k != k_ref:
            at = f"p = {p}, m = {m}" + ("" if v == 1 else f", v = {v}")
            why = _warmup_text(name, r, p, m, v, k_ref)
            raise CH.fail("warm-up length", at, r=r, k=k, k_ref=k_ref, why=why)


def _simulated(got, name, p, m, v) -> None:
    """Name a deadlock, or a rank holding more micro-batches at once than the schedule does."""
    try:
        sim = simulate(got, m)
    except ScheduleError as e:
        raise GradeFailure(f"p = {p}, m = {m}: {e}") from None
    for r in range(p):
        if sim.peak_in_flight[r] > peak_in_flight(name, r, p, m, v):
            raise CH.fail(
                "too many in flight",
                p=p,
                m=m,
                r=r,
                held=sim.peak_in_flight[r],
                name=name,
                most=peak_in_flight(name, r, p, m, v),
            )


def _first_difference(got, ref, name, p, m) -> None:
    """Name the first action of the first rank whose list differs from the reference's."""
    for r, (acts, want) in enumerate(zip(got, ref)):
        if acts != want:
            pairs = enumerate(zip(acts, want))
            i = next((j for j, (a, b) in pairs if a != b), min(len(acts), len(want)))
            have = acts[i] if i < len(acts) else "nothing"
            need = want[i] if i < len(want) else "nothing"
            raise CH.fail("first difference", p=p, m=m, r=r, i=i, have=have, name=name, need=need)


def _backward_chunk_order(got, ref, p, m, v) -> None:
    """Name backward units that visit a rank's chunks in forward order (chunk 0 first): a
    micro-batch's backward enters a rank at its last chunk, c = v−1, and walks down."""
    for r, (acts, want) in enumerate(zip(got, ref)):
        chunks = [a.stage // p for a in acts if a.op == "B"]
        fwd = [a.stage // p for a in want if a.op == "F"]
        if chunks != [a.stage // p for a in want if a.op == "B"] and chunks == fwd:
            first = next(a for a in acts if a.op == "B")
            raise CH.fail(
                "backward chunks in forward order", p=p, m=m, v=v, r=r, first=first, last=v - 1
            )


def _train_one_step(rank, p, group, m_lists):
    """One training step of the course's executor on the learner's action lists (data, not
    code: the executor is the grader's, so its calls are not rejected)."""
    from minipar.pipeline_parallel import train  # noqa: PLC0415 (lazy: torch)

    m, lists = m_lists
    c, opts = train.small_config(L=6), train.TrainOptions(actions=lists)
    batches = train.token_batches(1, 2 * m, c)
    return {"grads": train.train_rank(rank, p, "1f1b", m, 1, c, batches, opts).grads}


ONE_F_ONE_B = CH.layouts("one_f_one_b")  # the whole world of 3 ranks
GPIPE = CH.layouts("gpipe", allow=_STAGE)  # the whole world of 2, then of 3 ranks
GPIPE_M = {2: 3, 3: 4}  # micro-batches per world size


# ----------------------------------------------------------------------------- 01 1F1B
@CH.task("one_f_one_b")
def check_one_f_one_b(fn, **_):
    from minipar.pipeline_parallel import train  # noqa: PLC0415 (lazy: torch)

    _diagnose_schedule(fn, "1f1b", [(1, 3), (2, 2), (2, 5), (3, 3), (3, 7), (4, 8), (4, 2)])
    p, m = 3, 5
    lists = [_as_actions(_call(fn, r, p, m), "rank") for r in range(p)]
    grads = [c["grads"] for c in ONE_F_ONE_B.launch(_train_one_step, (m, lists), reject=False)]
    c = train.small_config(L=6)
    _, ref, _ = train.train_reference(c, train.token_batches(1, 2 * m, c))
    err = train.max_error([SimpleNamespace(grads=g) for g in grads], ref, "grads")
    if err > 1e-9:
        raise GradeFailure(f"on 3 ranks the gradients differ from one process by {err:.2g}")


# ----------------------------------------------------------------------------- 02 send/recv
def _gpipe_body(rank, p, group, fn):
    m = GPIPE_M[p]
    with grader_code():  # the stage the grader hands the answer (importing runs course code)
        from minipar.pipeline_parallel.stage import build_stages  # noqa: PLC0415 (lazy: torch)
        from minipar.pipeline_parallel.train import small_config, token_batches  # noqa: PLC0415 (lazy: torch)

        c = small_config(L=6)
        stage = build_stages(c, rank, p)[rank]
        x, y = token_batches(1, 2 * m, c)[0]
    fn(stage, rank, p, list(x.chunk(m)), list(y.chunk(m)), (2, c.s, c.h))
    with grader_code():
        named = stage.reference_names().items()
    return {"grads": {n: (None if q.grad is None else q.grad.clone()) for n, q in named}}


def _diagnose_gpipe(results, ref, m, p):
    import torch  # noqa: PLC0415 (lazy: torch)

    same = lambda a, b: a is not None and a.shape == b.shape and torch.allclose(a, b, atol=1e-9)
    for rank, res in enumerate(results):
        for n, g in res["grads"].items():
            if n == "tok.weight":  # tied: each copy has only its own use's share
                continue
            if same(g, ref[n]):
                continue
            if same(g, m * ref[n]):
                raise CH.fail("loss not divided by m", p=p, rank=rank, m=m)
            if g is None or torch.count_nonzero(g) == 0:
                raise CH.fail("no gradient", p=p, rank=rank, n=n)
            err = (g - ref[n]).abs().max().item()
            raise CH.fail("gradient differs", p=p, rank=rank, n=n, err=err)


@CH.task("gpipe_send_recv", allow=_STAGE)
def check_gpipe_send_recv(fn, **_):
    from minipar.pipeline_parallel.train import small_config, token_batches, train_reference  # noqa: PLC0415 (lazy: torch)

    c = small_config(L=6)
    for results in GPIPE.batches(_gpipe_body, fn):
        p = len(results)
        m = GPIPE_M[p]
        _, ref, _ = train_reference(c, token_batches(1, 2 * m, c))
        _diagnose_gpipe(results, ref, m, p)


# ----------------------------------------------------------------------------- 03 B/W split
@CH.task("bw_split", allow=_STAGE)
def check_bw_split(fns, **_):
    try:
        backward_input, backward_weight = fns
    except (TypeError, ValueError):
        raise GradeFailure("pass the pair (backward_input, backward_weight)") from None
    stage, params, xs, gys, want_x, each_w = _bw_case()
    # both micro-batches' B, then both W's
    outs = [_check_b(backward_input, stage, x, gy, want) for x, gy, want in zip(xs, gys, want_x)]
    for y, gy in outs:
        _graph_call(backward_weight, (y, params, gy), CH.why("W found the graph freed"))
    _check_weight_grads(stage, params, each_w)


def _bw_case():
    """The last of 2 stages (layers + head), its trainable weights, two micro-batches' inputs
    and output gradients (float64), and a full backward's gradients of each: x's, the weights'."""
    import torch  # noqa: PLC0415 (lazy: torch)

    from minipar.pipeline_parallel.stage import build_stages  # noqa: PLC0415 (lazy: torch)
    from minipar.pipeline_parallel.train import small_config  # noqa: PLC0415 (lazy: torch)

    c = small_config(L=4)
    stage = build_stages(c, 1, 2)[1]
    params = [q for q in stage.parameters() if q.requires_grad]
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(2, c.s, c.h, generator=g, dtype=torch.float64) for _ in range(2)]
    gys = [torch.randn(2, c.s, c.V, generator=g, dtype=torch.float64) for _ in range(2)]
    want_x, each_w = [], []
    for x, gy in zip(xs, gys):
        x = x.clone().requires_grad_()
        gx_w = torch.autograd.grad(stage(x), [x] + params, gy)
        want_x.append(gx_w[0])
        each_w.append(gx_w[1:])
    return stage, params, xs, gys, want_x, each_w


def _graph_call(fn, args, freed: str):
    """``fn(*args)`` in this process; autograd's error for a graph already freed becomes the
    reason ``freed``."""
    try:
        return _call(fn, *args, allow=_STAGE)
    except RuntimeError as e:
        if "second time" in str(e):
            raise GradeFailure(freed) from None
        raise


def _check_b(backward_input, stage, x, gy, want):
    """One micro-batch's forward and B: x's gradient (float64, (2, s, h)), no weight's .grad."""
    import torch  # noqa: PLC0415 (lazy: torch)

    x = x.clone().requires_grad_()
    y = stage(x)
    gx = _graph_call(backward_input, (y, x, gy), CH.why("B found the graph freed"))
    weights = [(n, q) for n, q in stage.named_parameters() if q.requires_grad]
    touched = [n for n, q in weights if q.grad is not None and torch.count_nonzero(q.grad)]
    if touched:
        raise CH.fail(
            "B filled weight grads", touched=len(touched), weights=len(weights), first=touched[0]
        )
    expect_tensor(gx, want, "backward_input must return the gradient of x")
    if not torch.allclose(gx, want, atol=1e-10):
        raise GradeFailure("backward_input's gradient differs from a full backward's gradient of x")
    return y, gy


def _check_weight_grads(stage, params, each_w) -> None:
    """After both W's every weight's .grad is the sum of the micro-batches' gradients."""
    import torch  # noqa: PLC0415 (lazy: torch)

    if any(q.grad is None for q in params):
        raise GradeFailure("backward_weight left a weight's .grad at None")
    if all(torch.allclose(q.grad, w, atol=1e-10) for q, w in zip(params, each_w[-1])):
        raise CH.fail("W overwrote .grad")
    names = [n for n, q in stage.named_parameters() if q.requires_grad]
    for n, q, w in zip(names, params, [a + b for a, b in zip(*each_w)]):
        if not torch.allclose(q.grad, w, atol=1e-10):
            if torch.allclose(q.grad, 2 * w, atol=1e-10):
                raise CH.fail("W added twice", n=n)
            raise CH.fail("B and W differ", n=n, err=(q.grad - w).abs().max().item())


# ----------------------------------------------------------------------------- 04 interleaved
@CH.task("interleaved")
def check_interleaved(fn, **_):
    _diagnose_schedule(
        fn, "interleaved", [(2, 2), (2, 4), (3, 6), (4, 4), (4, 8)], v_of=lambda p: 2
    )
    _diagnose_schedule(fn, "interleaved", [(2, 4), (3, 3)], v_of=lambda p: 3)
