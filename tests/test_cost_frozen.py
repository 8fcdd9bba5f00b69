"""The planner's form and constants as frozen (minipar/cost/frozen_model.json) before any modern
published table was evaluated: the term table, every GPU preset's constants and six probe plans.
A model change fails here until the file is regenerated, in a commit of its own."""

import dataclasses
import json
from pathlib import Path

import pytest

from minipar.cost import three_d as planner
from minipar.cost.hardware import GPUS
from minipar.cost.term_table import TERMS

FROZEN = json.loads((Path(planner.__file__).resolve().parent / "frozen_model.json").read_text())


def test_terms_and_gpu_constants_are_the_frozen_ones():
    assert [t.name for t in TERMS] == FROZEN["terms"]
    now = json.loads(json.dumps({k: dataclasses.asdict(g) for k, g in GPUS.items()}))
    assert now == FROZEN["gpus"]


@pytest.mark.parametrize("probe", FROZEN["probes"], ids=lambda p: f"{p['model']}-{p['gpus']}")
def test_probe_plans_are_the_frozen_ones(probe):
    cl = planner.cluster(probe["gpus"], 8, probe["gpu"])
    c = planner.evaluate(planner.MODELS[probe["model"]], cl, planner.Layout(**probe["layout"]))
    assert c.step_seconds == pytest.approx(probe["step_seconds"], rel=1e-9)
    assert c.bytes_per_gpu == pytest.approx(probe["bytes_per_gpu"], rel=1e-9)
