"""The planner as frozen for experiment 4 (minipar/cost/planner/frozen_experiment4.json), before
any of its rows was read: the term table, every GPU and link preset, every module constant of
the cost model, and probe plans with every term of their breakdown and one search's first
choice. The file is never rewritten: a change to a formula, a constant, a preset or a default
after the freeze fails here, and makes a new model for a new experiment."""

import json

import pytest

from minipar.cost.planner import frozen_experiment4 as frozen4
from minipar.cost.planner.term_table import TERMS

FROZEN = json.loads(frozen4.PATH.read_text())


def test_terms_presets_and_constants_are_the_frozen_ones():
    assert [t.name for t in TERMS] == FROZEN["terms"]
    assert frozen4.frozen.gpus_now() == FROZEN["gpus"]
    assert frozen4.frozen.links_now() == FROZEN["links"]
    assert frozen4.constants_now() == FROZEN["constants"]


def test_the_snapshot_holds_the_models_constants():
    """The constants are found, not listed by hand: the kernel model's FP8 and attention rates
    and the planner's memory reserve are among them."""
    c = FROZEN["constants"]
    assert {"FP8_GEMM_EFFICIENCY", "FA3_EFFICIENCY", "COMPILED_TRAFFIC"} <= set(c["compute"])
    assert "RESERVE" in c["layout"] and "ALLOCATOR_MARGIN" in c["layout"]


@pytest.mark.parametrize(
    "p", FROZEN["probes"], ids=lambda p: f"{p['model']}-{p['gpu']}-{p['gpus']}"
)
def test_probe_plans_are_the_frozen_ones(p):
    now = frozen4.probe(p)
    assert now["step_seconds"] == pytest.approx(p["step_seconds"], rel=1e-9)
    assert now["bytes_per_gpu"] == pytest.approx(p["bytes_per_gpu"], rel=1e-9)
    assert now["mfu"] == pytest.approx(p["mfu"], rel=1e-9)
    assert now["fits"] == p["fits"]
    assert now["terms"].keys() == p["terms"].keys()
    for k, v in p["terms"].items():
        assert now["terms"][k] == pytest.approx(v, rel=1e-9, abs=1e-15), k
    assert now.get("chosen") == p.get("chosen")
