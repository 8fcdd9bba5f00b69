"""``minipar bench <name>``: benchmarks on this machine.

Each module in ``BENCH_MODULES`` provides ``add_bench_parser(bench_sub)`` and registers one
sub-subcommand (``minipar bench data_parallel``, alias ``dp``, ...): one per chapter that has a
bench (:data:`minipar.chapters.CHAPTERS`), and the launcher's own. Each sets ``func`` (the
command) and ``precheck`` (its arguments' rules, which ``minipar.cli`` runs before it imports
torch: a bad argument is one line in 0.2 s, not after a 2-second import).
"""

from __future__ import annotations

import importlib

from minipar.chapters import CHAPTERS

BENCH_MODULES = [f"minipar.bench.{c.slug}" for c in CHAPTERS if c.bench] + ["minipar.bench.launch"]


def add_parser(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks on this machine (never assert a speed)")
    bench_sub = p.add_subparsers(dest="bench", required=True)
    for name in BENCH_MODULES:
        importlib.import_module(name).add_bench_parser(bench_sub)
