"""Numbers the pipeline page's section problems state are the cost model's and the schedule
functions': if a closed form or a schedule changes, this names the answer to rewrite."""

from __future__ import annotations

from pathlib import Path

from page_support import worked_problem

from minipar.cost.chapters import pipeline_parallel as C
from minipar.pipeline_parallel.schedules import schedule

PAGE = (Path(__file__).resolve().parents[1] / "book" / "pipeline_parallel.md").read_text("utf-8")


def test_which_convention():
    text = worked_problem(PAGE, "which convention?")
    p = 8
    m = next(m for m in range(1, 1000) if C.bubble_relative_to_ideal("1f1b", p, m) <= 0.25)
    assert m == 28 and "**$m = 28$**" in text and "25 %" in text
    frac = C.bubble_fraction_of_total("1f1b", p, m)
    assert f"**{frac:.0%}**".replace("%", " %") in text  # 20 %
    m5 = next(m for m in range(1, 1000) if C.bubble_fraction_of_total("1f1b", p, m) <= 0.05)
    assert f"**$m \\ge {m5}$**" in text  # 133
    rel = C.bubble_relative_to_ideal("1f1b", p, m5)
    assert f"({rel:.1%} of the".replace("%", " %") in text  # 5.3 %
    assert C.peak_microbatches("1f1b", 0, p, m5) == 8 and "holds **8** micro-batches" in text
    assert C.peak_microbatches("gpipe", 0, p, m5) == m5 and f"all {m5}" in text


def test_what_pytorch_leaves_to_you():
    text = worked_problem(PAGE, "what PyTorch leaves to you")
    p, v, m = 4, 2, 8
    lists = schedule("interleaved", p, m, v)
    rank_of = {a.stage: r for r, acts in enumerate(lists) for a in acts}
    assert rank_of[0] == 0 and "on rank **0**" in text
    last = v * p - 1
    assert rank_of[last] == 3 and f"$vp - 1 = {last}$" in text and "on rank **3**" in text
    assert f"sum of {m} micro-batch means, **{m} times**" in text


def test_what_micro_batches_buy():
    text = worked_problem(PAGE, "what micro-batches buy")
    p, t_f, t_b = 4, 4.0, 8.0  # ms for the whole batch on one rank
    one = C.bubble_fraction_of_total("gpipe", p, 1)
    assert (p - 1 + 1) * (t_f + t_b) == 48 and "**48 ms**" in text
    assert f"**{one:.0%}**".replace("%", " %") in text  # 75 %
    m = 4
    four = C.bubble_fraction_of_total("gpipe", p, m)
    step = (m + p - 1) * (t_f + t_b) / m
    assert step == 21 and "**21 ms**" in text
    assert f"**{four:.0%}**".replace("%", " %") in text and "(3/7)" in text  # 43 %
