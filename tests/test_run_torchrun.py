"""The same worker functions run under torchrun (``python -m minipar.runtime.run``), on one node and on
two nodes simulated on this machine (two torchrun agents meeting at a c10d rendezvous on
127.0.0.1, as on a cluster where each node runs one agent)."""

import ast
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from minipar.runtime.launch import free_port, run


@pytest.mark.slow
def test_worker_runs_under_torchrun_and_under_launch(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nnodes",
            "1",
            "--nproc-per-node",
            "2",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(free_port()),
            "-m",
            "minipar.runtime.run",
            "minipar.collectives.smoke:ring_vs_dist",
            "1000",
            "--backend",
            "gloo",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=_agent_env(tmp_path),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert list(tmp_path.glob("torchelastic_*")), "torchrun's log folder was not in TMPDIR"
    diffs = dict(re.findall(r"\[rank (\d)\] \{'max_abs_diff': ([0-9.e-]+)", out.stdout))
    assert sorted(diffs) == ["0", "1"], out.stdout
    assert all(float(d) < 1e-5 for d in diffs.values())
    from minipar.collectives.smoke import ring_vs_dist

    results = run(ring_vs_dist, 2, 1000, backend="gloo")
    assert all(r["max_abs_diff"] < 1e-5 and r["bytes"] == 4000 for r in results)


def test_run_without_torchrun_explains():
    out = subprocess.run(
        [sys.executable, "-m", "minipar.runtime.run", "minipar.collectives.smoke:x"],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in __import__("os").environ.items() if k not in ("RANK", "WORLD_SIZE")},
    )
    assert out.returncode != 0 and "start this module with torchrun" in out.stderr


# ------------------------------------------------------------------ two nodes on one machine
TESTS = os.path.dirname(os.path.abspath(__file__))


def _agent_env(tmp_path, **extra) -> dict:
    """The environment of a torchrun agent: TMPDIR in the test's folder, where each agent makes
    the log folder it never removes (``torchelastic_*``; in /tmp, five per run of this file)."""
    return dict(os.environ, TMPDIR=str(tmp_path), **extra)


def _two_agents(function: str, tmp_path, timeout: float = 150) -> list[subprocess.CompletedProcess]:
    """Two torchrun agents (nodes) with 2 ranks each, meeting at a c10d rendezvous on
    127.0.0.1, running ``python -m minipar.runtime.run multinode_workers:FUNCTION``; each agent and its
    workers are killed (process group) if they outlive ``timeout``."""
    port = free_port()
    env = _agent_env(
        tmp_path,
        PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]),
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
    )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "2",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        f"minipar-{port}",
        "-m",
        "minipar.runtime.run",
        f"multinode_workers:{function}",
        "--backend",
        "gloo",
    ]
    agents = [
        subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        for _ in range(2)
    ]
    out, deadline = [], time.monotonic() + timeout
    try:
        for a in agents:
            stdout, stderr = a.communicate(timeout=max(1.0, deadline - time.monotonic()))
            out.append(subprocess.CompletedProcess(a.args, a.returncode, stdout, stderr))
    except subprocess.TimeoutExpired:
        pytest.fail(f"torchrun agents still running after {timeout:g} s (a hang)")
    finally:
        for a in agents:
            if a.poll() is None:
                os.killpg(a.pid, signal.SIGKILL)
                a.wait()
    return out


@pytest.mark.slow
def test_two_nodes_train_like_one_process(tmp_path):
    """torchrun --nnodes 2 --nproc-per-node 2 (c10d rendezvous): the data-parallel step and the
    3D chapter's step (t = 2 inside a node, p = 2 across the nodes) through minipar.runtime.run equal
    the single-process reference (float64)."""
    agents = _two_agents("dp_and_3d_step", tmp_path)
    for a in agents:
        assert a.returncode == 0, a.stderr[-3000:]
    ranks = {}
    for a in agents:
        for r, text in re.findall(r"^\[rank (\d)\] (\{.*\})$", a.stdout, re.M):
            ranks[int(r)] = ast.literal_eval(text)
    assert sorted(ranks) == [0, 1, 2, 3], [a.stdout for a in agents]
    assert sorted((v["group_rank"], v["local_rank"]) for v in ranks.values()) == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]  # two nodes of two ranks
    for r, v in ranks.items():
        assert v["dp_param_error"] < 1e-12, (r, v)
        assert v["3d_param_error"] < 1e-9 and v["3d_grad_error"] < 1e-12, (r, v)
        assert v["3d_loss_error"] < 1e-12, (r, v)


@pytest.mark.slow
def test_a_rank_killed_on_one_node_ends_both_agents(tmp_path):
    """SIGKILL one rank mid-run: its agent reports the signal, the other node's ranks fail on
    the lost peer, and both agents exit non-zero (no hang: _two_agents' limit)."""
    t0 = time.monotonic()
    agents = _two_agents("die_mid_run", tmp_path, timeout=120)
    assert all(a.returncode != 0 for a in agents), [a.returncode for a in agents]
    text = [a.stderr for a in agents]
    assert sum("exitcode: -9" in t for t in text) == 1, text  # SIGKILL, on the dead rank's node
    assert all(
        re.search(
            r"exitcode: -9|Connection reset by peer|Connection closed by peer|"
            r"RendezvousConnectionError|ChildFailedError",
            t,
        )
        for t in text
    )
    assert time.monotonic() - t0 < 120


def test_slurm_example_parses_and_launches_like_the_test():
    path = os.path.join(os.path.dirname(TESTS), "scripts", "slurm_example.sbatch")
    subprocess.run(["bash", "-n", path], check=True)
    text = open(path).read()
    sbatch = dict(re.findall(r"^#SBATCH --([a-z-]+)=(\S+)$", text, re.M))
    assert sbatch["nodes"] == "2" and sbatch["ntasks-per-node"] == "1"  # one agent per node
    for flag in ("--rdzv-backend c10d", "--rdzv-endpoint", "--nnodes", "-m minipar.runtime.run"):
        assert flag in text, flag
    from minipar.runtime.run import load

    spec = re.search(r"-m minipar.runtime.run (\S+)", text).group(1)
    assert callable(load(spec))
