"""Numbers the collectives page states (its worked problem and its figures' captions) are the
cost model's: if a link preset or a formula changes, this names the sentence to rewrite."""

from __future__ import annotations

from pathlib import Path

from page_support import worked_problem

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


def _us(x: float) -> str:
    return f"{x * 1e6:.0f} µs"


def test_algorithm_choice_problem():
    ib = LINKS["ib-ndr400"]

    def t(algo, nbytes):
        return cc.collective_time("all-reduce", algo, 16, nbytes, ib.alpha, ib.bandwidth)

    text = worked_problem(PAGE, "which algorithm")
    assert (
        f"**{_us(t('ring', 64e3))}**" in text
        and f"**{_us(t('recursive-doubling', 64e3))}**" in text
    )
    assert round(t("ring", 64e3) / t("recursive-doubling", 64e3)) == 6 and "six times" in text
    for algo in ("ring", "recursive-doubling", "rabenseifner"):
        assert f"**{_us(t(algo, 16e6))}**" in text, algo
    # the crossover the text derives: recursive doubling wins below about 12 α/β, 3 MB
    lo = next(
        s for s in (x * 1e5 for x in range(1, 100)) if t("ring", s) < t("recursive-doubling", s)
    )
    assert 2.5e6 < lo < 3.5e6 and "about 3 MB" in PAGE


def test_nccl_tests_problem():
    text = worked_problem(PAGE, "reading an nccl-tests")
    alg = cc.algbw(1e9, 4.0e-3)
    bus = cc.busbw("all-reduce", 8, 1e9, 4.0e-3)
    assert f"**{alg / 1e9:.0f} GB/s**" in text and f"**{bus / 1e9:.1f} GB/s**" in text
    assert f"{100 * bus / 450e9:.0f} %" in text and f"{100 * bus / 900e9:.0f} %" in text
    assert cc.busbw_factor("all-reduce", 2) == 1


def test_hierarchical_problem():
    intra, inter = LINKS["nvlink4-h100"], LINKS["ib-ndr400"]
    text = worked_problem(PAGE, "1 GB over 4 nodes")
    flat_bytes = cc.ring_bytes_per_rank("all-reduce", 32, 1e9)
    hier_bytes = cc.ring_bytes_per_rank("all-reduce", 4, 1e9 / 8)
    assert f"**{flat_bytes / 1e9:.2f} GB**" in text and f"**{hier_bytes / 1e9:.2f} GB**" in text
    assert round(flat_bytes / hier_bytes) == 10 and "ten times less" in text
    flat = cc.collective_time("all-reduce", "ring", 32, 1e9, inter.alpha, inter.bandwidth)
    hier = cc.hierarchical_all_reduce_time(4, 8, 1e9, intra, inter)
    nv = cc.collective_time("all-reduce", "ring", 8, 1e9, intra.alpha, intra.bandwidth)
    ib = cc.collective_time("all-reduce", "ring", 4, 1e9 / 8, inter.alpha, inter.bandwidth)
    assert abs(nv + ib - hier) < 1e-12
    for x, d in ((flat, 1), (hier, 1), (nv, 2), (ib, 2)):
        assert _ms(x, d) in text, _ms(x, d)
    assert round(flat / hier) == 5 and "five times faster" in text


def test_datasheet_problem():
    text = worked_problem(PAGE, "reading a datasheet")
    for name, digits in (("nvlink4-h100", 1), ("ib-ndr400", 0)):
        assert f"**{_ms(1e9 / LINKS[name].bandwidth, digits)}**" in text, name
