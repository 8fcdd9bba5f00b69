"""Runs shared by the tests and the notebook (``*_on_rank`` under ``minipar.runtime.launch.run``,
plain numbers out, float64: "equal" means equal to ~1e-12): parity with one process, traced
traffic against the cost model, EP × DP training, load balance under a skewed router.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch
import torch.distributed as dist

from minipar.cost.chapters.expert_parallel import (
    MoELayer,
    all_gather_events,
    dispatch_rows,
    folded_block_events,
    imbalance,
    inter_node_rows,
    layer_events,
    node_dedup_events,
)
from minipar.cost.network.collectives import fit_alpha_beta
from minipar.dist import group_rank, group_size
from minipar.grid import Grid, new_groups
from minipar.runtime import launch, tracer
from minipar.runtime.timing import timed

from .balancing import (
    global_load_balancing_loss,
    router_z_loss,
    sequence_load_balancing_loss,
    update_bias,
)
from .dispatchers import node_groups
from .folding import DenseMLP, FoldedBlock
from .grid import ep_dp_groups, reduce_gradients
from .grouped import grouped_mlp
from .layer import ExpertParallelMoE
from .moe import MoE
from .routing import load_balancing_loss, top_k_gates

H, F = 8, 12  # hidden, expert FFN width: tiny on purpose


def _randn(*shape, seed, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@dataclass(frozen=True)
class MoETraining:
    """An MoE trained on several ranks against one process: ``experts`` experts, each token
    routed to its ``top_k``, ``capacity_factor`` (None: dropless), ``steps`` steps of SGD with
    momentum 0.9 at ``lr``, the balancing loss weighted ``aux_coef``."""

    experts: int = 4
    top_k: int = 2
    capacity_factor: float | None = None
    steps: int = 3
    lr: float = 0.1
    aux_coef: float = 0.01


def max_diff(a, b) -> float:
    return (a.detach() - b.detach()).abs().max().item() if a.numel() else 0.0


def tokens_on(rank: int) -> int:
    """Ranks hold different numbers of tokens (6, 7, 8, ...): uneven splits everywhere."""
    return 6 + rank


def make_moe(experts: int, top_k: int, capacity_factor=None, seed: int = 0) -> MoE:
    torch.manual_seed(seed)
    return MoE(H, F, experts, top_k, capacity_factor).double()


def reference(moe: MoE, chunks: list[torch.Tensor], weights: list[torch.Tensor]):
    """One process on all ranks' tokens concatenated in rank order. Loss = Σ w·y + Σ_r aux(chunk r)
    (the balancing loss of each rank's tokens, as each rank computes it). Returns y, x.grad."""
    x = torch.cat(chunks).requires_grad_()
    y = moe(x)
    aux = sum(
        load_balancing_loss(*_probs_experts(moe, c)) for c in x.split([len(c) for c in chunks])
    )
    ((y * torch.cat(weights)).sum() + aux).backward()
    return y, x.grad


def _probs_experts(moe, x):
    probs, _, experts, _ = moe.route(x)
    return probs, experts


def parity_on_rank(
    rank: int,
    experts: int,
    top_k: int,
    capacity_factor=None,
    cls=ExpertParallelMoE,
    seed: int = 0,
    group=None,
    **layer_kw,
) -> dict:
    """Max differences of this rank's EP layer against the reference on all ranks' tokens:
    outputs, input grads, owned experts' w1/w2 grads, the summed router grad, kept masks.
    ``layer_kw``: the layer's ``kernel``, ``dispatcher``, ``node_group``, ``rail_group``."""
    ep, r = group_size(group), group_rank(group)
    moe = make_moe(experts, top_k, capacity_factor, seed)
    chunks = [_randn(tokens_on(s), H, seed=100 + s) for s in range(ep)]
    weights = [_randn(tokens_on(s), H, seed=200 + s) for s in range(ep)]
    y_ref, dx_ref = reference(moe, chunks, weights)
    layer = cls.from_full(moe, group=group, **layer_kw)
    x = chunks[r].clone().requires_grad_()
    y = layer(x)
    ((y * weights[r]).sum() + layer.aux_loss).backward()
    g_router = layer.router.weight.grad.clone()
    if ep > 1:
        dist.all_reduce(g_router, group=group)
    lo = sum(tokens_on(s) for s in range(r))
    own = slice(layer.first, layer.first + layer.local)
    return {
        "out": max_diff(y, y_ref[lo : lo + len(x)]),
        "dx": max_diff(x.grad, dx_ref[lo : lo + len(x)]),
        "dw1": max_diff(layer.w1.grad, moe.w1.grad[own]),
        "dw2": max_diff(layer.w2.grad, moe.w2.grad[own]),
        "drouter": max_diff(g_router, moe.router.weight.grad),
        "kept differ": int((layer.kept != moe.kept[lo : lo + len(x)]).sum()),
        "dropped": moe.dropped,
        # own storage of E/ep experts (a view of the full stack would keep all E alive)
        "copies": all(
            w.untyped_storage().nbytes() == w.numel() * w.element_size()
            for w in (layer.w1, layer.w2)
        ),
        "expert params": layer.w1.numel() + layer.w2.numel(),
    }


def traffic_on_rank(
    rank: int,
    experts: int,
    top_k: int,
    capacity_factor=None,
    skew: float = 0.0,
    tokens: int | None = None,
) -> dict:
    """Traced (op, bytes) of one forward + backward next to the cost model's from the counts;
    ``skew`` > 0 biases the router towards expert 0 (:func:`skewed_router`)."""
    ep = group_size()
    moe = make_moe(experts, top_k, capacity_factor)
    if skew:
        skewed_router(moe, bias=skew)
    layer = ExpertParallelMoE.from_full(moe)
    n = tokens_on(rank) if tokens is None else tokens
    x = (_randn(n, H, seed=100 + rank) + (0.5 if skew else 0.0)).requires_grad_()
    with tracer.trace() as tr:
        layer(x).sum().backward()
    rows = torch.zeros(ep, ep, dtype=torch.int64)
    rows[rank] = layer.send_counts.sum(1)
    dist.all_reduce(rows)  # rows[s][d] for every pair
    return {
        "traced": [(e.op, e.bytes) for e in tr.events],
        "model": layer_events(
            rows.tolist(), rank, H, experts, top_k, 8, capacity_factor is not None
        ),
        "rows": rows.tolist(),
        "tokens per expert": layer.tokens_per_expert.tolist(),
    }


def dispatcher_traffic_on_rank(
    rank: int, dispatcher: str, experts: int, top_k: int, capacity_factor=None, node_size: int = 1
) -> dict:
    """One traced forward + backward of ``dispatcher`` on the whole world, and the cost model's
    events from every rank's kept choices (gathered afterwards, outside the trace). Events are
    compared as sorted lists: autograd may run independent branches of backward in either order.
    Also the rows that leave the source's node (``node_size`` ranks per node) under the model."""
    ep = group_size()
    kw = {"dispatcher": dispatcher}
    if dispatcher == "node_dedup":
        kw["node_group"], kw["rail_group"] = node_groups(node_size)
    moe = make_moe(experts, top_k, capacity_factor)
    layer = ExpertParallelMoE.from_full(moe, **kw)
    x = _randn(tokens_on(rank), H, seed=100 + rank).requires_grad_()
    with tracer.trace() as tr:
        layer(x).sum().backward()
    with torch.no_grad():  # (n, K) the router's choices
        picks = top_k_gates(layer.router(x), layer.top_k, layer.renormalize)[2].tolist()
    mine = [[int(e) for e, k in zip(es, ks) if k] for es, ks in zip(picks, layer.kept.tolist())]
    choices = [None] * ep
    dist.all_gather_object(choices, mine)
    cap = capacity_factor is not None
    if dispatcher == "all_to_all":
        model = layer_events(dispatch_rows(choices, experts), rank, H, experts, top_k, 8, cap)
    elif dispatcher == "all_gather":
        model = all_gather_events(
            [len(c) for c in choices], rank, H, top_k, 8, capacity_limited=cap, experts=experts
        )
    else:
        shape = MoELayer(tokens_on(rank), H, F, experts, top_k, ep, bytes_per_elem=8)
        model = node_dedup_events(choices, rank, shape, node_size, capacity_limited=cap)
    ns = node_size if ep % node_size == 0 else 1
    return {
        "traced": sorted((e.op, e.bytes) for e in tr.events),
        "model": sorted(model),
        "inter-node rows": {
            d: inter_node_rows(choices, experts, ns, d) for d in ("all_to_all", "node_dedup")
        },
    }


def ep_dp_train_on_rank(
    rank: int,
    world: int,
    ep: int,
    train: MoETraining = MoETraining(),
    expert_divisor: int | None = None,
    groups=None,
    **layer_kw,
) -> dict:
    """EP inside DP on ``world`` ranks (grid (dp, ep)), ``train.steps`` steps of SGD against one
    process that runs each replica's tokens (rank order) and averages the ranks' mean losses:
    the max difference of this rank's router and experts after each step. (SGD, not Adam: Adam
    divides by √v and so hides a gradient off by a constant factor, the very bug
    ``expert_divisor`` plants.) ``layer_kw``: as :func:`parity_on_rank`'s."""
    ep_group, dp_group = groups if groups is not None else ep_dp_groups(ep)
    dp, d = world // ep, rank // ep
    n = 6
    moe = make_moe(train.experts, train.top_k, train.capacity_factor)
    layer = ExpertParallelMoE.from_full(moe, group=ep_group, **layer_kw)
    opt_ref = torch.optim.SGD(moe.parameters(), lr=train.lr, momentum=0.9)
    opt = torch.optim.SGD(layer.parameters(), lr=train.lr, momentum=0.9)
    own = slice(layer.first, layer.first + layer.local)
    diffs, dropped = [], 0
    for step in range(train.steps):
        xs = [_randn(n, H, seed=1000 * step + s) for s in range(world)]
        ts = [_randn(n, H, seed=5000 + 1000 * step + s) for s in range(world)]

        def loss_of(y, t, aux):
            return ((y - t) ** 2).mean() + train.aux_coef * aux

        # reference: replica by replica (capacity is per EP group's batch)
        opt_ref.zero_grad()
        total = 0.0
        for rep in range(dp):
            ids = range(rep * ep, (rep + 1) * ep)
            y = moe(torch.cat([xs[s] for s in ids])).split(n)
            for s, ys in zip(ids, y):
                total = total + loss_of(ys, ts[s], load_balancing_loss(*_probs_experts(moe, xs[s])))
        (total / world).backward()
        opt_ref.step()
        # expert parallel inside data parallel
        opt.zero_grad()
        loss_of(layer(xs[rank]), ts[rank], layer.aux_loss).backward()
        dropped += layer.dropped
        reduce_gradients(layer, dp_group, expert_divisor)
        opt.step()
        diffs.append(
            max(
                max_diff(layer.router.weight, moe.router.weight),
                max_diff(layer.w1, moe.w1[own]),
                max_diff(layer.w2, moe.w2[own]),
            )
        )
    return {"replica": d, "param diff per step": diffs, "dropped": dropped}


def skewed_router(moe: MoE, favourite: int = 0, bias: float = 3.0) -> None:
    """Make expert ``favourite`` everyone's first choice: add ``bias`` times a shared direction
    to its router row, so the logit of tokens along it is large (a router collapsed early)."""
    with torch.no_grad():
        moe.router.weight[favourite] += (
            bias * torch.ones(moe.hidden, dtype=moe.w1.dtype) / moe.hidden**0.5
        )


PARITY_CASES = [(1, None), (2, None), (1, 1.0), (2, 1.0)]  # (top_k, capacity_factor)


def run_on_gloo(fn, world_size: int, *args, **kwargs) -> list:
    """:func:`minipar.runtime.launch.run` on gloo, whatever GPUs there are: these functions
    build float64 inputs with CPU generators."""
    return launch.run(fn, world_size, *args, backend="gloo", **kwargs)


def _chapter_on_rank(rank, ep):
    E = 6 if ep == 3 else 4
    return {
        "parity": {case: parity_on_rank(rank, E, *case) for case in PARITY_CASES},
        "traffic": traffic_on_rank(rank, E, 2, None),
        "traffic capacity": traffic_on_rank(rank, E, 2, 1.0),
        "skewed": traffic_on_rank(rank, E, 1, None, skew=3.0, tokens=32),
        "even": traffic_on_rank(rank, E, 1, None, tokens=32),
    }


def _ep_dp_on_rank(rank, world):
    groups = ep_dp_groups(2)
    return {
        cf: ep_dp_train_on_rank(rank, world, 2, MoETraining(4, 2, cf), groups=groups)
        for cf in (None, 1.0)
    }


def chapter_runs(eps=(2, 3)) -> dict:
    """One launch per ep (all ranks' results) and one EP × DP launch on 4 ranks (dp = ep = 2)."""
    out = {ep: run_on_gloo(_chapter_on_rank, ep) for ep in eps}
    out["ep x dp"] = run_on_gloo(_ep_dp_on_rank, 4)
    return out


def _a2a_times_on_rank(rank: int, n: int, sizes: list[int], iters: int) -> list[float]:
    """Median seconds of an even ``all_to_all_single`` of S = ``size`` bytes (float32) per size."""
    times = []
    for size in sizes:
        numel = max(n, size // 4 // n * n)
        inp, out = torch.ones(numel), torch.empty(numel)  # (S/4,) float32
        times.append(
            statistics.median(timed(lambda o=out, i=inp: dist.all_to_all_single(o, i), iters, 2))
        )
    return times


def all_to_all_fit(n: int = 2, sizes=(2**12, 2**16, 2**19, 2**22), iters: int = 5) -> dict:
    """Time gloo's all-to-all on n ranks at several S and fit the pairwise-exchange α-β model
    (:func:`fit_all_to_all`)."""
    per_rank = run_on_gloo(_a2a_times_on_rank, n, list(sizes), iters)
    return fit_all_to_all(sizes, [max(r[i] for r in per_rank) for i in range(len(sizes))], n)


def fit_all_to_all(sizes, seconds: list[float], n: int) -> dict:
    """:func:`minipar.cost.network.collectives.fit_alpha_beta` (the collectives chapter's method)
    of the all-to-all on n ranks: sizes, seconds (max over ranks), and α and bandwidth, or the
    fit's error (timings on a busy machine can make the fit meaningless: then it says so)."""
    out = dict(sizes=list(sizes), seconds=seconds, alpha=None, bandwidth=None, error=None)
    try:
        out["alpha"], out["bandwidth"] = fit_alpha_beta(
            sizes, seconds, "all-to-all", n, "pairwise-exchange"
        )
    except ValueError as e:
        out["error"] = str(e)
    return out


def folded_train_on_rank(
    rank: int,
    world: int,
    grid: Grid,
    train: MoETraining = MoETraining(experts=6),
    wrong_expert_group: bool = False,
) -> dict:
    """MoE parallel folding on ``world`` = t·d ranks of ``grid``: the dense MLP tensor- and
    sequence-parallel over t, the experts over ep (any divisor of t·d), ``train.steps`` steps of
    SGD against one process on every rank's tokens (dropless, no balancing loss): the first
    step's output and input-gradient differences, the largest parameter difference per step.
    ``wrong_expert_group``, the negative control: expert gradients reduced over the dp group."""
    if train.capacity_factor is not None:
        raise ValueError(
            f"the folded run is dropless: capacity_factor ({train.capacity_factor}) must be None"
        )
    t, ep = grid.t, grid.ep
    groups = new_groups(grid, ("tp", "dp", "dp_cp", "ep", "edp"))
    n = 4  # tokens per rank (a slice)
    torch.manual_seed(0)
    dense = DenseMLP(H, F).double()  # F = 12: divisible by t = 2, 3
    moe = make_moe(train.experts, train.top_k)
    block = FoldedBlock(dense, moe, groups)
    ref = list(dense.parameters()) + list(moe.parameters())
    opt_ref = torch.optim.SGD(ref, lr=train.lr, momentum=0.9)
    opt = torch.optim.SGD(block.parameters(), lr=train.lr, momentum=0.9)
    k = group_rank(groups["tp"])
    cols = slice(k * F // t, (k + 1) * F // t)
    own = slice(block.moe.first, block.moe.first + block.moe.local)
    diffs, first = [], {}
    for step in range(train.steps):
        xs = [_randn(n, H, seed=1000 * step + s) for s in range(world)]
        ts = [_randn(n, H, seed=7000 + 1000 * step + s) for s in range(world)]
        opt_ref.zero_grad()
        x_all = torch.cat(xs).requires_grad_()
        u = dense(x_all)
        y_ref = u + moe(u)
        sum(((ys - tt) ** 2).mean() for ys, tt in zip(y_ref.split(n), ts)).div(world).backward()
        opt.zero_grad()
        x = xs[rank].clone().requires_grad_()
        y = block(x)
        ((y - ts[rank]) ** 2).mean().backward()  # this rank's mean loss
        if step == 0:  # the global loss is / world
            first = {
                "out": max_diff(y, y_ref[rank * n : (rank + 1) * n]),
                "dx": max_diff(x.grad / world, x_all.grad[rank * n : (rank + 1) * n]),
            }
        block.reduce_gradients(groups["dp"] if wrong_expert_group else None)
        opt_ref.step()
        opt.step()
        diffs.append(
            max(
                max_diff(block.dense.w1, dense.w1[:, cols]),
                max_diff(block.dense.w2, dense.w2[cols]),
                max_diff(block.moe.router.weight, moe.router.weight),
                max_diff(block.moe.w1, moe.w1[own]),
                max_diff(block.moe.w2, moe.w2[own]),
            )
        )
    return {
        **first,
        "param diff per step": diffs,
        "edp": world // ep,
        "ep group": dist.get_process_group_ranks(groups["ep"]) if ep > 1 else [rank],
        "tp group": dist.get_process_group_ranks(groups["tp"]) if t > 1 else [rank],
    }


BALANCING = {  # name -> a Balancing's fields (one process, E = 8, top-2, 128 tokens a step)
    "none": {},
    "Switch aux, micro-batch": {"aux": "micro", "coef": 1e-2},
    "aux, global batch": {"aux": "global", "coef": 1e-2},
    "aux, per sequence": {"aux": "sequence", "coef": 1e-2},
    "z-loss only": {"z": 1e-3},
    "bias (aux-loss-free)": {"bias_rate": 1e-2},
    "capacity 1.25, drop by position": {"capacity_factor": 1.25},
    "capacity 1.25, drop by probability": {"capacity_factor": 1.25, "drop_policy": "probs"},
}


@dataclass(frozen=True)
class Balancing:
    """One way to balance the experts' load (:data:`BALANCING`): the auxiliary loss ``aux``
    (None, "micro", "global", "sequence") weighted ``coef``, the router z-loss weighted ``z``,
    the aux-loss-free bias updated at ``bias_rate``, a ``capacity_factor`` (None: dropless) and
    which tokens it drops (``drop_policy``: "position" or "probs")."""

    aux: str | None = None
    coef: float = 0.0
    z: float = 0.0
    bias_rate: float = 0.0
    capacity_factor: float | None = None
    drop_policy: str = "position"


@dataclass(frozen=True)
class BalancingLoad:
    """The one-process balancing run's data: ``experts`` experts, top-``top_k``, ``steps`` Adam
    steps at ``lr`` of ``tokens`` tokens in ``micro`` micro-batches, sequences of ``seq_len``."""

    experts: int = 8
    top_k: int = 2
    steps: int = 40
    tokens: int = 128
    micro: int = 2
    seq_len: int = 16
    lr: float = 3e-2
    seed: int = 0


def balancing_run(method: Balancing = Balancing(), load: BalancingLoad = BalancingLoad()) -> dict:
    """One process: a skewed MoE learns to imitate a random teacher MoE under one balancing
    ``method``; each of ``load.micro`` micro-batches is a forward of its own (capacity and the
    micro-batch loss are per micro-batch). Per step: assignments routed to each expert (before
    dropping), dropped fraction, gate mass dropped, mean squared router log-partition (what the
    z-loss penalises), loss. ``method.aux``: None, "micro" (Switch's loss per micro-batch,
    averaged), "global" (f over the step's tokens, P per micro-batch), "sequence" (per sequence
    of ``seq_len``, averaged)."""
    aux, coef, z, micro = method.aux, method.coef, method.z, load.micro
    tokens, seq_len = load.tokens, load.seq_len
    teacher = make_moe(load.experts, load.top_k, seed=load.seed + 1)
    moe = make_moe(load.experts, load.top_k, method.capacity_factor, seed=load.seed)
    moe.drop_policy, moe.kernel = method.drop_policy, "padded"  # grouped GEMMs: fewer calls
    skewed_router(moe)
    opt = torch.optim.Adam(moe.parameters(), lr=load.lr)
    out = {
        k: [] for k in ("routed per expert", "dropped fraction", "dropped gate mass", "z", "loss")
    }
    m = tokens // micro
    for step in range(load.steps):
        x = _randn(tokens, H, seed=10_000 + step) + 0.5  # tokens share a mean direction
        with torch.no_grad():
            target = teacher(x)
        opt.zero_grad()
        parts, loads, dropped, mass, zs, losses = [], [], 0, 0.0, [], []
        for xb, tb in zip(x.split(m), target.split(m)):
            y = moe(xb)
            parts.append((moe.probs, moe.choices, moe.logits))
            loads.append(moe.routed_per_expert)
            dropped += moe.dropped
            g = moe.probs.detach().gather(-1, moe.choices)
            mass += float((g * ~moe.kept).sum() / g.sum()) / micro if moe.dropped else 0.0
            zs.append(router_z_loss(moe.logits.detach()).item())
            losses.append(((y - tb) ** 2).mean())
        loss = torch.stack(losses).mean()
        out["loss"].append(loss.item())  # the task's loss alone
        reg = 0.0
        counts = torch.stack(loads).sum(0)  # (E,) the step's routing
        for probs, choices, logits in parts:
            if aux == "micro":
                reg = reg + load_balancing_loss(probs, choices) / micro
            elif aux == "global":
                reg = reg + global_load_balancing_loss(probs, choices, counts) / micro
            elif aux == "sequence":
                reg = reg + sequence_load_balancing_loss(probs, choices, seq_len) / micro
            if z:
                loss = loss + z * router_z_loss(logits) / micro
        (loss + coef * reg).backward()
        opt.step()
        if method.bias_rate:
            update_bias(moe.expert_bias, counts, method.bias_rate)
        out["routed per expert"].append(counts.tolist())
        out["dropped fraction"].append(dropped / (tokens * load.top_k))
        out["dropped gate mass"].append(mass)
        out["z"].append(sum(zs) / micro)
    return out


def balancing_summary(r: dict, ep: int = 4, window: int = 10) -> dict:
    """Most loaded of ``ep`` ranks over the mean at step 0 and over the last ``window`` steps;
    dropped fraction, dropped gate mass, z and loss over the last ``window`` steps."""
    last = lambda k: sum(r[k][-window:]) / window
    imb = [imbalance(l, ep)["max/mean rank"] for l in r["routed per expert"]]
    return {
        "first": imb[0],
        "last": sum(imb[-window:]) / window,
        "dropped last": last("dropped fraction"),
        "dropped mass last": last("dropped gate mass"),
        "z last": last("z"),
        "loss last": last("loss"),
    }


def balancing_runs(steps: int = 40) -> dict:
    """Every method of :data:`BALANCING`, same seed, same data."""
    load = BalancingLoad(steps=steps)
    return {name: balancing_run(Balancing(**kw), load) for name, kw in BALANCING.items()}


DISPATCH_CASES = [(2, None), (2, 1.0), (3, None)]  # (top_k, capacity_factor)


def _modern_on_rank(rank: int, world: int, node_size: int, t: int, d: int) -> dict:
    """The chapter's dispatcher and folding runs in one launch (see :func:`modern_runs`)."""
    node, rail = node_groups(node_size)
    E = 2 * world
    out = {"parity": {}, "traffic": {}}
    for disp in ("all_to_all", "all_gather", "node_dedup"):
        kw = {"node_group": node, "rail_group": rail} if disp == "node_dedup" else {}
        for case in DISPATCH_CASES:
            r = parity_on_rank(rank, E, *case, dispatcher=disp, **kw)
            out["parity"][disp, case] = max(r[k] for k in ("out", "dx", "dw1", "dw2", "drouter"))
            out["traffic"][disp, case] = dispatcher_traffic_on_rank(
                rank, disp, E, *case, node_size=node_size
            )
    grid, train = Grid(d=d, t=t, ep=world), MoETraining(experts=2 * world)
    out["folded"] = folded_train_on_rank(rank, world, grid, train)
    out["folded wrong"] = folded_train_on_rank(rank, world, grid, train, wrong_expert_group=True)
    out["folded traffic"] = folded_traffic_on_rank(rank, world, t, d, world, 2 * world)
    return out


def modern_runs(world: int = 4, node_size: int = 2, t: int = 2, d: int = 2) -> list:
    """One launch on ``world`` ranks: the three dispatchers against one process and their
    traced bytes against the model (nodes of ``node_size`` ranks, E = 2·world), and MoE
    parallel folding with the dense part over t and the experts over all world ranks (ep =
    world, which does not divide d), with its negative control."""
    return run_on_gloo(_modern_on_rank, world, node_size, t, d)


def balancing_runs_one_thread(steps: int = 40) -> dict:
    """:func:`balancing_runs` on one intra-op thread (tiny matrices: threads only contend)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return balancing_runs(steps)
    finally:
        torch.set_num_threads(threads)


def kernel_seconds(
    rows: int, experts: int, hidden: int, ffn: int, reps: int, seed: int = 0
) -> dict:
    """Fastest forward + backward of every expert's MLP on ``rows`` rows (float32, experts
    drawn uniformly at random) per kernel of :mod:`minipar.expert_parallel.grouped`; None for
    a kernel this torch lacks on this device."""
    g = torch.Generator().manual_seed(seed)
    which = torch.randint(experts, (rows,), generator=g)
    sizes = torch.bincount(which, minlength=experts)  # (E,)
    x = torch.randn(rows, hidden, generator=g)  # (rows, h), expert-major
    w1 = (torch.randn(experts, hidden, ffn, generator=g) / hidden**0.5).requires_grad_()
    w2 = (torch.randn(experts, ffn, hidden, generator=g) / ffn**0.5).requires_grad_()
    dy = torch.randn(rows, hidden, generator=g)  # (rows, h) output gradient
    out, threads = {}, torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: no oversubscription of shared cores
    for kernel in ("loop", "padded", "grouped_mm"):

        def step(kernel=kernel):
            grouped_mlp(x, sizes, w1, w2, kernel).backward(dy)
            w1.grad = w2.grad = None

        try:
            out[kernel] = min(timed(step, reps, 1, barrier=False))
        except (RuntimeError, AttributeError, NotImplementedError):  # no such kernel here
            out[kernel] = None
    torch.set_num_threads(threads)
    out["loop_over_padded"] = out["loop"] / out["padded"]
    out["loop_over_grouped_mm"] = out["loop"] / out["grouped_mm"] if out["grouped_mm"] else None
    out.update(rows=rows, experts=experts)
    return out


def folded_traffic_on_rank(
    rank: int, world: int, t: int, d: int, ep: int, experts: int = 12, top_k: int = 2
) -> dict:
    """One traced training step (forward, backward, gradient reduction) of the folded block,
    and :func:`minipar.cost.chapters.expert_parallel.folded_block_events` from the routed counts
    (gathered outside the trace). Events compared as sorted lists."""
    grid = Grid(d=d, t=t, ep=ep)
    groups = new_groups(grid, ("tp", "dp_cp", "ep", "edp"))
    n = 4
    torch.manual_seed(0)
    block = FoldedBlock(DenseMLP(H, F).double(), make_moe(experts, top_k), groups)
    x = _randn(n, H, seed=rank).requires_grad_()  # as from an earlier layer
    with tracer.trace() as tr:
        block(x).pow(2).mean().backward()
        block.reduce_gradients()
    rows = torch.zeros(ep, ep, dtype=torch.int64)
    me = group_rank(groups["ep"])
    rows[me] = block.moe.send_counts.sum(1)
    if ep > 1:
        dist.all_reduce(rows, group=groups["ep"])
    shape = MoELayer(n, H, F, experts, top_k, ep, matrices=2, bytes_per_elem=8)
    dp_cp, edp = group_size(groups["dp_cp"]), group_size(groups["edp"])
    model = folded_block_events(rows.tolist(), me, shape, F, t, dp_cp, edp, world)
    return {"traced": sorted((e.op, e.bytes) for e in tr.events), "model": sorted(model)}
