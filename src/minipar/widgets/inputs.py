"""The explorers' input contract, the Python twin of ``checkControls`` in ``explorer.js``, with
the same messages (the parity test compares them on every registered explorer's number boxes):
an empty box says so (``"t is empty"``); a value must be a finite number, a whole number where
the control's step is whole (``"b (1.5) must be a whole number"``), at least the control's
``min`` and at most its ``max`` (never above :data:`MAX_INPUT`); ``divisible = [(field, by),
...]`` pairs (``"h (3) must be divisible by a (128)"``); the field the reader changed is checked
first, so the message names it. A control is a dict with the JavaScript control's keys (``name``,
``label``, ``type``, ``min``, ``max``, ``step``, ``integer``); numbers in messages are written as
JavaScript writes them (``1e+21``, ``10000000``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal

from minipar.widgets import js_source

#: The largest value a number box accepts unless its control sets a smaller max (10 million:
#: more GPUs, tokens or hidden units than any machine has is a typing slip, not a setting).
MAX_INPUT = 10_000_000


def js_number(x) -> str:
    """``String(x)`` in JavaScript: whole floats without ``.0``, exponents from 1e21 and below
    1e-6 written ``1e+21`` / ``1.5e-7``."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, float):
        if math.isnan(x):
            return "NaN"
        if math.isinf(x):
            return "Infinity" if x > 0 else "-Infinity"
        if x == 0:
            return "0"
        if 1e-6 <= abs(x) < 1e21:
            text = format(Decimal(repr(x)), "f")
            return text.rstrip("0").rstrip(".") if "." in text else text
        mantissa, exponent = repr(x).split("e")
        mantissa = mantissa[:-2] if mantissa.endswith(".0") else mantissa
        return f"{mantissa}e{'-' if exponent.startswith('-') else '+'}{int(exponent.lstrip('+-'))}"
    return str(x)


def field_name(control: Mapping) -> str:
    """The name a message uses for a control: its label up to ``" ("``."""
    return str(control.get("label") or control["name"]).split(" (")[0]


def input_rule(control: Mapping) -> dict:
    """``{"integer", "min", "max"}`` of a number control, as ``inputRule`` in explorer.js."""
    step = control.get("step")
    step = None if step in (None, "any") else float(step)
    maximum = control.get("max")
    return {
        "integer": bool(control.get("integer")) or (step is not None and step.is_integer()),
        "min": control.get("min"),
        "max": MAX_INPUT if maximum is None else min(maximum, MAX_INPUT),
    }


def check_input(field: str, value, rule: Mapping) -> None:
    """Raise ValueError naming ``field`` and ``value`` if the value breaks ``rule``."""
    if value is None or value == "":
        raise ValueError(f"{field} is empty")
    v = js_number(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{field} ({v}) must be a finite number")
    if rule["integer"] and not float(value).is_integer():
        raise ValueError(f"{field} ({v}) must be a whole number")
    if rule["min"] is not None and value < rule["min"]:
        raise ValueError(f"{field} ({v}) must be at least {js_number(rule['min'])}")
    if value > rule["max"]:
        raise ValueError(f"{field} ({v}) must be at most {js_number(rule['max'])}")


def check_controls(
    controls: Iterable[Mapping],
    values: Mapping,
    changed: str | None = None,
    divisible: Iterable = (),
) -> None:
    """The whole contract for one explorer's values (``checkControls`` in explorer.js)."""
    controls = list(controls)
    numbers = [c for c in controls if c.get("type") == "number"]
    ordered = [c for c in numbers if c["name"] == changed] + [
        c for c in numbers if c["name"] != changed
    ]
    for c in ordered:
        check_input(field_name(c), values.get(c["name"]), input_rule(c))
    # a pair may name a control that is not a number box (a slider): then its name
    by_name = {c["name"]: c for c in controls}
    pairs = sorted(divisible, key=lambda pair: changed not in pair)
    for field, by in pairs:
        if values[field] % values[by] != 0:
            raise ValueError(
                f"{field_name(by_name.get(field, {'name': field}))} ({js_number(values[field])}) "
                f"must be divisible by {field_name(by_name.get(by, {'name': by}))} "
                f"({js_number(values[by])})"
            )


def check_numbers(rule: Mapping | None = None, /, **values) -> None:
    """``check_input`` for keyword values in order under one rule (default: a count such as t,
    p, m, b or heads, a whole number from 1 to :data:`MAX_INPUT`): an explorer's Python model
    refuses what its boxes refuse, in the same words."""
    rule = rule or {"integer": True, "min": 1, "max": MAX_INPUT}
    for field, value in values.items():
        check_input(field, value, rule)


#: The rule of a time or a price: any finite number from 0 to MAX_INPUT.
NONNEGATIVE = {"integer": False, "min": 0, "max": MAX_INPUT}


# a control's other keys: numbers, words, or quoted text (a `why` may hold commas)
_NUMBER_CONTROL = re.compile(
    r'\{name: "(\w+)", label: "((?:[^"\\]|\\.)*)", type: "number"'
    r'((?:, \w+: (?:"(?:[^"\\]|\\.)*"|[^,{}"]+))*)\}'
)
_FIELD = re.compile(r'(\w+): ("(?:[^"\\]|\\.)*"|[^,]+)')
_DIVISIBLE = re.compile(r"divisible: (\[\[.*?\]\])", re.S)


def js_controls(slug: str, name: str) -> tuple[list[dict], list]:
    """The number boxes (and ``divisible`` pairs) of explorer ``name`` read from the source of
    ``widgets/<slug>.js``, so Python checks the same rules without running JavaScript
    (tests/test_explorer_inputs.py compares this with the JavaScript's ``explorerInputs``)."""
    src = js_source(slug)
    start = src.index(f'registerExplorer("{name}"')
    end = src.find("registerExplorer(", start + 1)
    block = src[start:] if end < 0 else src[start:end]
    controls = []
    for cname, label, rest in _NUMBER_CONTROL.findall(block):
        c = {"name": cname, "label": label.replace('\\"', '"'), "type": "number"}
        for key, value in _FIELD.findall(rest):
            if key in ("min", "max", "step"):
                c[key] = float(value) if "." in value or "e" in value else int(value)
            elif key == "integer":
                c[key] = value.strip() == "true"
        controls.append(c)
    m = _DIVISIBLE.search(block)
    divisible = json.loads(m.group(1)) if m else []
    return controls, divisible


def check_values(slug: str, name: str, values: Mapping, changed: str | None = None) -> None:
    """The contract for the values a notebook passes to an explorer (``tp_explorer(t=0)``):
    the boxes it sets are checked as the page would check them, with the same message."""
    controls, divisible = js_controls(slug, name)
    given = [c for c in controls if c["name"] in values]
    check_controls(
        given, values, changed, [pair for pair in divisible if all(f in values for f in pair)]
    )
