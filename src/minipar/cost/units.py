"""Units used across the cost model: decimal GB versus binary GiB, and readable formatting.

Bytes are always bytes (never elements) unless a name ends in ``_elems``; times are seconds;
bandwidth is bytes/s per direction unless a name says ``bidirectional``.
"""

from __future__ import annotations

import re

from ..errors import InputError

GB = 1e9  # decimal gigabyte: what datasheets, link speeds and the ZeRO paper's tables use
GiB = 2**30  # binary gibibyte: what torch.cuda.memory_allocated / nvidia-smi (MiB) count in
MB = 1e6
MiB = 2**20


def fmt_bytes(x: float, binary: bool = True) -> str:
    """``1.5 * 2**30`` -> ``"1.50 GiB"`` (``binary=False``: ``1.5e9`` -> ``"1.50 GB"``)."""
    base, names = (
        (1024.0, ("B", "KiB", "MiB", "GiB", "TiB", "PiB"))
        if binary
        else (1000.0, ("B", "kB", "MB", "GB", "TB", "PB"))
    )
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


_UNITS = {
    "": 1,
    "B": 1,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}


def parse_bytes(text: str) -> float:
    """``"1e9"``, ``"512MB"``, ``"1.5GiB"`` -> bytes (> 0); else :class:`InputError` naming the
    rule and the text (the ``minipar`` commands and ``minipar bench`` parse sizes with it)."""
    m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise InputError(f"must be a positive size in bytes (e.g. 1e9, 512MB, 1GiB), got {text!r}")
    try:
        value = float(m.group(1))
    except ValueError:
        value = None
    if value is None or not 0 < value < float("inf"):
        raise InputError(f"must be a positive number, got {m.group(1)!r}")
    return value * _UNITS[m.group(2).upper()]
