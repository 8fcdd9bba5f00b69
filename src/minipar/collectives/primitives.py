"""What each collective primitive computes, on plain lists: the definition the demo's real
``torch.distributed`` calls are checked against, and what the book's before/after figure draws.

Buffers are lists of numbers, one per rank. Conventions of nccl-tests and ``torch.distributed``:
reduce-scatter and all-to-all cut a rank's buffer into n equal chunks; all-gather concatenates
the ranks' chunks in rank order; ``reduce`` defines the result on the root only (``None`` on the
other ranks); send/recv is drawn as a ring shift, rank r sending to rank r + 1. Pure Python.
"""

from __future__ import annotations

PRIMITIVES = (
    "broadcast",
    "reduce",
    "all-reduce",
    "reduce-scatter",
    "all-gather",
    "all-to-all",
    "send/recv",
)


def example_inputs(op: str, n: int) -> list[list[float]]:
    """Rank r's buffer for ``op`` on ``n`` ranks: 10·r + j at position j, so a value's tens
    digit names the rank it came from and a sum (≥ 10·n) is plainly a sum. Every buffer has n
    elements, except all-gather's, whose two elements are the rank's contribution."""
    _check(op, n)
    k = 2 if op == "all-gather" else n
    return [[float(10 * r + j) for j in range(k)] for r in range(n)]


def _check(op: str, n: int) -> None:
    if op not in PRIMITIVES:
        raise ValueError(f"op ({op!r}) must be one of {', '.join(PRIMITIVES)}")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"ranks n ({n}) must be an integer >= 1")


def _chunks(x: list, n: int) -> list[list]:
    if len(x) % n:
        raise ValueError(f"buffer length ({len(x)}) must be divisible by ranks n ({n})")
    c = len(x) // n
    return [x[i * c : (i + 1) * c] for i in range(n)]


def primitive_outputs(op: str, inputs: list[list[float]], root: int = 0) -> list[list | None]:
    """Every rank's buffer after ``op``, given every rank's buffer before (``inputs[r]``): the
    module's conventions; all-to-all is a transpose (rank r receives chunk r of every rank)."""
    n = len(inputs)
    _check(op, n)
    total = [sum(col) for col in zip(*inputs)]
    if op == "broadcast":
        return [list(inputs[root]) for _ in range(n)]
    if op == "reduce":
        return [total if r == root else None for r in range(n)]
    if op == "all-reduce":
        return [list(total) for _ in range(n)]
    if op == "reduce-scatter":
        return _chunks(total, n)
    if op == "all-gather":
        return [[v for x in inputs for v in x] for _ in range(n)]
    if op == "all-to-all":
        parts = [_chunks(x, n) for x in inputs]  # parts[k][r]: rank k's chunk for rank r
        return [[v for k in range(n) for v in parts[k][r]] for r in range(n)]
    return [list(inputs[(r - 1) % n]) for r in range(n)]  # send/recv: a ring shift
