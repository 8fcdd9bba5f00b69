"""Run a chapter's explorer JavaScript under Node.js and compare it with the Python cost model.

Test support, not library code: used by tests/test_explorer_parity.py and every chapter's
explorer test (``from explorer_parity_support import ...``), through the same two helpers:

* ``js_call(slug, [(function, args), ...])`` evaluates exported functions of the bundle of
  ``widgets/<slug>.js`` (framework + required chapters + the chapter) in ONE node process and
  returns, per call, ``("ok", value)`` or ``("error", message)``.
* ``assert_parity(slug, js_name, py_fn, cases)`` calls ``py_fn(**case)`` and the JavaScript
  ``js_name(*js_args(case))`` for every case and asserts equal results: numbers to ``rel``
  (1e-9 by default), strings and booleans exactly, NamedTuples and dataclasses as objects with
  the same fields,
  tuples as arrays, and a ``ValueError`` in Python as a thrown ``Error`` in JavaScript.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from minipar.widgets import bundle

NODE = shutil.which("node") or "/usr/bin/node"

_DRIVER = r"""
import * as m from "./bundle.mjs";
import {readFileSync} from "node:fs";
const calls = JSON.parse(readFileSync(0, "utf8"));
const out = calls.map(([fn, args]) => {
  if (typeof m[fn] !== "function") return ["error", `no exported function ${fn}`];
  try { return ["ok", m[fn](...args)]; } catch (e) { return ["error", String(e && e.message || e)]; }
});
process.stdout.write(JSON.stringify(out, (k, v) => (typeof v === "number" && !Number.isFinite(v) ? String(v) : v)));
"""


def node_available() -> bool:
    return Path(NODE).exists()


def js_call(slug: str, calls: Iterable[tuple[str, list]], timeout: float = 120) -> list[tuple]:
    """Evaluate ``fn(*args)`` for each (fn, args) in Node.js; results in order."""
    calls = [[fn, list(args)] for fn, args in calls]
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "bundle.mjs").write_text(bundle(slug), encoding="utf-8")
        Path(tmp, "driver.mjs").write_text(_DRIVER, encoding="utf-8")
        proc = subprocess.run(
            [NODE, "driver.mjs"],
            cwd=tmp,
            input=json.dumps(calls),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    if proc.returncode:
        raise RuntimeError(f"node failed on {slug}.js (exit {proc.returncode}):\n{proc.stderr}")
    return [tuple(r) for r in json.loads(proc.stdout)]


def to_plain(x):
    """Python result -> the JSON shape the JavaScript twin returns (a NamedTuple or a dataclass
    as an object with the same fields)."""
    if hasattr(x, "_asdict"):
        return {k: to_plain(v) for k, v in x._asdict().items()}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: to_plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {k: to_plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_plain(v) for v in x]
    return x


def mismatch(py, js, rel: float = 1e-9, where: str = "") -> str | None:
    """A description of the first difference between ``py`` and ``js``, or None."""
    if isinstance(py, bool) or isinstance(js, bool) or isinstance(py, str):
        return None if py == js else f"{where}: python {py!r} != js {js!r}"
    if isinstance(py, (int, float)):
        if not isinstance(js, (int, float)) or isinstance(js, bool):
            return f"{where}: python {py!r} != js {js!r}"
        if py == js or math.isclose(py, js, rel_tol=rel, abs_tol=0.0):
            return None
        return f"{where}: python {py!r} != js {js!r} (relative {abs(py - js) / max(abs(py), abs(js)):.2e})"
    if isinstance(py, dict):
        if not isinstance(js, dict):
            return f"{where}: python {py!r} != js {js!r}"
        for k in py:
            if k not in js:
                return f"{where}.{k}: missing in js"
            d = mismatch(py[k], js[k], rel, f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(py, list):
        if not isinstance(js, list) or len(py) != len(js):
            return f"{where}: python {py!r} != js {js!r}"
        for i, (a, b) in enumerate(zip(py, js)):
            d = mismatch(a, b, rel, f"{where}[{i}]")
            if d:
                return d
        return None
    return None if py == js else f"{where}: python {py!r} != js {js!r}"


def _message(text: str) -> str:
    """A refusal's words with the one formatting difference of the two languages folded:
    Python writes a whole float as 1000000.0, JavaScript as 1000000."""
    return re.sub(r"(\d)\.0\b", r"\1", str(text))


def assert_parity(
    slug: str,
    js_name: str,
    py_fn: Callable,
    cases: list[dict],
    *,
    js_args: Callable[[dict], list] | None = None,
    rel: float = 1e-9,
) -> dict:
    """Assert the JavaScript ``js_name`` equals ``py_fn`` on every case (see module docstring).

    ``cases``: keyword arguments of ``py_fn``. ``js_args(case)`` gives the JavaScript arguments
    (default: the case's values in order). Returns counts {"cases", "errors"} so a test can check
    that its grid covered both valid and impossible inputs.
    """
    js_args = js_args or (lambda case: list(case.values()))
    expected = []
    for case in cases:
        try:
            expected.append(("ok", to_plain(py_fn(**case))))
        except ValueError as e:
            expected.append(("error", str(e)))
    got = js_call(slug, [(js_name, js_args(case)) for case in cases])
    bad = []
    for case, (ek, ev), (gk, gv) in zip(cases, expected, got):
        if ek != gk:
            bad.append(f"{case}: python {ek} {ev!r}, js {gk} {gv!r}")
        elif ek == "ok":
            d = mismatch(ev, gv, rel, js_name)
            if d:
                bad.append(f"{case}: {d}")
        elif _message(ev) != _message(gv):  # both refuse: the same rule and value
            bad.append(f"{case}: python says {ev!r}, js says {gv!r}")
    if bad:
        raise AssertionError(
            f"{js_name} ({slug}.js) differs from {py_fn.__module__}."
            f"{py_fn.__name__} in {len(bad)} of {len(cases)} cases:\n" + "\n".join(bad[:8])
        )
    return {"cases": len(cases), "errors": sum(k == "error" for k, _ in expected)}
