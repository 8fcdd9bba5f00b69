"""Communication volumes per rank and the two pipeline-bubble conventions."""

import pytest

from minipar.cost.chapters.data_parallel import dp_allreduce_bytes_per_rank, zero_bytes_per_rank
from minipar.cost.chapters.pipeline_parallel import (
    bubble_fraction_of_total,
    bubble_relative_to_ideal,
    pp_p2p_bytes_per_microbatch,
)
from minipar.cost.chapters.tensor_parallel import tp_bytes_per_layer
from minipar.cost.network.collectives import ring_bytes_per_rank


def test_dp_and_zero_volumes():
    S, n = 1e9, 8
    assert dp_allreduce_bytes_per_rank(S, n) == ring_bytes_per_rank("all-reduce", n, S)
    # ZeRO §7: stages 1 and 2 move what data parallelism moves; stage 3 moves 1.5x
    for stage in (0, 1, 2):
        assert zero_bytes_per_rank(stage, S, n) == pytest.approx(dp_allreduce_bytes_per_rank(S, n))
    assert zero_bytes_per_rank(3, S, n) == pytest.approx(1.5 * dp_allreduce_bytes_per_rank(S, n))
    assert dp_allreduce_bytes_per_rank(S, 1) == 0
    with pytest.raises(ValueError, match=r"ZeRO stage \(4\)"):
        zero_bytes_per_rank(4, S, n)


def test_tp_and_pp_volumes():
    b, s, h, t = 1, 2048, 12288, 8
    act = b * s * h * 2  # one (b, s, h) bf16 activation
    # 4 ring all-reduces per layer (2 forward, 2 backward)
    one_all_reduce = ring_bytes_per_rank("all-reduce", t, act)
    assert tp_bytes_per_layer(b, s, h, t) == pytest.approx(4 * one_all_reduce)
    assert tp_bytes_per_layer(b, s, h, 1) == 0
    assert pp_p2p_bytes_per_microbatch(b, s, h) == 2 * act
    # per layer, TP sends far more than a pipeline boundary does per micro-batch
    assert tp_bytes_per_layer(b, s, h, t) > 3 * pp_p2p_bytes_per_microbatch(b, s, h)


def test_bubble_conventions():
    # the same schedule, two numbers: p=4, m=4 is 3/7 of the step or 3/4 on top of ideal
    assert bubble_fraction_of_total("gpipe", 4, 4) == pytest.approx(3 / 7)
    assert bubble_relative_to_ideal("gpipe", 4, 4) == pytest.approx(3 / 4)
    # GPipe (Huang et al. 2019 §2.3): negligible when m >= 4p; at m = 4p it is (p-1)/(5p-1)
    assert bubble_fraction_of_total("gpipe", 8, 32) == pytest.approx(7 / 39)
    # 1F1B has GPipe's bubble
    for p, m in ((2, 1), (4, 8), (8, 64)):
        assert bubble_fraction_of_total("1f1b", p, m) == bubble_fraction_of_total("gpipe", p, m)
    # Megatron interleaving divides the relative bubble by v
    assert bubble_relative_to_ideal("interleaved", 8, 16, v=4) == pytest.approx(7 / 64)
    f = bubble_fraction_of_total("interleaved", 8, 16, v=4)
    assert f == pytest.approx((7 / 4) / (16 + 7 / 4))
    # p = 1: no bubble
    assert bubble_fraction_of_total("1f1b", 1, 5) == 0


@pytest.mark.parametrize(
    "args, kw, match",
    [
        (("interleaved", 4, 6), {"v": 2}, r"microbatches m \(6\) to be a multiple of p \(4\)"),
        (("gpipe", 4, 8), {"v": 2}, r"chunks v \(2\)"),
        (("gpipe", 0, 8), {}, r"p \(0\)"),
        (("gpipe", 4, 0), {}, r"m \(0\)"),
        (("zb", 4, 8), {}, "schedule"),
    ],
)
def test_bubble_errors(args, kw, match):
    with pytest.raises(ValueError, match=match):
        bubble_relative_to_ideal(*args, **kw)


def test_zb_h1_and_peak_microbatches():
    from minipar.cost.chapters.pipeline_parallel import peak_microbatches, zb_h1_bubble_fraction

    assert zb_h1_bubble_fraction(4, 8) == pytest.approx(3 / 27)  # (p−1)/(3m+p−1)
    # a third of 1F1B's relative bubble when F, B, W take equal time
    r_zb = zb_h1_bubble_fraction(4, 8) / (1 - zb_h1_bubble_fraction(4, 8))
    r_1f1b = bubble_relative_to_ideal("1f1b", 4, 8)  # (p−1)/m
    assert r_zb == pytest.approx(r_1f1b / 3)
    assert [peak_microbatches("1f1b", r, 4, 8) for r in range(4)] == [4, 3, 2, 1]
    assert [peak_microbatches("gpipe", r, 4, 8) for r in range(4)] == [8] * 4
    assert peak_microbatches("interleaved", 0, 4, 16, v=2) == 2 * 3 + 4 + 1
    assert peak_microbatches("zb-h1", 3, 4, 8) == 4
    with pytest.raises(ValueError, match=r"needs m \(2\) >= p \(4\)"):
        zb_h1_bubble_fraction(4, 2)
    with pytest.raises(ValueError, match=r"rank \(4\) must be in 0..3"):
        peak_microbatches("1f1b", 4, 4, 8)


def test_chapter_numbers_for_gpt3_shape():
    """The pipeline chapter's figures for s = 2048, h = 12288, bf16, b = 1."""
    b, s, h = 1, 2048, 12288
    assert round(b * s * h * 2 / 1e6) == 50  # one message, MB
    assert round(pp_p2p_bytes_per_microbatch(b, s, h) / 1e6) == 101  # per boundary
    assert round(tp_bytes_per_layer(b, s, h, 8) / 1e6) == 352  # TP, t = 8, per layer
