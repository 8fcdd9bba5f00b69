"""The one table of cost terms (minipar/cost/planner/term_table.json) is what the Python planner, the
explorer's JavaScript, `minipar plan` and the tests read: a term missing from either language or
from the table fails here, naming it."""

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from minipar.cost.planner import term_table, three_d_terms
from minipar.cost.planner.term_table import TERMS, js_block, js_name, python_name

JS = Path(term_table.__file__).resolve().parents[2] / "widgets" / "three_d_model.js"
STRUCTURAL = {"term_bubble"}  # the pipeline's stretch factor, not an additive term


def missing(terms, py_module, js_text: str) -> list[str]:
    """One line per term the table, Python or JavaScript lacks."""
    out = []
    names = {t.name for t in terms}
    for t in terms:
        if not callable(getattr(py_module, python_name(t.name), None)):
            out.append(f"term {t.name}: no Python function {python_name(t.name)}")
        if not re.search(rf"export function {js_name(t.name)}\(", js_text):
            out.append(f"term {t.name}: no JavaScript function {js_name(t.name)}")
    for fn in dir(py_module):
        if fn.startswith("term_") and fn not in STRUCTURAL and fn[5:] not in names:
            out.append(f"Python {fn}: not in the term table")
    for fn in re.findall(r"export function (term[A-Z]\w*)\(", js_text):
        if fn != "termBubble" and fn not in {js_name(n) for n in names}:
            out.append(f"JavaScript {fn}: not in the term table")
    return out


def test_a_term_takes_what_its_row_needs_in_both_languages():
    """A term's arguments after (model, cluster, layout, options) are the earlier terms its row
    ``needs``, by name, in Python and (camelCase) in JavaScript: no results dict passed
    around."""
    text = JS.read_text()
    for t in TERMS:
        params = list(inspect.signature(getattr(three_d_terms, python_name(t.name))).parameters)
        assert params[4:] == list(t.needs), t.name
        js = re.search(rf"export function {js_name(t.name)}\(([^)]*)\)", text).group(1)
        camel = [js_name(n)[4].lower() + js_name(n)[5:] for n in t.needs]
        assert [a.strip() for a in js.split(",")][4:] == camel, t.name
    with pytest.raises(ValueError, match=r"needs \('dp_exposed'\) must be a term before it"):
        term_table._check_needs(TERMS[:1] + (TERMS[0]._replace(name="x", needs=("dp_exposed",)),))


def test_every_term_is_in_the_table_and_both_languages():
    assert not missing(TERMS, three_d_terms, JS.read_text())
    assert {t.where for t in TERMS} == set(term_table.WHERE)


def test_the_javascript_table_is_generated_from_the_json():
    text = JS.read_text()
    start, end = text.index(term_table.BEGIN), text.index(term_table.END) + len(term_table.END)
    assert text[start:end] == js_block(), (
        "run `python -m minipar.cost.planner.term_table` and paste it"
    )


def test_a_term_missing_anywhere_is_named():
    """Negative controls: a table row without functions, and a function without its row."""
    extra = TERMS + (term_table.Term("straggler", "step", "s", None, "compute", (), "planted"),)
    assert missing(extra, three_d_terms, JS.read_text()) == [
        "term straggler: no Python function term_straggler",
        "term straggler: no JavaScript function termStraggler",
    ]
    short = tuple(t for t in TERMS if t.name != "embedding")
    assert missing(short, three_d_terms, JS.read_text()) == [
        "Python term_embedding: not in the term table",
        "JavaScript termEmbedding: not in the term table",
    ]


def test_breakdown_and_plan_columns_follow_the_table():
    from minipar.cost.planner import three_d as planner

    m, cl = planner.MODELS["gpt3-175b"], planner.cluster(1024, 8)
    c = planner.evaluate(m, cl, planner.Layout(1536, 8, 16, 8, 1, zero=3, recompute="full"))
    assert list(c.breakdown.values) == [t.name for t in TERMS]
    d = c.as_dict()
    for t in TERMS:
        if t.where == "memory":
            assert d[f"{t.name}_bytes"] == c.bytes(t.name)
        else:
            assert d[f"{t.name}_seconds"] == c.seconds(t.name)
    # a term is read by name, never through an invented attribute
    assert not hasattr(c, "tp_seconds") and not hasattr(c, "states_bytes")
    with pytest.raises(KeyError, match="must be one of the time terms"):
        c.seconds("states")
    with pytest.raises(KeyError, match="must be one of the memory terms"):
        c.bytes("tp")
    assert list(d)[:11] == [f for f in planner.Layout.__dataclass_fields__ if f != "global_batch"]
    assert list(d)[-7:] == [
        "dp_seconds",
        "step_seconds",
        "mfu",
        "hfu",
        "tp_link",
        "pp_link",
        "dp_link",
    ]
    slot = sum(c.breakdown.values[t.name] for t in TERMS if t.where == "slot")
    step = sum(c.breakdown.values[t.name] for t in TERMS if t.where == "step")
    assert c.step_seconds == c.microbatches * slot * (1 + c.bubble_relative) + step


@pytest.mark.slow
def test_the_command_prints_the_block_to_paste():
    """`python -m minipar.cost.planner.term_table`, as CONTRIBUTING.md's recipe runs it."""
    out = subprocess.run(
        [sys.executable, "-m", "minipar.cost.planner.term_table"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert out.strip() == js_block().strip()
