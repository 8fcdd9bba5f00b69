"""Numbers the data-parallel page states (its worked problems, its roofline's caption and text
alternative, the appendix's scaling table) are the cost model's or follow from the problem's
data: if a preset or a formula changes, this names the sentence to rewrite."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book"))

from figures.data_parallel import roofline_links, three_figures, tokens_to_hide  # noqa: E402
from page_support import has, worked_problem  # noqa: E402

from minipar.cost.chapters.data_parallel import (  # noqa: E402
    compute_seconds,
    dp_allreduce_bytes_per_rank,
    forward_backward,
)

PAGE = (ROOT / "book" / "data_parallel.md").read_text("utf-8")
APPENDIX = (ROOT / "book" / "data_parallel_appendix.md").read_text("utf-8")
PSI = 1.3e9


def test_roofline_caption_and_alt_state_the_drawn_crossings():
    start = PAGE.index("{minipar-figure} data_parallel.dp_roofline")
    figure = PAGE[start : PAGE.index("```", start)]
    for _, allreduce in roofline_links():
        seconds = allreduce(2 * PSI)
        has(figure, three_figures(tokens_to_hide(seconds, PSI)), f"{seconds * 1e3:.0f} ms")
    # the crossing is where backward equals the all-reduce
    seconds = roofline_links()[2][1](2 * PSI)
    backward = forward_backward(compute_seconds(PSI, tokens_to_hide(seconds, PSI)))[1]
    assert math.isclose(backward, seconds)


def test_summing_instead_of_averaging():
    has(worked_problem(PAGE, "summing"), f"**{8 * 0.01:.2f}**", f"**{8 * 0.2:.1f}**")


def test_accumulation_problem():
    k = 1024 // (64 * 2)
    micro = compute_seconds(PSI, 2 * 2048)
    has(
        worked_problem(PAGE, "accumulating"),
        f"**{k}**",
        f"**{dp_allreduce_bytes_per_rank(2 * PSI, 64) / 1e9:.2f} GB**",
        f"{k} × {micro * 1e3:.1f} = **{k * micro * 1e3:.0f} ms**",
        f"**{forward_backward(micro)[1] * 1e3:.1f} ms**",
    )


def test_unequal_batches_problem():
    sums, tokens, d = (200, 300), (100, 300), 2
    means = sum(s / t for s, t in zip(sums, tokens)) / d
    true = sum(sums) / sum(tokens)
    fixed = sum(s * d / sum(tokens) for s in sums) / d
    assert fixed == true
    has(worked_problem(PAGE, "two ranks"), f"**{means:.1f}**", f"**{true:.2f}**")


def test_clipping_problem():
    norms, c = (3, 4, 0, 0), 1
    total = math.sqrt(sum(n * n for n in norms))
    per_shard = math.sqrt(sum(min(n, c) ** 2 for n in norms))  # each shard clipped to norm <= c
    has(
        worked_problem(PAGE, "clipping"),
        f"**{total:.0f}**",
        f"**{c / total:.1f}**",
        f"{per_shard:.2f}",
    )


def _steps(x: float) -> float:
    """N/N_min at B = x·B_crit, solved from (N/N_min − 1)(E/E_min − 1) = 1 with E = B·N
    (McCandlish et al. 2018) by bisection, not by the closed form the answer states."""
    lo, hi = 1.0 + 1e-12, 1e6
    for _ in range(200):
        n = (lo + hi) / 2
        lo, hi = (n, hi) if (n - 1) * (x * n - 1) < 1 else (lo, n)
    return lo


def test_critical_batch_problem():
    n_min, e_min = 10_000, 4e6 * 10_000
    text = worked_problem(PAGE, "past the critical")
    for x in (1, 4):
        n = _steps(x)
        has(text, f"**{n * n_min:,.0f} steps**", f"{n * x * e_min / 1e9:.0f} billion tokens")
    has(text, f"only {_steps(1) / _steps(4):.1f} times", f"{4 * _steps(4) / _steps(1):.1f} times")


def test_straggler_problem():
    text = worked_problem(PAGE, "rare stalls")
    means = {d: 40 + 50 * (1 - 0.99**d) for d in (1, 8, 512)}
    has(text, *(f"**{m:.1f} ms**" for m in means.values()))
    has(text, f"{100 * (means[1] / 40 - 1):.2f} %", f"{100 * (means[512] / 40 - 1):.0f} %")


def test_powersgd_problem():
    text = worked_problem(PAGE, "PowerSGD")
    for m, n, share in ((4096, 16384, "0.061 %"), (64, 64, "6.25 %")):
        assert f"{100 * 2 * (m + n) / (m * n):.3g} %" == share
        has(text, f"**{share}**")
    has(text, f"{2 * (4096 + 16384):,}", f"{4096 * 16384:,}")


def test_scaling_table_is_the_models():
    from minipar.data_parallel.scaling import scaling_curves

    rows = re.findall(r"^\| (\d+k tokens/GPU[^|]*)\|([^|]+)\|([^|]+)\|([^|]+)\|", APPENDIX, re.M)
    assert len(rows) == 5, rows
    for (_, *cells), (name, effs) in zip(rows, scaling_curves().items()):
        for cell, eff in zip(cells, effs):
            text = cell.strip().rstrip("%")
            digits = len(text.split(".")[1]) if "." in text else 0
            assert text == f"{100 * eff:.{digits}f}", (name, cell, eff)
    summary = PAGE[PAGE.index("**Latency decides the rest.**") :]
    curves = list(scaling_curves().values())
    has(summary, f"{100 * curves[1][2]:.0f} %", f"{100 * curves[2][2]:.0f} %")


def test_opening_figure_and_problem():
    from minipar.cost.chapters.data_parallel import (
        allreduce_seconds,
        dp_step_time,
        min_tokens_to_hide,
    )

    fwd, bwd = forward_backward(compute_seconds(PSI, 2048))
    ar = allreduce_seconds(64)
    buckets = dp_step_time(fwd, bwd, 2 * PSI, 250 * 2**20, ar)
    one = dp_step_time(fwd, bwd, 2 * PSI, 2 * PSI, ar)
    start = PAGE.index("{minipar-figure} data_parallel.dp_timeline")
    figure = PAGE[start : PAGE.index("```", start)]
    assert len(buckets.intervals) == 10
    has(
        figure,
        "ten numbered",
        "ten 250 MiB buckets",
        f"{buckets.step_s * 1e3:.1f} ms per step",
        f"{one.step_s * 1e3:.1f} ms, {one.exposed_s * 1e3:.1f} ms of it exposed",
        f"end {buckets.exposed_s * 1e3:.1f} ms after it",
    )
    sent = dp_allreduce_bytes_per_rank(2 * PSI, 64)
    text = worked_problem(PAGE, "does the all-reduce")
    has(text, f"**{sent / 1e9:.2f} GB**", f"**{sent / 50e9 * 1e3:.0f} ms**")
    has(text, f"**{bwd * 1e3:.1f} ms**", f"{fwd * 3 * 1e3:.0f} ms at 400 TFLOP/s")
    assert round(sent / 50e9 / bwd) == 4 and "four times shorter" in text
    assert min_tokens_to_hide(400e12, 50e9) == 8000


def test_bytes_buckets_zero_and_ethernet_problems():
    from minipar.cost.chapters.data_parallel import (
        allreduce_seconds,
        bucket_sizes,
        dp_step_time,
        min_tokens_to_hide,
        zero_bytes_per_rank,
    )
    from minipar.cost.chapters.memory_time import model_state_bytes

    text = worked_problem(PAGE, "a 7B model")
    has(text, f"**{dp_allreduce_bytes_per_rank(4 * 7e9, 16) / 1e9:.1f} GB**")
    fwd, bwd = forward_backward(compute_seconds(PSI, 2048))
    ar = allreduce_seconds(8)
    buckets = dp_step_time(fwd, bwd, 2 * PSI, 25 * 2**20, ar)
    one = dp_step_time(fwd, bwd, 2 * PSI, 2 * PSI, ar)
    n = len(bucket_sizes(2 * PSI, 25 * 2**20))
    text = worked_problem(PAGE, "how many buckets")
    has(text, f"**{n} buckets**", f"**{n * 2 * 7 * 2e-6 * 1e3:.1f} ms**")
    has(text, f"{one.comm_s * 1e3:.1f} ms after backward", f"**{buckets.exposed_s * 1e3:.2f} ms**")
    has(text, f"{buckets.step_s * 1e3:.1f} ms instead of {one.step_s * 1e3:.1f} ms")
    text = worked_problem(PAGE, "what ZeRO costs")
    fp32 = dict(d=8, weight_bytes=4, grad_bytes=4, optimizer_bytes=8)
    for z in range(4):
        held = model_state_bytes(PSI, zero=z, **fp32).total / 1e9
        has(text, f"**{held:g} GB**")
    has(text, f"**{zero_bytes_per_rank(0, 4 * PSI, 8) / 1e9:g} GB**")
    has(text, f"**{zero_bytes_per_rank(3, 4 * PSI, 8) / 1e9:g} GB**")
    has(
        worked_problem(PAGE, "data parallelism over"),
        f"**{min_tokens_to_hide(400e12, 12.5e9):,.0f} tokens**",
    )
