"""The one table of the planner's cost terms (``term_table.json``), read by the Python planner
(:func:`minipar.cost.planner.three_d_terms.breakdown`), the explorer's JavaScript (the generated block of
``widgets/three_d_model.js``), ``minipar plan``'s columns, the charts and the tests.

Adding a term is one row here, one Python function
``term_<name>(model, cluster, layout, options, *needs)`` in the module of its kind
(:mod:`~minipar.cost.planner.compute_terms`,
:mod:`~minipar.cost.planner.communication_terms`, :mod:`~minipar.cost.planner.memory_terms`,
:mod:`~minipar.cost.planner.moe_terms`, imported by :mod:`~minipar.cost.planner.three_d_terms`) and its JavaScript twin
``term<Name>(model, cluster, layout, options, ...needs)`` in ``widgets/three_d_model.js``;
``python -m minipar.cost.planner.term_table`` prints the JavaScript block to paste between its
``BEGIN TERMS`` and ``END TERMS`` lines (tests/test_cost_terms.py fails until it is there). A term
returns its value (seconds or bytes), or a record (a ``NamedTuple``) whose first field,
``value``, is its value; a later term that needs its other fields lists it in ``needs`` and
takes it as an argument of the same name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

WHERE = ("slot", "step", "memory")


class Term(NamedTuple):
    name: str
    where: str  # "slot" (s per micro-batch), "step" (s per step) or "memory" (bytes)
    unit: str
    column: str | None  # `minipar plan`'s column header, or None
    group: str  # the part of the step or memory it is drawn in (charts, figure, grader)
    needs: tuple[str, ...]  # earlier terms whose results it takes as arguments, by name
    doc: str


def _load() -> tuple[Term, ...]:
    rows = json.loads(Path(__file__).with_name("term_table.json").read_text())["terms"]
    return _check_needs(tuple(Term(**r | {"needs": tuple(r["needs"])}) for r in rows))


def _check_needs(terms: tuple[Term, ...]) -> tuple[Term, ...]:
    """``terms``, after checking each row's ``where`` and that it needs only earlier terms."""
    for i, t in enumerate(terms):
        if t.where not in WHERE:
            raise ValueError(f"term {t.name}: where ({t.where!r}) must be one of {WHERE}")
        earlier = {u.name for u in terms[:i]}
        for n in t.needs:
            if n not in earlier:
                raise ValueError(f"term {t.name}: needs ({n!r}) must be a term before it")
    return terms


TERMS: tuple[Term, ...] = _load()
SLOT = tuple(t.name for t in TERMS if t.where == "slot")
STEP = tuple(t.name for t in TERMS if t.where == "step")
MEMORY = tuple(t.name for t in TERMS if t.where == "memory")
BUBBLE = "pipeline bubble"
"""The part of a step's chart that is the compute's pipeline bubble (the other slot terms' share
of the bubble stays in their own group: their per-step seconds include it)."""


def _time_groups() -> tuple[str, ...]:
    out: list[str] = []
    for t in TERMS:
        for g in (t.group, BUBBLE) if t.name == "compute" else (t.group,):
            if t.where != "memory" and g not in out:
                out.append(g)
    return tuple(out)


TIME_GROUPS = _time_groups()
"""The parts of a step, in the table's order, the bubble after the compute's group: what the
explorer's chart, the book's figure and the grader draw or name."""


def python_name(name: str) -> str:
    return f"term_{name}"


def js_name(name: str) -> str:
    """``zero3_exposed`` -> ``termZero3Exposed``."""
    return "term" + "".join(w[:1].upper() + w[1:] for w in name.split("_"))


BEGIN, END = "// BEGIN TERMS", "// END TERMS"


def js_block() -> str:
    """The JavaScript block of ``widgets/three_d_model.js`` generated from the table."""
    rows = json.dumps([t._asdict() for t in TERMS], ensure_ascii=False)
    fns = ", ".join(f"{t.name}: {js_name(t.name)}" for t in TERMS)
    return (
        f"{BEGIN} (generated from minipar/cost/planner/term_table.json by "
        "`python -m minipar.cost.planner.term_table`; do not edit)\n"
        f"export const TERMS = {rows};\n"
        f"const TERM_FUNCTIONS = {{{fns}}};\n"
        f"{END}"
    )


if __name__ == "__main__":
    print(js_block())
