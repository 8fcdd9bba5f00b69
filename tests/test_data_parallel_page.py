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

from minipar.cost.chapters.data_parallel import (  # noqa: E402
    compute_seconds,
    dp_allreduce_bytes_per_rank,
    forward_backward,
)

PAGE = (ROOT / "book" / "data_parallel.md").read_text("utf-8")
APPENDIX = (ROOT / "book" / "data_parallel_appendix.md").read_text("utf-8")
PSI = 1.3e9


def _problem(title: str) -> str:
    """The text of the worked problem whose title starts with ``title``, answer included."""
    start = PAGE.index(f"Worked problem: {title}")
    return PAGE[start : PAGE.index("\n:::\n", start)]


def _has(text: str, *parts: str) -> None:
    missing = [p for p in parts if p not in text]
    assert not missing, missing


def test_roofline_caption_and_alt_state_the_drawn_crossings():
    start = PAGE.index("{minipar-figure} data_parallel.dp_roofline")
    figure = PAGE[start : PAGE.index("```", start)]
    for _, allreduce in roofline_links():
        seconds = allreduce(2 * PSI)
        _has(figure, three_figures(tokens_to_hide(seconds, PSI)), f"{seconds * 1e3:.0f} ms")
    # the crossing is where backward equals the all-reduce
    seconds = roofline_links()[2][1](2 * PSI)
    backward = forward_backward(compute_seconds(PSI, tokens_to_hide(seconds, PSI)))[1]
    assert math.isclose(backward, seconds)


def test_summing_instead_of_averaging():
    _has(_problem("summing"), f"**{8 * 0.01:.2f}**", f"**{8 * 0.2:.1f}**")


def test_accumulation_problem():
    k = 1024 // (64 * 2)
    micro = compute_seconds(PSI, 2 * 2048)
    _has(
        _problem("accumulating"),
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
    _has(_problem("two ranks"), f"**{means:.1f}**", f"**{true:.2f}**")


def test_clipping_problem():
    norms, c = (3, 4, 0, 0), 1
    total = math.sqrt(sum(n * n for n in norms))
    per_shard = math.sqrt(sum(min(n, c) ** 2 for n in norms))  # each shard clipped to norm <= c
    _has(_problem("clipping"), f"**{total:.0f}**", f"**{c / total:.1f}**", f"{per_shard:.2f}")


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
    text = _problem("past the critical")
    for x in (1, 4):
        n = _steps(x)
        _has(text, f"**{n * n_min:,.0f} steps**", f"{n * x * e_min / 1e9:.0f} billion tokens")
    _has(text, f"only {_steps(1) / _steps(4):.1f} times", f"{4 * _steps(4) / _steps(1):.1f} times")


def test_straggler_problem():
    text = _problem("rare stalls")
    means = {d: 40 + 50 * (1 - 0.99**d) for d in (1, 8, 512)}
    _has(text, *(f"**{m:.1f} ms**" for m in means.values()))
    _has(text, f"{100 * (means[1] / 40 - 1):.2f} %", f"{100 * (means[512] / 40 - 1):.0f} %")


def test_powersgd_problem():
    text = _problem("PowerSGD")
    for m, n, share in ((4096, 16384, "0.061 %"), (64, 64, "6.25 %")):
        assert f"{100 * 2 * (m + n) / (m * n):.3g} %" == share
        _has(text, f"**{share}**")
    _has(text, f"{2 * (4096 + 16384):,}", f"{4096 * 16384:,}")


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
    _has(summary, f"{100 * curves[1][2]:.0f} %", f"{100 * curves[2][2]:.0f} %")
