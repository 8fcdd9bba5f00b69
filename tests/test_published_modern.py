"""The schema of measurements/published_modern.json: modern published training throughputs
(torchtitan's benchmarks; NVIDIA's Megatron-Bridge and NeMo performance summaries), kept with
their inputs as published so the planner can be checked on them once its form is frozen.

This file only checks the data: every row names its source, carries every layout field (null
when the source does not give it), at least one measured quantity with its unit, and no row is
repeated. It does not price any row."""

import json
from collections import Counter
from importlib.resources import files

import pytest

DATA = json.loads(
    files("minipar.cost.validation").joinpath("measurements/published_modern.json").read_text()
)
ROWS = DATA["rows"]
LAYOUT = DATA["layout_fields"]
INTEGER_FIELDS = (
    "gpus",
    "seq_len",
    "global_batch",
    "micro_batch",
    "tp",
    "pp",
    "cp",
    "ep",
    "vp",
    "dp",
)
REQUIRED_LAYOUT = (
    "gpu", "gpus", "precision", "seq_len", "global_batch", "micro_batch",
    "tp", "pp", "cp", "ep", "vp", "dp", "fsdp", "recompute", "compile",
)  # fmt: skip


def test_layout_fields_are_the_documented_ones():
    assert set(REQUIRED_LAYOUT) <= set(LAYOUT)
    assert set(LAYOUT) <= set(DATA["field_meanings"]) | {"gpu"}


def test_enough_rows_from_each_publisher():
    assert len(ROWS) >= 12
    by_repo = Counter(DATA["sources"][r["source"]]["repo"] for r in ROWS)
    assert by_repo["pytorch/torchtitan"] >= 4, by_repo
    nvidia = by_repo["NVIDIA-NeMo/Megatron-Bridge"] + by_repo["NVIDIA/NeMo"]
    assert nvidia >= 4, by_repo


@pytest.mark.parametrize("key", sorted(DATA["sources"]))
def test_every_source_is_pinned(key):
    source = DATA["sources"][key]
    for field in ("title", "url", "repo", "path", "file_commit", "read_at_commit", "hardware"):
        assert source.get(field), f"source {key} lacks {field}"
    for field in ("file_commit", "read_at_commit"):
        commit = source[field]
        assert len(commit) == 40 and set(commit) <= set("0123456789abcdef"), (key, field, commit)


def test_every_source_is_used():
    assert {r["source"] for r in ROWS} == set(DATA["sources"])


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_row_schema(row):
    assert row["source"] in DATA["sources"], row["source"]
    assert row["where"] and row["model"]
    missing = [f for f in LAYOUT if f not in row]
    assert not missing, f"{row['id']} lacks layout fields {missing}"
    assert row["gpus"] and row["gpu"], "the GPU type and count are always published"
    for f in INTEGER_FIELDS:
        assert row[f] is None or (isinstance(row[f], int) and row[f] >= 1), (f, row[f])
    assert row["fsdp"] is None or (isinstance(row["fsdp"], int) and row["fsdp"] >= 0)
    assert row["recompute"] in (None, "none", "selective", "full")
    assert row["compile"] in (None, True, False)
    assert row["model_key"] is None or row["model_key"] in DATA["models"]

    assert row["measured"], f"{row['id']} has no measured quantity"
    for m in row["measured"]:
        assert m["quantity"] and m["unit"] and m["published_as"], m
        assert isinstance(m["value"], (int, float)) and m["value"] > 0, m

    # A value computed from the source's numbers says how; one read from the configuration at
    # the source's commit stays out of the layout field.
    for f, how in row["derived"].items():
        assert f in row and row[f] is not None and how, (f, how)
    for f, d in row["config_defaults"].items():
        assert d["from"] and d["value"] is not None, (f, d)
        assert row.get(f) is None, f"{row['id']}: {f} is both published and a config default"


LAID_OUT = [r for r in ROWS if None not in (r["tp"], r["pp"], r["cp"], r["dp"])]


def test_most_rows_publish_every_degree():
    assert len(LAID_OUT) >= len(ROWS) - 2


@pytest.mark.parametrize("row", LAID_OUT, ids=[r["id"] for r in LAID_OUT])
def test_parallel_degrees_multiply_to_the_gpu_count(row):
    tp, pp, cp, dp = (row[f] for f in ("tp", "pp", "cp", "dp"))
    assert tp * pp * cp * dp == row["gpus"], row["id"]
    if row["global_batch"] and row["micro_batch"]:
        assert row["global_batch"] % (row["micro_batch"] * dp) == 0, row["id"]


def test_no_duplicate_rows():
    ids = [r["id"] for r in ROWS]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    places = [(r["source"], r["where"]) for r in ROWS]
    assert len(places) == len(set(places)), [p for p, n in Counter(places).items() if n > 1]
    content = [
        (
            r["source"],
            r.get("release"),
            r["model"],
            r.get("async_tp"),
            r.get("pipeline_schedule"),
            r.get("precision_detail"),
            tuple(r[f] for f in LAYOUT),
            tuple((m["quantity"], m["value"]) for m in r["measured"]),
        )
        for r in ROWS
    ]
    assert len(content) == len(set(content)), [c for c, n in Counter(content).items() if n > 1]


@pytest.mark.parametrize("key", sorted(DATA["models"]))
def test_model_architectures_are_sourced(key):
    model = DATA["models"][key]
    for f in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab"):
        assert isinstance(model[f], int) and model[f] > 0, (key, f)
    assert model["hidden"] % model["heads"] == 0 and model["heads"] % model["kv_heads"] == 0
    assert model["source"]["repo"] and len(model["source"]["commit"]) == 40
