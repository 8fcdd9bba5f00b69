"""The frozen planner on modern published rows (minipar.cost.validation.modern, the rows of
measurements/published_modern.json): each priced row keeps its error and the constant-MFU
baseline's; every other row says why it is not priced. What the numbers say is recorded, not
hidden: on torchtitan's 500 W HBM2e H100 the H100-SXM preset is about a third too fast."""

from minipar.cost.validation import modern as mv


def test_every_row_is_priced_or_says_why_not():
    s = mv.summary()
    rows = mv.load()["rows"]
    assert s["n"] + len(s["not_evaluated"]) == len(rows) == 80
    assert set(s["not_evaluated"].values()) <= {
        "not BF16 (FP8 or unstated): the frozen model has no FP8 recipe",
        "torch.compile: the frozen model prices eager kernels one by one",
        "no preset for this shape",
        "no throughput or sequence length published",
    }


def test_the_frozen_model_on_torchtitan_llama3_8b():
    s = mv.summary()
    assert [r["id"] for r in s["rows"]] == ["tt2412-1-8b-8gpu-fsdp", "tt2412-3-8b-128gpu-fsdp"]
    for r in s["rows"]:
        # the model prices a 700 W HBM3 H100 (3.35 TB/s); these ran at 500 W on HBM2e (2.4 TB/s)
        assert -45 < r["error"] < -25, r
        assert abs(r["baseline_error"]) < abs(r["error"])  # the constant baseline does better
        assert abs(r["predicted_gib"] / r["measured_gib"] - 1) < 0.10  # memory within 10 %
    assert s["within15"] == 0
    # the 500 W HBM2e preset, added after these rows were read: closer, still too fast
    assert all(-30 < r["error"] < -15 for r in s["post_hoc"]) and len(s["post_hoc"]) == 2
