"""`make gpu-check`: prove the course's GPU path on one node, in one step, with a JSON report.

    python scripts/gpu_check.py [--out gpu-check.json] [--budget 450] [--only bench:launch,...]

On a node with GPUs it runs, within ``--budget`` seconds (default 450, so the whole check stays
under 8 minutes with start-up):

* ``minipar bench`` for launch, collectives, data, tensor and pipeline parallelism on NCCL
  (one GPU per rank; as many ranks as the node has GPUs, up to 8): each bench module's
  ``gpu_check_args`` gives its arguments, or None where it stays out of the check and why, and
  its ``gpu_check_figures`` picks the report's ``figures`` from the run's JSON result
  (:mod:`minipar.bench.cli`: the modules, one per chapter with a bench, and the launcher's);
* the GPU tests of ``tests/test_gpu_paths.py`` (``pytest -m gpu``, ~35 s on one H200): on
  min(GPUs, 2) NCCL ranks, our tensor parallelism against DTensor and one process, PyTorch's
  pipelining against one process, our ring all-reduce against ``dist.all_reduce``, the timed
  pipeline bench. They need one GPU, so a 1-GPU workstation checks the device placement of
  these paths too (and with 2 GPUs their point-to-point messages);
* every chapter notebook where the chapter switches to NCCL or to the GPU (``Chapter.gpu`` in
  :mod:`minipar.chapters`: which ones and why); the others stay on gloo on purpose and are
  listed as skipped with the chapter's reason. Each notebook run records the backends its
  launches announced.

An item that needs more GPUs than the node has (NCCL takes one GPU per rank) is skipped with
that reason, so a 1-GPU workstation runs what fits and says what it skipped. Without any GPU
the script says "no GPU", writes a report in which every item is skipped for that reason and
exits 0. Exit status 1 means an item failed (its reason is in the report).

The report: ``{"machine": ..., "status": "ok" | "failures" | "no GPU", "benches": {name:
{"status": "ran" | "failed" | "skipped", "reason", "seconds", "command", "figures", "result"}},
"tests": {name: {"status", "reason", "seconds", "command", "summary"}},
"notebooks": {slug: {"status", "reason", "seconds", "backends_seen"}}}``, rewritten after each
item so an interrupted check still leaves what it learnt.

``--dry-run [--assume-gpus N]`` prints the plan without running anything; ``--cpu-plumbing``
runs the selected items on gloo without a GPU (to test this script on a CPU machine).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

from minipar.bench.cli import BENCH_MODULES
from minipar.chapters import CHAPTERS
from minipar.jsonio import dumps
from minipar.runtime.device import gpu_count

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
MAX_RANKS = 8  # the GPUs the benches may use: one node's, at most 8
LAUNCH = "minipar.bench.launch"

# slug -> (GPUs its NCCL/GPU part needs, or None if the chapter stays on gloo; why): the registry's
NOTEBOOKS = {c.slug: c.gpu for c in CHAPTERS if c.gpu is not None}
UNCLASSIFIED = (
    2,
    "not classified in minipar.chapters (Chapter.gpu): run, and report the "
    "backends its launches chose",
)
# pytest runs; min_gpus 1: the tests use min(GPUs, 2) ranks
TESTS = [
    dict(
        name="gpu_paths",
        min_gpus=1,
        args=[
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "gpu",
            "-rfEx",
            "tests/test_gpu_paths.py",
        ],
    )
]
KINDS = ("benches", "tests", "notebooks")
BENCH_TIMEOUT = 240.0
NOTEBOOK_TIMEOUT = 300.0


# ----------------------------------------------------------------------------- the plan
def bench_plan(gpus: int) -> list[dict]:
    """One entry per benchmark in the check: the ``minipar`` arguments and the GPUs they need,
    read from each module of :data:`minipar.bench.cli.BENCH_MODULES` (``gpu_check_args`` and
    ``GPU_CHECK_MIN_GPUS``; a module whose ``gpu_check_args`` returns None is left out), and
    the module's name (:func:`figures` asks it for the run's figures). The launcher's bench
    comes first: the quickest item, and the one that shows whether NCCL ranks start at all, it
    runs before the chapters' benches spend the budget."""
    n = min(gpus, MAX_RANKS)
    plan = []
    for name in sorted(BENCH_MODULES, key=lambda m: m != LAUNCH):  # stable: chapter order
        mod = importlib.import_module(name)
        args = mod.gpu_check_args(n)
        if args is not None:
            short = name.rsplit(".", 1)[1]
            plan.append(dict(name=short, module=name, min_gpus=mod.GPU_CHECK_MIN_GPUS, args=args))
    return plan


def notebook_plan() -> list[dict]:
    out = []
    for path in sorted(NOTEBOOK_DIR.glob("*.ipynb")):
        need, why = NOTEBOOKS.get(path.stem, UNCLASSIFIED)
        out.append(dict(name=path.stem, path=str(path), min_gpus=need, why=why))
    return out


def decide(item: dict, gpus: int) -> str | None:
    """Why ``item`` is skipped on a node with ``gpus`` GPUs, or None if it runs."""
    if gpus == 0:
        return "no GPU (torch.cuda.is_available() is False)"
    if item["min_gpus"] is None:
        return item["why"]
    if gpus < item["min_gpus"]:
        return f"needs {item['min_gpus']} GPUs (one per rank for NCCL); this node has {gpus}"
    return None


# ----------------------------------------------------------------------------- running
def _reason(stderr: str, rc: int) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.search(r"Error|error:|raised|died", ln)]
    return (errors or lines or [f"exit status {rc}, no output"])[-1][:400]


def figures(item: dict, result: dict) -> dict:
    """The numbers a reader compares across machines (ratios and fitted link figures): picked
    from the bench's JSON ``result`` by the ``gpu_check_figures`` of the plan item's module."""
    return importlib.import_module(item["module"]).gpu_check_figures(result)


def run_bench(item: dict, timeout: float) -> dict:
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "minipar.cli", *item["args"]]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return dict(
            status="failed",
            reason=f"did not finish within {timeout:.0f} s",
            seconds=time.monotonic() - t0,
        )
    out = dict(seconds=time.monotonic() - t0)
    if p.returncode != 0:
        return dict(out, status="failed", reason=_reason(p.stderr, p.returncode))
    try:
        result = json.loads(p.stdout)
    except json.JSONDecodeError as e:
        return dict(out, status="failed", reason=f"stdout is not one JSON object: {e}")
    return dict(out, status="ran", reason="", figures=figures(item, result), result=result)


def run_tests(item: dict, timeout: float) -> dict:
    """``python -m pytest ...`` in the repository; ``summary``: pytest's closing line; a failure's
    reason is the first FAILED/ERROR line of the short summary."""
    t0 = time.monotonic()
    cmd = [sys.executable, *item["args"]]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return dict(
            status="failed",
            reason=f"did not finish within {timeout:.0f} s",
            seconds=time.monotonic() - t0,
        )
    lines = [ln.strip() for ln in p.stdout.splitlines() if ln.strip()]
    summary = next(
        (
            ln.strip("= ")
            for ln in reversed(lines)
            if re.search(r"\d+ (passed|failed|skipped|error|xfailed|deselected)", ln)
        ),
        "",
    )
    out = dict(seconds=time.monotonic() - t0, summary=summary)
    if p.returncode != 0:
        bad = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))]
        return dict(
            out,
            status="failed",
            reason=(bad or [summary or _reason(p.stderr, p.returncode)])[0][:400],
        )
    return dict(out, status="ran", reason="")


def run_notebook(path: str, timeout: float) -> dict:
    """Execute a notebook in a fresh kernel (cwd: its folder); the backends its launches
    announced ("minipar.runtime.launch: backend=nccl (...)") are collected from its outputs."""
    try:  # the [dev] extra; a GPU node's base install may lack them
        import nbformat  # noqa: PLC0415 (lazy: dev extra)
        from nbclient import NotebookClient  # noqa: PLC0415 (lazy: dev extra)
        from nbclient.exceptions import (  # noqa: PLC0415 (lazy: dev extra)
            CellExecutionError,
            CellTimeoutError,
            DeadKernelError,
        )
    except ImportError as e:
        return dict(
            seconds=0.0,
            status="skipped",
            reason=f"needs {e.name or 'nbformat and nbclient'} (pip install -e '.[dev]')",
            backends_seen=[],
        )

    t0 = time.monotonic()
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=max(1, int(timeout)),
        kernel_name="python3",
        resources={"metadata": {"path": str(Path(path).parent)}},
    )
    status, reason = "ran", ""
    try:
        client.execute()
    except CellExecutionError as e:
        ename = getattr(e, "ename", "") or "error"
        evalue = (getattr(e, "evalue", "") or str(e).strip().splitlines()[-1])[:300]
        cell = next(
            (
                i
                for i, c in enumerate(nb.cells)
                if c.get("cell_type") == "code"
                and any(o.get("output_type") == "error" for o in c.get("outputs", []))
            ),
            None,
        )
        status, reason = "failed", f"code cell {cell}: {ename}: {evalue}"
    except CellTimeoutError:
        status, reason = "failed", f"a cell did not finish within {timeout:.0f} s"
    except DeadKernelError as e:
        status, reason = "failed", f"the kernel died: {e}"
    seen = set()
    for c in nb.cells:
        for o in c.get("outputs", []):
            seen.update(re.findall(r"backend=(nccl|gloo)", o.get("text", "") or ""))
    return dict(
        status=status, reason=reason, seconds=time.monotonic() - t0, backends_seen=sorted(seen)
    )


# ----------------------------------------------------------------------------- the check
def machine() -> dict:
    import torch  # noqa: PLC0415 (lazy: torch)

    gpus = gpu_count()
    return dict(
        gpus=gpus,
        gpu_names=[torch.cuda.get_device_name(i) for i in range(gpus)],
        torch=torch.__version__,
        cuda=torch.version.cuda,
        nccl=".".join(map(str, torch.cuda.nccl.version())) if gpus else None,
        platform=platform.platform(),
        cpus=os.cpu_count(),
    )


def check(
    gpus: int,
    budget: float,
    only: set[str] | None,
    out: Path | None,
    dry_run: bool,
    plumbing: bool,
    info: dict,
) -> dict:
    report = dict(
        machine=info, budget_s=budget, status="running", benches={}, tests={}, notebooks={}
    )
    t0 = time.monotonic()

    def save():
        report["elapsed_s"] = time.monotonic() - t0
        if out is not None:
            out.write_text(dumps(report, indent=1))  # strict JSON: no Infinity

    items = (
        [("benches", b) for b in bench_plan(gpus)]
        + [("tests", t) for t in TESTS]
        + [("notebooks", nb) for nb in notebook_plan()]
    )
    prefix = {"benches": "bench:", "tests": "tests:", "notebooks": "notebook:"}
    for kind, item in items:
        key = prefix[kind] + item["name"]
        entry = report[kind].setdefault(item["name"], {})
        if kind == "benches":
            args = [("gloo" if plumbing and a == "nccl" else a) for a in item["args"]]
            entry["command"] = "minipar " + " ".join(args)
            item = dict(item, args=args)
        elif kind == "tests":
            entry["command"] = "python " + " ".join(item["args"])
        skip = (
            "not selected by --only"
            if only is not None and key not in only
            else None
            if plumbing
            else decide(item, gpus)
        )
        left = budget - (time.monotonic() - t0)
        if skip is None and left < 10:
            skip = f"the time budget ({budget:g} s) is spent"
        if skip is not None:
            entry.update(status="skipped", reason=skip)
        elif dry_run:
            entry.update(status="planned", reason="")
        else:
            print(f"gpu-check: {key} ...", file=sys.stderr, flush=True)
            try:  # one item's crash is that item's failure, never the whole report's
                entry.update(
                    run_bench(item, min(BENCH_TIMEOUT, left))
                    if kind == "benches"
                    else run_tests(item, min(BENCH_TIMEOUT, left))
                    if kind == "tests"
                    else run_notebook(item["path"], min(NOTEBOOK_TIMEOUT, left))
                )
            except Exception as e:  # reported in the item; the run goes on
                entry.update(seconds=0.0, status="failed", reason=f"{type(e).__name__}: {e}"[:400])
            print(
                f"gpu-check: {key} {entry['status']} in {entry['seconds']:.0f} s {entry['reason']}",
                file=sys.stderr,
                flush=True,
            )
        save()
    states = [e["status"] for k in KINDS for e in report[k].values()]
    report["status"] = (
        "no GPU"
        if gpus == 0 and not plumbing
        else "planned"
        if dry_run
        else "failures"
        if "failed" in states
        else "ok"
    )
    save()
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu-check.json", help="JSON report path")
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for all items")
    ap.add_argument(
        "--only", help="comma list of items, e.g. bench:launch,tests:gpu_paths,notebook:three_d"
    )
    ap.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    ap.add_argument("--assume-gpus", type=int, help="plan for this many GPUs (with --dry-run)")
    ap.add_argument(
        "--cpu-plumbing",
        action="store_true",
        help="run the selected items on gloo even without a GPU (tests this script)",
    )
    a = ap.parse_args(argv)
    if a.assume_gpus is not None and not a.dry_run:
        ap.error("--assume-gpus only plans (add --dry-run): real runs use the GPUs present")
    info = machine()
    gpus = a.assume_gpus if a.assume_gpus is not None else info["gpus"]
    if a.cpu_plumbing:
        gpus = max(gpus, 2)
    only = set(a.only.split(",")) if a.only else None
    out = Path(a.out) if a.out else None
    report = check(gpus, a.budget, only, out, a.dry_run, a.cpu_plumbing, info)
    if report["status"] == "no GPU":
        print(
            f"gpu-check: no GPU (torch.cuda.is_available() is False): nothing runs on NCCL "
            f"here; every item is skipped for that reason; report: {a.out}"
        )
        return 0
    if a.dry_run:
        print(dumps(report, indent=1))
        return 0
    counts = {
        s: sum(e["status"] == s for k in KINDS for e in report[k].values())
        for s in ("ran", "failed", "skipped")
    }
    print(
        f"gpu-check: {info['gpus']} GPUs; {counts['ran']} ran, {counts['failed']} failed, "
        f"{counts['skipped']} skipped in {report['elapsed_s']:.0f} s; report: {a.out}"
    )
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
