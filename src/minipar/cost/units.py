"""Units used across the cost model: decimal GB versus binary GiB, and readable formatting.

Bytes are always bytes (never elements) unless a name ends in ``_elems``; times are seconds;
bandwidth is bytes/s per direction unless a name says ``bidirectional``.
"""
from __future__ import annotations

GB = 1e9        # decimal gigabyte: what datasheets, link speeds and the ZeRO paper's tables use
GiB = 2**30     # binary gibibyte: what torch.cuda.memory_allocated / nvidia-smi (MiB) count in
MB = 1e6
MiB = 2**20


def fmt_bytes(x: float, binary: bool = True) -> str:
    """``1.5 * 2**30`` -> ``"1.50 GiB"`` (``binary=False``: ``1.5e9`` -> ``"1.50 GB"``)."""
    base, names = (1024.0, ("B", "KiB", "MiB", "GiB", "TiB", "PiB")) if binary else (
        1000.0, ("B", "kB", "MB", "GB", "TB", "PB"))
    sign, v = ("-" if x < 0 else ""), abs(float(x))
    for name in names:
        if v < base or name == names[-1]:
            return f"{sign}{v:.0f} {name}" if name == "B" else f"{sign}{v:.2f} {name}"
        v /= base
    raise AssertionError("unreachable")


def fmt_seconds(x: float) -> str:
    """``2.5e-6`` -> ``"2.50 µs"``, ``0.0123`` -> ``"12.30 ms"``, ``3`` -> ``"3.00 s"``."""
    v = abs(float(x))
    if v == 0:
        return "0 s"
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if v >= scale:
            return f"{x / scale:.2f} {name}"
    return f"{x / 1e-9:.2f} ns"
