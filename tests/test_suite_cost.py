"""scripts/suite_cost.py: each process a test started is charged to that test (the attribution
on a planted process table, with controls), and the command does so on a real run."""

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import suite_cost as sc  # noqa: E402 (scripts/ joins sys.path above)


def _proc(pid, ppid, first, cpu, cmd="python -c x", comm="python"):
    return sc.Proc(pid, ppid, first, cpu, cmd, comm)


RANK = "/repo/.venv/bin/python /repo/src/minipar/runtime/_rank.py /tmp/s 10 /tmp/f"


def test_processes_are_charged_to_the_test_their_worker_ran_when_they_appeared():
    """Worker 10 runs a (0-10 s) then b (10-20 s). Its zygote, started in a, is a's; a rank the
    zygote forks in b is b's, however deep; a kernel's child is b's; a process started between
    the tests is charged to neither; a process of no worker (pid 1's) and a rank whose
    ancestry is lost are charged to nothing."""
    workers = [
        {
            "pid": 10,
            "cpu": 7.0,
            "tests": [
                {"test": "t.py::a", "t0": 0.0, "t1": 10.0, "cpu": 2.0},
                {"test": "t.py::b", "t0": 10.0, "t1": 20.0, "cpu": 4.0},
            ],
        }
    ]
    procs = [
        _proc(10, 1, -5.0, 7.0, "python -c import sys;exec(eval(sys.stdin.readline()))"),
        _proc(11, 10, 1.0, 1.5, RANK),  # the zygote, in a
        _proc(12, 11, 12.0, 0.25, RANK),  # a rank, in b
        _proc(13, 10, 14.0, 1.0, "python -m ipykernel_launcher -f k.json"),  # a kernel, in b
        _proc(14, 13, 15.0, 0.5),  # the kernel's child, in b
        _proc(15, 10, 20.5, 0.125),  # between the tests
        _proc(16, 1, 3.0, 9.0),  # no worker's
        _proc(17, 99, 4.0, 9.0, RANK),  # its parent was never seen
    ]
    costs = sc.attribute(procs, workers)
    assert (costs["t.py::a"].worker, costs["t.py::a"].others) == (2.0, 1.5)
    assert costs["t.py::a"].kinds == {"zygote": 1}
    assert (costs["t.py::b"].worker, costs["t.py::b"].others) == (4.0, 1.75)
    assert costs["t.py::b"].kinds == {"rank": 1, "kernel": 1, "python": 1}
    assert (costs[sc.BETWEEN].worker, costs[sc.BETWEEN].others) == (1.0, 0.125)
    assert set(costs) == {"t.py::a", "t.py::b", sc.BETWEEN}
    files = sc.by_file(costs)
    assert files["t.py"].worker + files["t.py"].others == 9.25
    assert files["t.py"].kinds == {"zygote": 1, "rank": 1, "kernel": 1, "python": 1}
    assert sc.table(files, 1)[1].split()[:3] == ["9.2", "6.0", "3.2"]  # the costliest first
    kinds = sc.by_kind(procs, workers)  # the same CPU, summed by what each process was
    assert {k: c.worker + c.others for k, c in kinds.items()} == {
        "pytest worker": 7.0,
        "zygote": 1.5,
        "rank": 0.25,
        "kernel": 1.0,
        "python -c": 0.625,
    }
    assert kinds["python -c"].kinds == {"python -c": 2}
    minipar = _proc(18, 10, 1.0, 1.0, "/v/bin/python -X utf8 -m minipar plan --gpus 8")
    assert sc.command(minipar, None) == "python -m minipar"


@pytest.mark.slow
def test_the_sampler_keeps_the_command_line_a_process_execs_into():
    """A process first seen before its exec (a zygote, between the worker's fork and exec,
    shows the worker's command line) is known by the line it runs after: its children are
    then told from it (a rank from a zygote)."""
    child = subprocess.Popen(["sh", "-c", "sleep 0.5; exec sleep 5"])
    try:
        sampler = sc.Sampler()
        sampler.snap()
        time.sleep(1.5)
        sampler.snap()
        (proc,) = [p for p in sampler.seen.values() if p.pid == child.pid]
        assert proc.cmd == "sleep 5" and proc.comm == "sleep", proc
    finally:
        child.kill()
        child.wait()


def test_the_sampler_keeps_the_command_line_of_a_process_that_ended():
    """A process that has ended but is not yet reaped (a zombie: a rank between its exit and the
    zygote's next poll) shows an empty command line; the sampler keeps the one it saw, so the
    rank is still told from a zygote."""
    child = subprocess.Popen(["sleep", "0.3"])
    try:
        sampler = sc.Sampler()
        sampler.snap()
        for _ in range(300):  # it ends, and nobody waits for it: a zombie
            with open(f"/proc/{child.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.1)
        with open(f"/proc/{child.pid}/cmdline") as f:
            assert f.read() == ""  # the control: what the sampler now reads
        sampler.snap()
        (proc,) = [p for p in sampler.seen.values() if p.pid == child.pid]
        assert proc.cmd == "sleep 0.3" and proc.comm == "sleep", proc
    finally:
        child.wait()


@pytest.mark.slow
def test_the_command_charges_a_tests_ranks_to_that_test(tmp_path):
    """A real run: a test that launches two ranks spinning 0.5 CPU-s each is charged its zygote
    and ranks (and the spares the zygote forks for a next call); a test that starts nothing is
    charged none; ``--by kind`` sums the same run's CPU by process kind."""
    (tmp_path / "test_planted.py").write_text(
        "from minipar.runtime.launch import run\n\n\n"
        "def _spin(rank, world_size):\n"
        "    import time\n\n"
        "    t = time.process_time()\n"
        "    while time.process_time() - t < 0.5:\n"
        "        pass\n\n\n"
        "def test_ranks():\n"
        "    run(_spin, 2, backend='gloo')\n\n\n"
        "def test_nothing():\n"
        "    pass\n"
    )
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "suite_cost.py"), "--by", "test", "--by", "kind"]
        + ["--"]
        + ["-q", "-n", "0", str(tmp_path / "test_planted.py")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rows = {ln.split()[-1].rsplit("::", 1)[-1]: ln for ln in out.stdout.splitlines() if ln.strip()}
    ranks = rows["test_ranks"]
    assert float(ranks.split()[2]) >= 0.5 and "1 zygote" in ranks, ranks
    assert int(re.search(r"(\d+) rank", ranks).group(1)) >= 2, ranks  # and spares
    assert rows["test_nothing"].split()[2:4] == ["0.0", "-"], rows["test_nothing"]
    # the second table, from the same run: the CPU by kind of process
    assert rows["zygote"].split()[3:5] == ["1", "zygote"], rows["zygote"]
    assert int(rows["rank"].split()[3]) >= 2 and float(rows["rank"].split()[0]) >= 0.5, rows
    assert out.stdout.splitlines()[-1].startswith("suite_cost: pytest exited 0 after ")


def test_the_default_run_is_make_units_recipe(tmp_path):
    """The default arguments are read from the Makefile's unit recipe, not copied beside it."""
    assert sc.unit_args()[-1] == "tests" and "loadfile" in sc.unit_args()
    makefile = tmp_path / "Makefile"
    makefile.write_text("unit: $(STAMP) ## planted\n\t$(PYTEST) -q -n 5 tests/planted\n")
    assert sc.unit_args(makefile) == ["-q", "-n", "5", "tests/planted"]
