"""The planner's form and constants as frozen (minipar/cost/planner/frozen_model.json) before any modern
published table was evaluated: the term table, every GPU and link preset's constants, the
kernel constants and its probe plans.
A model change fails here until `python -m minipar.cost.planner.frozen` rewrites the file, in a commit
of its own."""

import json

import pytest

from minipar.cost.planner import frozen
from minipar.cost.planner.term_table import TERMS

FROZEN = json.loads(frozen.PATH.read_text())


def test_terms_and_gpu_constants_are_the_frozen_ones():
    assert [t.name for t in TERMS] == FROZEN["terms"]
    assert frozen.gpus_now() == FROZEN["gpus"]
    assert frozen.links_now() == FROZEN["links"]
    assert frozen.constants_now() == FROZEN["constants"]


@pytest.mark.parametrize("p", FROZEN["probes"], ids=lambda p: f"{p['model']}-{p['gpus']}")
def test_probe_plans_are_the_frozen_ones(p):
    now = frozen.probe(p)
    assert now["step_seconds"] == pytest.approx(p["step_seconds"], rel=1e-9)
    assert now["bytes_per_gpu"] == pytest.approx(p["bytes_per_gpu"], rel=1e-9)
