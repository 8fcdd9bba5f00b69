"""Numbers the collectives page states (its worked problem and its figures' captions) are the
cost model's: if a link preset or a formula changes, this names the sentence to rewrite."""

from __future__ import annotations

from pathlib import Path

from minipar.cost.kernels.hardware import LINKS
from minipar.cost.network import collectives as cc

PAGE = (Path(__file__).resolve().parents[1] / "book" / "collectives.md").read_text("utf-8")


def _ms(x: float, digits: int) -> str:
    return f"{x * 1e3:.{digits}f} ms"


def test_worked_problem_numbers_are_the_models():
    nv = LINKS["nvlink4-h100"]

    def t(algo, n):
        return cc.collective_time("all-reduce", algo, n, 1e9, nv.alpha, nv.bandwidth)

    assert cc.ring_bytes_per_rank("all-reduce", 8, 1e9) == 1.75e9 and "1.75 GB" in PAGE
    for text in (_ms(t("ring", 8), 2), _ms(t("parameter-server", 8), 1)):
        assert text in PAGE, text  # 3.92 ms, 31.1 ms
    assert _ms(t("ring", 64), 1) in PAGE and _ms(t("parameter-server", 64), 0) in PAGE
    assert round(t("parameter-server", 8) / t("ring", 8)) == 8 and "eight times the ring" in PAGE


def test_hierarchical_caption_numbers_are_the_models():
    intra, inter = LINKS["nvlink4-h100"], LINKS["ib-ndr400"]
    nodes = [2, 4, 8, 16, 32, 64, 128]
    flat = [
        cc.collective_time("all-reduce", "ring", 8 * m, 1e9, inter.alpha, inter.bandwidth)
        for m in nodes
    ]
    ring = [cc.hierarchical_all_reduce_time(m, 8, 1e9, intra, inter) for m in nodes]
    tree = [
        cc.hierarchical_all_reduce_time(m, 8, 1e9, intra, inter, "double-binary-tree")
        for m in nodes
    ]
    assert f"{flat[0] * 1e3:.0f} to {flat[-1] * 1e3:.0f} ms" in PAGE  # 38 to 50 ms
    assert f"{ring[0] * 1e3:.0f} to {ring[-1] * 1e3:.0f} ms" in PAGE  # 6 to 10 ms
    assert f"about {tree[3] * 1e3:.0f} ms" in PAGE
    cross = next(m for m, r, d in zip(nodes, ring, tree) if d < r)
    assert f"between {cross // 2} and {cross} nodes" in PAGE
