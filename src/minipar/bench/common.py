"""What every ``minipar bench`` command shares: the same flag names, one range check, one
``--json`` contract.

* ``--ranks`` is the number of ranks (``bench collectives``: a comma list of rank counts, since
  it sweeps them); ``--json`` prints exactly one JSON object on stdout and sends everything else
  (the launcher's notes, ranks' prints, progress bars, tables) to stderr, so
  ``minipar bench X --json | jq`` always parses.
* :func:`check` raises :class:`minipar.errors.InputError` naming the flag, its value and the rule
  (``"--ranks (1) must be >= 2"``); ``minipar`` prints it as one line and exits with status 2.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys

from minipar.errors import InputError
from minipar.runtime.device import resolve_backend

MAX_RANKS = 16  # ranks of one machine that a benchmark starts (each is a process)


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_common(
    p,
    ranks: int,
    ranks_help: str = "ranks",
    *,
    also: str | None = None,
    json_help: str | None = None,
):
    """``--ranks N`` (default ``ranks``; ``also``: a second spelling such as ``--pp``) and
    ``--json``."""
    names = ["--ranks"] + ([also] if also else [])
    p.add_argument(
        *names, dest="ranks", type=int, default=ranks, help=f"{ranks_help} (default {ranks})"
    )
    add_json(p, json_help)


def add_json(p, help: str | None = None) -> None:
    p.add_argument(
        "--json",
        action="store_true",
        help=help or "print one JSON object on stdout (everything else on stderr)",
    )


def add_backend(p, default: str, why: str) -> None:
    """``--backend {auto,gloo,nccl}``; ``why`` says why ``default`` is the default."""
    p.add_argument(
        "--backend",
        choices=["auto", "gloo", "nccl"],
        default=default,
        help=f"auto: NCCL with one GPU per rank if there are enough GPUs, else gloo "
        f"(default {default}: {why})",
    )


def backend(args, ranks: int) -> str:
    """``args.backend`` resolved for ``ranks`` ranks; NCCL without a GPU per rank is an
    :class:`InputError` naming both numbers."""
    try:
        return resolve_backend(args.backend, ranks)
    except ValueError as e:
        raise InputError(f"--backend {args.backend}: {e}") from None


def check(
    args, *, at_least: dict | None = None, at_most: dict | None = None, positive: tuple = ()
) -> None:
    """``at_least={"steps": 1}``: ``args.steps >= 1``; ``at_most``: ``<=``; ``positive``: ``> 0``
    and finite. The first rule broken raises :class:`InputError`."""
    for name, lo in (at_least or {}).items():
        v = getattr(args, name)
        if v < lo:
            raise InputError(f"{flag(name)} ({v}) must be >= {lo}")
    for name, hi in (at_most or {}).items():
        v = getattr(args, name)
        if v > hi:
            raise InputError(f"{flag(name)} ({v}) must be <= {hi} on one machine")
    for name in positive:
        v = getattr(args, name)
        if not (v > 0 and math.isfinite(v)):
            raise InputError(f"{flag(name)} ({v}) must be > 0")


def emit(args, measure, show) -> int:
    """Run ``measure()`` (its prints go to stderr under ``--json``), then print the result:
    one JSON object under ``--json``, else ``show(result)`` for people."""
    with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
        result = measure()
    if args.json:
        print(json.dumps(result))
    else:
        show(result)
    return 0
