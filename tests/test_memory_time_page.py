"""Numbers the memory page states (its worked problem and its figures' captions and text
alternatives) are the cost model's: if a preset or a formula changes, this names the sentence
to rewrite."""

from __future__ import annotations

import math
from pathlib import Path

from page_support import worked_problem

from minipar.cost.chapters.memory_time import activation_bytes_per_layer
from minipar.cost.kernels import compute
from minipar.cost.kernels.hardware import gpu
from minipar.cost.model import param_count, six_nd
from minipar.cost.planner.breakdown import per_gpu_memory
from minipar.cost.units import GiB

PAGE = (Path(__file__).resolve().parents[1] / "book" / "memory_time.md").read_text("utf-8")


def test_worked_problem_numbers():
    n = param_count(L=32, h=4096, V=32000, s=4096)  # the figure's Llama 2 7B shape, Eq. 2
    assert f"{n / 1e9:.2f} billion parameters" in PAGE
    states = 16 * n
    assert f"{states / GiB:.1f} GiB" in PAGE and f"{states / 8 / GiB:.1f} GiB per GPU" in PAGE
    h100 = gpu("H100-SXM")
    assert f"{h100.peak_flops['bf16'] / 1e12:.0f} TFLOP/s" in PAGE
    days = six_nd(n, 1e12) / (8 * 0.4 * h100.peak_flops["bf16"]) / 86400
    assert f"about {days:.0f} days" in PAGE


def test_memory_stack_text_alternative():
    shape = dict(L=32, h=4096, a=32, s=4096, V=32000, b=1, recompute="selective")
    totals = [per_gpu_memory(**shape, d=8, zero=z).total / GiB for z in range(4)]
    assert f"both need {totals[0]:.0f} GiB" in PAGE
    assert f"stage 1 brings it to {totals[1]:.0f} GiB" in PAGE
    assert f"stage 2 to {totals[2]:.0f}" in PAGE and f"stage 3 to {totals[3]:.0f}" in PAGE
    assert per_gpu_memory(**shape).total == per_gpu_memory(**shape, d=8).total


def test_activation_settings():
    gpt3 = dict(s=2048, b=1, h=12288, a=96)
    for kw in ({}, dict(t=8), dict(t=8, sp=True), dict(t=8, sp=True, recompute="selective")):
        assert f"{96 * activation_bytes_per_layer(**gpt3, **kw) / GiB:.1f} GiB" in PAGE, kw
    assert f"{96 * activation_bytes_per_layer(**gpt3, t=8, recompute='full') / GiB:.1f} GiB" in PAGE


def test_roofline_caption():
    g = gpu("H100-SXM")
    assert f"$\\eta F$ = {g.peak_flops['bf16'] * g.gemm_efficiency / 1e12:.0f} TFLOP/s" in PAGE
    assert f"HBM {g.hbm_bandwidth / 1e12:.1f} TB/s" in PAGE
    rates = []
    for n, M, N, K in compute.layer_gemms(1, 2048, 12288, 96, 8):
        rates.append((n, 2.0 * n * M * N * K / compute.gpu_gemm_seconds(g, M, N, K, n) / 1e12))
    dense = [r for n, r in rates if n == 1]
    batched = [r for n, r in rates if n > 1]  # QKᵀ and attention·V: one point in the figure
    assert f"{min(dense):.0f} to {max(dense):.0f} TFLOP/s" in PAGE
    assert max(batched) - min(batched) < 0.5 and f"{batched[0]:.0f} TFLOP/s" in PAGE
    adam = 10 * 175e9 / 8 / compute.optimizer_seconds(175e9 / 8, g) / 1e12
    assert f"{adam:.2f} TFLOP/s" in PAGE


def test_section_problems():
    """The parameters', model states', leftovers' and one-GPU sections' worked problems."""
    gpt2 = dict(L=48, h=1600, V=50257, s=1024)
    n = param_count(**gpt2)
    text = worked_problem(PAGE, "GPT-2 XL")
    assert f"**{n:,}**" in text and f"**{n + 2 * 1600:,}**" in text  # 1,557,611,200 published
    assert f"**{100 * 12 * 48 * 1600**2 / n:.1f} %**" in text
    for kw, total in (({}, 208), (dict(weight_bytes=4, grad_bytes=4, optimizer_bytes=8), 208)):
        assert model_state_bytes_total(13e9, **kw) == total * 1e9
    text = worked_problem(PAGE, "a 13B model")
    assert f"{208e9 / GiB:.1f} GiB" in text
    assert f"**{model_state_bytes_total(13e9, grad_bytes=4) / 1e9:.0f} GB** (18Ψ)" in text
    layer = activation_bytes_per_layer(8192, 1, 4096, 32, recompute="selective")
    logits = 4 * 8192 * 128_256
    text = worked_problem(PAGE, "the logits")
    assert f"**{logits / 1e9:.2f} GB**" in text and f"{layer / 1e9:.2f} GB per layer" in text
    assert (
        f"**{logits / layer:.1f} layers**" in text
        and f"as much as {3 * logits / layer:.0f}" in text
    )
    assert f"{3 * logits / 1e9:.1f} GB" in text and f"**{logits / 8 / 1e9:.2f} GB**" in text
    flops = six_nd(70e9, 2e12)
    rate = 0.4 * gpu("H100-SXM").peak_flops["bf16"]
    text = worked_problem(PAGE, "what sets the GPU count")
    assert f"about **{flops / rate / (365.25 * 86400):.0f} years**" in text
    assert f"**{math.ceil(flops / rate / (30 * 86400))} GPUs**" in text
    states = model_state_bytes_total(70e9) / (80 * GiB)
    assert f"{states:.2f} times" in text and f"**{math.ceil(states)} GPUs**" in text


def test_appendix_llama_count():
    from minipar.cost.model import param_count_llama

    text = (Path(__file__).resolve().parents[1] / "book" / "memory_time_appendix.md").read_text()
    n = param_count_llama(L=80, h=8192, V=32000, a=64, a_kv=8, f=28672)
    assert f"{n / 1e9:.1f} \\text{{ billion}}" in text
    assert f"{12 * 80 * 8192**2 / 1e9:.1f} billion for $12Lh^2$" in text


def model_state_bytes_total(psi: float, **kw) -> float:
    """Model-state bytes of Ψ = ``psi`` parameters on one GPU (mixed-precision Adam unless told)."""
    from minipar.cost.chapters.memory_time import model_state_bytes

    return model_state_bytes(psi, **kw).total


def test_zero_activation_pipeline_and_mfu_problems():
    """The ZeRO, activations, pipeline and MFU sections' worked problems."""
    from minipar.cost.chapters.memory_time import (
        model_state_bytes,
        pipeline_first_stage_activation_bytes,
    )
    from minipar.cost.model import flops_per_iteration, mfu

    text = worked_problem(PAGE, "a 70B model on 64 GPUs")
    for z in range(4):
        total = model_state_bytes(70e9, d=64, zero=z).total / 1e9
        assert f"**{total:.1f} GB**".replace(".0 GB", " GB") in text, (z, total)
    full = activation_bytes_per_layer(4096, 1, 4096, 32)
    sel = activation_bytes_per_layer(4096, 1, 4096, 32, recompute="selective")
    text = worked_problem(PAGE, "the 7B model's activations")
    assert (
        f"**{full / GiB:.2f} GiB**" in text and f"{32 * full / GiB:.0f} GiB for the model" in text
    )
    assert f"{100 * 5 * 32 * 4096**2 / full:.0f} %" in text
    assert f"{sel / GiB:.2f} GiB per layer, **{32 * sel / GiB:.1f} GiB**" in text
    shape = dict(s=4096, b=1, h=4096, a=32, L=32, p=4, m=16, recompute="selective")
    text = worked_problem(PAGE, "GPipe against 1F1B")
    for schedule in ("gpipe", "1f1b"):
        peak = pipeline_first_stage_activation_bytes(**shape, schedule=schedule) / GiB
        assert f"**{peak:.0f} GiB**" in text, (schedule, peak)
    flops = flops_per_iteration(256, 4096, 32, 4096, 32000)
    peak = 8 * gpu("H100-SXM").peak_flops["bf16"]
    n = param_count(L=32, h=4096, V=32000, s=4096)
    text = worked_problem(PAGE, "the MFU of a 7B step")
    assert f"**MFU {100 * mfu(flops / 15, peak):.1f} %**" in text
    assert f"**{100 * six_nd(n, 256 * 4096) / 15 / peak:.1f} %**" in text
