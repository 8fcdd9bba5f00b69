"""``minipar bench launch``: how long ``minipar.runtime.launch.run`` takes to start ranks: the
first call starts the zygote (an interpreter that imports torch), each repeat call forks fresh
ranks from it, which rendezvous, run one all-reduce on the launcher's backend and device and
exit. Both in one run; the repeat figure is the median.
"""

from __future__ import annotations

import statistics
import time

from minipar.runtime.device import get_device

from .common import add_backend, add_common, check, emit, gpu_check_command
from .common import backend as _backend


def _one_all_reduce(rank, world_size):
    import torch  # noqa: PLC0415 (lazy: torch)
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    t = torch.ones(1, device=get_device())
    dist.all_reduce(t)
    return t.item()  # .item() waits for a GPU collective


def measure(ranks: int = 4, repeats: int = 5, backend: str = "auto") -> dict:
    """Seconds for a cold first call and the median of ``repeats`` warm calls; ``backend``
    (default: the launcher's ``"auto"`` choice) is reported resolved under ``backend``."""
    from minipar.runtime import launch  # noqa: PLC0415 (lazy: launcher)

    backend = launch.choose_backend(backend, ranks)
    launch.shutdown()  # make the first call cold even if this process launched before
    times = []
    for _ in range(1 + repeats):
        t0 = time.perf_counter()
        launch.run(_one_all_reduce, ranks, backend=backend)
        times.append(time.perf_counter() - t0)
    first, repeat = times[0], statistics.median(times[1:])
    return {
        "ranks": ranks,
        "backend": backend,
        "first_call_s": first,
        "repeat_call_s": repeat,
        "repeat_to_first": repeat / first,
    }


def add_bench_parser(bench_sub) -> None:
    p = bench_sub.add_parser("launch", help="first-call and repeat-call latency of the launcher")
    add_common(p, ranks=4, ranks_help="ranks per call")
    p.add_argument("--repeats", type=int, default=5, help="warm calls timed (default 5)")
    add_backend(p, "auto", "the launcher's own choice, NCCL on GPUs")
    p.set_defaults(func=_main, precheck=_check)


GPU_CHECK_MIN_GPUS = 1  # one NCCL rank per GPU: one GPU is a launch too


def gpu_check_args(gpus: int) -> list[str] | None:
    """The GPU check's run (:mod:`minipar.bench.cli`): one NCCL rank per GPU, 3 warm calls."""
    return gpu_check_command(__name__, "--ranks", str(max(gpus, 1)), "--repeats", "3")


def gpu_check_figures(result: dict) -> dict:
    """The GPU check's figures (:mod:`minipar.bench.cli`): the backend, the first and the
    repeated call's seconds and their ratio."""
    return {k: result[k] for k in ("backend", "first_call_s", "repeat_call_s", "repeat_to_first")}


def _show(r: dict) -> None:
    print(
        f"launch of {r['ranks']} {r['backend']} ranks: first call {r['first_call_s']:.2f} s, "
        f"repeat call {r['repeat_call_s'] * 1e3:.0f} ms ({r['repeat_to_first']:.1%} of the "
        f"first)"
    )


def _check(args) -> None:
    """The arguments' rules (run before torch is imported: a typo costs no import)."""
    from minipar.runtime.launch import MAX_WORLD_SIZE  # noqa: PLC0415 (lazy: launcher)

    check(args, at_least=dict(ranks=1, repeats=1), at_most=dict(ranks=MAX_WORLD_SIZE))


def _main(args) -> int:
    _check(args)
    _backend(args, args.ranks)  # NCCL without a GPU per rank: exit 2 before starting
    return emit(args, lambda: measure(args.ranks, args.repeats, args.backend), _show)
