"""Fit the kernel model of :mod:`minipar.cost.kernels.compute` to measured kernel and layer times.

Pure Python. The input is a dict in the format of ``measurements/h200_layer_gemm_times.json``
(what ``minipar calibrate gpu`` also writes under ``"measured"``):

    gemm_ceiling_flops   FLOP/s of one large square bf16 GEMM      → η = ceiling / peak
    copy_bytes_per_s     a device-to-device copy, bytes read + written → W
    gemms                rows {batch, M, N, K, measured_s}; batch 1: dense, else attention's
    layers               rows {b, s, h, a, t, attention ("sdpa" or "unfused"), measured_s}
    adam                 rows {params, measured_s} of ``torch.optim.Adam(fused=True)``

Every other constant enters its model linearly, so each is a closed-form least-squares fit of
the RELATIVE error Σ (predicted / measured − 1)² (a 1-ms kernel counts as much as a 10-µs one):

    λ              dense GEMMs      t = λ + 2MNK/(P·η) + bytes/W                (one unknown)
    λ_bmm, W_bmm   batched GEMMs    t = λ_bmm + bytes · (1/W_bmm)               (two)
    O, 1/e, B      layers           t = fixed + O + F_flash/P · (1/e)   (SDPA)
                                    t = fixed + O + scores/W · B        (unfused)  (three)
    W_adam         Adam             t = 28 · params · (1/W_adam)                 (one)

with ``fixed`` the layer's dense GEMMs and memory-bound kernels under the GEMM constants just
fitted (and, unfused, its batched GEMMs), O the per-layer overhead, e the flash efficiency and
B the bytes per score. Layers at three or more token counts (``minipar calibrate gpu``'s)
also identify the element-wise kernels the planner prices one by one
(:func:`~minipar.cost.kernels.compute.elementwise_kernels`, GPT's recipe): each at
max(τ, bytes/W_e), per launch at few tokens, per token at many (:func:`fit_elementwise`).
The layers are timed without fp32 gradient accumulation (autograd's 16-bit ``.grad``), so
``grad_accum_bytes`` = 0 here. ``torch.optim.Adam(fused=True)`` on fp32 parameters moves 28
bytes per parameter: reads weight, gradient, momentum and variance (16), writes weight,
momentum and variance (12).
"""

from __future__ import annotations

from dataclasses import replace

from ..kernels import compute as C
from ..kernels.hardware import GPU

ADAM_FP32_BYTES = 28


def _solve(rows: list[list[float]], target: list[float]) -> list[float]:
    """Least squares ``rows · x ≈ target`` through the normal equations (≤ 4 unknowns),
    Gaussian elimination with partial pivoting."""
    n = len(rows[0])
    A = [[sum(r[i] * r[j] for r in rows) for j in range(n)] for i in range(n)]
    y = [sum(r[i] * t for r, t in zip(rows, target)) for i in range(n)]
    for c in range(n):
        p = max(range(c, n), key=lambda i: abs(A[i][c]))
        if A[p][c] == 0:
            raise ValueError(f"the measurements cannot separate unknown {c} (singular fit)")
        A[c], A[p], y[c], y[p] = A[p], A[c], y[p], y[c]
        for i in range(c + 1, n):
            f = A[i][c] / A[c][c]
            A[i] = [a - f * b for a, b in zip(A[i], A[c])]
            y[i] -= f * y[c]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (y[i] - sum(A[i][j] * x[j] for j in range(i + 1, n))) / A[i][i]
    return x


def _relative(fixed: list[float], coefs: list[list[float]], measured: list[float]) -> list[float]:
    """x minimising Σ ((fixed_i + coefs_i · x) / m_i − 1)²."""
    return _solve(
        [[c / m for c in cs] for cs, m in zip(coefs, measured)],
        [1 - f / m for f, m in zip(fixed, measured)],
    )


def fit_gemm_latency(gemms: list[dict], gpu: GPU) -> float:
    """λ of the "additive" rule over the dense rows (batch 1), ``gpu``'s η and W; ≥ 0."""
    dense = [g for g in gemms if g["batch"] == 1]
    if not dense:
        raise ValueError("gemms: no dense row (batch 1) to fit the GEMM latency")
    g0 = replace(gpu, gemm_rule="additive", gemm_latency_s=0.0)
    fixed = [C.gpu_gemm_seconds(g0, g["M"], g["N"], g["K"]) for g in dense]
    (lam,) = _relative(fixed, [[1.0]] * len(dense), [g["measured_s"] for g in dense])
    return max(0.0, lam)


def fit_bmm(gemms: list[dict]) -> tuple[float, float]:
    """(W_bmm bytes/s, λ_bmm s) over the batched rows (batch > 1), 16-bit operands."""
    att = [g for g in gemms if g["batch"] > 1]
    if len({g["batch"] * (g["M"] * g["K"] + g["K"] * g["N"] + g["M"] * g["N"]) for g in att}) < 2:
        raise ValueError("gemms: the batched rows need at least two sizes to fit W_bmm and λ_bmm")
    moved = [2 * g["batch"] * (g["M"] * g["K"] + g["K"] * g["N"] + g["M"] * g["N"]) for g in att]
    lam, inv_w = _relative(
        [0.0] * len(att), [[1.0, b] for b in moved], [g["measured_s"] for g in att]
    )
    if lam < 0 or not inv_w > 0:  # noise (tiny shapes): refit through the origin, λ = 0
        (inv_w,) = _relative([0.0] * len(att), [[b] for b in moved], [g["measured_s"] for g in att])
        lam = 0.0
    return 1 / inv_w, lam


def _layer_terms(row: dict, gpu: GPU) -> tuple[float, float]:
    """(fixed seconds, coefficient of the layer's own unknown) for one layer row on ``gpu``."""
    b, s, h, a, t = (row[k] for k in ("b", "s", "h", "a", "t"))
    gemms = C.layer_gemms(b, s, h, a, t)
    fixed = sum(C.pass_seconds(gemms[:4], gpu))
    f, bw, _ = C.layer_memory_bytes(b, s, h, a, t, grad_accum_bytes=0, attention="flash")
    fixed += (f + bw) / gpu.hbm_bandwidth
    if row["attention"] == "sdpa":
        ff, fb = C.flash_attention_flops(b, s, h, t)
        return fixed, (ff + fb) / gpu.peak_flops["bf16"]
    if row["attention"] != "unfused":
        raise ValueError(f"layers: attention ({row['attention']!r}) must be sdpa or unfused")
    fixed += sum(C.pass_seconds(gemms[4:], gpu))
    return fixed, a * s * s * b / t / gpu.hbm_bandwidth


def _attention_constants(kinds: list[str], x: list[float]) -> dict[str, float]:
    """``flash_efficiency`` from the SDPA rows' 1/e, ``attention_score_bytes`` from B."""
    out = {}
    for k, v in zip(kinds, x):
        if k == "sdpa":
            out["flash_efficiency"] = min(1.0, 1 / v) if v > 0 else 1.0
        else:
            out["attention_score_bytes"] = max(0.0, v)
    return out


def fit_layers(layers: list[dict], gpu: GPU) -> dict[str, float]:
    """``layer_overhead_s``, ``flash_efficiency`` (if SDPA rows), ``attention_score_bytes``
    (if unfused rows), fitted jointly on ``layers`` with ``gpu``'s GEMM constants."""
    kinds = [k for k in ("sdpa", "unfused") if any(r["attention"] == k for r in layers)]
    if not kinds:
        raise ValueError("layers: no row to fit")
    fixed, coefs = [], []
    for r in layers:
        f, c = _layer_terms(r, gpu)
        fixed.append(f)
        coefs.append([1.0] + [c if r["attention"] == k else 0.0 for k in kinds])
    measured = [r["measured_s"] for r in layers]
    x = _relative(fixed, coefs, measured)
    if x[0] < 0:  # no overhead: refit the kernels' own unknowns alone
        x = [0.0] + _relative(fixed, [c[1:] for c in coefs], measured)
    return {"layer_overhead_s": x[0]} | _attention_constants(kinds, x[1:])


def fit_elementwise(layers: list[dict], gpu: GPU) -> dict[str, float] | None:
    """τ (``kernel_issue_s``), W_e (``elementwise_bandwidth``), e and B fitted jointly on
    ``layers`` priced as the planner prices a layer: its GEMMs, its attention term, and the
    recipe's element-wise kernels each at max(τ, bytes/W_e). ``None`` below three token counts
    (b·s), where a cost per launch cannot be told from one per token. Once the launch-bound
    kernels are known the model is linear, and they are the smallest by bytes: the fit solves
    each cut of the kernels sorted by bytes and keeps the one whose constants, put back into the
    max, leave the least relative error. With no kernel launch-bound, τ is only bounded by the
    smallest kernel's time: it is set to that bound or the GEMM's λ, whichever is smaller."""
    if len({r["b"] * r["s"] for r in layers}) < 3:
        return None
    kinds = [k for k in ("sdpa", "unfused") if any(r["attention"] == k for r in layers)]
    rows = []  # (fixed s, attention coefficient, the kernels' bytes, attention)
    for r in layers:
        f, c = _layer_terms(r, gpu)
        ks = C.elementwise_kernels(r["h"], 4 * r["h"], r["h"], r["t"])
        f -= C.fused_activation_seconds(r["b"], r["s"], r["h"], r["t"], gpu)
        rows.append((f, c, [r["b"] * r["s"] * k.bytes_per_token for k in ks], r["attention"]))
    measured = [r["measured_s"] for r in layers]

    def error(tau: float, inv_w: float, x: list[float]) -> float:
        att = lambda c, a: sum(c * v for k, v in zip(kinds, x) if a == k)
        return sum(
            ((f + att(c, a) + sum(max(tau, y * inv_w) for y in ks)) / m - 1) ** 2
            for (f, c, ks, a), m in zip(rows, measured)
        )

    best = None
    for cut in sorted({y for _, _, ks, _ in rows for y in ks}):
        coefs = [
            [sum(y < cut for y in ks), sum(y for y in ks if y >= cut)]
            + [c if a == k else 0.0 for k in kinds]
            for _, c, ks, a in rows
        ]
        if not any(c[0] for c in coefs):  # none launch-bound: τ ≤ the smallest kernel's time
            inv_w, *x = _relative([f for f, *_ in rows], [c[1:] for c in coefs], measured)
            tau = min(gpu.gemm_latency_s, cut * inv_w)
        else:
            tau, inv_w, *x = _relative([f for f, *_ in rows], coefs, measured)
        if inv_w > 0 and tau >= 0 and (best is None or error(tau, inv_w, x) < best[0]):
            best = (error(tau, inv_w, x), tau, inv_w, x)
    if best is None:
        return None
    _, tau, inv_w, x = best
    return {"kernel_issue_s": tau, "elementwise_bandwidth": 1 / inv_w} | _attention_constants(
        kinds, x
    )


def fit_adam(adam: list[dict]) -> float:
    """Bytes/s of the fused Adam step: 28 bytes per fp32 parameter over its time."""
    if not adam:
        raise ValueError("adam: no row to fit")
    (inv_w,) = _relative(
        [0.0] * len(adam),
        [[ADAM_FP32_BYTES * r["params"]] for r in adam],
        [r["measured_s"] for r in adam],
    )
    return 1 / inv_w


def fit_gpu(measured: dict, base: GPU) -> GPU:
    """``base`` (name, memory, peak, SMs, links) with every kernel constant from ``measured``:
    η and W measured directly, then λ, (W_bmm, λ_bmm), (O, e, B), where the whole (t = 1)
    layers allow it (τ, W_e, e, B), and W_adam fitted in that order (each fit uses the
    constants before it); with them at fewer than three token counts (the H200 file's), τ and
    W_e stay ``base``'s."""
    peak = base.peak_flops["bf16"]
    eta = measured["gemm_ceiling_flops"] / peak
    if not 0 < eta <= 1:
        raise ValueError(
            f"gemm_ceiling_flops ({measured['gemm_ceiling_flops']:.3g}) over the "
            f"bf16 peak ({peak:.3g}) must be in (0, 1]: is the peak right?"
        )
    gpu = replace(
        base, gemm_rule="additive", gemm_efficiency=eta, hbm_bandwidth=measured["copy_bytes_per_s"]
    )
    gpu = replace(gpu, gemm_latency_s=fit_gemm_latency(measured["gemms"], gpu))
    bw, lam = fit_bmm(measured["gemms"])
    gpu = replace(gpu, bmm_bandwidth=bw, bmm_latency_s=lam)
    gpu = replace(gpu, **fit_layers(measured["layers"], gpu))
    whole = [r for r in measured["layers"] if r["t"] == 1]
    gpu = replace(gpu, **(fit_elementwise(whole, gpu) or {}))
    return replace(gpu, optimizer_bandwidth=fit_adam(measured["adam"]))
