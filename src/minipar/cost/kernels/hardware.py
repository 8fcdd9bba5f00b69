"""Links and GPUs the course's cost examples use, each number with its source (the presets are
data, ``presets.json`` beside this module; the fitted kernel constants are below).

Bandwidth is bytes/s PER DIRECTION (what one ring step can use). Vendors often quote the
bidirectional sum; ``Link.note`` records the conversion. The α values are NOT measured: they
are order-of-magnitude assumptions for one message's start-up cost through NCCL on that link
(a few µs in a node, more across nodes, tens of µs over TCP). Measure your own with
``minipar bench collectives`` and :func:`minipar.cost.network.collectives.fit_alpha_beta`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth: float  # bytes/s per direction
    alpha: float  # s per message (assumed, see module docstring)
    source: str
    note: str = ""
    # NCCL's achieved bus bandwidth over the line rate (nccl-tests' busbw / bandwidth), which
    # the planner's collectives run at (minipar.cost.planner.three_d.cluster); 1.0 where a fit
    # absorbed it (the A100 links: PTD-P Table 1's fit was made at line rate)
    bus_efficiency: float = 1.0


@dataclass(frozen=True)
class GPU:
    name: str
    memory_bytes: float
    peak_flops: dict[str, float] = field(hash=False)  # dtype -> dense FLOP/s (no 2:4 sparsity)
    source: str = ""
    note: str = ""
    hbm_bandwidth: float = 2.0e12  # bytes/s of HBM (datasheet; achieved where measured)
    sms: int = 108  # streaming multiprocessors (tile waves, compute.py)
    gemm_efficiency: float = 0.75  # η: fraction of dense peak a large GEMM sustains in training
    intra: str = "nvlink3-a100"  # the NVLink of its generation (DGX/HGX baseboard)
    inter: str = "ib-hdr200"  # the InfiniBand NIC per GPU of its generation
    # GPUs on one NVLink domain: the planner's default GPUs per node (an HGX/DGX baseboard: 8;
    # a GB200 NVL72 rack: 72, its NVLink Switch trays joining every GPU of the rack)
    nvlink_domain: int = 8
    # The kernel model of minipar.cost.kernels.compute (its docstring derives each term). The defaults
    # are the 2021 model; every preset sets its own (A100: fitted on PTD-P Table 1; H200:
    # measured; H100: the H200's, see gh100_kernels), and a measured profile sets them all.
    gemm_rule: str = "waves"  # "waves" (tile/wave roofline) or "additive" (measured)
    gemm_latency_s: float = 0.0  # λ: fixed seconds per GEMM call under "additive"
    bmm_bandwidth: float | None = None  # bytes/s of attention's batched GEMMs (None: GEMM rule)
    bmm_latency_s: float = 0.0  # fixed seconds per batched attention GEMM call
    flash_efficiency: float = 0.5  # fused (flash) attention's FLOP/s over the bf16 peak
    attention_score_bytes: float = 20.0  # unfused attention: bytes per score, fwd + bwd
    layer_overhead_s: float = 0.0  # fixed seconds per layer forward + backward
    optimizer_bandwidth: float | None = None  # bytes/s of the fused Adam step (None: HBM)
    # the recipe's element-wise kernels one by one (compute.elementwise_kernels), each at the
    # longer of its issue time and its traffic at this rate, in place of Megatron's fused byte
    # count and layer_overhead_s (None: the fused count, the 2021 model)
    elementwise_bandwidth: float | None = None
    kernel_issue_s: float = 0.0  # CPU time to issue one kernel (eager PyTorch)


_T = 1e12  # the presets' peaks are dense TFLOP/s (presets.json says how they were read)

# The A100's kernel model. Datasheet: peak, HBM, SMs. GEMMs by the "additive" rule measured on
# the H200 (compute.py): the 2021 tile/wave rule over-charged dense shapes there by up to
# +83 %. Two constants FITTED on the calibration half of Narayanan et al. 2021 Table 1 (1.7 B,
# 7.5 B, 39.1 B, 145.6 B, 529.6 B: every other row), each row with its published layout and
# interleaving at the micro-batch the planner picks: minipar.cost.validation.published.fit_a100, least
# squares of log(predicted / published step time). The other five rows, GPT-3 175B (an
# assumed 140 TFLOP/s, not a measured run), BLOOM, MT-NLG and the §5.2 ZeRO-3 comparison are
# the check (tests/test_cost_validation.py): held out from the fit, not from the choice of the
# model's form, made with all ten Table 1 rows in view.
A100_GEMM_EFFICIENCY = 0.725
"""η for A100: the fraction of the 312 TFLOP/s dense peak that training's GEMMs sustain
(clocks under the 400 W power cap, NCCL kernels sharing the SMs); fitted with
:data:`A100_SCORE_BYTES`."""

A100_SCORE_BYTES = 30.0
"""Bytes per attention score, forward + backward, that Megatron-LM's fused scale-mask-softmax
and dropout cost on the A100; fitted with :data:`A100_GEMM_EFFICIENCY`. The kernels move 9 + 11
(:data:`minipar.cost.kernels.compute.SCORE_BYTES_FWD`): 30 is those bytes at two thirds of the
datasheet's HBM rate. Scores per FLOP fall as a/h², so this term is what separates the small
models from the large; left at 20 with η alone fitted, the 2021 wave rule orders Table 1
at Spearman 0.23 (η alone under the additive rule: 0.79)."""

# The H200's kernel model, from one H200 (SXM, 132 SMs; torch 2.11, CUDA 13.0): the CALIBRATION
# set measurements/h200_layer_gemm_times.json, whose README says which constant came from which
# file and row, fitted by minipar.cost.validation.kernel_fit (its docstring gives each model) and
# rounded; tests/test_cost_compute_h200.py re-derives every figure. Measured directly: η = 0.78
# (an 8192³ bf16 matmul at 775 TFLOP/s of the 989.4 dense peak), W = 4.22 TB/s (a 2 GiB
# device-to-device copy, 88 % of the datasheet's 4.8). Fitted on its rows: λ = 7.4 µs per GEMM
# call (72 dense GEMMs); W_bmm = 3.74 TB/s and λ_bmm = 20 µs (36 batched attention GEMMs); on its
# 12 layers, 0.72 ms per layer, flash at 0.40 of the peak and 74 bytes per unfused score
# (PyTorch's separate softmax and dropout kernels, far more than the 9 + 11 of Megatron's fused
# one); Adam at 3.24 TB/s (28 bytes per fp32 parameter). The planner prices the recipe's
# element-wise kernels instead of the 0.72 ms (three_d_terms.recipe_kernels_seconds), each at
# max(issue time, traffic): kernel_issue_s = the 7.4 µs λ (the step files cannot identify it),
# elementwise_bandwidth = 1.6 TB/s FITTED on the nine SDPA rows of the two whole-step files, so
# those rows' step times are IN-SAMPLE (tests/test_cost_kernels.py holds both within ±10 %).
H200_GEMM_EFFICIENCY = 0.78
H200_HBM_ACHIEVED = 4.22e12
H200_DATASHEET_HBM = 4.8e12
H200_KERNELS = dict(
    gemm_rule="additive",
    gemm_latency_s=7.4e-6,
    bmm_bandwidth=3.74e12,
    bmm_latency_s=20e-6,
    flash_efficiency=0.40,
    attention_score_bytes=74.0,
    layer_overhead_s=0.72e-3,
    optimizer_bandwidth=3.24e12,
    elementwise_bandwidth=1.6e12,
    kernel_issue_s=7.4e-6,
)
"""The H200's fitted kernel constants (above), by :class:`GPU` field."""


POWER_500W = 0.64
"""The 500 W HBM2e H100 preset's peaks over the 700 W SXM's: FITTED on one calibration row
(:mod:`minipar.cost.validation.modern_fit`: torchtitan's Llama 3.1 8B, bf16, eager). It is not
a hardware rate: the one constant fitted on an eager step absorbs whatever that step lost
besides the power cap (launch gaps, unfused element-wise kernels, host-side stalls), which is
why the preset's bf16 peak (633 TFLOP/s) sits below the smaller H100 PCIe's datasheet 756. Read
it as "this part under torchtitan's stack of December 2024": right for the rows of that stack,
wrong for comparing parts (no power-capped H100 was measured to separate the two)."""


def gh100_kernels(hbm_datasheet: float) -> dict:
    """Kernel constants for another GH100 part (H100 SXM, H100 PCIe), never measured in this
    course, taken from the H200's (same GH100 chip, same SMs and tensor cores): the
    compute-bound ones as measured (η 0.78 of the part's own bf16 peak, the 7.4 µs per GEMM
    call and per kernel issued, flash at 0.40 of the peak, 74 bytes per unfused score; the
    0.72 ms per layer is carried but replaced by the element-wise kernels), the
    bandwidth-bound ones (the achieved HBM rate, attention's batched GEMMs, the fused Adam
    step, the element-wise rate) scaled by the part's datasheet HBM bandwidth over the H200's (4.8 TB/s). An
    ASSUMPTION, labelled as such: no H100 step was measured to check it."""
    r = hbm_datasheet / H200_DATASHEET_HBM
    k = dict(
        H200_KERNELS, gemm_efficiency=H200_GEMM_EFFICIENCY, hbm_bandwidth=H200_HBM_ACHIEVED * r
    )
    scaled = ("bmm_bandwidth", "optimizer_bandwidth", "elementwise_bandwidth")
    return k | {f: H200_KERNELS[f] * r for f in scaled}


# Blackwell's kernel constants, each from a published measurement of a B200 (none was measured
# in this course: no Blackwell GPU was lent), the rest carried from the H200 where they are
# properties of the host or of the kernel's form rather than of the chip:
BLACKWELL_GEMM_EFFICIENCY = 0.63
"""η on Blackwell: a bf16 8192³ torch.matmul on a B200 at 1.42 PFLOP/s, 0.631 of the 2.25 dense
peak (torchao's ``benchmarks/float8/bench_matmul.py`` as run on an NVIDIA B200 in pytorch/ao
pull request 2427: 0.63-0.67 from 3072³ to 8192³), the same measurement as the H200's η
(8192³). The GB200 keeps 0.63 of its own peak: an ASSUMPTION (no GB200 matmul read)."""

B200_HBM_ACHIEVED = 6.72e12
"""A B200's achieved HBM rate: 6.72 TB/s, 87.6 % of 7.67, by CUB's ``DeviceTransform`` add of
2²⁸ bf16 elements (NVIDIA/cccl pull request 7391's benchmark table on an NVIDIA B200); the
H200's copy reached 88 % of its datasheet, so the ratio carries to the GB200's 8 TB/s."""

B200_DATASHEET_HBM = 7.7e12

BLACKWELL_FLASH_EFFICIENCY = 0.44
"""Fused attention's forward + backward FLOP/s over the bf16 peak on Blackwell: cuDNN 9.13's
forward at 1605/1.3 = 1235 TFLOP/s, 0.55 of the B200's 2.25 PFLOP/s (Together AI's
FlashAttention-4 report: FA4 reaches 1605 TFLOP/s forward, 1.3 × cuDNN 9.13, bf16, head dim
128), times the backward's share of FlashAttention-3's forward + backward rate on an H100
(0.52/0.65, :data:`minipar.cost.kernels.compute.FA3_EFFICIENCY`'s derivation): 0.44. A
derivation from two published figures, not a measurement of a training step."""


def blackwell_kernels(hbm_datasheet: float) -> dict:
    """Kernel constants for a Blackwell part (B200, GB200): η
    (:data:`BLACKWELL_GEMM_EFFICIENCY`) and fused attention's rate
    (:data:`BLACKWELL_FLASH_EFFICIENCY`) from published B200 kernel figures; the achieved HBM
    rate :data:`B200_HBM_ACHIEVED`, times the part's datasheet over the B200's 7.7 TB/s; the
    bandwidth-bound constants (attention's batched GEMMs, the fused Adam step, the element-wise
    rate) the H200's measured ones times the achieved HBM ratio (their form: traffic at a share
    of the HBM rate); the per-call λ and the kernel issue time the H200's (7.4 µs: the host and
    the launch path, not the GPU's arithmetic)."""
    hbm = B200_HBM_ACHIEVED * hbm_datasheet / B200_DATASHEET_HBM
    r = hbm / H200_HBM_ACHIEVED
    k = dict(
        H200_KERNELS,
        gemm_efficiency=BLACKWELL_GEMM_EFFICIENCY,
        hbm_bandwidth=hbm,
        flash_efficiency=BLACKWELL_FLASH_EFFICIENCY,
    )
    scaled = ("bmm_bandwidth", "optimizer_bandwidth", "elementwise_bandwidth")
    return k | {f: H200_KERNELS[f] * r for f in scaled}


KERNEL_KINDS = ("a100", "gh100", "h200-assumed", "blackwell")
"""Where a preset's kernel constants come from: the A100's fitted ones; the H200's measured
ones on a GH100 part (:func:`gh100_kernels`); or the same carried to a Blackwell part
("h200-assumed": no preset now); or Blackwell's published kernel figures
(:func:`blackwell_kernels`, the B200 and GB200)."""

BLACKWELL_ONLY = ("mxfp8",)
"""Peaks only Blackwell presets have: MXFP8 (the OCP Microscaling format, FP8 elements in blocks
of 32 sharing an 8-bit power-of-two scale) runs on Blackwell's fifth-generation tensor cores at
the FP8 rate (NVIDIA Blackwell Architecture Technical Brief, micro-tensor scaling); Hopper's
tensor cores take one scale per tensor (or per row in software), not per block."""


def _preset(name: str, g: dict) -> GPU:
    """A GPU of ``presets.json``: its peaks in TFLOP/s (times ``peak_scale``, a constant of this
    module, where given) and its kernel constants (:data:`KERNEL_KINDS`), the A100's fitted ones
    or :func:`gh100_kernels` of its datasheet HBM bandwidth."""
    g = dict(g)
    scale = {"POWER_500W": POWER_500W}[g.pop("peak_scale")] if "peak_scale" in g else 1
    peaks = {k: scale * v * _T for k, v in g.pop("peak_tflops").items()}
    kind = g.pop("kernels")
    if kind not in KERNEL_KINDS:
        raise ValueError(f"{name}: kernels ({kind!r}) must be one of {', '.join(KERNEL_KINDS)}")
    if kind == "a100":
        kernels = dict(
            gemm_efficiency=A100_GEMM_EFFICIENCY,
            gemm_rule="additive",
            attention_score_bytes=A100_SCORE_BYTES,
        )
    elif kind == "blackwell":
        kernels = blackwell_kernels(g.pop("hbm_datasheet"))
    else:
        kernels = gh100_kernels(g.pop("hbm_datasheet"))
    return GPU(name, peak_flops=peaks, **g, **kernels)


_PRESETS = json.loads((Path(__file__).resolve().parent / "presets.json").read_text())
LINKS: dict[str, Link] = {k: Link(k, **v) for k, v in _PRESETS["links"].items()}
GPUS: dict[str, GPU] = {k: _preset(k, g) for k, g in _PRESETS["gpus"].items()}


def link(name: str) -> Link:
    """The :class:`Link` called ``name``; ``ValueError`` listing the valid names otherwise."""
    if name not in LINKS:
        raise ValueError(f"link ({name!r}) must be one of {', '.join(LINKS)}")
    return LINKS[name]


def gpu(name: str) -> GPU:
    """The :class:`GPU` called ``name``; ``ValueError`` listing the valid names otherwise."""
    if name not in GPUS:
        raise ValueError(f"gpu ({name!r}) must be one of {', '.join(GPUS)}")
    return GPUS[name]


# A GPU profile is a JSON object with GPU's fields (what ``minipar calibrate gpu`` writes); these
# keys may carry the raw measurements and how they were taken, and are not read back.
PROFILE_EXTRA_KEYS = ("measured", "method")
_PROFILE_REQUIRED = (
    "name",
    "memory_bytes",
    "peak_flops",
    "hbm_bandwidth",
    "sms",
    "gemm_efficiency",
)
_FRACTIONS = ("gemm_efficiency", "flash_efficiency")  # in (0, 1]
_POSITIVE = ("memory_bytes", "hbm_bandwidth", "sms", "bmm_bandwidth", "optimizer_bandwidth")
_POSITIVE += ("nvlink_domain",)
_NON_NEGATIVE = ("gemm_latency_s", "bmm_latency_s", "attention_score_bytes", "layer_overhead_s")


def gpu_profile(g: GPU) -> dict:
    """``g`` as the JSON object :func:`load_gpu_profile` reads."""
    return {f.name: getattr(g, f.name) for f in fields(GPU)}


def _profile_fields(profile, where: str) -> dict:
    """The :class:`GPU` fields of ``profile``: ``ValueError`` for a non-object, an unknown
    field or a missing required one."""
    if not isinstance(profile, dict):
        raise ValueError(f"{where}: must be a JSON object, got {type(profile).__name__}")
    known = {f.name for f in fields(GPU)}
    unknown = sorted(set(profile) - known - set(PROFILE_EXTRA_KEYS))
    if unknown:
        raise ValueError(
            f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(sorted(known))})"
        )
    missing = [k for k in _PROFILE_REQUIRED if k not in profile]
    if missing:
        raise ValueError(f"{where}: missing field {missing[0]!r}")
    return {k: v for k, v in profile.items() if k in known}


def _number_rules(kw: dict) -> str | None:
    """The first numeric rule ``kw`` breaks (the peaks, fractions, positive and non-negative
    fields, whole SMs), or ``None``."""

    def finite(v) -> bool:
        return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)

    peak = kw["peak_flops"]
    if not isinstance(peak, dict) or "bf16" not in peak:
        return f"peak_flops ({peak!r}) must be an object with a 'bf16' entry (dense FLOP/s)"
    for dtype, v in peak.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            return f"peak_flops[{dtype!r}] ({v!r}) must be a number > 0"
    checks = [(k, lambda v: 0 < v <= 1, "must be in (0, 1]") for k in _FRACTIONS]
    checks += [(k, lambda v: v > 0, "must be > 0") for k in _POSITIVE]
    checks += [(k, lambda v: v >= 0, "must be >= 0") for k in _NON_NEGATIVE]
    for k, ok, rule in checks:
        if k not in kw or (kw[k] is None and k in _POSITIVE):
            continue
        if not finite(kw[k]):
            return f"{k} ({kw[k]!r}) must be a finite number"
        if not ok(kw[k]):
            return f"{k} ({kw[k]!r}) {rule}"
    for k in ("sms", "nvlink_domain"):
        if k in kw and int(kw[k]) != kw[k]:
            return f"{k} ({kw[k]!r}) must be a whole number"
    return None


def _name_rules(kw: dict) -> str | None:
    """The first rule on the named fields (GEMM rule, links, strings) ``kw`` breaks, or ``None``."""
    if kw.get("gemm_rule", "waves") not in ("waves", "additive"):
        return f"gemm_rule ({kw['gemm_rule']!r}) must be one of waves, additive"
    for k in ("intra", "inter"):
        if k in kw and kw[k] not in LINKS:
            return f"{k} ({kw[k]!r}) must be one of {', '.join(LINKS)}"
    for k in ("name", "source", "note"):
        if k in kw and not isinstance(kw[k], str):
            return f"{k} ({kw[k]!r}) must be a string"
    return None


def check_gpu_profile(profile: dict, where: str = "gpu profile") -> GPU:
    """A :class:`GPU` from a profile's dict; ``ValueError`` naming the field, its value and the
    rule it breaks (``"gpu profile p.json: hbm_bandwidth (-1) must be > 0"``)."""
    kw = _profile_fields(profile, where)
    rule = _number_rules(kw) or _name_rules(kw)
    if rule:
        raise ValueError(f"{where}: {rule}")
    kw["sms"] = int(kw["sms"])
    if "nvlink_domain" in kw:
        kw["nvlink_domain"] = int(kw["nvlink_domain"])
    return GPU(**kw)


def load_gpu_profile(path) -> GPU:
    """The :class:`GPU` in the JSON profile at ``path`` (written by ``minipar calibrate gpu``,
    or by hand from :func:`gpu_profile` of a preset): required fields name, memory_bytes,
    peak_flops (with 'bf16'), hbm_bandwidth, sms, gemm_efficiency; every other field of
    :class:`GPU` optional with its default. ``ValueError`` names the missing or invalid field
    and its value."""
    try:
        with open(path) as f:
            profile = json.load(f)
    except OSError as e:
        raise ValueError(f"gpu profile {path}: cannot be read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"gpu profile {path}: not JSON ({e.msg}, line {e.lineno})") from None
    return check_gpu_profile(profile, f"gpu profile {path}")
