"""``minipar bench collectives``: time collectives on this machine, fit α and β, report busbw.

For every rank count n, op and message size S (nccl-tests convention, see
:mod:`minipar.cost.network.collectives`) each rank times ``iters`` calls after ``warmup``
untimed ones, each right after a barrier; a point's time is the median over iterations, then
the max over ranks (the slowest rank decides when the collective is done). Per (op, n) we fit
the α-β model of the algorithm we assume the backend uses (``ASSUMED_ALGORITHM``) with
:func:`minipar.cost.network.collectives.fit_alpha_beta`. The backend is the launcher's choice
(``--backend auto``: NCCL with one GPU per rank when there are enough, else gloo), tensors live
on :func:`minipar.runtime.device.get_device` and every call is synchronised, so a GPU
workstation reports its NVLink or PCIe numbers next to the model's prediction.

A benchmark reports; it never asserts a speed. Numbers on a shared 2-core CPU are noisy.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import statistics
import sys
import tomllib
from pathlib import Path

from minipar.cost.network import collectives as cc
from minipar.cost.units import parse_bytes
from minipar.errors import InputError
from minipar.jsonio import write
from minipar.runtime import device
from minipar.runtime.timing import timed

from .collectives_report import table
from .common import (
    add_backend,
    add_json,
    add_options,
    check,
    check_writable,
    emit,
    gpu_check_command,
)

_SWEEPS = tomllib.loads(Path(__file__).with_name("collectives_sweeps.toml").read_text("utf-8"))
ASSUMED_ALGORITHM = _SWEEPS["algorithm"]  # op -> the algorithm we assume the backend uses
OPS = tuple(ASSUMED_ALGORITHM)
ELEMENT_BYTES = 4  # float32


def _numel(op: str, n: int, nbytes: int) -> int:
    """Elements of the op's nccl-tests buffer, rounded down to a multiple of n (at least n)."""
    return max(n, nbytes // ELEMENT_BYTES // n * n)


def _call(op: str, numel: int, n: int):
    """A zero-argument function running one ``op`` on freshly allocated float32 buffers."""
    import torch  # noqa: PLC0415 (lazy: torch)
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    full = torch.ones(numel, device=device.get_device())  # (S/4,)
    part = torch.ones(numel // n, device=device.get_device())  # (S/4n,)
    if op == "all-reduce":
        return lambda: dist.all_reduce(full)
    # the long-standing names (torch >= 2.0), which any torch a GPU node carries has; the
    # course's pinned torch 2.13 also has all_gather_single / reduce_scatter_single
    if op == "all-gather":
        return lambda: dist.all_gather_into_tensor(full, part)
    if op == "reduce-scatter":
        return lambda: dist.reduce_scatter_tensor(part, full)
    if op == "broadcast":
        return lambda: dist.broadcast(full, src=0)
    if op == "ring-all-reduce":
        from minipar.collectives import ring_all_reduce  # noqa: PLC0415 (lazy: torch)

        return lambda: ring_all_reduce(full)
    raise ValueError(f"op ({op!r}) must be one of {', '.join(OPS)}")


def _time_on_rank(rank: int, n: int, op: str, numel: int, iters: int, warmup: int) -> float:
    """Median seconds of one ``op`` on this rank (runs on every rank)."""
    return statistics.median(timed(_call(op, numel, n), iters, warmup))


def time_op(
    op: str, n: int, nbytes: int, iters: int = 5, warmup: int = 2, backend: str = "auto"
) -> tuple[int, float]:
    """(S actually used in bytes, seconds: median over iterations, max over the n ranks)."""
    from minipar.runtime.launch import run  # noqa: PLC0415 (lazy: launcher)

    numel = _numel(op, n, nbytes)
    per_rank = run(_time_on_rank, n, op, numel, iters, warmup, backend=backend, timeout=120)
    return numel * ELEMENT_BYTES, max(per_rank)


def sweep(
    ops, ranks, sizes, iters: int = 5, progress: bool = True, backend: str = "auto"
) -> list[dict]:
    """One row per (n, op, S): bytes, seconds, algbw and busbw (bytes/s, nccl-tests)."""
    from tqdm.auto import tqdm  # noqa: PLC0415 (lazy: help)

    rows = []
    jobs = [(n, op, s) for n in ranks for op in ops for s in sizes]
    for n, op, s in tqdm(jobs, desc="bench collectives", file=sys.stderr, disable=not progress):
        nbytes, t = time_op(op, n, s, iters, backend=backend)
        rows.append(
            dict(
                op=op,
                n=n,
                bytes=nbytes,
                seconds=t,
                algbw=cc.algbw(nbytes, t),
                busbw=cc.busbw(op, n, nbytes, t),
            )
        )
    return rows


def fit(rows: list[dict]) -> list[dict]:
    """Per (op, n): α (s) and bandwidth (bytes/s per direction) of the assumed algorithm."""
    fits = []
    for op, n in dict.fromkeys((r["op"], r["n"]) for r in rows):
        mine = [r for r in rows if (r["op"], r["n"]) == (op, n)]
        algorithm, entry = ASSUMED_ALGORITHM[op], dict(op=op, n=n)
        entry.update(algorithm=algorithm, alpha=None, bandwidth=None, error=None)
        try:
            entry["alpha"], entry["bandwidth"] = cc.fit_alpha_beta(
                [r["bytes"] for r in mine], [r["seconds"] for r in mine], op, n, algorithm
            )
        except ValueError as e:  # too few sizes, or times that do not grow with size
            entry["error"] = str(e)
        fits.append(entry)
    return fits


def ring_vs_dist(sizes, n: int = 4, iters: int = 5, backend: str = "auto") -> list[dict]:
    """Our send/recv ring all-reduce against ``dist.all_reduce`` (ratio > 1: ours is slower)."""
    rows = []
    for s in sizes:
        nbytes, t_ring = time_op("ring-all-reduce", n, s, iters, backend=backend)
        _, t_dist = time_op("all-reduce", n, s, iters, backend=backend)
        rows.append(
            dict(n=n, bytes=nbytes, ring_seconds=t_ring, dist_seconds=t_dist, ratio=t_ring / t_dist)
        )
    return rows


def machine(backend: str = "gloo") -> dict:
    import torch  # noqa: PLC0415 (lazy: torch)

    from minipar.runtime.pool import usable_cpus  # noqa: PLC0415 (lazy: launcher)

    gpu = torch.cuda.get_device_name(0) if backend == "nccl" else None
    return dict(
        platform=platform.platform(),
        processor=platform.processor(),
        cpu_count=os.cpu_count(),
        usable_cpus=usable_cpus(),
        torch=torch.__version__,
        backend=backend,
        gpu=gpu,
        dtype="float32",
    )


def run_benchmark(
    ops=OPS,
    ranks=(2, 4),
    sizes=None,
    iters: int = 5,
    ring_sizes=None,
    progress: bool = True,
    backend: str = "auto",
    ring_ranks: int = 4,
) -> dict:
    """The whole benchmark as one JSON-ready dict (what ``--json`` prints); ``ring_ranks``:
    the rank count of the ring-vs-dist comparison."""
    from minipar.runtime.launch import choose_backend  # noqa: PLC0415 (lazy: launcher)

    sizes = sizes or [4 * 4**k * 1024 for k in range(7)]  # 4 KiB … 16 MiB
    ranks = list(ranks)
    backend = choose_backend(backend, max(ranks + [ring_ranks if ring_sizes else 2]))  # one for all
    rows = sweep(ops, ranks, sizes, iters, progress, backend)
    ring = ring_vs_dist(ring_sizes, ring_ranks, iters, backend) if ring_sizes else []
    return dict(
        machine=machine(backend), iters=iters, results=rows, fits=fit(rows), ring_vs_dist=ring
    )


# ----------------------------------------------------------------------------- command line
QUICK, FULL = _SWEEPS["quick"], _SWEEPS["full"]  # the --quick and the default sweep


def parse_size(text: str) -> int:
    """``"4KiB"`` -> 4096 bytes (also ``"1MB"``, ``"1e6"``, ``"512"``)."""
    try:
        return int(parse_bytes(text))
    except InputError as e:
        raise InputError(f"size {e}") from None


def parse_sizes(text: str) -> list[int]:
    """``"4KiB..16MiB"`` (×4 steps, both ends included) or a comma list ``"4KiB,1MiB"``."""
    if ".." in text:
        lo, hi = (parse_size(t) for t in text.split("..", 1))
        if lo > hi:
            raise InputError(f"sizes range {text!r}: start ({lo} B) must be <= end ({hi} B)")
        out = [lo]
        while out[-1] * 4 <= hi:
            out.append(out[-1] * 4)
        return out
    return [parse_size(t) for t in text.split(",")]


def parse_ranks(text: str) -> list[int]:
    from minipar.runtime.launch import MAX_WORLD_SIZE  # noqa: PLC0415 (lazy: launcher)

    try:
        ranks = [int(t) for t in text.split(",")]
    except ValueError:
        raise InputError(f"--ranks must be comma-separated integers, got {text!r}") from None
    bad = [r for r in ranks if not 2 <= r <= MAX_WORLD_SIZE]
    if bad:
        raise InputError(
            f"--ranks ({bad[0]}) must be between 2 and {MAX_WORLD_SIZE}: a collective "
            "on one rank moves nothing"
        )
    return ranks


def parse_ops(text: str) -> list[str]:
    ops = [t.strip() for t in text.split(",")]
    bad = [o for o in ops if o not in OPS]
    if bad:
        raise InputError(f"--ops ({bad[0]!r}) must be among {', '.join(OPS)}")
    return ops


def _check(args) -> tuple:
    """The arguments' rules (run before torch is imported: a typo costs no import); the
    preset and the parsed (ops, ranks, sizes, iters)."""
    preset = QUICK if args.quick else FULL
    get = lambda name: preset[name] if getattr(args, name) is None else getattr(args, name)
    ops, ranks = parse_ops(get("ops")), parse_ranks(get("ranks"))
    sizes, iters = parse_sizes(get("sizes")), get("iters")
    check(args, at_least=({} if args.iters is None else dict(iters=1)) | dict(ring_ranks=2))
    if args.plot:  # before minutes of measuring, not after
        if importlib.util.find_spec("matplotlib") is None:
            raise InputError(
                f"--plot {args.plot} needs matplotlib, which is not installed "
                "(pip install matplotlib, or the [book] extra)"
            )
    check_writable(args.out, "--out")
    check_writable(args.plot, "--plot")
    return preset, (ops, ranks, sizes, iters)


def _main(args) -> int:
    preset, (ops, ranks, sizes, iters) = _check(args)
    if len(sizes) < 2:
        print("note: one size only, so no α-β fit", file=sys.stderr)

    def measure() -> dict:
        try:
            result = run_benchmark(
                ops,
                ranks,
                sizes,
                iters,
                parse_sizes(preset["ring_sizes"]),
                backend=args.backend,
                ring_ranks=args.ring_ranks,
            )
        except ValueError as e:  # e.g. --backend nccl without a GPU per rank
            raise InputError(str(e)) from None

        print(table(result))  # on stderr under --json
        if args.out:
            write(args.out, result, indent=1)
            print(f"wrote {args.out}")
        if args.plot:
            from minipar.plotting.collectives import draw_benchmark  # noqa: PLC0415 (lazy: matplotlib)

            draw_benchmark(result).savefig(args.plot, dpi=120)
            print(f"wrote {args.plot}")
        return result

    return emit(args, measure, lambda result: None)


def add_bench_parser(bench_sub) -> None:
    p = bench_sub.add_parser(
        "collectives",
        help="time collectives on this machine's ranks, fit α and β, report algbw/busbw",
    )
    p.add_argument("--ops", help=f"comma list from {','.join(OPS)} (default: all)")
    p.add_argument("--ranks", help="comma list of rank counts (default 2,4)")
    p.add_argument("--sizes", help="LO..HI in ×4 steps or a comma list (default 4KiB..16MiB)")
    p.add_argument("--iters", type=int, help="timed iterations per point (default 5)")
    add_json(p)
    p.add_argument("--out", metavar="PATH", help="also write the result as JSON to PATH")
    p.add_argument("--plot", metavar="PATH", help="write the measured-vs-model figure")
    add_backend(p, "auto", "the chapter measures this machine's links, NCCL on GPUs")
    add_options(
        p,
        (
            "--ring-ranks",
            4,
            "ranks of the ring_all_reduce vs dist.all_reduce comparison (default 4)",
        ),
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a small sweep (seconds): all-reduce,all-gather; 2 ranks; 4KiB..256KiB",
    )
    p.set_defaults(func=_main, precheck=_check)


GPU_CHECK_MIN_GPUS = 2  # the smallest group, one GPU per NCCL rank


def gpu_check_args(gpus: int) -> list[str] | None:
    """The GPU check's run (:mod:`minipar.bench.cli`): the four ops on every group of 2, 3, 4
    and 8 ranks that ``gpus`` GPUs hold (2 with fewer), 64 KiB to 64 MiB, the ring comparison
    on at most 4 of them."""
    counts = [k for k in (2, 3, 4, 8) if k <= gpus] or [2]
    return gpu_check_command(
        __name__,
        "--ops",
        "all-reduce,all-gather,reduce-scatter,broadcast",
        "--ranks",
        ",".join(map(str, counts)),
        "--sizes",
        "64KiB..64MiB",
        "--iters",
        "5",
        "--ring-ranks",
        str(min(4, max(counts))),
    )


def gpu_check_figures(result: dict) -> dict:
    """The GPU check's figures (:mod:`minipar.bench.cli`): the backend and GPU, the largest bus
    bandwidth, each (op, n)'s fitted α and bandwidth per direction (None where the fit failed),
    and our ring's time over ``dist.all_reduce``'s at each size."""
    fits = {
        f"{f['op']} n={f['n']}": None
        if f["error"]
        else {"alpha_s": f["alpha"], "bandwidth_GB_per_s": f["bandwidth"] / 1e9}
        for f in result["fits"]
    }
    busbw = max((x["busbw"] for x in result["results"]), default=0.0)
    return {
        "backend": result["machine"]["backend"],
        "gpu": result["machine"]["gpu"],
        "max_busbw_GB_per_s": busbw / 1e9,
        "fits_per_direction": fits,
        "ring_to_dist": [x["ratio"] for x in result["ring_vs_dist"]],
    }
