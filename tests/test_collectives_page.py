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


def test_section_problems_numbers_are_the_models():
    """The primitives' and the overlap section's worked problems."""
    for op in ("reduce-scatter", "all-gather"):
        assert cc.ring_bytes_per_rank(op, 4, 64e6) == 48e6
    assert "**48 MB**" in PAGE and cc.ring_bytes_per_rank("all-reduce", 4, 64e6) == 96e6
    assert "at least **96 MB**" in PAGE
    ib = LINKS["ib-ndr400"]

    def t(op):
        return cc.collective_time(op, "ring", 16, 2.6e9, ib.alpha, ib.bandwidth) * 1e3

    from minipar.cost.chapters.data_parallel import compute_seconds, forward_backward

    fwd, bwd = (x * 1e3 for x in forward_backward(compute_seconds(1.3e9, 2048)))
    assert f"forward takes {fwd:.1f} ms and backward {bwd:.1f} ms" in PAGE
    ddp = t("all-reduce") - bwd
    rs, ag = t("reduce-scatter"), t("all-gather")
    zero1 = (rs - bwd) + (ag - fwd)
    for text in (
        f"**{t('all-reduce'):.1f} ms**",
        f"**{ddp:.1f} ms**",
        f"reduce-scatter ({rs:.1f} ms)",
        f"leaving {rs - bwd:.1f} ms",
        f"leaving {ag - fwd:.1f} ms: **{zero1:.1f} ms**",
    ):
        assert text in PAGE, text


def test_no_control_characters_in_the_math():
    """A backslash eaten on the way in (\\f of \\frac becomes a form feed) breaks the math."""
    assert not [c for c in PAGE if ord(c) < 32 and c not in "\n\t"]
