"""Experiment 5 of the planner's validation (minipar.cost.validation.experiment5): the MoE rows of
published_moe.json on the frozen planner, mapped to its inputs before any was evaluated.

The first part holds the data and the mapping only: every row read is recorded, every kept row
has a preset, a GPU and a layout the planner prices, and the mapping's decisions (the GPU per
NVLink domain, FP8 recipe, pipeline chunks, recomputation) are the ones the module states."""

from collections import Counter

import pytest

from minipar.cost.planner import three_d as planner
from minipar.cost.validation import experiment5 as e5

DATA = e5.load()
ROWS = DATA["rows"]
KEPT = e5.kept_rows()


def test_every_row_read_is_recorded_kept_or_with_its_reason():
    assert len(ROWS) == 55 and len({r["id"] for r in ROWS}) == 55
    assert all(r["source"] in DATA["sources"] for r in ROWS)
    assert all((r["excluded_because"] is None) == r["kept"] for r in ROWS)
    reasons = Counter(r["excluded_because"] for r in ROWS if not r["kept"])
    assert reasons["no planner preset for GB300 (DGX-GB300, NVL72)"] == 17
    assert reasons["no planner preset for B300 (DGX-B300)"] == 7
    assert reasons["NVFP4 (4-bit) precision: the planner prices no FP4 GEMM"] == 3
    assert len(KEPT) == 14
    assert Counter(r["system"] for r in KEPT) == {"GB200-NVL72": 8, "B200": 3, "H100-SXM": 3}
    assert Counter(r["model"] for r in KEPT) == {
        "DeepSeek-V3": 6,
        "Qwen3-30B-A3B": 4,
        "Qwen3-235B-A22B": 4,
    }


def test_kept_rows_have_a_preset_a_gpu_and_a_consistent_layout():
    for r in KEPT:
        m = planner.MODELS[e5.PRESETS[r["model"]]]
        assert m.moe and r["system"] in ("H100-SXM", "B200", "GB200-NVL72"), r["id"]
        assert r["gpus"] == r["tp"] * r["pp"] * (r["cp"] or 1) * r["dp"], r["id"]
        assert r["etp"] in (None, 1), r["id"]  # ETP > 1 would be left out
        assert e5.measured_seconds(r) > 0


def test_the_mapping_decisions():
    """A rack of 72 gives 64 to a 256-GPU job; FP8 without a recipe is MXFP8 on Blackwell and
    delayed scaling on Hopper; DeepSeek-V3's 61 layers take no interleaving at p = 4 or 8, Qwen3
    235B's 94 (+ 2) take v = 3 at p = 8; published recompute modules keep only the priced ones."""
    assert e5.gpus_per_node("GB200-NVL72", 256) == 64 and e5.gpus_per_node("B200", 256) == 8
    assert e5.gpus_per_node("GB200-NVL72", 8) == 8
    by = {r["id"]: r for r in ROWS}
    dsv3, qwen = planner.MODELS["deepseek-v3"], planner.MODELS["qwen3-235b-a22b"]
    assert e5.chunks_for(by["mb-26.04.01-deepseekv3-gb200-256gpu-mxfp8"], dsv3) == 1
    assert e5.chunks_for(by["mb-26.04.01-qwen3-235b-a22b-gb200-256gpu-mxfp8"], qwen) == 3
    assert e5.chunks_for(by["mb-26.04.01-qwen3-235b-a22b-h100-256gpu-fp8"], qwen) == 4
    assert e5.fp8_for(by["mb-26.04.01-qwen3-235b-a22b-h100-256gpu-fp8"], "H100-SXM") == "delayed"
    assert e5.fp8_for(by["mb-26.04.01-deepseekv3-b200-256gpu-mxfp8"], "B200") == "mxfp8"
    assert e5.recompute_modules(by["dgxc-nemo-deepseekv3-gb200-128gpu-bf16"]) == ("core_attn",)
    assert e5.recompute_modules(by["dgxc-nemo-deepseekv3-h100-1024gpu-bf16"]) == ()
    o = e5.options_for(by["mb-26.04.01-qwen3-30b-a3b-h100-16gpu-fp8"], "H100-SXM")
    assert (o.attention, o.compiled, o.ep_overlap, o.moe_capacity) == ("fa3", True, False, None)
    with pytest.raises(KeyError):
        e5.PRESETS["GPT OSS 120B"]
