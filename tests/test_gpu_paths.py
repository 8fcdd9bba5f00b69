"""The code ``make gpu-check`` runs on NCCL puts every tensor on the rank's device and times only
finished GPU work, checked on a CPU machine (the GPU half, marked ``gpu``, runs where CUDA is).

An NCCL process group runs collectives and send/recv on CUDA tensors only, so a CPU tensor (a
factory call without ``device=``, a CPU device mesh, a ``PipelineStage`` on the CPU) that reaches
one fails at the first message of a GPU run, and never on gloo. Three kinds of check:

* static: in the modules of the NCCL benches, every tensor factory takes ``device=`` or is moved
  with ``.to(...)`` at once, no device mesh or pipeline stage names a device literally, and
  point-to-point goes through ``batch_isend_irecv`` only (NCCL matches by posting order; a lone
  ``send`` waits for its receiver). A negative control shows the checker flags the old code.
* placement: with the rank's device set to ``meta`` (a device that is not the CPU and needs no
  GPU), the DTensor comparison builds its mesh on ``meta`` and the ``torch.distributed
  .pipelining`` path builds its stages and ``PipelineStage`` wrappers there.
* timing: with ``minipar.runtime.device.synchronize`` replaced by a 0.2 s wait (the stand-in for queued
  GPU work), every timed interval is at least 0.2 s: the clock stops only after the device is
  waited for (a CUDA timer without a synchronize measures the launch, not the work).
"""

from __future__ import annotations

import ast
import datetime
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from minipar.runtime import device

SRC = Path(__file__).resolve().parents[1] / "src" / "minipar"

# what the NCCL items of scripts/gpu_check.py run on the ranks (benches and their rank code)
NCCL_MODULES = [
    "bench/launch.py",
    "bench/collectives.py",
    "collectives/ring.py",
    "bench/data_parallel.py",
    "data_parallel/timing.py",
    "data_parallel/naive.py",
    "data_parallel/bucketed.py",
    "bench/tensor_parallel.py",
    "tensor_parallel/dtensor.py",
    "tensor_parallel/layers.py",
    "tensor_parallel/mappings.py",
    "bench/pipeline_parallel.py",
    "pipeline_parallel/measure.py",
    "pipeline_parallel/communication.py",
    "pipeline_parallel/executor.py",
    "pipeline_parallel/torch_pipelining.py",
    "pipeline_parallel/timed.py",
]
PENDING: dict[str, str] = {}  # module -> why it is known to fail on NCCL (none now)

FACTORIES = {
    "empty",
    "zeros",
    "ones",
    "full",
    "randn",
    "rand",
    "randint",
    "randperm",
    "tensor",
    "arange",
    "linspace",
    "eye",
    "as_tensor",
}
P2P_CALLS = {"send", "recv", "isend", "irecv"}
DELAY = 0.2  # seconds the fake synchronize waits


# ----------------------------------------------------------------------------- static checks
def _is_torch_attr(node, names) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr in names
        and isinstance(node.value, ast.Name)
        and node.value.id == "torch"
    )


def _literal_device(node) -> bool:
    """``"cpu"``/``"cuda"`` or ``torch.device("cpu")``: a device written into the code."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split(":")[0] in ("cpu", "cuda")
    return (
        isinstance(node, ast.Call)
        and _is_torch_attr(node.func, {"device"})
        and bool(node.args)
        and _literal_device(node.args[0])
    )


def device_problems(source: str) -> list[str]:
    """Every place in ``source`` that would put a tensor or a mesh on a fixed device: a torch
    factory without ``device=`` (unless ``.to(...)`` follows at once or it is wrapped in
    ``nn.Parameter``, which the module's ``.to(device)`` moves), ``init_device_mesh`` or
    ``PipelineStage`` with a literal device, and point-to-point outside ``batch_isend_irecv``."""
    tree = ast.parse(source)
    parent = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f, line = node.func, f"line {node.lineno}: {ast.unparse(node)[:80]}"
        if _is_torch_attr(f, FACTORIES) and not any(k.arg == "device" for k in node.keywords):
            up = parent.get(node)
            moved = (
                isinstance(up, ast.Attribute)
                and up.attr in ("to", "cuda")
                and isinstance(parent.get(up), ast.Call)
            )
            param = (
                isinstance(up, ast.Call) and ast.unparse(up.func).split(".")[-1] == "Parameter"
            )  # a module's parameter: module.to(device) moves it
            moved = moved or param
            if not moved:
                out.append(f"{line} (a tensor made without device=)")
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        if name in ("init_device_mesh", "PipelineStage"):
            args = node.args + [k.value for k in node.keywords]
            if any(_literal_device(a) for a in args):
                out.append(f"{line} (a device written into the code)")
        if (
            isinstance(f, ast.Attribute)
            and f.attr in P2P_CALLS
            and isinstance(f.value, ast.Name)
            and f.value.id == "dist"
        ):
            out.append(f"{line} (point-to-point outside batch_isend_irecv)")
    return out


@pytest.mark.parametrize(
    "module",
    [
        m
        if m not in PENDING
        else pytest.param(m, marks=pytest.mark.xfail(strict=True, reason=PENDING[m]))
        for m in NCCL_MODULES
    ],
)
def test_nccl_paths_take_the_device_from_the_rank(module):
    problems = device_problems((SRC / module).read_text())
    assert not problems, f"{module}:\n" + "\n".join(problems)


def test_the_checker_flags_the_old_cpu_placements():
    """Negative control: the lines that broke on NCCL before this change, and their fixes."""
    old = """
mesh = init_device_mesh("cpu", (t,))
st = pipelining.PipelineStage(stages[s], s, v * p, torch.device("cpu"))
x = torch.randn(b, s, h, generator=g, dtype=dtype)
t0 = torch.tensor([time.perf_counter()], dtype=torch.float64)
dist.send(buf, peer)
"""
    new = """
mesh = init_device_mesh(get_device().type, (t,))
st = pipelining.PipelineStage(stages[s], s, v * p, dev)
x = torch.randn(b, s, h, generator=g, dtype=dtype).to(dev)
t0 = torch.tensor([time.perf_counter()], dtype=torch.float64, device=dev)
works = dist.batch_isend_irecv(ops)
"""
    flagged = [int(p.split(":")[0].split()[1]) for p in device_problems(old)]
    assert flagged == [2, 3, 4, 5, 6], device_problems(old)  # each old line, once
    assert device_problems(new) == []


# ----------------------------------------------------------------------------- placement
class _Stop(Exception):
    pass


@pytest.fixture
def meta_rank(monkeypatch):
    """This process is a rank whose device is ``meta`` (what ``set_backend`` records)."""
    monkeypatch.setenv("MINIPAR_DEVICE", "meta")
    assert device.get_device() == torch.device("meta")


def _record_mesh(monkeypatch):
    import torch.distributed.device_mesh as dm

    seen = []

    def fake(device_type, shape, **kw):
        seen.append(device_type)
        raise _Stop

    monkeypatch.setattr(dm, "init_device_mesh", fake)
    return seen


@pytest.mark.parametrize("case", ["dtensor", "compare_on_rank", "compare_loss_parallel_on_rank"])
def test_dtensor_mesh_and_tensors_on_the_rank_device(meta_rank, monkeypatch, case):
    from minipar.tensor_parallel import dtensor as D

    seen = _record_mesh(monkeypatch)
    # our layers replace .data of CPU-made parameters, which meta refuses (CUDA accepts it; the
    # gpu tests below run them): here the unsharded block stands in for ours
    monkeypatch.setattr(D, "ours", lambda block, group=None, **kw: block)
    with pytest.raises(_Stop):
        if case == "dtensor":
            D.dtensor(D.MLPBlock(8).to("meta"), 2)
        elif case == "compare_on_rank":
            D.compare_on_rank(0, 1, h=8, b=1, s=2)
        else:
            D.compare_loss_parallel_on_rank(0, 1, h=4, v=6, b=1, s=2)
    assert seen == ["meta"], f"device mesh built on {seen}, not on the rank's device (meta)"


def test_torch_pipelining_stages_on_the_rank_device(meta_rank, monkeypatch):
    from torch.distributed import pipelining

    from minipar.pipeline_parallel.torch_pipelining import torch_pipelining_grads
    from minipar.pipeline_parallel.train import small_config, token_batches

    seen = []

    def fake(module, index, n, dev, *a, **kw):
        seen.append((dev, {q.device.type for q in module.parameters()}))
        raise _Stop

    monkeypatch.setattr(pipelining, "PipelineStage", fake)
    c = small_config(L=4)
    with pytest.raises(_Stop):
        torch_pipelining_grads(0, 2, "gpipe", 2, 1, c, token_batches(1, 4, c)[0])
    ((dev, params),) = seen
    assert torch.device(dev).type == "meta", f"PipelineStage on {dev}, not on the rank's device"
    assert params == {"meta"}, f"stage parameters on {params}"


# ----------------------------------------------------------------------------- timing
@pytest.fixture
def one_rank():
    """A one-rank gloo process group in this process (barriers and collectives return)."""
    dist.init_process_group(
        "gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=datetime.timedelta(seconds=60)
    )
    yield
    dist.destroy_process_group()


def _slow_synchronize(calls):
    def fake():
        calls.append(time.perf_counter())
        time.sleep(DELAY)  # the queued GPU work finishing

    return fake


def test_tensor_parallel_timing_waits_for_the_device(one_rank, monkeypatch):
    from minipar.tensor_parallel import dtensor as D

    calls = []
    monkeypatch.setattr(device, "synchronize", _slow_synchronize(calls))
    out = D.time_on_rank(0, 1, h=8, b=1, s=2, steps=2, rounds=1)
    times = [t for v in out.values() for t in v]
    assert len(times) == 2 and min(times) >= DELAY, (
        f"step times {times} s exclude the device's work ({DELAY} s): no synchronize before the clock"
    )
    assert len(calls) == 2 * 3 * 2  # before and after each step (the warm-up's too)


def test_collectives_timing_waits_for_the_device(one_rank, monkeypatch):
    from minipar.bench.collectives import _time_on_rank

    calls = []
    monkeypatch.setattr(device, "synchronize", _slow_synchronize(calls))
    t = _time_on_rank(0, 1, "all-reduce", 16, iters=2, warmup=1)
    assert t >= DELAY and len(calls) == 2 * 3


def test_data_parallel_timing_waits_for_the_device(one_rank, monkeypatch):
    from minipar.data_parallel import timing

    calls = []
    monkeypatch.setattr(device, "synchronize", _slow_synchronize(calls))
    out = timing.time_variants_on_rank(0, 1, ["compute", "naive"], timing.Workload(4, 1, 2, 1, 1))
    assert min(t for v in out.values() for t in v) >= DELAY


def test_a_pipeline_receive_returns_after_the_device_has_the_message(monkeypatch):
    """On NCCL ``work.wait()`` only orders the CUDA stream; the receive must then wait for the
    device, or a timed stage starts before its input has arrived. Both ways of posting (one
    message, and the planned order's prefetching batch) wait first, then synchronize."""
    from minipar.pipeline_parallel import communication as C

    log = []

    class Work:
        def wait(self):
            log.append("wait")

    monkeypatch.setattr(C, "_p2p_op", lambda op, t, peer, group: (op, peer))
    monkeypatch.setattr(dist, "batch_isend_irecv", lambda ops: [Work() for _ in ops])
    monkeypatch.setattr(C, "synchronize", lambda: log.append("synchronize"))
    comm = C.P2P(rank=1, p=2, m=1)
    comm.recv((1, 2), torch.float32, 1, 0, 0, C.ACTIVATION)
    assert log == ["wait", "synchronize"]
    log.clear()
    msg = (1, 0, C.ACTIVATION)
    comm.set_order([("recv", 0, msg)], like=((1, 2), torch.float32))
    comm.recv((1, 2), torch.float32, 1, 0, 0, C.ACTIVATION)
    assert log == ["wait", "synchronize"]


def test_a_timer_without_synchronize_would_miss_the_work(one_rank, monkeypatch):
    """Negative control for the timing tests: the same fake device, clocked the old way
    (no synchronize inside the interval), reports less than the device's work."""
    calls = []
    fake = _slow_synchronize(calls)
    fake()  # before: outside the interval
    t0 = time.perf_counter()
    t = time.perf_counter() - t0  # work queued, clock read at once
    fake()
    assert t < DELAY


# ----------------------------------------------------------------------------- on a GPU
def _gpu_ranks() -> int:
    return min(device.gpu_count(), 2)


def _tp_rank(rank, t):
    from minipar.tensor_parallel.dtensor import compare_on_rank, time_on_rank

    assert device.get_device().type == "cuda"
    times = time_on_rank(rank, t, h=64, b=2, s=16, steps=2, rounds=1)
    return compare_on_rank(rank, t), times


def _pp_rank(rank, p, c, batch):
    from minipar.pipeline_parallel.torch_pipelining import torch_pipelining_grads

    return torch_pipelining_grads(rank, p, "gpipe", 2, 1, c, batch)


@pytest.mark.gpu
@pytest.mark.skipif(not device.gpu_count(), reason="needs CUDA (one GPU per NCCL rank)")
def test_on_nccl_tensor_parallel_matches_dtensor_and_one_process():
    from minipar.runtime.launch import run

    t = _gpu_ranks()
    for diffs, times in run(_tp_rank, t, backend="nccl", timeout=300):
        assert max(diffs.values()) < 1e-10, diffs
        assert all(x > 0 for v in times.values() for x in v)


@pytest.mark.gpu
@pytest.mark.skipif(not device.gpu_count(), reason="needs CUDA (one GPU per NCCL rank)")
def test_on_nccl_torch_pipelining_matches_one_process():
    from types import SimpleNamespace

    from minipar.pipeline_parallel.train import (
        max_error,
        small_config,
        token_batches,
        train_reference,
    )
    from minipar.runtime.launch import run

    p, c = _gpu_ranks(), small_config(L=4)
    batches = token_batches(1, 4, c)
    res = run(_pp_rank, p, c, batches[0], backend="nccl", timeout=300)
    _, ref, _ = train_reference(c, batches)
    assert max_error([SimpleNamespace(grads=r["grads"]) for r in res], ref, "grads") < 1e-12


def test_the_collectives_bench_uses_names_older_torch_has():
    """torch 2.11 (a GPU image's, seen on an H200 node) has no ``dist.all_gather_single`` or
    ``dist.reduce_scatter_single``: the bench times the long-standing ``all_gather_into_tensor``
    and ``reduce_scatter_tensor`` (the same operations, torch >= 2.0)."""
    tree = ast.parse((SRC / "bench" / "collectives.py").read_text())
    used = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "dist"
    }
    assert {"all_gather_into_tensor", "reduce_scatter_tensor"} <= used
    assert not used & {"all_gather_single", "reduce_scatter_single"}, used


@pytest.mark.gpu
@pytest.mark.skipif(not device.gpu_count(), reason="needs CUDA (one GPU per NCCL rank)")
def test_on_nccl_ring_all_reduce_matches_dist():
    """Our send/recv ring (one batch_isend_irecv per step) on NCCL, against dist.all_reduce."""
    from minipar.collectives.smoke import ring_vs_dist
    from minipar.runtime.launch import run

    for r in run(ring_vs_dist, _gpu_ranks(), 2**20, 2, backend="nccl", timeout=300):
        assert r["max_abs_diff"] < 1e-4, r


@pytest.mark.gpu
@pytest.mark.skipif(not device.gpu_count(), reason="needs CUDA (one GPU per NCCL rank)")
def test_on_nccl_the_timed_pipeline_bench_runs():
    from minipar.pipeline_parallel.measure import StageTimes, measure_bubble

    p = _gpu_ranks()
    r = measure_bubble("1f1b", p, 2 * p, 1, StageTimes(0.01, 0.01, 0.01), 1, backend="nccl")
    assert r["backend"] == "nccl" and 0 <= r["measured_bubble"] < 1


def test_pipeline_timeline_ends_each_action_after_the_device(one_rank, monkeypatch):
    """The executor's timeline (the pipeline bench's bubble) stamps an action's end only after
    the device has run it: without the synchronize, on CUDA it would record launch times."""
    from minipar.pipeline_parallel import executor as E
    from minipar.pipeline_parallel.schedules import schedule

    calls = []
    monkeypatch.setattr(E, "synchronize", _slow_synchronize(calls))
    stage = torch.nn.Linear(4, 4)
    ex = E.PipelineExecutor({0: stage}, 1, 0, 1, 2, loss=E.LastStageLoss(lambda y, t: y.sum()))
    x = [torch.randn(1, 2, 4) for _ in range(2)]
    rec = ex.run(schedule("1f1b", 1, 2)[0], x, [None, None], (1, 2, 4), torch.float32)
    spans = [end - start for _, _, start, end in rec.timeline]
    assert len(spans) == 4 and min(spans) >= DELAY, spans
