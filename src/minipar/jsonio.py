"""The one JSON writer behind every ``--json`` output and JSON file a command writes: standard
JSON or a refusal, never ``Infinity`` or ``NaN`` (which ``jq``, ``JSON.parse`` and every strict
reader reject). A non-finite number raises :class:`minipar.errors.InputError` naming where it
sits and its value (``"memory.total_bytes (inf) is not a finite number: no JSON for it"``), so
``minipar`` prints one line and exits with status 2. A leaf module (imports nothing from
minipar but :mod:`minipar.errors`): any layer may use it.

    print_json(result)                 # one line on stdout
    print_json(result, indent=1)       # pretty
    write(path, result, indent=1)      # a file
"""

from __future__ import annotations

import json
import math
import sys
from typing import IO, Any

from minipar.errors import InputError


def first_non_finite(obj: Any, path: str = "") -> tuple[str, float] | None:
    """``(path, value)`` of the first ``inf``/``-inf``/``nan`` in ``obj`` (dicts, lists, tuples
    in order; ``path`` like ``"steps[3].time_s"``), or ``None`` when every number is finite."""
    if isinstance(obj, float):
        return None if math.isfinite(obj) else (path or "value", obj)
    if isinstance(obj, dict):
        for k, v in obj.items():
            found = first_non_finite(v, f"{path}.{k}" if path else str(k))
            if found:
                return found
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found = first_non_finite(v, f"{path}[{i}]")
            if found:
                return found
    return None


def dumps(obj: Any, *, indent: int | None = None, **kwargs) -> str:
    """``json.dumps`` that refuses non-finite numbers (:class:`InputError` naming where)."""
    found = first_non_finite(obj)
    if found:
        raise InputError(f"{found[0]} ({found[1]}) is not a finite number: no JSON for it")
    return json.dumps(obj, indent=indent, allow_nan=False, **kwargs)


def write(path, obj: Any, *, indent: int | None = None) -> None:
    """Write ``obj`` to the file ``path``, checked whole before the file opens."""
    text = dumps(obj, indent=indent)
    with open(path, "w") as f:
        f.write(text)


def print_json(obj: Any, *, indent: int | None = None, file: IO[str] | None = None) -> None:
    """Print ``obj`` as one JSON document (stdout by default); nothing is printed on refusal."""
    print(dumps(obj, indent=indent), file=file or sys.stdout)


__all__ = ["dumps", "first_non_finite", "print_json", "write"]
