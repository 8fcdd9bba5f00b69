"""Run a course worker function under ``torchrun`` (real clusters), unchanged.

    torchrun --nproc-per-node 4 -m minipar.runtime.run minipar.collectives.smoke:ring_vs_dist [ARGS...]

torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``; this
module initialises the default process group from them (NCCL when this node has a GPU for each
local rank, gloo otherwise; ``--backend`` overrides), calls ``fn(rank, world_size, *args)`` (extra
command-line arguments are passed as strings, or parsed as Python literals when they are ones),
prints each rank's return value prefixed ``[rank r]`` and destroys the group.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import sys

from minipar.runtime import device


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def load(spec: str):
    """``"package.module:function"`` -> the function."""
    module, sep, name = spec.partition(":")
    if not sep or not name:
        raise SystemExit(f"minipar.runtime.run: error: expected MODULE:FUNCTION, got {spec!r}")
    return getattr(importlib.import_module(module), name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minipar.runtime.run", description=__doc__)
    parser.add_argument("function", help="MODULE:FUNCTION taking (rank, world_size, *args)")
    parser.add_argument("args", nargs="*", help="extra arguments (Python literals or strings)")
    parser.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto")
    ns = parser.parse_args(argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise SystemExit(
            "minipar.runtime.run: error: RANK and WORLD_SIZE are not set; start this "
            "module with torchrun (or use minipar.runtime.launch.run from Python)"
        )
    import torch.distributed as dist  # noqa: PLC0415 (lazy: torch)

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    # every rank of this node decides alike: NCCL only with a GPU for each of them
    backend = device.resolve_backend(
        ns.backend, int(os.environ.get("LOCAL_WORLD_SIZE", local_rank + 1))
    )
    device.set_backend(backend, local_rank=local_rank)
    dist.init_process_group(backend)
    try:
        result = load(ns.function)(rank, world, *map(_literal, ns.args))
        # one write of the whole line: the ranks of a node share the agent's stdout, and
        # print's separate text and newline writes interleaved two ranks on one line
        sys.stdout.flush()
        os.write(sys.stdout.fileno(), f"[rank {rank}] {result!r}\n".encode())
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
