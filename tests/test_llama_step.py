"""``scripts/llama_step.py``: the Llama-style step it times is the shape the planner prices (the
same parameter count, row by row), it runs end to end on the CPU (tiny shapes, a plumbing
check) and, on a GPU, it sets each measured step beside the plan."""

import importlib.util
import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "llama_step.py"


def _script():
    spec = importlib.util.spec_from_file_location("llama_step", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_timed_model_is_the_shape_the_planner_prices():
    """Every row's torch model (built on the meta device: no memory) has the planner's
    parameter count for Llama's recipe; GPT's recipe at the same sizes does not (a control)."""
    ls = _script()
    for row in ls.GPU_ROWS + ls.CPU_ROWS:
        name, L, h, a, kv, f, s, *_ = row
        with torch.device("meta"):
            n = sum(p.numel() for p in ls.Llama(L, h, a, kv, f, s).parameters())
        shape = ls.shape_of(row)
        assert n == shape.params, (name, n, shape.params)
        gpt = replace(shape, norm="layernorm", bias=True, positions="learned", tied=True)
        assert gpt.params != n, name


@pytest.mark.slow
def test_it_runs_on_the_cpu_and_writes_each_row_with_its_plan(tmp_path):
    """`python scripts/llama_step.py --device cpu`, as the README names the script."""
    ls = _script()
    out = tmp_path / "steps.json"
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["name"] for r in rows] == [r[0] for r in ls.CPU_ROWS]
    assert len({r["b"] * r["s"] for r in rows}) >= 2 and len({r["h"] for r in rows}) == 2
    for r in rows:
        assert r["measured_s"] > 0 and r["predicted_s"] > 0 and r["fits"]
        assert math.isclose(r["time_error"], 100 * (r["predicted_s"] / r["measured_s"] - 1))
    assert run.stdout.count("planned") == len(rows)


@pytest.mark.gpu
def test_llama_steps_on_this_gpu(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    ls = _script()
    out = tmp_path / "steps.json"
    assert ls.main(["--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert len(rows) == len(ls.GPU_ROWS)
    assert all(r["peak_bytes"] > 0 and r["memory_error"] is not None for r in rows)
