"""scripts/gpu_check.py (make gpu-check) on a CPU machine: it says "no GPU" and exits 0 with a
JSON report; its plan for 1 and 8 GPUs runs what fits and names what it skips; its benches are
read from the bench modules (``gpu_check_args``); every command it would run parses with the real
CLI; each bench's figures are picked by its own module (``gpu_check_figures``); its runners record
results and failures (gloo plumbing)."""

import importlib
import importlib.util
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _statuses(report, kind):
    return {k: (v["status"], v["reason"]) for k, v in report[kind].items()}


# one small JSON result per bench in the check (the keys its figures read, and some they leave),
# and the figures scripts/gpu_check.py's own dispatch picked from it before that moved into the
# bench modules (recorded from figures(name, result) at 71cad64)
SAMPLE_RESULTS = {
    "launch": dict(
        ranks=2, backend="nccl", first_call_s=1.5, repeat_call_s=0.25, repeat_to_first=0.25 / 1.5
    ),
    "collectives": dict(
        machine=dict(backend="nccl", gpu="NVIDIA H100 80GB HBM3", torch="2.5.1", cpu_count=16),
        iters=5,
        results=[
            dict(op="all-reduce", n=2, bytes=65536, seconds=2e-5, algbw=3.2e9, busbw=3.2e9),
            dict(op="all-reduce", n=2, bytes=2**26, seconds=4e-4, algbw=1.6e11, busbw=1.6e11),
            dict(op="broadcast", n=4, bytes=2**26, seconds=5e-4, algbw=1.3e11, busbw=1.3e11),
        ],
        fits=[
            dict(
                op="all-reduce", n=2, algorithm="ring", alpha=1.2e-5, bandwidth=2.5e11, error=None
            ),
            dict(
                op="broadcast",
                n=4,
                algorithm="tree",
                alpha=None,
                bandwidth=None,
                error="times do not grow with size",
            ),
        ],
        ring_vs_dist=[
            dict(n=4, bytes=65536, ring_seconds=3e-4, dist_seconds=1e-4, ratio=3.0),
            dict(n=4, bytes=2**26, ring_seconds=1.5e-3, dist_seconds=1e-3, ratio=1.5),
        ],
    ),
    "data_parallel": dict(
        ranks=4,
        backend="nccl",
        params=1_000_000,
        batch_per_rank=32,
        bucket_cap_mb=1.0,
        step_seconds=dict(naive=0.04, bucketed=0.025, ddp=0.02, compute=0.015),
        samples_per_second=dict(naive=3200.0, bucketed=5120.0, ddp=6400.0, compute=8533.3),
        naive_to_ddp=0.5,
        bucketed_to_ddp=0.8,
        ddp_to_compute=0.75,
    ),
    "tensor_parallel": dict(
        ranks=8,
        backend="nccl",
        h=512,
        b=4,
        s=128,
        dtype="float32",
        step_seconds=dict(ours=0.002, dtensor=0.003),
        tokens_per_second=dict(ours=256000.0, dtensor=170666.7),
        ours_to_dtensor=1.5,
        max_difference_float64=dict(forward=1e-15, grad_input=4e-15, grad_weight=2e-15),
    ),
    "pipeline_parallel": dict(
        schedule="1f1b",
        p=4,
        m=16,
        v=1,
        backend="nccl",
        steps=3,
        measured_bubble=0.17,
        model_bubble=0.1579,
        model_bubble_with_latency=0.165,
        hop_latency=1.2e-4,
        step_seconds=0.9,
    ),
}
RECORDED_FIGURES = {
    "launch": {
        "backend": "nccl",
        "first_call_s": 1.5,
        "repeat_call_s": 0.25,
        "repeat_to_first": 0.16666666666666666,
    },
    "collectives": {
        "backend": "nccl",
        "gpu": "NVIDIA H100 80GB HBM3",
        "max_busbw_GB_per_s": 160.0,
        "fits_per_direction": {
            "all-reduce n=2": {"alpha_s": 1.2e-05, "bandwidth_GB_per_s": 250.0},
            "broadcast n=4": None,
        },
        "ring_to_dist": [3.0, 1.5],
    },
    "data_parallel": {
        "backend": "nccl",
        "ranks": 4,
        "naive_to_ddp": 0.5,
        "bucketed_to_ddp": 0.8,
        "ddp_to_compute": 0.75,
    },
    "tensor_parallel": {
        "backend": "nccl",
        "ranks": 8,
        "ours_to_dtensor": 1.5,
        "max_difference_float64": 4e-15,
    },
    "pipeline_parallel": {
        "backend": "nccl",
        "p": 4,
        "m": 16,
        "measured_bubble": 0.17,
        "model_bubble": 0.1579,
        "model_bubble_with_latency": 0.165,
        "hop_latency": 0.00012,
    },
}


@pytest.mark.slow
def test_no_gpu_is_reported_cleanly(tmp_path):
    out = tmp_path / "report.json"
    p = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("gpu-check: no GPU")
    r = json.loads(out.read_text())
    assert r["status"] == "no GPU" and r["machine"]["gpus"] == 0
    assert set(r["notebooks"]) == {nb.stem for nb in (ROOT / "notebooks").glob("*.ipynb")}
    assert set(r["benches"]) == {
        "launch",
        "collectives",
        "data_parallel",
        "tensor_parallel",
        "pipeline_parallel",
    }
    assert set(r["tests"]) == {"gpu_paths"}
    for kind in ("benches", "tests", "notebooks"):
        assert all(
            s == "skipped" and why.startswith("no GPU") for s, why in _statuses(r, kind).values()
        )


def test_plan_for_one_and_eight_gpus_uses_the_real_commands():
    from minipar.cli import build_parser

    gc = _module()
    one = gc.check(1, 450, None, None, True, False, {})
    b = _statuses(one, "benches")
    assert b["launch"] == ("planned", "")
    assert one["benches"]["launch"]["command"].startswith("minipar bench launch --ranks 1 ")
    assert len(b) > 4  # every chapter bench needs two NCCL ranks
    for name in set(b) - {"launch"}:
        assert b[name] == ("skipped", "needs 2 GPUs (one per rank for NCCL); this node has 1")
    assert _statuses(one, "tests") == {"gpu_paths": ("planned", "")}  # fits one GPU
    assert one["tests"]["gpu_paths"]["command"].endswith("-m gpu -rfEx tests/test_gpu_paths.py")
    nb = _statuses(one, "notebooks")
    assert nb["memory_time"] == ("planned", "")
    assert nb["tensor_parallel"][0] == "skipped" and "stays on gloo" in nb["tensor_parallel"][1]
    assert nb["three_d"] == ("skipped", "needs 8 GPUs (one per rank for NCCL); this node has 1")

    eight = gc.check(8, 450, None, None, True, False, {})
    assert all(s == "planned" for s, _ in _statuses(eight, "benches").values())
    commands = {k: v["command"] for k, v in eight["benches"].items()}
    assert (
        "--ranks 2,3,4,8 " in commands["collectives"]
        and "--ring-ranks 4" in commands["collectives"]
    )
    assert (
        "--ranks 8 " in commands["data_parallel"]
        and "--ranks 8 " in commands["tensor_parallel"]
        and "--ranks 4 " in commands["pipeline_parallel"]
    )
    assert _statuses(eight, "notebooks")["three_d"] == ("planned", "")
    parser = build_parser()
    for plan in (gc.bench_plan(1), gc.bench_plan(3), gc.bench_plan(8)):
        for item in plan:
            args = parser.parse_args(item["args"])  # every flag exists, every value parses
            assert args.json and getattr(args, "backend", "nccl") in ("nccl", "auto"), item


def test_the_bench_plan_is_read_from_the_bench_modules(monkeypatch):
    """Every bench module says whether and how it runs in the check; the plan holds exactly those
    that give arguments, the launcher's first, each with its module's GPU_CHECK_MIN_GPUS. A
    planted module that gives arguments joins the plan (with the GPUs capped at MAX_RANKS); one
    that returns None does not."""
    from minipar.bench.cli import BENCH_MODULES

    gc = _module()
    modules = {m.rsplit(".", 1)[1]: importlib.import_module(m) for m in BENCH_MODULES}
    assert all(callable(getattr(m, "gpu_check_args", None)) for m in modules.values())
    for gpus in (0, 1, 3, 8, 12):
        plan = gc.bench_plan(gpus)
        n = min(gpus, gc.MAX_RANKS)
        names = [item["name"] for item in plan]
        assert names[0] == "launch" and len(set(names)) == len(names), names
        assert set(names) == {k for k, m in modules.items() if m.gpu_check_args(n) is not None}
        for item in plan:
            assert item["args"][:2] == ["bench", item["name"]], item
            assert item["args"] == modules[item["name"]].gpu_check_args(n)
            assert item["min_gpus"] == modules[item["name"]].GPU_CHECK_MIN_GPUS >= 1, item

    before = gc.bench_plan(12)
    asked = []
    runs = types.ModuleType("minipar.bench.planted_runs")
    runs.GPU_CHECK_MIN_GPUS = 3
    runs.gpu_check_args = lambda g: asked.append(g) or ["bench", "planted_runs", "--ranks", str(g)]
    stays_out = types.ModuleType("minipar.bench.planted_stays_out")
    stays_out.gpu_check_args = lambda g: None  # and no GPU_CHECK_MIN_GPUS: never read
    for m in (runs, stays_out):
        monkeypatch.setitem(sys.modules, m.__name__, m)
    monkeypatch.setattr(gc, "BENCH_MODULES", [*BENCH_MODULES, runs.__name__, stays_out.__name__])
    planted = gc.bench_plan(12)
    assert planted[:-1] == before
    assert planted[-1] == dict(
        name="planted_runs",
        module="minipar.bench.planted_runs",
        min_gpus=3,
        args=["bench", "planted_runs", "--ranks", "8"],
    )
    assert asked == [8] and "planted_stays_out" not in [item["name"] for item in planted]


def test_each_bench_module_picks_its_own_figures():
    """Every bench in the check has a sample result here, and its module's gpu_check_figures
    gives, through gpu_check's figures, exactly what the script's dispatch gave before it moved
    into the modules; the modules that never run in the check define no figures. Each sample's
    figures differ from every other's, so a dispatch that read one bench's figures with another
    module (or answered {}) fails here."""
    from minipar.bench.cli import BENCH_MODULES

    gc = _module()
    plan = {item["name"]: item for item in gc.bench_plan(gc.MAX_RANKS)}
    assert set(plan) == set(SAMPLE_RESULTS) == set(RECORDED_FIGURES)
    for name in BENCH_MODULES:
        mod = importlib.import_module(name)
        runs = any(mod.gpu_check_args(g) is not None for g in range(gc.MAX_RANKS + 1))
        assert callable(getattr(mod, "gpu_check_figures", None)) == runs, name
    for name, item in plan.items():
        assert item["module"] == f"minipar.bench.{name}", item
        result = json.loads(json.dumps(SAMPLE_RESULTS[name]))  # as run_bench reads it
        got = gc.figures(item, result)
        assert got == RECORDED_FIGURES[name], name
        assert list(got) == list(RECORDED_FIGURES[name]), name  # the report's key order too
        assert result == SAMPLE_RESULTS[name], name  # the result is left as it was
    values = [json.dumps(f, sort_keys=True) for f in RECORDED_FIGURES.values()]
    assert len(set(values)) == len(values) and "{}" not in values


def test_run_bench_records_the_figures_of_the_items_module(monkeypatch):
    """run_bench hands the JSON a bench printed to the gpu_check_figures of the plan item's own
    module (a planted one here, which no name-based dispatch knows), and records both."""
    gc = _module()
    planted = types.ModuleType("minipar.bench.planted_figures")
    seen = []
    planted.gpu_check_figures = lambda r: seen.append(r) or {"doubled": 2 * r["x"]}
    monkeypatch.setitem(sys.modules, planted.__name__, planted)
    ran = []

    def fake_run(cmd, **kw):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout='{"x": 21, "backend": "nccl"}', stderr="")

    monkeypatch.setattr(gc.subprocess, "run", fake_run)
    item = dict(name="launch", module=planted.__name__, min_gpus=1, args=["bench", "launch"])
    got = gc.run_bench(item, 60)
    assert ran == [[sys.executable, "-m", "minipar.cli", "bench", "launch"]]
    assert got["status"] == "ran" and got["figures"] == {"doubled": 42}, got
    assert got["result"] == seen[0] == {"x": 21, "backend": "nccl"}
    # the same item with the launcher's module: its figures, not the planted one's
    monkeypatch.setattr(
        gc.subprocess,
        "run",
        lambda cmd, **kw: subprocess.CompletedProcess(
            cmd, 0, stdout=json.dumps(SAMPLE_RESULTS["launch"]), stderr=""
        ),
    )
    got = gc.run_bench(dict(item, module="minipar.bench.launch"), 60)
    assert got["figures"] == RECORDED_FIGURES["launch"] and len(seen) == 1


@pytest.mark.slow
def test_runners_record_results_and_failures_on_gloo(tmp_path):
    """--cpu-plumbing runs the launch benchmark on gloo through the same runner as on GPUs."""
    out = tmp_path / "report.json"
    p = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--cpu-plumbing",
            "--only",
            "bench:launch",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(out.read_text())
    launch = r["benches"]["launch"]
    assert launch["status"] == "ran" and launch["figures"]["backend"] == "gloo"
    assert launch["figures"]["repeat_call_s"] == launch["result"]["repeat_call_s"] > 0
    assert launch["figures"]["repeat_to_first"] == launch["result"]["repeat_to_first"]
    pp = r["benches"]["pipeline_parallel"]  # not run: NCCL replaced by gloo
    assert pp["status"] == "skipped" and pp["reason"] == "not selected by --only"
    assert "--backend gloo" in pp["command"] and "nccl" not in pp["command"]
    assert "1 ran, 0 failed, 13 skipped" in p.stdout
    # a notebook: backends announced by the launcher are collected; an error names its cell
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "print('minipar.runtime.launch: backend=gloo (0 GPUs < 2 ranks)')"
            ),
            nbformat.v4.new_code_cell("raise ValueError('heads (12) must be divisible by t (5)')"),
        ]
    )
    path = tmp_path / "tiny.ipynb"
    nbformat.write(nb, path)
    got = _module().run_notebook(str(path), 120)
    assert got["status"] == "failed" and got["backends_seen"] == ["gloo"]
    assert got["reason"] == "code cell 1: ValueError: heads (12) must be divisible by t (5)"


@pytest.mark.slow
def test_test_runner_records_the_summary_and_the_failing_test(tmp_path, monkeypatch):
    """The pytest item: its closing line on success; the first FAILED line as the reason."""
    gc = _module()
    # the child pytest loads no plugin from entry points (nbval & co.: ~1.8 CPU-s each run)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    good, bad = tmp_path / "test_good.py", tmp_path / "test_bad.py"
    good.write_text("def test_ok():\n    assert True\n")
    bad.write_text("def test_ok():\n    pass\n\n\ndef test_broken():\n    assert 1 == 2\n")
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfEx"]
    ran = gc.run_tests(dict(args=[*args, str(good)]), 120)
    assert ran["status"] == "ran" and ran["summary"].startswith("1 passed"), ran
    failed = gc.run_tests(dict(args=[*args, str(bad)]), 120)
    assert failed["status"] == "failed" and failed["summary"].startswith("1 failed, 1 passed")
    assert failed["reason"].startswith("FAILED") and "test_broken" in failed["reason"], failed


def test_a_base_install_without_nbformat_skips_notebooks_with_the_reason(monkeypatch, tmp_path):
    """On a GPU node whose Python has torch but not the [dev] extra, each notebook item is
    'skipped: needs nbformat ...' instead of a traceback that ends the whole report."""
    mod = _module()
    monkeypatch.setitem(sys.modules, "nbformat", None)  # `import nbformat` raises ImportError
    r = mod.run_notebook(str(tmp_path / "any.ipynb"), 60)
    assert r["status"] == "skipped" and r["reason"].startswith("needs nbformat"), r
    # negative control: with nbformat importable the same call reads the (missing) notebook
    monkeypatch.setitem(sys.modules, "nbformat", nbformat)
    with pytest.raises(FileNotFoundError):
        mod.run_notebook(str(tmp_path / "any.ipynb"), 60)
