"""The planner as frozen for experiment 4 (minipar/cost/planner/frozen_experiment4.json), before
any of its rows was read: the term table, every GPU and link preset, every module constant of
the cost model, and probe plans with every term of their breakdown and one search's first
choice. The freeze has ended (the planner changed after experiments 4 and 5 were evaluated, whose
results are read from their records); the file stays the record of the model they evaluated, as
it was written at the freeze commit, never rewritten."""

import hashlib
import json

from minipar.cost.planner import frozen_experiment4 as frozen4

FROZEN = json.loads(frozen4.PATH.read_text())
SHA256 = "23a965503163528b6a6cfd377dee58e56e67fc7d7ac696bf83fbc40b37121613"
"""The file's bytes at the freeze commit ``62885ed``."""


def test_the_record_is_the_file_of_the_freeze():
    assert hashlib.sha256(frozen4.PATH.read_bytes()).hexdigest() == SHA256


def test_the_snapshot_holds_the_models_constants():
    """The constants are found, not listed by hand: the kernel model's FP8 and attention rates
    and the planner's memory reserve are among them."""
    c = FROZEN["constants"]
    assert {"FP8_GEMM_EFFICIENCY", "FA3_EFFICIENCY", "COMPILED_TRAFFIC"} <= set(c["compute"])
    assert "RESERVE" in c["layout"] and "ALLOCATOR_MARGIN" in c["layout"]


def test_the_record_holds_every_probe_with_its_terms():
    """Every probe of the module's list is in the record, evaluated with its breakdown; the
    search's first choice is kept."""
    assert len(FROZEN["probes"]) >= len(frozen4.PROBES)
    for p in FROZEN["probes"]:
        assert p["step_seconds"] > 0 and p["bytes_per_gpu"] > 0 and p["terms"], p["model"]
    assert sum("chosen" in p for p in FROZEN["probes"]) == 1
