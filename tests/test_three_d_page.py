"""Numbers the 3D page's section problems state are the grid's and the cost model's: if the
rank order, a closed form or the message size changes, this names the answer to rewrite."""

from __future__ import annotations

from pathlib import Path

from page_support import worked_problem

from minipar.cost.chapters import pipeline_parallel as PP
from minipar.grid import Grid

PAGE = (Path(__file__).resolve().parents[1] / "book" / "three_d.md").read_text("utf-8")


def _pct(x: float) -> str:
    return f"**{100 * x:.1f} %**"


def test_what_interleaving_buys():
    text = worked_problem(PAGE, "what interleaving buys")
    B, p = 1536, 8
    m_hand, m_best = B // (16 * 1), B // (32 * 2)
    assert (m_hand, m_best) == (96, 24) and m_best % p == 0 and "= **24**" in text
    assert _pct(PP.bubble_fraction_of_total("1f1b", p, m_hand)) in text  # 6.8 %
    assert _pct(PP.bubble_fraction_of_total("interleaved", p, m_best, 12)) in text  # 2.4 %
    assert f"$vp - 1$ = **{12 * p - 1}** boundaries" in text
    assert f"{(12 * p - 1) / (p - 1):.1f} times the messages" in text


def test_the_groups_of_gpt3s_layout():
    text = worked_problem(PAGE, "the groups of GPT-3's layout")
    g, per_node = Grid(d=16, t=8, p=8), 8
    count = {k: len(g.groups(k)) for k in ("tp", "dp", "pp", "embedding")}
    assert count == {"tp": 128, "dp": 64, "pp": 128, "embedding": 128}
    assert "$d p$ = **128** groups of 8" in text and "$t p$ = **64** groups of 16" in text
    assert "$d t$ = **128** groups" in text and "**128** groups of\n2" in text
    assert all(len(gr) == 2 for gr in g.groups("embedding"))
    assert f"all **{sum(count.values())}**" in text  # 448
    dp = g.group_of("dp", 0)
    assert dp == list(range(0, 128, 8)) and "0, 8, …, 120" in text
    assert len({r // per_node for r in dp}) == 16 and "**16 nodes**" in text
    assert {r % per_node for r in dp} == {0} and "**rail 0**" in text
    pp = g.group_of("pp", 0)
    assert pp == list(range(0, 1024, 128)) and "0, 128, …, 896, on 8 nodes" in text
    assert g.group_of("tp", 0) == list(range(8))  # "each one node"


def test_what_the_scatter_gather_saves():
    text = worked_problem(PAGE, "what the scatter/gather saves")
    s, h, t, nic = 2048, 12288, 8, 25e9
    whole = PP.pp_p2p_bytes_per_microbatch(1, s, h) / 2  # one direction
    assert f"= {whole / 1e6:.1f} MB" in text
    assert f"**{whole / t / 1e6:.2f} MB**, in **{whole / t / nic * 1e3:.2f} ms**" in text
    assert f"**{whole / nic * 1e3:.2f} ms**" in text
    assert f"carry {t * whole / 1e6:.0f} MB instead of {whole / 1e6:.1f} MB" in text
