"""Where the unit tests' CPU goes: CPU seconds per test file (or per test), counting the pytest
worker and every process it started: zygotes, ranks, Jupyter kernels, CLI runs, Chromium,
Node.js. Measure with it before cutting a test, and after.

    .venv/bin/python scripts/suite_cost.py                    # make unit's pytest command
    .venv/bin/python scripts/suite_cost.py --by test --top 20 -- -n 2 tests/test_launch.py
    .venv/bin/python scripts/suite_cost.py --by kind --by file  # by process kind, then file

Arguments after ``--`` replace ``make unit``'s, which are read from the Makefile. The exit
status is pytest's.

How it counts. A thread reads ``/proc`` every 0.2 s: each process's CPU time (user + system),
parent and command line, and when it was first seen. This file, loaded into pytest as a plugin
(``-p suite_cost``), writes when each test ran in which worker and the worker's own CPU time
over it. After the run, a process that descends from a worker is charged to the test that
worker was running when the process was first seen: a zygote to the test that started it
(later tests' ranks fork from it), a spare rank forked ahead of the next call to the test
running then. The last line compares the CPU charged with what pytest's whole process tree
used (``RUSAGE_CHILDREN``): a process that lives less than 0.2 s, or what a process spends
after its last sample, is not seen; Chromium's renderers, which leave pytest's process tree, are
charged but not in that total.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTEST = ["-m", "pytest", "-p", "no:cacheprovider"]  # the Makefile's $(PYTEST) after $(PY)
INTERVAL_S = 0.2
OUT_ENV = "MINIPAR_SUITE_COST_DIR"  # where the plugin writes each worker's tests
BETWEEN = "(between tests: collection, module fixtures' teardown)"


def unit_args(makefile: Path = ROOT / "Makefile") -> list[str]:
    """The arguments ``make unit`` gives pytest, read from its recipe (one home: the Makefile)."""
    lines = makefile.read_text().splitlines()
    recipe = lines[next(i for i, ln in enumerate(lines) if ln.startswith("unit:")) + 1]
    return recipe.split()[1:]  # after $(PYTEST)


# ----------------------------------------------------------------------------- the plugin
_rows: list[dict] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Each test's wall interval and the worker's own CPU over it (setup, call, teardown)."""
    t0, c0 = time.time(), time.process_time()
    yield
    _rows.append(
        {"test": item.nodeid, "t0": t0, "t1": time.time(), "cpu": time.process_time() - c0}
    )


def pytest_sessionfinish(session):
    folder = os.environ.get(OUT_ENV)
    xdist_controller = getattr(session.config.option, "numprocesses", None) and not hasattr(
        session.config, "workerinput"
    )  # it runs no test: its workers do
    if folder and not xdist_controller:
        with open(os.path.join(folder, f"worker-{os.getpid()}.json"), "w") as f:
            json.dump({"pid": os.getpid(), "cpu": time.process_time(), "tests": _rows}, f)


# ----------------------------------------------------------------------------- the sampler
@dataclass
class Proc:
    pid: int
    ppid: int
    first: float  # time.time() when first seen
    cpu: float  # CPU seconds (user + system) at the last sample
    cmd: str
    comm: str


class Sampler(threading.Thread):
    """Every process under /proc, every ``INTERVAL_S``, keyed by (pid, start time): a reused
    pid is another process."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen: dict[tuple[int, int], Proc] = {}
        self.done = threading.Event()
        self.tick = os.sysconf("SC_CLK_TCK")

    def run(self):
        while not self.done.wait(INTERVAL_S):
            self.snap()

    def snap(self):
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    self._read(int(name))
                except (OSError, ValueError, IndexError):  # it ended while read
                    pass

    def _read(self, pid: int):
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        comm, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :]
        fields = rest.split()  # fields 3.. of proc(5): state, ppid, ...
        key = (pid, int(fields[19]))
        cpu = (int(fields[11]) + int(fields[12])) / self.tick
        # read at every sample: a process first seen between fork and exec still shows its
        # parent's command line (a zygote then looks like the pytest worker that starts it)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        if key in self.seen:
            proc = self.seen[key]
            proc.cpu = cpu
            if cmd:  # a zombie (ended, not yet reaped) shows an empty command line
                proc.cmd, proc.comm = cmd, comm
            return
        self.seen[key] = Proc(pid, int(fields[1]), time.time(), cpu, cmd, comm)


# ----------------------------------------------------------------------------- attribution
def kind(proc: Proc, parent: Proc | None) -> str:
    """What a process is, from its command line (a rank is a fork of the zygote: same line)."""
    zygote = "minipar/runtime/_rank.py"
    if zygote in proc.cmd:
        return "rank" if parent is not None and zygote in parent.cmd else "zygote"
    if "ipykernel" in proc.cmd:
        return "kernel"
    if "chrom" in proc.comm:
        return "chromium"
    if proc.comm == "node":
        return "node"
    return "python" if "python" in proc.comm else "other"


@dataclass
class Cost:
    worker: float = 0.0  # CPU-s in the pytest worker itself
    others: float = 0.0  # CPU-s in the processes it started
    kinds: collections.Counter = field(default_factory=collections.Counter)  # kind -> count


def _worker_of(proc: Proc, by_pid: dict[int, Proc], workers) -> int | None:
    """The pid of the pytest worker ``proc`` descends from (``workers``: their pids), or None
    for a worker itself and for a process of no worker (pytest's controller, the machine's)."""
    if proc.pid in workers:
        return None
    node, hops = by_pid.get(proc.ppid), 0
    while node is not None and node.pid not in workers and hops < 64:
        node, hops = by_pid.get(node.ppid), hops + 1
    return node.pid if node is not None and node.pid in workers else None


def attribute(procs: list[Proc], workers: list[dict]) -> dict[str, Cost]:
    """test node id (or :data:`BETWEEN`) -> its :class:`Cost`. ``workers``: the plugin's
    records, one per worker process. A process that descends from no worker (pytest's
    controller, the machine's own) is not charged."""
    by_pid = {}
    for p in sorted(procs, key=lambda p: p.first):
        by_pid[p.pid] = p  # the latest process of a reused pid
    runs = {w["pid"]: w for w in workers}
    out: dict[str, Cost] = collections.defaultdict(Cost)
    for w in workers:
        for row in w["tests"]:
            out[row["test"]].worker += row["cpu"]
        out[BETWEEN].worker += w["cpu"] - sum(row["cpu"] for row in w["tests"])
    for p in procs:
        worker = _worker_of(p, by_pid, runs)
        if worker is None:
            continue
        test = next(
            (r["test"] for r in runs[worker]["tests"] if r["t0"] <= p.first <= r["t1"]),
            BETWEEN,
        )
        out[test].others += p.cpu
        out[test].kinds[kind(p, by_pid.get(p.ppid))] += 1
    return dict(out)


def command(proc: Proc, parent: Proc | None) -> str:
    """A process's kind, and for a Python process what it ran (``python -m minipar``,
    ``python script.py``): the rows of ``--by kind``."""
    k = kind(proc, parent)
    if k != "python":
        return k
    args = proc.cmd.split()[1:]
    if "-m" in args[:-1]:
        return "python -m " + args[args.index("-m") + 1]
    script = next((a for a in args if a.endswith(".py") or a == "-c"), "-c")
    return "python " + Path(script).name


def by_kind(procs: list[Proc], workers: list[dict]) -> dict[str, Cost]:
    """The same CPU as :func:`attribute`, summed by what each process was: the pytest workers
    themselves, zygotes, ranks, kernels, Chromium, each Python command."""
    by_pid = {p.pid: p for p in sorted(procs, key=lambda p: p.first)}
    runs = {w["pid"] for w in workers}
    out: dict[str, Cost] = collections.defaultdict(Cost)
    out["pytest worker"].worker = sum(w["cpu"] for w in workers)
    out["pytest worker"].kinds["pytest worker"] = len(workers)
    for p in procs:
        if _worker_of(p, by_pid, runs) is None:
            continue
        name = command(p, by_pid.get(p.ppid))
        out[name].others += p.cpu
        out[name].kinds[name] += 1
    return dict(out)


def by_file(costs: dict[str, Cost]) -> dict[str, Cost]:
    out: dict[str, Cost] = collections.defaultdict(Cost)
    for test, c in costs.items():
        f = out[test.split("::")[0]]
        f.worker, f.others = f.worker + c.worker, f.others + c.others
        f.kinds.update(c.kinds)
    return dict(out)


def table(costs: dict[str, Cost], top: int) -> list[str]:
    rows = sorted(costs.items(), key=lambda kv: -(kv[1].worker + kv[1].others))
    lines = [f"{'CPU-s':>7} {'worker':>7} {'started':>7}  {'processes started':26s}  test"]
    for name, c in rows[:top]:
        procs = ", ".join(f"{n} {k}" for k, n in c.kinds.most_common()) or "-"
        lines.append(
            f"{c.worker + c.others:7.1f} {c.worker:7.1f} {c.others:7.1f}  {procs:26s}  {name}"
        )
    return lines


# ----------------------------------------------------------------------------- the command
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--by",
        choices=("file", "test", "kind"),
        action="append",
        help="rows per test file (the default), test or process kind; repeat it for more "
        "tables from the one run",
    )
    ap.add_argument("--top", type=int, default=30, help="rows shown (default 30)")
    ap.add_argument("pytest_args", nargs="*", help="after --: pytest's arguments")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="suite-cost-") as folder:
        path = [str(ROOT / "scripts"), os.environ.get("PYTHONPATH", "")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path)), **{OUT_ENV: folder})
        sampler = Sampler()
        sampler.start()
        t0 = time.monotonic()
        code = subprocess.call(
            [sys.executable, *PYTEST, "-p", "suite_cost", *(args.pytest_args or unit_args())],
            cwd=ROOT,
            env=env,
        )
        wall = time.monotonic() - t0
        sampler.done.set()
        sampler.join()
        workers = [json.loads(p.read_text()) for p in Path(folder).glob("worker-*.json")]
    procs = list(sampler.seen.values())
    costs = attribute(procs, workers)
    tables = {"test": costs, "file": by_file(costs), "kind": by_kind(procs, workers)}
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    sampled = sum(c.worker + c.others for c in costs.values())
    print("\n\n".join("\n".join(table(tables[by], args.top)) for by in args.by or ["file"]))
    print(
        f"suite_cost: pytest exited {code} after {wall:.0f} s; {sampled:.0f} CPU-s charged to "
        f"tests, of {used.ru_utime + used.ru_stime:.0f} CPU-s its process tree used"
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
