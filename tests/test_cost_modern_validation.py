"""The frozen planner on modern published rows (minipar.cost.modern_validation): each row keeps
its source, error and the constant-MFU baseline's error. What the numbers say is recorded, not
hidden: on torchtitan's 500 W HBM2e H100 the H100-SXM preset is about a third too fast."""

from minipar.cost import modern_validation as mv


def test_every_row_names_its_source_and_every_skip_its_reason():
    data = mv.load()
    assert all(r["source"] in data["sources"] for r in data["rows"])
    assert all(s["url"].startswith("https://") and s["title"] for s in data["sources"].values())
    assert all(x["why"] for x in data["not_evaluated"])


def test_the_frozen_model_on_torchtitan_llama3_8b():
    s = mv.summary()
    assert s["n"] == 2
    for r in s["rows"]:
        # the model prices a 700 W HBM3 H100 (3.35 TB/s); these ran at 500 W on HBM2e (2.4 TB/s)
        assert -45 < r["error"] < -25, r
        assert abs(r["baseline_error"]) < abs(r["error"])  # the constant baseline does better
    assert s["within15"] == 0
