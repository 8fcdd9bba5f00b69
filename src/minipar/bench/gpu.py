"""``minipar calibrate gpu``: measure this GPU's kernel constants, write its JSON profile.

What :mod:`minipar.cost.kernels.compute` needs of a GPU, measured on the reader's card in well
under a minute, the way ``measurements/h200_layer_gemm_times.json`` measured the H200 (bf16,
CUDA events around each call, the median of repeats after warm-up, random data):

  ceiling   one large square bf16 ``torch.matmul``                  → η = FLOP/s / peak
  copy      a device-to-device copy, bytes read + written            → W (HBM bandwidth)
  gemms     every GEMM of a layer (forward, input and weight gradient) at five layer shapes,
            the attention ones with ``torch.bmm``                    → λ, W_bmm, λ_bmm
  layers    one :class:`minipar.model.Layer` forward + backward at the five shapes (three
            token counts, two widths), attention unfused (as written) and fused
            (``scaled_dot_product_attention``, causal: flash where PyTorch has it)
                            → flash rate, bytes per score, element-wise rate and issue time
  adam      ``torch.optim.Adam(fused=True)`` on fp32 parameters      → the optimizer's bandwidth

:func:`minipar.cost.validation.kernel_fit.fit_gpu` turns the timings into a :class:`GPU`,
written with the raw timings under ``"measured"``;
:func:`minipar.cost.kernels.hardware.load_gpu_profile` reads it back (``minipar plan
--gpu-profile FILE``). The dense bf16 peak is ``--peak-tflops``, else the matching preset's
(H200, H100 PCIe or SXM, A100), else the measured ceiling (η = 1, and the profile says so).
``--device cpu`` runs the same code on tiny shapes: a check of the plumbing, not a GPU profile.
:func:`calibrate` takes a ``timer`` so that tests can replace the clock.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

from minipar.cost.kernels import compute
from minipar.cost.kernels.hardware import GPU, GPUS, gpu_profile
from minipar.cost.validation import kernel_fit
from minipar.errors import InputError
from minipar.jsonio import write
from minipar.runtime.timing import timed

from .common import add_options, check_writable, progress

ROLES = ("fwd", "dgrad", "wgrad")


@dataclass(frozen=True)
class Plan:
    """What one calibration measures: the square GEMM, the copy, the layer shapes (b, s, h, a),
    the Adam sizes, and how many timed repeats."""

    ceiling: int
    copy_bytes: int
    shapes: tuple[tuple[int, int, int, int], ...]
    adam: tuple[int, ...]
    repeats: int


def _shapes(b: int, s: int, h: int, a: int) -> tuple[tuple[int, int, int, int], ...]:
    """The calibration's layer shapes (b, s, h, a) around one: b·s/4, b·s (s and 2s), 4·b·s,
    and b·s at 2h."""
    return (
        (b // 4, s, h, a),
        (b, s, h, a),
        (b // 2, 2 * s, h, a),
        (4 * b, s, h, a),
        (b, s, 2 * h, 2 * a),
    )


PLANS = {
    # s doubling at fixed b·s (the same dense GEMMs, twice the attention per token) tells the
    # attention rate from the rest; three token counts b·s (1/4, 1, 4 of the first) tell a cost
    # per kernel launch from one per token; a second width h checks both at other sizes
    "full": Plan(8192, 2**30, _shapes(4, 2048, 2048, 16), (2**24, 2**26), 10),
    "quick": Plan(4096, 2**28, _shapes(4, 1024, 1024, 8), (2**22, 2**24), 5),
    "cpu": Plan(128, 2**20, _shapes(4, 32, 32, 4), (2**10, 2**12), 2),
}


@dataclass(frozen=True)
class Probe:
    """One thing to time: ``kind`` ("ceiling", "copy", "gemm", "layer", "adam"), its sizes,
    and ``make()``, which allocates its tensors and returns the call to time."""

    kind: str
    dims: tuple
    make: Callable[[], Callable[[], object]]


# --- the probes (torch only inside make) ---------------------------------------------------


def _gemm_probe(kind: str, n: int, M: int, N: int, K: int, device: str) -> Probe:
    def make():
        import torch  # noqa: PLC0415 (lazy: torch)

        shape = (n,) if n > 1 else ()
        A = torch.randn(*shape, M, K, device=device, dtype=torch.bfloat16)  # (n, M, K)
        B = torch.randn(*shape, K, N, device=device, dtype=torch.bfloat16)  # (n, K, N)
        return (lambda: torch.bmm(A, B)) if n > 1 else (lambda: torch.matmul(A, B))

    return Probe(kind, (n, M, N, K), make)


def _copy_probe(nbytes: int, device: str) -> Probe:
    def make():
        import torch  # noqa: PLC0415 (lazy: torch)

        src = torch.randn(nbytes // 4, device=device)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)

    return Probe("copy", (nbytes,), make)


def _layer_probe(b: int, s: int, h: int, a: int, attention: str, device: str) -> Probe:
    """Forward + backward of one layer; ``attention``: "unfused" or "sdpa"."""

    def make():
        import torch  # noqa: PLC0415 (lazy: torch)
        import torch.nn.functional as F  # noqa: PLC0415 (lazy: torch)

        from minipar.model import GPTConfig, Layer  # noqa: PLC0415 (lazy: torch)

        class FusedLayer(Layer):
            """:class:`minipar.model.Layer` with PyTorch's fused causal attention."""

            def _attend(self, q, k, v):  # q, k, v (b, a, s, h/a)
                return F.scaled_dot_product_attention(
                    q, k, v, dropout_p=self.c.dropout, is_causal=True
                )

        torch.manual_seed(0)
        c = GPTConfig(L=1, h=h, a=a, s=s, dropout=0.1)
        layer = (FusedLayer if attention == "sdpa" else Layer)(c).to(device, torch.bfloat16)
        x = torch.randn(b, s, h, device=device, dtype=torch.bfloat16, requires_grad=True)
        dy = torch.randn_like(x)
        params = list(layer.parameters())

        def step():
            for p in params:  # 16-bit .grad written, not accumulated (as the H200 file)
                p.grad = None
            x.grad = None
            layer(x).backward(dy)

        return step

    return Probe("layer", (b, s, h, a, 1, attention), make)


def _adam_probe(params: int, device: str) -> Probe:
    def make():
        import torch  # noqa: PLC0415 (lazy: torch)

        p = torch.nn.Parameter(torch.randn(params, device=device))
        p.grad = torch.randn_like(p)
        opt = torch.optim.Adam([p], lr=1e-4, fused=device.startswith("cuda"))
        return opt.step

    return Probe("adam", (params,), make)


def probes(plan: Plan, device: str) -> list[Probe]:
    """Everything :func:`calibrate` times, in order."""
    out = [
        _gemm_probe("ceiling", 1, plan.ceiling, plan.ceiling, plan.ceiling, device),
        _copy_probe(plan.copy_bytes, device),
    ]
    for b, s, h, a in plan.shapes:
        for n, M, N, K in compute.layer_gemms(b, s, h, a):
            for dims in ((M, N, K), (M, K, N), (K, N, M)):  # fwd, dgrad, wgrad
                out.append(_gemm_probe("gemm", n, *dims, device))
    for b, s, h, a in plan.shapes:
        for attention in ("sdpa", "unfused"):
            out.append(_layer_probe(b, s, h, a, attention, device))
    out += [_adam_probe(n, device) for n in plan.adam]
    return out


# --- clocks --------------------------------------------------------------------------------


def device_timer(device: str, repeats: int, warmup: int = 3) -> Callable[[Probe], float]:
    """Median seconds of ``repeats`` calls after ``warmup``: CUDA events around each call on
    a GPU, ``time.perf_counter`` on the CPU."""
    import torch  # noqa: PLC0415 (lazy: torch)

    def timer(probe: Probe) -> float:
        fn = probe.make()
        if not device.startswith("cuda"):
            return statistics.median(timed(fn, repeats, warmup, barrier=False))
        for _ in range(warmup):
            fn()
        times = []
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(repeats):
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        del fn
        return statistics.median(times)

    return timer


# --- measure, fit, write -------------------------------------------------------------------


def measure(plan: Plan, device: str, timer: Callable[[Probe], float]) -> dict:
    """The timings in :mod:`minipar.cost.validation.kernel_fit`'s format."""
    out: dict = {"gemms": [], "layers": [], "adam": []}
    for p in probes(plan, device):
        t = timer(p)
        if not t > 0:
            raise InputError(f"probe {p.kind} {p.dims}: time ({t}) must be > 0")
        if p.kind == "ceiling":
            n, M, N, K = p.dims
            out["gemm_ceiling_flops"] = 2.0 * M * N * K / t
        elif p.kind == "copy":
            out["copy_bytes_per_s"] = 2.0 * p.dims[0] / t
        elif p.kind == "gemm":
            n, M, N, K = p.dims
            gemm = {"role": ROLES[len(out["gemms"]) % 3], "batch": n, "M": M, "N": N, "K": K}
            out["gemms"].append(gemm | {"measured_s": t, "tflops": 2e-12 * n * M * N * K / t})
        elif p.kind == "layer":
            out["layers"].append(
                dict(zip(("b", "s", "h", "a", "t", "attention"), p.dims), measured_s=t)
            )
        else:
            out["adam"].append({"params": p.dims[0], "measured_s": t})
    return out


# preset -> the words a device's name must contain, most specific first
_MATCH = {
    "H200": ["H200"],
    "H100-PCIe": ["H100", "PCIE"],
    "H100-SXM": ["H100"],
    "A100-80GB": ["A100"],
}


def preset_matching(name: str) -> str | None:
    """The preset whose words the device's ``name`` contains, most specific first, or None."""
    upper = name.upper()
    return next((k for k, words in _MATCH.items() if all(w in upper for w in words)), None)


def base_gpu(
    name: str, memory_bytes: float, sms: int, peak_tflops: float | None, ceiling_flops: float
) -> tuple[GPU, str]:
    """The GPU before fitting, and where its peak came from: ``--peak-tflops``, else the
    preset whose name the device's matches, else the measured ceiling (η = 1)."""
    preset = GPUS.get(preset_matching(name))
    if peak_tflops is not None:
        peak, why = peak_tflops * 1e12, "--peak-tflops"
    elif preset is not None:
        peak, why = preset.peak_flops["bf16"], f"the {preset.name} preset's dense bf16 peak"
    else:
        peak, why = ceiling_flops, "the measured ceiling (no preset matches; η = 1)"
    template = preset or GPUS["H100-SXM"]
    g = replace(
        template,
        name=name,
        memory_bytes=memory_bytes,
        sms=sms,
        peak_flops={"bf16": peak},
        source=f"minipar calibrate gpu on {name}",
        note=f"peak from {why}",
        elementwise_bandwidth=None,  # measured or absent, never the template's
        kernel_issue_s=0.0,
    )
    return g, why


def calibrate(
    *,
    device: str = "cuda",
    quick: bool = False,
    peak_tflops: float | None = None,
    timer: Callable[[Probe], float] | None = None,
    device_info: tuple[str, float, int] | None = None,
) -> dict:
    """Measure, fit, and return the profile (a dict :func:`load_gpu_profile` reads).
    ``device_info``: (name, memory bytes, SMs), read from torch when None."""
    plan = PLANS["cpu" if device == "cpu" else "quick" if quick else "full"]
    if timer is None:
        timer = device_timer(device, plan.repeats)
    if device_info is None:
        device_info = _device_info(device)
    measured = measure(plan, device, timer)
    base, why = base_gpu(*device_info, peak_tflops, measured["gemm_ceiling_flops"])
    if measured["gemm_ceiling_flops"] > base.peak_flops["bf16"]:  # a peak below the GEMM
        base = replace(
            base,
            peak_flops={"bf16": measured["gemm_ceiling_flops"]},
            note=base.note + "; raised to the measured ceiling, which exceeded it",
        )
    try:
        gpu = kernel_fit.fit_gpu(measured, base)
    except ValueError as e:
        raise InputError(f"the timings cannot be fitted: {e}") from None
    return gpu_profile(gpu) | {
        "measured": measured,
        "method": {"device": device, "plan": plan.__dict__, "peak_from": why},
    }


def _kernels(profile: dict) -> str:
    """The element-wise kernels' constants, or the per-layer time where they were not fitted."""
    if not profile["elementwise_bandwidth"]:
        return f"layer overhead {profile['layer_overhead_s'] * 1e3:.2f} ms"
    bw, issue = profile["elementwise_bandwidth"] / 1e12, profile["kernel_issue_s"] * 1e6
    return f"element-wise {bw:.2f} TB/s, at least {issue:.1f} µs per kernel"


def _device_info(device: str) -> tuple[str, float, int]:
    import torch  # noqa: PLC0415 (lazy: torch)

    if device == "cpu":
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return "CPU", float(memory), os.cpu_count() or 1
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return props.name, float(props.total_memory), props.multi_processor_count


# --- the command -----------------------------------------------------------------------------


DEFAULT_OUT = os.path.join("bench-results", "gpu_profile.json")
"""Where ``--out`` writes by default: a folder git ignores, made when missing, so a run in the
course's checkout leaves no untracked file at its root."""


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="measure this machine's constants for the cost model")
    what = p.add_subparsers(dest="what", required=True)
    g = what.add_parser(
        "gpu",
        help="bf16 GEMMs, attention (flash and unfused), HBM copy and "
        "Adam on this CUDA GPU; writes the JSON profile that "
        "'minipar plan --gpu-profile' reads",
    )
    add_options(g, ("--out", DEFAULT_OUT, f"profile to write (default {DEFAULT_OUT})"))
    g.add_argument("--quick", action="store_true", help="smaller shapes, fewer repeats")
    g.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: the same code on tiny shapes, a plumbing check (not a profile)",
    )
    g.add_argument(
        "--peak-tflops",
        type=float,
        default=None,
        help="dense bf16 peak in TFLOP/s (default: the matching preset's)",
    )
    g.set_defaults(func=_run)


def _run(args) -> int:
    import torch  # noqa: PLC0415 (lazy: torch)

    if args.device == "cuda" and not torch.cuda.is_available():
        raise InputError(
            "needs a CUDA GPU (torch.cuda.is_available() is False); "
            "--device cpu checks the plumbing on tiny shapes"
        )
    if args.peak_tflops is not None and not args.peak_tflops > 0:
        raise InputError(f"--peak-tflops ({args.peak_tflops}) must be > 0")
    check_writable(args.out, "--out", make_folder=args.out == DEFAULT_OUT)  # before minutes
    with progress("minipar calibrate gpu"):  # minutes on a GPU: say it is still measuring
        profile = calibrate(device=args.device, quick=args.quick, peak_tflops=args.peak_tflops)
    write(args.out, profile, indent=1)  # a non-finite constant is refused before the file opens
    print(
        f"{profile['name']}: η {profile['gemm_efficiency']:.2f} of "
        f"{profile['peak_flops']['bf16'] / 1e12:.0f} TFLOP/s, HBM "
        f"{profile['hbm_bandwidth'] / 1e12:.2f} TB/s, GEMM λ "
        f"{profile['gemm_latency_s'] * 1e6:.1f} µs, attention GEMMs "
        f"{profile['bmm_bandwidth'] / 1e12:.2f} TB/s + {profile['bmm_latency_s'] * 1e6:.1f} "
        f"µs, flash {profile['flash_efficiency']:.2f} of peak, unfused "
        f"{profile['attention_score_bytes']:.0f} B/score, {_kernels(profile)}, Adam "
        f"{profile['optimizer_bandwidth'] / 1e12:.2f} TB/s -> {args.out}",
        file=sys.stderr,
    )
    return 0
