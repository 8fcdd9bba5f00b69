"""``minipar bench <name>``: benchmarks on this machine.

Each module in ``BENCH_MODULES`` provides ``add_bench_parser(bench_sub)`` and registers one
sub-subcommand; add a benchmark by appending its module here.
"""

from __future__ import annotations

import importlib

BENCH_MODULES = [
    "minipar.bench.collectives",  # minipar bench collectives
    "minipar.bench.context_parallel",  # minipar bench context_parallel (alias: cp)
    "minipar.bench.data_parallel",  # minipar bench data_parallel (alias: dp)
    "minipar.bench.expert_parallel",  # minipar bench expert_parallel (alias: ep)
    "minipar.bench.launch",  # minipar bench launch
    "minipar.bench.pipeline_parallel",  # minipar bench pipeline_parallel (alias: pp)
    "minipar.bench.tensor_parallel",  # minipar bench tensor_parallel (alias: tp)
    "minipar.bench.three_d",  # minipar bench three_d (alias: 3d)
]


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks on this machine (never assert a speed)")
    bench_sub = p.add_subparsers(dest="bench", required=True)
    for name in BENCH_MODULES:
        importlib.import_module(name).add_bench_parser(bench_sub)
