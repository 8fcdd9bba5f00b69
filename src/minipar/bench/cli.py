"""``minipar bench <name>``: benchmarks on this machine.

Each module in ``BENCH_MODULES`` provides ``add_bench_parser(bench_sub)`` and registers one
sub-subcommand (``minipar bench data_parallel``, alias ``dp``, ...): one per chapter that has a
bench (:data:`minipar.chapters.CHAPTERS`), and the launcher's own. Each sets ``func`` (the
command) and ``precheck`` (its arguments' rules, which ``minipar.cli`` runs before it imports
torch: a bad argument is one line in 0.2 s, not after a 2-second import).

For ``make gpu-check`` (``scripts/gpu_check.py``, whose ``bench_plan`` reads these modules)
each module also provides ``gpu_check_args(gpus: int) -> list[str] | None``: the ``minipar``
arguments (``["bench", "<name>", ..., "--backend", "nccl", "--json"]``, written by
:func:`minipar.bench.common.gpu_check_command`) of its run in the check
when the check may use ``gpus`` GPUs (the node's, at most the script's ``MAX_RANKS``; 0 and 1
included: the plan lists what it then skips), or None where the bench is not part of the check
(its docstring says why). A module that returns arguments also sets ``GPU_CHECK_MIN_GPUS``: the
GPUs that run needs (NCCL takes one per rank); the check skips it, with that reason, on a node
with fewer. It also provides ``gpu_check_figures(result: dict) -> dict``: from the JSON object its
run printed (``result``), the numbers a reader compares across machines (ratios, fitted link
figures), which the report lists as the bench's ``figures``. A module whose ``gpu_check_args``
always returns None defines neither: the check never asks it. Like ``add_bench_parser``, these
must not import torch.
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
