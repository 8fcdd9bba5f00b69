"""Numbers the context-parallel page's section problems state are the cost model's: if a link
preset, the GPU's peak or a formula changes, this names the answer to rewrite."""

from __future__ import annotations

from pathlib import Path

from page_support import worked_problem

from minipar.cost.chapters import context_parallel as C
from minipar.cost.kernels.hardware import gpu, link
from minipar.grid import Grid

PAGE = (Path(__file__).resolve().parents[1] / "book" / "context_parallel.md").read_text("utf-8")
F = gpu("H100-SXM").peak_flops["bf16"]
IB = link("ib-ndr400")
H, H_KV = 8192, 1024  # the ring section's model: 64 query heads, 8 K/V heads


def test_gather_or_ring():
    text = worked_problem(PAGE, "gather or ring?")
    sh = C.AttentionShape(1, 65536, H, 8, h_kv=H_KV)
    ag = C.allgather_attention_time(sh, flops=F, bandwidth=IB.bandwidth, alpha=IB.alpha)
    ring = C.ring_attention_time(sh, flops=F, bandwidth=IB.bandwidth, alpha=IB.alpha)
    kv = C.kv_block_bytes(1, 65536, H_KV, 8)
    sent = C.allgather_sent_bytes_per_layer(1, 65536, H_KV, 8)["forward"]
    assert f"= {kv / 1e6:.1f} MB" in text and f"{sent / 1e6:.0f} MB" in text
    assert IB.bandwidth == 50e9 and IB.alpha == 5e-6 and "(50 GB/s,\n5 µs)" in text
    assert f"**{ag['gather'] * 1e3:.2f} ms**" in text  # 4.73 ms
    assert f"**{ag['compute'] * 1e3:.2f} ms**" in text  # 8.89 ms
    assert f"**{ag['time'] * 1e3:.1f} ms**" in text  # 13.6 ms
    flops = max(C.attention_flops_per_rank(1, 65536, H, 8, "zigzag", True, "half"))
    assert f"{flops / 1e12:.2f} \\times 10^{{12}}" in text
    assert ring["time"] == ring["compute"]  # hidden: the ring takes its compute
    assert f"ring step computes {ring['step'] * 1e3:.2f} ms" in text
    assert f"against a {(IB.alpha + kv / IB.bandwidth) * 1e3:.2f} ms transfer" in text
    assert f"hiding it: **{ring['time'] * 1e3:.2f} ms**" in text


def test_llama3_long_context_layout():
    text = worked_problem(PAGE, "Llama 3's long-context layout")
    g = Grid(d=8, t=8, p=16, cp=16)
    assert g.world_size == 16384 and "16,384 GPUs" in text
    cp = g.group_of("cp", 0)
    assert cp == list(range(0, 128, 8)) and "ranks **0, 8, …, 120**" in text
    assert len({r // 8 for r in cp}) == 16 and "**16\nnodes**" in text
    assert len(g.group_of("dp_cp", 0)) == 128 and "= **128 ranks**" in text
    layer = C.activation_bytes_per_rank(131072, 1, 16384, 128)
    assert f"= {layer / 1e9:.1f} GB" in text
    per_gpu = C.activation_bytes_per_rank(131072, 1, 16384, 128, cp=16) / 8
    assert f"**{per_gpu / 1e9:.3f} GB** per GPU" in text


def test_cp_or_recomputation():
    text = worked_problem(PAGE, "CP or recomputation for 64K tokens?")
    s, t, layers = 65536, 8, 80

    def gb(cp: int) -> float:
        return C.activation_bytes_per_rank(s, 1, H, 64, cp) / t * layers / 1e9

    assert f"= {gb(1) / layers:.2f} GB, **{gb(1):.0f} GB**" in text  # 2.28 GB, 183 GB
    assert f"{gb(2):.0f}, {gb(4):.0f}, then **{gb(8):.0f} GB at $c_p = 8$**" in text
    assert gb(4) > 40 > gb(8)  # c_p = 8 is the smallest power of two under 40 GB
    threshold = C.min_tokens_per_rank_for_overlap(F, IB.bandwidth, kv_fraction=H_KV / H)
    assert s / 8 >= threshold and f"threshold of {threshold:,.0f}" in text
    assert f"**{2 * s * H * layers / t / 1e9:.1f} GB**" in text  # full recomputation: 2sbh


def test_the_ring_section_problem_is_the_model_these_refer_to():
    text = worked_problem(PAGE, "does this ring hide its transfers?")
    assert "$h = 8192$ with 64 query and 8 K/V heads ($h_{kv} = 1024$)" in text
    threshold = C.min_tokens_per_rank_for_overlap(F, IB.bandwidth, kv_fraction=H_KV / H)
    assert f"**{threshold:,.0f}** over InfiniBand" in text


def test_one_ring_on_four_ranks():
    text = worked_problem(PAGE, "one ring on four ranks")
    assert 32768 // 4 == 8192 and "**8,192 tokens**" in text
    sends = C.ring_sends_per_layer(4)["forward"]
    assert sends == 3 and f"receives the other **{sends}**" in text
