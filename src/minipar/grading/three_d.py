"""Checkers for the "Putting them together" exercises: rank-grid groups against
:class:`minipar.three_d.RankGrid`, a chosen (d, t, p) against the planner's feasible set, a
cost per token against :func:`minipar.cost.planner.three_d.dollars_per_million_tokens`, and the cp,
dp_cp and folded ep/edp groups of the five-dimensional grid against :class:`minipar.grid.Grid`.
Group lists are shown in full with what differs, or the known slip is named; answers to
exercises 1, 3 and 4 that use the course's grid or planner are rejected
(:mod:`minipar.grading.imports`)."""

from __future__ import annotations

import itertools
from functools import partial

from minipar.cost.planner import three_d as planner
from minipar.grid import Grid
from minipar.three_d.grid import RankGrid

from . import GradeFailure, as_number
from .declare import Chapter, call_own
from .imports import course_calls, forbidden_modules, reject_course_calls

CH = Chapter("three_d")  # its tasks' PASS lines and named mistakes: clauses/three_d.toml
_call = partial(call_own, "three_d")  # fn(...) here, rejecting calls into the grid or planner
GRID_SHAPES = [(2, 2, 2), (3, 2, 1), (1, 3, 2), (2, 3, 4), (1, 1, 1)]


def _normal(groups):
    return sorted(sorted(int(r) for r in g) for g in groups)


def _show(groups) -> str:
    return "[" + ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups) + "]"


def _group_diff(ax, mine, want) -> str:
    """Both lists in full and what differs (groups missing, groups that should not be there)."""
    missing = [g for g in want if g not in mine]
    extra = [g for g in mine if g not in want]
    parts = []
    if extra:
        parts.append(f"yours has {_show(extra)}, which Megatron's has not")
    if missing:
        parts.append(f"it lacks {_show(missing)}")
    if not parts:  # same groups, other multiplicities
        parts.append(f"{len(mine)} groups where Megatron's has {len(want)}")
    return f"{ax} groups {_show(mine)}; Megatron's are {_show(want)} -- " + "; ".join(parts)


def _axis_groups(sizes: dict, inner_to_outer, vary) -> list:
    """The groups of ranks that differ only along the axes in ``vary``, the ranks numbered with
    the axes of ``sizes`` (axis: its size) laid out innermost first in ``inner_to_outer``."""
    stride, s = {}, 1
    for ax in inner_to_outer:
        stride[ax], s = s, s * sizes[ax]

    def offsets(axes):
        ranges = (range(sizes[a]) for a in axes)
        return [sum(i * stride[a] for a, i in zip(axes, idx)) for idx in itertools.product(*ranges)]

    fixed = [ax for ax in inner_to_outer if ax not in vary]
    return _normal([[base + o for o in offsets(vary)] for base in offsets(fixed)])


def _other_orders(d, t, p):
    """Groups produced by the usual mix-ups of the rank order, for naming the slip."""
    sizes = {"tp": t, "dp": d, "pp": p}
    return {
        " > ".join(order): {ax: _axis_groups(sizes, order[::-1], [ax]) for ax in sizes}
        for order in itertools.permutations(("pp", "dp", "tp"))  # outermost .. innermost
        if order != ("pp", "dp", "tp")
    }


@CH.task("rank_groups")
def check_rank_groups(candidate):
    if not callable(candidate):
        raise GradeFailure("pass your function itself, not its result")
    for d, t, p in GRID_SHAPES:
        got = _call(candidate, d, t, p)
        if not isinstance(got, dict) or not {"tp", "dp", "pp"} <= set(got):
            raise CH.fail("groups not a dict", d=d, t=t, p=p, kind=type(got).__name__)
        grid = RankGrid(d, t, p)
        try:
            mine = {ax: _normal(got[ax]) for ax in ("tp", "dp", "pp")}
        except (TypeError, ValueError):
            raise CH.fail("groups not lists", d=d, t=t, p=p) from None
        want = {ax: _normal(grid.groups(ax)) for ax in ("tp", "dp", "pp")}
        if mine == want:
            continue
        for order, groups in _other_orders(d, t, p).items():
            if mine == groups:
                raise CH.fail("another rank order", d=d, t=t, p=p, order=order)
        bad = next(ax for ax in ("tp", "dp", "pp") if mine[ax] != want[ax])
        raise GradeFailure(
            f"for (d, t, p) = ({d}, {t}, {p}): " + _group_diff(bad, mine[bad], want[bad])
        )


# --- choosing a layout ----------------------------------------------------------------------
LAYOUT_MODEL = "gpt3-175b"
LAYOUT_GPUS, LAYOUT_BATCH, LAYOUT_SLACK = 1024, 1536, 1.10


def layout_verdicts():
    """{(t, p, d): fastest fitting Config} over the planner's whole feasible set (every micro-
    batch up to 4, recomputation, SP, interleaving and ZeRO stage, ZeRO-3 included as one
    choice among the others) for the exercise's setting, and the overall best. The A100 preset
    carries its own links: NVLink 3 (300 GB/s per direction), HDR 200 (25 GB/s per GPU)."""
    m = planner.MODELS[LAYOUT_MODEL]
    cl = planner.cluster(LAYOUT_GPUS, 8, "A100-80GB")
    best_of = {}
    # v in 1, 2, 4, the chunk counts the exercise was set with (the planner tries every v ≤ L/p)
    space = planner.Space(max_micro_batch=4, max_chunks=4)
    for c in planner.search(m, cl, LAYOUT_BATCH, space):
        if c.fits and c.chunks != 3 and (c.tp, c.pp, c.dp) not in best_of:
            best_of[c.tp, c.pp, c.dp] = c
    return best_of, min(best_of.values(), key=lambda c: c.step_seconds), m, cl


def _parts(c) -> dict:
    """Where a layout's step goes, in seconds: the parts of the term table's ``group`` column
    (:meth:`minipar.cost.planner.three_d.Config.group_seconds`), every term in one of them."""
    return {f"the {group}": seconds for group, seconds in c.group_seconds().items()}


@CH.task("choose_layout")
def check_choose_layout(candidate):
    value = candidate() if callable(candidate) else candidate
    if not isinstance(value, (tuple, list)) or len(value) != 3:
        raise GradeFailure(f"return a tuple (d, t, p), got {value!r}")
    try:
        d, t, p = (int(as_number(x, "d, t and p must be numbers")) for x in value)
    except (TypeError, ValueError):
        raise GradeFailure(f"return a tuple (d, t, p), got {value!r}") from None
    best_of, best, m, cl = layout_verdicts()
    if t * p * d != LAYOUT_GPUS:
        raise GradeFailure(f"d·t·p ({d}·{t}·{p} = {t * p * d}) must equal the GPUs ({LAYOUT_GPUS})")
    if min(t, p, d) < 1:
        raise GradeFailure(f"d, t and p must be >= 1, got ({d}, {t}, {p})")
    if m.heads % t:
        raise GradeFailure(f"heads ({m.heads}) must be divisible by t ({t})")
    if m.layers % p:
        raise GradeFailure(f"layers ({m.layers}) must be divisible by p ({p})")
    if LAYOUT_BATCH % d:
        raise GradeFailure(f"global batch ({LAYOUT_BATCH}) must be divisible by d ({d})")
    if t > cl.gpus_per_node:
        raise CH.fail("t crosses nodes", t=t, gpus_per_node=cl.gpus_per_node)
    if (t, p, d) not in best_of:
        raise CH.fail(
            "layout does not fit",
            d=d,
            t=t,
            p=p,
            gib=cl.gpu.memory_bytes * (1 - planner.HEADROOM) / 2**30,
        )
    mine = best_of[t, p, d]
    if mine.step_seconds > LAYOUT_SLACK * best.step_seconds:
        gap = {k: v - _parts(best)[k] for k, v in _parts(mine).items()}
        worst = max(gap, key=gap.get)
        raise CH.fail(
            "layout too slow",
            dtp=(d, t, p),
            mine=mine,
            best=best,
            recompute="no" if mine.recompute == "none" else mine.recompute,
            slower=mine.step_seconds / best.step_seconds - 1,
            worst=worst,
            gap=gap[worst],
        )


# --- cost per token -------------------------------------------------------------------------
COST_CONFIGS = CH.data["configs"]["cost_per_token"]  # the inputs: [configs] of its clause table


def _cost(step_seconds, gpus, global_batch, seq, usd_per_gpu_hour):
    return planner.dollars_per_million_tokens(
        step_seconds, gpus, global_batch * seq, usd_per_gpu_hour
    )


@CH.task("cost_per_token")
def check_cost_per_token(candidate):
    if not callable(candidate):
        raise GradeFailure("pass your function itself, not its result")
    for cfg in COST_CONFIGS:
        want = _cost(**cfg)
        x = as_number(_call(candidate, **cfg), "expected a number of dollars")
        if abs(x - want) <= 1e-6 * want:
            continue
        slips = {
            "per token": want / 1e6,
            "per sequence": want * cfg["seq"],
            "seconds as hours": want * 3600,
            "GPUs left out": want / cfg["gpus"],
            "per billion tokens": want * 1e3,
        }
        what = ", ".join(f"{k}={v}" for k, v in cfg.items())
        for name, value in slips.items():
            if abs(x - value) <= 1e-6 * abs(value):
                raise GradeFailure(f"for {what}: {x:.4g} -- {CH.why(name)}")
        raise GradeFailure(f"for {what}: {x:.4g}, expected {want:.4g} dollars per million tokens")


# --- the five-dimensional grid: cp, dp_cp and the folded expert groups ----------------------
FIVE_D_SHAPES = [tuple(shape) for shape in CH.data["configs"]["five_d_groups"]]  # (d, t, p, cp, ep)
FIVE_D_UNSUPPORTED = (1, 2, 1, 3, 4)  # ep = 4 does not divide t·cp·d = 6: a ValueError
FIVE_D_KINDS = ("cp", "dp_cp", "ep", "edp")
FIVE_D_FORBIDDEN = forbidden_modules("three_d")  # the grids and the planner


# The usual wrong rules of exercise 4, by kind (``[[five_d_slip]]`` of clauses/three_d.toml):
# each a layout of the ranks (grid, its axes innermost first, the axes one group spans) and what
# it means, {fields} filled in by :func:`_five_d_slips`.
FIVE_D_SLIPS = CH.data["five_d_slip"]


def _five_d_slips(d, t, p, cp, ep) -> dict:
    """{kind: [(reason, groups), ...]}: the groups the rules of :data:`FIVE_D_SLIPS` give."""
    S = t * cp * d
    grids = {
        "dense": {"t": t, "c": cp, "d": d, "p": p},
        "folded": {"x": ep, "e": S // ep, "p": p},
        "inside dp": {"t": t, "c": cp, "x": ep, "q": d // ep, "p": p},
    }
    fields = dict(t=t, td=t * d, tcp=t * cp, S=S, edp=S // ep, ep=ep)
    return {
        kind: [
            (s["reason"].format(**fields), _axis_groups(grids[s["grid"]], s["order"], s["vary"]))
            for s in FIVE_D_SLIPS
            if s["kind"] == kind and (s["grid"] != "inside dp" or d % ep == 0)
        ]
        for kind in FIVE_D_KINDS
    }


def five_d_reference(d, t, p, cp, ep) -> dict:
    """The four kinds of groups of :class:`minipar.grid.Grid` (normalised)."""
    g = Grid(d, t, p, cp, ep)
    return {k: _normal(g.groups(k)) for k in FIVE_D_KINDS}


def _partition_fault(kind, groups, d, t, p, cp, ep) -> str | None:
    """A rank out of range, in two groups or in none, or None."""
    N = d * t * p * cp
    where = {}
    for g in groups:
        for r in g:
            if not 0 <= r < N:
                return f"rank {r} in your {kind} groups is outside [0, {N}) (an off-by-one?)"
            if r in where:
                same = CH.why("same group twice") if where[r] == g else ""
                return f"rank {r} is in two {kind} groups, {where[r]} and {g}{same}"
            where[r] = g
    missing = [r for r in range(N) if r not in where]
    if missing:
        return f"rank {missing[0]} is in no {kind} group"
    return None


def _shape_fault(kind, groups, d, t, p, cp, ep) -> str | None:
    """A group that leaves its pipeline stage or has the wrong size, or None."""
    S = d * t * cp
    size = {"cp": cp, "dp_cp": d * cp, "ep": ep, "edp": S // ep}[kind]
    rule = {"cp": "cp", "dp_cp": "d·cp", "ep": "ep", "edp": "t·cp·d/ep"}[kind]
    for g in groups:
        if len({r // S for r in g}) > 1:
            return CH.why("group spans stages", kind=kind, g=g, S=S)
    bad = next((g for g in groups if len(g) != size), None)
    if bad is not None:
        return f"{kind} groups must have {rule} = {size} ranks; yours has {bad}"
    return None


@CH.task("five_d_groups")
def check_five_d_groups(candidate):
    if not callable(candidate):
        raise GradeFailure("pass your function itself, not its result")
    for shape in FIVE_D_SHAPES:
        d, t, p, cp, ep = shape
        at = f"for (d, t, p, cp, ep) = {shape}: "
        with course_calls(FIVE_D_FORBIDDEN) as used:
            try:
                got = candidate(d, t, p, cp, ep)
            except ValueError as e:
                raise GradeFailure(at + _refused(e, d, t, cp, ep)) from None
        reject_course_calls(used)
        if not isinstance(got, dict) or not set(FIVE_D_KINDS) <= set(got):
            raise GradeFailure(at + CH.why("groups not a dict of kinds", kind=type(got).__name__))
        want = five_d_reference(*shape)
        slips = _five_d_slips(*shape)
        for kind in FIVE_D_KINDS:
            try:
                mine = _normal(got[kind])
            except (TypeError, ValueError):
                raise GradeFailure(at + f"{kind} must be a list of lists of ranks") from None
            fault = _partition_fault(kind, mine, *shape)
            if fault:
                raise GradeFailure(at + fault)
            if mine == want[kind]:
                continue
            for reason, groups in slips[kind]:
                if mine == groups:
                    raise GradeFailure(at + reason)
            raise GradeFailure(
                at + (_shape_fault(kind, mine, *shape) or _group_diff(kind, mine, want[kind]))
            )
    _check_unsupported(candidate)


def _refused(e, d, t, cp, ep) -> str:
    """Why a ValueError for a shape the exercise supports (ep divides t·cp·d) is wrong."""
    S = t * cp * d
    rule = ", nor t, nor cp" if d % ep and (t % ep or cp % ep) else ""
    return CH.why("supported shape refused", e=e, ep=ep, S=S, rule=rule)


def _check_unsupported(candidate) -> None:
    """A shape where ep does not divide the stage's t·cp·d ranks raises a ValueError."""
    d, t, p, cp, ep = FIVE_D_UNSUPPORTED
    at = f"for (d, t, p, cp, ep) = {FIVE_D_UNSUPPORTED}, where ep = {ep} does not divide t·cp·d = {t * cp * d}: "
    try:
        call_own("three_d", candidate, d, t, p, cp, ep)
    except ValueError:
        return
    except GradeFailure:
        raise
    except Exception as e:
        raise GradeFailure(at + CH.why("raised another error", kind=type(e).__name__)) from None
    raise GradeFailure(at + CH.why("unsupported shape accepted"))
