"""``minipar params | flops | memory | activations | bubble | collective``: the cost model on the
command line. Tables for people by default; ``--json`` prints one JSON object (bytes in bytes,
times in seconds, bandwidth in bytes/s per direction). Bad input: one line, exit status 2.
"""

from __future__ import annotations

import argparse
import math
import sys
import tomllib
from dataclasses import asdict, replace
from pathlib import Path

from ..errors import InputError
from ..jsonio import print_json
from . import model
from .chapters import memory_time as memory
from .chapters import pipeline_parallel as pipeline
from .kernels import hardware
from .kernels.compute import FP8_SCALING, check_fp8_gpu
from .network import collectives
from .planner import three_d as planner
from .planner.breakdown import check_layout
from .planner.layout import MLP_SAVES
from .planner.term_table import TERMS
from .planner.three_d_terms import CP_ALGORITHMS
from .units import fmt_bytes, fmt_seconds, parse_bytes


def parse_number(text: str, cast, ok, rule: str):
    """``cast(text)`` if it parses and ``ok(value)``; else argparse's one-line error."""
    try:
        value = cast(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"must be {rule}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return parse_number(text, int, lambda v: v >= 1, "a positive integer")


def positive_float(text: str) -> float:
    return parse_number(text, float, lambda v: 0 < v < float("inf"), "a positive number")


def nonnegative_float(text: str) -> float:
    return parse_number(text, float, lambda v: 0 <= v < float("inf"), "a number >= 0")


def parse_fraction(text: str) -> float:
    return parse_number(text, float, lambda v: 0 <= v < 1, "a number in [0, 1)")


def size_bytes(text: str) -> float:
    """:func:`minipar.cost.units.parse_bytes` as an argparse type."""
    try:
        return parse_bytes(text)
    except InputError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


_CLUSTER = 2**20, "about a million: more than any cluster built"
_BATCH = 2**24, "16.8 million sequences"
BOUNDS: dict[str, tuple[float, float, str]] = {
    # counts of GPUs, ranks and parallel degrees
    **{k: (1, *_CLUSTER) for k in "gpus gpus_per_node tp pp dp cp ep max_cp max_ep".split()},
    "ranks": (1, *_CLUSTER),
    # sequences and micro-batches
    **{k: (1, *_BATCH) for k in "global_batch batch micro_batch microbatches".split()},
    # the model's shape: far past any trained transformer, small enough that every count the
    # cost model prints stays an exact number in both the table and --json
    "layers": (1, 2**16, "far deeper than any trained model"),
    "hidden": (1, 2**20, "a hidden size of 1,048,576"),
    "ffn_hidden": (1, 2**22, "an MLP width of 4,194,304"),
    "heads": (1, 2**16, "65,536 heads"),
    "kv_heads": (1, 2**16, "65,536 heads"),
    "seq": (1, 2**24, "16.8 million tokens"),
    "vocab": (1, 2**24, "16.8 million tokens"),
    "chunks": (1, 2**16, "65,536 model chunks per stage"),
    "steps": (1, 10**4, "10,000 timed steps"),
    "params": (1, 1e15, "a quadrillion parameters"),
    "seconds": (0, 1e9, "32 years"),
    "bytes": (0, 2**50, "1 PiB in one collective"),
    "alpha": (0, 1.0, "one second per message"),
    "bandwidth": (1, 1e15, "1 PB/s per direction"),
    "weight_bytes": (0, 64, "64 bytes per parameter"),
    "grad_bytes": (0, 64, "64 bytes per parameter"),
    "optimizer_bytes": (0, 64, "64 bytes per parameter"),
    "grad_reduce_bytes": (0, 64, "64 bytes per element"),
    # the busiest EP rank's routed tokens over the mean: at most the number of EP ranks (every
    # token on one rank); the plan checks the model's experts, Options that it is >= 1
    "moe_imbalance": (0, 1024, "the busiest of 1,024 EP ranks taking every token"),
}
"""Each flag's physical or practical range, by argparse ``dest``, checked as it is parsed so a
refusal names the flag (``argument --gpus: must be between 1 and 1,048,576 ...``); the rules of the
model itself (divisibility, memory) are checked after."""


def _bounded(parse, dest: str):
    """``parse`` (an argparse type) that also refuses a value outside :data:`BOUNDS`."""
    lo, hi, why = BOUNDS[dest]

    def bounded(text: str):
        value = parse(text)
        if isinstance(value, (int, float)) and not lo <= value <= hi:
            ends = [f"{v:,}" if float(v).is_integer() and v < 1e16 else f"{v:g}" for v in (lo, hi)]
            raise argparse.ArgumentTypeError(
                f"must be between {ends[0]} and {ends[1]} ({why}), got {text!r}"
            )
        return value

    bounded.__name__ = getattr(parse, "__name__", "value")
    return bounded


def _count(v: float) -> str:
    """``v`` with thousands separators, exactly as ``--json`` gives it: an int's every digit; a
    float past 2⁵³ (where its digits are no longer exact) as ``--json``'s shortest form."""
    if isinstance(v, int) or abs(v) < 2**53:
        return f"{v:,.0f}" if not isinstance(v, int) else f"{v:,}"
    return repr(float(v))


def _emit(args, command: str, result: dict, rows: list[tuple[str, str]]) -> int:
    if args.json:
        print_json(result)  # refuses Infinity and NaN
    else:
        width = max(len(k) for k, _ in rows)
        print(f"minipar {command}")
        for k, v in rows:
            print(f"  {k:<{width}}  {v}")
    return 0


def guarded(command: str, fn):
    """Run ``fn(args)``; a ValueError (the cost model's rule errors and
    :class:`minipar.errors.InputError`)
    becomes one line on stderr and status 2, under ``minipar`` and ``python -m minipar.cli``
    alike."""

    def run(args) -> int:
        try:
            return fn(args)
        except ValueError as e:
            print(f"minipar {command}: error: {e}", file=sys.stderr)
            return 2

    return run


def _check_model_shape(args, t: int = 1, p: int = 1) -> None:
    layers = getattr(args, "layers", None)
    check_layout(p if layers is None else layers, args.hidden, args.heads, t=t, p=p)


def _params(args) -> int:
    if args.heads is not None:
        _check_model_shape(args)
    n = model.param_count(args.layers, args.hidden, args.vocab, args.seq)
    return _emit(
        args,
        "params",
        {"params": n},
        [("params", f"{_count(n)} ({n / 1e9:.2f} B)"), ("source", "Narayanan et al. 2021, Eq. 2")],
    )


def _flops(args) -> int:
    f = model.flops_per_iteration(
        args.batch, args.seq, args.layers, args.hidden, args.vocab, args.recompute
    )
    mf = model.flops_per_iteration(args.batch, args.seq, args.layers, args.hidden, args.vocab)
    out = {"flops_per_iteration": f, "model_flops_per_iteration": mf, "recompute": args.recompute}
    rows = [("flops_per_iteration", f"{f:.4g}"), ("model_flops_per_iteration", f"{mf:.4g}")]
    if args.seconds is not None:
        gpus = 1 if args.gpus is None else args.gpus
        peak = hardware.gpu(args.gpu).peak_flops["bf16"] * gpus
        out.update(mfu=model.mfu(mf / args.seconds, peak), hfu=model.hfu(f / args.seconds, peak))
        if not out["hfu"] <= 1:  # faster than the peak: the seconds cannot have been measured
            _too_fast(args, f, peak, out["hfu"])
        rows += [("mfu", f"{out['mfu']:.1%}"), ("hfu", f"{out['hfu']:.1%}")]
    return _emit(args, "flops", out, rows)


def _too_fast(args, flops: float, peak: float, hfu: float) -> None:
    """The InputError for ``--seconds`` shorter than the dense peak's time for ``flops``:
    naming ``--gpus`` when it was left out (one GPU assumed), else the seconds."""
    need = math.ceil(flops / (args.seconds * peak / (args.gpus or 1)))
    if args.gpus is None:
        raise InputError(
            f"--gpus is missing: these FLOPs in --seconds {args.seconds:g} need at least {need:,} "
            f"× {args.gpu} at its dense bf16 peak (HFU {hfu:.3g} on the 1 GPU assumed); give "
            "--gpus N, the GPUs the step ran on"
        )
    raise InputError(
        f"--seconds ({args.seconds:g}) must be at least the peak's time for these FLOPs "
        f"({flops / peak:.3g} s on --gpus {args.gpus} × {args.gpu}): HFU would be {hfu:.3g}; "
        f"at {args.seconds:g} s they need at least {need:,} GPUs"
    )


_DIMS = ("layers", "hidden", "heads", "seq", "vocab")


def _require_shape(args, instead: str) -> None:
    """An InputError naming the shape flags missing, unless all are given."""
    missing = [k for k in _DIMS if getattr(args, k) is None]
    if missing:
        raise InputError(
            f"give {instead} or all of --layers --hidden --heads --seq --vocab "
            f"(missing --{' --'.join(missing)})"
        )


def _memory(args) -> int:
    given = [k for k in _DIMS if getattr(args, k) is not None]
    if args.params is not None and given:
        raise InputError(
            f"give --params or the model shape, not both (got --params and --{given[0]})"
        )
    if args.params is None:
        _require_shape(args, "--params N")
        _check_model_shape(args, args.tp, args.pp)
        psi = model.param_count(args.layers, args.hidden, args.vocab, args.seq)
    else:
        psi = args.params
    recipe = {
        k: getattr(args, k) for k in ("zero", "weight_bytes", "grad_bytes", "optimizer_bytes")
    }
    s = memory.model_state_bytes(psi, d=args.dp, t=args.tp, p=args.pp, **recipe)
    out = {
        "bytes_per_device": s.total,
        "weights": s.weights,
        "gradients": s.gradients,
        "optimizer": s.optimizer,
        "params": psi,
    }
    rows = [
        (k, f"{_count(v)} B ({fmt_bytes(v, binary=False)}, {fmt_bytes(v)})")
        for k, v in out.items()
        if k != "params"
    ] + [("params", _count(psi))]
    return _emit(args, "memory", out, rows)


def _activations(args) -> int:
    _check_model_shape(args, args.tp)
    shape = (args.seq, args.micro_batch, args.hidden, args.heads)
    kw = dict(t=args.tp, sp=args.sp, recompute=args.recompute)
    per = memory.activation_bytes_per_layer(*shape, **kw)
    out = {"bytes_per_layer": per}
    rows = [("bytes_per_layer", f"{per:,.0f} B ({fmt_bytes(per)})")]
    if args.layers is not None:
        kw |= dict(m=args.microbatches, schedule=args.schedule, v=args.chunks)
        first = memory.pipeline_first_stage_activation_bytes(*shape, args.layers, args.pp, **kw)
        out["first_stage_bytes"] = first
        rows.append(("first_stage_bytes", f"{first:,.0f} B ({fmt_bytes(first)})"))
    return _emit(args, "activations", out, rows)


def _bubble(args) -> int:
    f = pipeline.bubble_fraction_of_total(args.schedule, args.pp, args.microbatches, args.chunks)
    r = pipeline.bubble_relative_to_ideal(args.schedule, args.pp, args.microbatches, args.chunks)
    return _emit(
        args,
        "bubble",
        {"fraction_of_total": f, "relative_to_ideal": r},
        [
            ("fraction_of_total", f"{f:.4f}  (GPipe convention: bubble / total)"),
            ("relative_to_ideal", f"{r:.4f}  (Megatron convention: bubble / ideal)"),
        ],
    )


def _collective(args) -> int:
    if args.link is not None:
        lk = hardware.link(args.link)
        alpha = lk.alpha if args.alpha is None else args.alpha
        bandwidth = lk.bandwidth if args.bandwidth is None else args.bandwidth
    elif args.alpha is None or args.bandwidth is None:
        raise InputError(
            f"give --alpha and --bandwidth, or --link NAME (one of {', '.join(hardware.LINKS)})"
        )
    else:
        alpha, bandwidth = args.alpha, args.bandwidth
    t = collectives.collective_time(
        args.op, args.algorithm, args.ranks, args.bytes, alpha, bandwidth
    )
    factor = collectives.busbw_factor(args.op, args.ranks)
    out = {"seconds": t, "busbw_factor": factor, "alpha": alpha, "bandwidth": bandwidth}
    rows = [("seconds", fmt_seconds(t)), ("busbw_factor", f"{factor:.4f}")]
    if t > 0:
        out.update(
            algbw=collectives.algbw(args.bytes, t),
            busbw=collectives.busbw(args.op, args.ranks, args.bytes, t),
        )
        rows += [
            ("algbw", f"{fmt_bytes(out['algbw'], binary=False)}/s"),
            ("busbw", f"{fmt_bytes(out['busbw'], binary=False)}/s"),
        ]
    return _emit(args, "collective", out, rows)


def _fraction(text: str) -> float:
    return parse_number(text, float, lambda v: 0 < v <= 1, "a number in (0, 1]")


def _nonneg_int(text: str) -> int:
    return parse_number(text, int, lambda v: v >= 0, "an integer >= 0")


_FLAGS = tomllib.loads((Path(__file__).resolve().parent / "cli_flags.toml").read_text("utf-8"))
"""Each command's help and flags, in order (``cli_flags.toml``: argparse's keywords, with a type,
choices and action named by :func:`_flag_names`)."""


def _flag_names() -> tuple[dict, dict]:
    """(types, choices) that ``cli_flags.toml`` names: this module's parsers, the cost model's
    own lists."""
    types = (int, positive_int, positive_float, nonnegative_float, parse_fraction, size_bytes)
    types += (_fraction, _nonneg_int)
    choices = {
        "RECOMPUTE": model.RECOMPUTE,
        "SCHEDULES": pipeline.SCHEDULES,
        "OPS": collectives.OPS,
        "ALGORITHMS": sorted({a for algs in collectives.ALGORITHMS.values() for a in algs}),
        "LINKS": tuple(hardware.LINKS),
        "GPUS": tuple(hardware.GPUS),
        "MODELS": tuple(planner.MODELS),
        "ZERO_STAGES": planner.ZERO_STAGES,
        "ZERO3_COLLECTIVES": planner.ZERO3_COLLECTIVES,
        "RECIPES": tuple(planner.RECIPES),
        "ATTENTION": planner.ATTENTION,
        "NORMS": planner.NORMS,
        "SPLITS": planner.SPLITS,
        "PLAN_SCHEDULES": planner.SCHEDULES,
        "CP_ALGORITHMS": CP_ALGORITHMS,
        "FP8_SCALING": FP8_SCALING,
        "MLP_SAVES": MLP_SAVES,
    }
    return {f.__name__: f for f in types}, choices


def add_parser(subparsers) -> None:
    """Register the cost-model subcommands and their flags (:data:`_FLAGS`) on ``minipar``'s
    subparsers (``plan --calibrate`` reaches ``bench three_d`` through ``subparsers``, the
    command tree both are registered on)."""
    handlers = dict(params=_params, flops=_flops, memory=_memory, activations=_activations)
    handlers |= dict(bubble=_bubble, collective=_collective, plan=_plan)
    types, choices = _flag_names()
    actions = {"BooleanOptionalAction": argparse.BooleanOptionalAction}
    for name, spec in _FLAGS.items():
        p = subparsers.add_parser(name, help=spec["help"], description=spec["help"])
        p.add_argument("--json", action="store_true", help="print one JSON object")
        p.set_defaults(func=guarded(name, handlers[name]))
        for flag in spec["flag"]:
            kw = dict(flag)
            names = kw.pop("name")
            if "type" in kw:
                kw["type"] = types[kw["type"]]
                first = names if isinstance(names, str) else names[0]
                dest = kw.get("dest", first.lstrip("-").replace("-", "_"))
                if dest in BOUNDS:
                    kw["type"] = _bounded(kw["type"], dest)
            if isinstance(kw.get("choices"), str):
                kw["choices"] = choices[kw["choices"]]
            if kw.get("action") in actions:
                kw["action"] = actions[kw["action"]]
            p.add_argument(*([names] if isinstance(names, str) else names), **kw)
    subparsers.choices["plan"].set_defaults(command_tree=subparsers)


# --- minipar plan: the 3D planner (minipar.cost.planner.three_d) ------------------------------------


def _plan_model(args) -> "planner.ModelShape":
    """The model shape from ``--model`` and the shape flags (a flag overrides the preset)."""
    given = [k for k in _DIMS if getattr(args, k) is not None]
    shape = {
        k: v
        for k, v in (
            ("ffn", args.ffn_hidden),
            ("kv_heads", args.kv_heads),
            ("mlp_matrices", {"gelu": 2, "swiglu": 3}.get(args.mlp)),
            ("norm", args.norm),
            ("tied", False if args.untied_embeddings else None),
            ("bias", False if args.no_bias else None),
            ("positions", "rope" if args.rope else None),
            ("dropout", args.dropout),
        )
        if v is not None
    }
    if args.model is not None:
        base = planner.MODELS[args.model]
        model = replace(base, **{k: getattr(args, k) for k in given}, **shape)  # keeps MoE fields
    else:
        _require_shape(args, "--model NAME")
        model = planner.ModelShape(*(getattr(args, k) for k in _DIMS), **shape)
    model.check()
    return model


PHYSICAL_SLACK = (8.0, 4.0)
"""A profile's dense bf16 peak, HBM bandwidth and memory must lie between 1/8 of the least and
4 × the most of its generation's presets (:func:`check_physical`): room for a cut-down or a
next part, none for a CPU's 0.1 TFLOP/s or a typo's 10³⁰ FLOP/s."""


def check_physical(g: "hardware.GPU", where: str) -> None:
    """An InputError naming ``where``, the field and its range unless ``g``'s peak, HBM
    bandwidth and memory are those of a GPU of its generation: the presets on the same NVLink
    (``g.intra``; every preset if none is). A profile that ``minipar calibrate gpu --device
    cpu`` wrote (a check of the plumbing) is refused here, before it prices any plan."""
    same = [p for p in hardware.GPUS.values() if p.intra == g.intra]
    era = f"the {g.intra} generation ({', '.join(p.name for p in same)})" if same else "any GPU"
    same = same or list(hardware.GPUS.values())
    fields = (
        ("peak_flops['bf16']", lambda x: x.peak_flops["bf16"], 1e12, "TFLOP/s"),
        ("hbm_bandwidth", lambda x: x.hbm_bandwidth, 1e12, "TB/s"),
        ("memory_bytes", lambda x: x.memory_bytes, 1e9, "GB"),
    )
    for name, get, unit, label in fields:
        lo = min(get(p) for p in same) / PHYSICAL_SLACK[0]
        hi = max(get(p) for p in same) * PHYSICAL_SLACK[1]
        if not lo <= get(g) <= hi:
            raise InputError(
                f"{where}: {name} ({get(g) / unit:.3g} {label}) must be between "
                f"{lo / unit:.3g} and {hi / unit:.3g} {label} for a GPU of {era}"
                + (
                    "; a profile from `minipar calibrate gpu --device cpu` checks the plumbing "
                    "and prices no plan"
                    if g.name == "CPU"
                    else ""
                )
            )


def _plan_cluster(args) -> "planner.Cluster":
    if args.gpus_per_node is not None and args.gpus_per_node > args.gpus:
        raise InputError(
            f"gpus per node ({args.gpus_per_node}) must be at most the GPUs ({args.gpus}): "
            "fewer GPUs than one node are given by --gpus alone"
        )
    gpu = hardware.load_gpu_profile(args.gpu_profile) if args.gpu_profile else args.gpu
    if args.gpu_profile:
        check_physical(gpu, f"gpu profile {args.gpu_profile}")
    # default: the GPU's NVLink domain (8 on a baseboard, 72 on a GB200 NVL72 rack); of a rack's
    # domain a job takes the largest share that divides its GPUs (2048 GPUs: 64 of each 72)
    domain = (gpu if isinstance(gpu, hardware.GPU) else hardware.gpu(gpu)).nvlink_domain
    per_node = min(domain, args.gpus) if args.gpus_per_node is None else args.gpus_per_node
    if args.gpus_per_node is None and domain > 8 and args.gpus % per_node:
        per_node = max(k for k in range(1, per_node + 1) if args.gpus % k == 0)
    names = ("gemm_efficiency", "intra_bandwidth", "intra_alpha", "inter_bandwidth", "inter_alpha")
    kw = {k: getattr(args, k) for k in names}  # overrides of the presets, None where not given
    return planner.cluster(args.gpus, per_node, gpu, args.intra, args.inter, **kw)


_PLAN_OPTIONS = (
    "grad_reduce_bytes headroom zero3_collectives attention precision overlap_grad_reduce "
    "cp_algorithm overlap_param_gather reshard_after_forward fp8 compiled tp_overlap moe_imbalance "
    "fp8_params main_grad_bytes moe_capacity ep_overlap mlp_saves microbatch_group dualpipe"
).split()
"""The :class:`~minipar.cost.planner.three_d_terms.Options` fields ``minipar plan`` takes as flags
of the same name."""


def plan_inputs(args):
    """(model, cluster, space, options) of ``minipar plan``: the one place where every default
    is decided (:func:`minipar.cost.planner.three_d.plan_options`)."""
    model, cluster = _plan_model(args), _plan_cluster(args)
    dims = ("tp", "pp", "dp", "micro_batch", "zero", "recompute", "cp", "ep", "max_cp", "max_ep")
    dims += ("chunks", "schedule")
    space = planner.Space(**{k: getattr(args, k) for k in dims}, split=args.pipeline_split)
    modules = args.recompute_modules
    opts = planner.Options(
        **{k: getattr(args, k) for k in _PLAN_OPTIONS},
        zero3_ac_inside_unit=args.ac_inside_unit,
        recompute_modules=tuple(modules.split(",")) if modules else None,
    )
    return model, cluster, space, planner.plan_options(model, cluster, opts)


def _check_hopper(cluster, opts) -> None:
    """``--fp8`` and ``--attention fa3`` need a Hopper GPU (an FP8 peak in its preset): said
    before the search, naming the flag and the GPU, not as a rule every layout broke; --fp8
    mxfp8 needs a Blackwell GPU (:func:`~minipar.cost.kernels.compute.check_fp8_gpu`)."""
    if opts.fp8 == "mxfp8":
        check_fp8_gpu(cluster.gpu, opts.fp8)
    if cluster.gpu.peak_flops.get("fp8"):
        return
    hopper = ", ".join(k for k, g in hardware.GPUS.items() if g.peak_flops.get("fp8"))
    if opts.fp8:
        raise InputError(
            f"--fp8 {opts.fp8} needs FP8 tensor cores (Hopper or later); --gpu {cluster.gpu.name} "
            f"has none: use one of {hopper}"
        )
    if opts.attention == "fa3":
        raise InputError(
            f"--attention fa3 (FlashAttention-3) is a Hopper kernel; --gpu {cluster.gpu.name} "
            f"is not Hopper: use --attention flash, or one of {hopper}"
        )


def _check_space(model, cluster, space) -> None:
    """The fixed dimensions' own rules, before any layout is searched."""
    if (space.ep or (space.max_ep or 1) > 1) and not model.moe:
        raise InputError(f"--ep needs an MoE model (experts > 1), got {model.experts} expert")
    if space.tp and model.heads % space.tp:
        raise InputError(f"heads ({model.heads}) must be divisible by t ({space.tp})")
    if space.pp and model.layers % space.pp and space.split == "even":
        raise InputError(
            f"layers ({model.layers}) must be divisible by p ({space.pp}) under --pipeline-split "
            "even (units: the embedding and the head count as layers)"
        )
    prod = 1
    for k in (space.tp, space.pp, space.dp, space.cp):
        prod *= k or 1
    if cluster.gpus % prod:
        raise InputError(f"gpus ({cluster.gpus}) must be divisible by the fixed t·cp·p·d ({prod})")


MAX_SECONDS = 1e9
"""No step time `minipar plan` prints is this long (32 years): an input is out of range."""


def _plan(args) -> int:
    if args.calibrate:  # the same code as ``minipar bench three_d``
        given = [
            f
            for f, k in (("--gpus", "gpus"), ("--global-batch", "global_batch"))
            if getattr(args, k) is not None
        ]
        if given:
            raise InputError(
                f"--calibrate measures this machine's --ranks ({args.ranks}) gloo ranks, so "
                f"{' and '.join(given)} would be ignored: drop {'them' if len(given) > 1 else 'it'}"
                ", or drop --calibrate to plan that cluster"
            )
        return _calibrate(args)
    missing = [
        f"--{k.replace('_', '-')}" for k in ("gpus", "global_batch") if getattr(args, k) is None
    ]
    if missing:
        raise InputError(f"give {' and '.join(missing)} (or --calibrate to measure this machine)")
    model, cluster, space, opts = plan_inputs(args)
    if model.moe and opts.moe_imbalance > model.experts:
        raise InputError(
            f"--moe-imbalance ({opts.moe_imbalance:g}) must be at most the experts "
            f"({model.experts}): the busiest EP rank gets at most every routed token"
        )
    _check_hopper(cluster, opts)
    _check_space(model, cluster, space)
    # the rule broken, before the search
    planner.preflight(model, cluster, args.global_batch, space, opts)
    refusals: list[str] = []
    configs = planner.search(model, cluster, args.global_batch, space, opts, refusals=refusals)
    fitting = [c for c in configs if c.fits]
    if not fitting:
        raise InputError(
            "nothing fits: " + planner.why_nothing_fits(model, cluster, configs, refusals, opts)
        )
    for c in fitting:  # an input out of range: no Infinity/NaN, no 40-digit step time
        d = c.as_dict()
        bad = [
            k
            for k, v in d.items()
            if isinstance(v, float)
            and not (math.isfinite(v) and (abs(v) < MAX_SECONDS or not k.endswith("_seconds")))
        ]
        if bad:
            raise InputError(
                f"predicted {bad[0]} ({d[bad[0]]:.3g}) must be a finite number of seconds below "
                f"{MAX_SECONDS:.0e}: an input (bandwidth, α, η, batch) is out of range"
            )
    shown = fitting if args.top == 0 else fitting[: args.top]
    sens = (
        planner.sensitivity(model, cluster, args.global_batch, space, opts)
        if args.sensitivity
        else None
    )
    if args.json:
        return _plan_json(model, cluster, opts, shown, sens)
    _plan_table(args, model, cluster, opts, shown, (len(fitting), len(configs)))
    if sens is not None:
        _sensitivity_table(sens)
    return 0


def _sensitivity_table(rows) -> None:
    print("  sensitivity of the first layout (each constant alone ±20 %):")
    for r in rows:
        b = r["best"]
        then = "first becomes nothing (none fits)"
        if r["same"]:
            then = "the same layout stays first"
        elif b is not None:
            then = f"first becomes t={b['tp']} p={b['pp']} d={b['dp']} b={b['micro_batch']} "
            then += f"{b['recompute']} ZeRO-{b['zero']}"
        print(
            f"    {r['knob']:<17} ×{r['factor']:.1f}: step {fmt_seconds(r['step_seconds']):>9} "
            f"({r['step_change']:+.1%}), MFU {r['mfu']:.1%}; {then}"
        )


def _plan_json(model, cluster, opts, shown, sens=None) -> int:
    links = {
        k: {"name": lk.name, "bandwidth": lk.bandwidth, "alpha": lk.alpha}
        for k, lk in (("intra", cluster.intra), ("inter", cluster.inter))
    }
    extra = {} if sens is None else {"sensitivity": sens}
    print_json(
        extra
        | {
            "model": asdict(model),
            "params": model.params,
            "gpus": cluster.gpus,
            "attention": opts.attention,
            "precision": opts.precision,
            "headroom": opts.headroom,
            "gpu": cluster.gpu.name,
            "intra": cluster.intra.name,
            "inter": cluster.inter.name,
            "links": links,
            "gemm_efficiency": cluster.gpu.gemm_efficiency,
            "configs": [c.as_dict() for c in shown],
        }
    )
    return 0


def _term_columns(shown) -> list:
    """The term table's columns (:data:`minipar.cost.planner.term_table.TERMS`) that are not zero in
    every row shown, the DP and ZeRO-3 ones always."""
    always = {"tp", "pp", "dp_exposed"}
    return [
        t
        for t in TERMS
        if t.column and (t.name in always or any(c.breakdown.values[t.name] > 0 for c in shown))
    ]


_DTYPES = {4: "fp32", 2: "bf16", 1: "fp8"}


def recipe_words(opts, given=(), zero=None) -> str:
    """The recipe inputs a plan assumed, in words (every default decided): the main gradients'
    and the reduction's dtypes, FP8, its scaling and FP8 parameters, each overlap switch, the
    optimizer's sharding and the schedules searched. A switch not in ``given`` (the flags the
    command line set) is marked "(default)": the era's, on for the modern recipes (H100 and
    later) as NVIDIA's Hopper recipes and torchtitan run them, off for the 2021 A100 runs."""
    on = {True: "on", False: "off", None: "off"}

    def dtype(nbytes) -> str:
        return _DTYPES.get(nbytes, f"{nbytes:g} bytes")

    def mark(name: str) -> str:
        return "" if name in given else " (default)"

    schedules = (
        "pipeline schedule DualPipe (v = 1, p and m even)"
        if opts.dualpipe
        else f"pipeline schedules {', '.join(planner.SCHEDULES)} (v up to the layers per stage; "
        f"interleaved micro-batch group N = {opts.microbatch_group or 'p'})"
    )
    sharding = (
        "the Z column's ZeRO stage searched (1: the distributed optimizer)"
        if zero is None
        else f"ZeRO-{zero}"
    )
    return (
        f"main gradients {dtype(opts.recipe.grad_bytes)}{mark('main_grad_bytes')}, "
        f"reduced in {dtype(opts.grad_reduce_bytes)}{mark('grad_reduce_bytes')}; "
        f"FP8 GEMMs {opts.fp8 or 'off'}"
        f"{', FP8 parameters (no 16-bit copy)' if opts.fp8_params else ''}; "
        f"TP overlap {on[opts.tp_overlap]}{mark('tp_overlap')}; grad-reduce overlap (p>1) "
        f"{on[opts.overlap_grad_reduce]}{mark('overlap_grad_reduce')}; param-gather overlap "
        f"{on[opts.overlap_param_gather]}{mark('overlap_param_gather')}; optimizer states: "
        f"{sharding}; {schedules}; the MLP keeps {MLP_KEEPS[opts.mlp_saves]}"
    )


MLP_KEEPS = {
    "product": "its activation's inputs and output",
    "inputs": "its activation's inputs, the output rewritten in the backward",
}
"""What the plan's header says the MLP keeps, per :data:`~minipar.cost.planner.layout.MLP_SAVES`."""


def _plan_table(args, model, cluster, opts, shown, counts) -> None:
    n_fit, n_all = counts
    print(
        f"minipar plan: {model.params / 1e9:.2f} B params, {opts.attention} attention, "
        f"{opts.precision} precision, on {cluster.gpus} × {cluster.gpu.name} "
        f"(η = {cluster.gpu.gemm_efficiency:.3g} of {cluster.peak / 1e12:.0f} TFLOP/s), "
        f"B = {args.global_batch}; {n_fit} of {n_all} layouts fit in "
        f"{fmt_bytes(shown[0].memory_limit)} ({opts.headroom:.0%} headroom)"
    )
    print(
        f"  links: intra {cluster.intra.name} {cluster.intra.bandwidth / 1e9:.2f} GB/s "
        f"per direction ({cluster.gpus_per_node}/node), inter {cluster.inter.name} "
        f"{cluster.inter.bandwidth / 1e9:.2f} GB/s per direction per GPU"
    )
    print(
        "  overlap: TP and PP on the critical path; DP after the flush (p>1) or under the last "
        "backward (p=1); ZeRO-3 gathers prefetched one layer ahead"
    )
    marked = ("main_grad_bytes", "grad_reduce_bytes", "tp_overlap", "overlap_grad_reduce")
    given = {k for k in (*marked, "overlap_param_gather") if getattr(args, k, None) is not None}
    print("  recipe: " + recipe_words(opts, given, args.zero))
    extra = any(c.cp > 1 or c.ep > 1 for c in shown)  # cp/ep columns when used
    cols = _term_columns(shown)
    print(
        f"  {'t':>2} {'p':>3} {'d':>4} "
        + (f"{'cp':>3} {'ep':>3} " if extra else "")
        + f"{'b':>2} {'m':>4} {'v':>2} {'recomp':<9} {'sp':<2} "
        f"{'Z':>1} {'mem/GPU':>10} {'bubble':>6} "
        + "".join(f"{t.column:>9} " for t in cols)
        + f"{'step':>9} {'MFU':>5}"
    )
    for c in shown:
        print(
            f"  {c.tp:>2} {c.pp:>3} {c.dp:>4} "
            + (f"{c.cp:>3} {c.ep:>3} " if extra else "")
            + f"{c.micro_batch:>2} {c.microbatches:>4} "
            f"{c.chunks:>2} {c.recompute:<9} {'y' if c.sp else 'n':<2} {c.zero:>1} "
            f"{fmt_bytes(c.bytes_per_gpu) + ('*' if c.tight else ''):>10} {c.bubble:>6.1%} "
            + "".join(f"{fmt_seconds(c.breakdown.per_step(t.name)):>9} " for t in cols)
            + f"{fmt_seconds(c.step_seconds):>9} {c.mfu:>5.1%}"
        )
    if any(c.tight for c in shown):
        print(
            f"  * tight: above the {fmt_bytes(shown[0].breakdown.margin_limit)} the allocator "
            "margin leaves, within the limit: it may or may not fit"
        )
        _tight_first(shown)


def _tight_first(shown) -> None:
    """Say so when the first layout is tight: the ranking is by time alone, and the first that
    surely fits may be nearly as fast."""
    if not shown[0].tight:
        return
    safe = next((i for i, c in enumerate(shown) if not c.tight), None)
    if safe is None:
        print("    the first is tight, ranked by time alone; none shown surely fits (--top 0: all)")
        return
    slower = shown[safe].step_seconds / shown[0].step_seconds - 1
    print(
        f"    the first is tight, ranked by time alone: row {safe + 1}, {slower:.1%} slower, "
        "surely fits (take it where memory is short)"
    )


def _calibrate(args) -> int:
    """``minipar plan --calibrate``: run ``minipar bench three_d`` as the command tree that
    registered ``plan`` dispatches it (the cost layer never imports the benchmarks)."""
    bench = args.command_tree.choices.get("bench") if args.command_tree else None
    if bench is None:
        raise InputError(
            "--calibrate needs the `minipar bench three_d` command, which this "
            "command line does not register"
        )
    argv = ["three_d", "--ranks", str(args.ranks), "--steps", str(args.steps)]
    ns = bench.parse_args(argv + (["--json"] if args.json else []))
    return ns.func(ns)
