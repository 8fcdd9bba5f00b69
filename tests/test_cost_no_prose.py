"""The package returns numbers; the sentences, glued strings and tables that quote them for the
book are built in the book's glue (book/glue/), where the book is. Two static guards over every
module of ``src/minipar``:

* no function or class is named like a sentence builder (``*_sentence``, ``*_paragraph``,
  ``*_clause``, ``*_prose``);
* no function that returns text (annotated ``-> str``, or returning an f-string with a value in
  it, alone or inside a dict or list) holds 40 or more words of prose in its string literals, its
  docstring, the messages of the errors it raises and one-word strings (dict keys, labels) left
  out. The library's own output is not the book's: the grader's verdicts and hints (what
  ``minipar grade`` tells a learner), the reports ``minipar bench`` prints and the recipe line
  ``minipar plan`` prints are held to the first rule only.

Negative controls: a planted sentence builder (returning its sentence, or a dict holding it), and
a planted ``*_sentence`` name, are named, in any package.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "minipar"
NAMES = re.compile(r"_(sentence|paragraph|clause|prose)s?$")
MAX_WORDS = 40
# the library's own text, printed or returned to a learner: the grader's reasons, bench reports,
# and the recipe line `minipar plan` prints above its table
OUTPUT = ("grading/", "bench/", "cost/cli.py")


def _docstring_and_raises(fn: ast.AST) -> set[int]:
    skip = set()
    body = getattr(fn, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        skip.add(id(body[0].value))
    for node in ast.walk(fn):
        if isinstance(node, ast.Raise):
            skip.update(id(m) for m in ast.walk(node))
    return skip


def prose_words(fn: ast.AST) -> int:
    """Words (two letters or more) in ``fn``'s string literals of more than one word, its
    docstring and the messages of the errors it raises left out."""
    skip = _docstring_and_raises(fn)
    return sum(
        len(re.findall(r"[A-Za-z]{2,}", n.value))
        for n in ast.walk(fn)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and id(n) not in skip
        and len(n.value.split()) > 1  # a dict key or a label is one word, not prose
    )


def _formats_a_value(node: ast.AST, skip: set[int] = frozenset()) -> bool:
    """An f-string with a value in it under ``node`` (outside ``skip``)."""
    return any(
        isinstance(m, ast.JoinedStr)
        and id(m) not in skip
        and any(isinstance(v, ast.FormattedValue) for v in m.values)
        for m in ast.walk(node)
    )


def returns_text(fn: ast.FunctionDef) -> bool:
    """Text built from numbers: annotated to return ``str`` (or ``str | None``) or returning an
    f-string, and formatting a value into an f-string outside the errors it raises (a
    function returning fixed labels, such as a reason from a short list, is not one)."""
    annotated = fn.returns is not None and ast.unparse(fn.returns) in ("str", "str | None")
    returned = any(
        isinstance(node, ast.Return) and node.value is not None and _formats_a_value(node.value)
        for node in ast.walk(fn)
    )
    return (annotated or returned) and _formats_a_value(fn, _docstring_and_raises(fn))


def sentence_builders(name: str, source: str) -> list[str]:
    """'file: function (n words)' for each text-returning function over the prose limit, and
    'file: name' for each function or class named like a sentence builder."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if NAMES.search(node.name):
                bad.append(f"{name}: {node.name} (named like a sentence builder)")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if name.startswith(OUTPUT) or not returns_text(node):
                continue
            words = prose_words(node)
            if words >= MAX_WORDS:
                bad.append(f"{name}: {node.name} returns text with {words} words of prose")
    return bad


def _sources():
    for path in sorted(SRC.rglob("*.py")):
        yield str(path.relative_to(SRC)), path.read_text()


@pytest.mark.slow
def test_the_package_builds_no_sentences_for_the_book():
    bad = [b for name, src in _sources() for b in sentence_builders(name, src)]
    assert not bad, "\n".join(bad) + "\n(build sentences in book/glue/, return numbers here)"


def test_the_scan_sees_every_module():
    names = [name for name, _ in _sources()]
    for module in ("cost/validation/published.py", "cost/planner/three_d.py", "three_d/grid.py"):
        assert module in names, module
    assert {n.split("/")[0] for n in names if "/" in n} >= {"cost", "three_d", "grading", "bench"}
    assert len(names) > 100


PLANTED = '''
def ratio_summary(effects: dict):
    """Docstrings may be long; they are not what a function returns."""
    if not effects:
        raise ValueError("effects must not be empty: this message may be as long as it needs to be")
    r = effects["ratio"]
    return (
        f"the planner now puts PTD-P ahead too once the GPU count doubles, by a ratio of {r:.2f}, "
        "and the gap keeps growing at the largest count, where its ZeRO-3 gathers every "
        "layer's weights three times per micro-batch and reduce-scatters the gradients once, "
        "each as a flat ring in which every GPU's whole share crosses its own NIC"
    )
'''


PLANTED_DICT = """
def cost_rows(nv: float, pc: float) -> dict:
    cheaper = "NVLink" if nv < pc else "PCIe"
    return {
        "usd": (nv, pc),
        "cheaper_token": (
            f"the {cheaper} server buys the cheaper token ({nv:.3f} against {pc:.3f} "
            "dollars per million tokens)"
        ),
        "pcie_part": (
            f"buys its token at {pc:.3f}, less than that third row: its lower price more than "
            "makes up for the slower chip, where the other part's chip costs more than its lower "
            "price saves"
        ),
    }
"""

# returns numbers under many one-word keys (a benchmark's report), and one f-string key
KEYS = """
def report(mach, ops: dict) -> dict:
    return {
        "layer_overhead_s": mach.layer_overhead, "flop_rate": mach.flop_rate,
        "cores": mach.cores, "share": mach.share, "usable_cpus": 2, "ends_s": 0.0,
        "ends_s_per_sequence": 0.0, "optimizer_s": 0.0, "optimizer_s_per_element": 0.0,
        "links": {f"{op} n={n}": {"alpha": a, "bandwidth": bw} for (op, n), (a, bw) in ops},
        "p2p_alpha": 0.0, "p2p_bandwidth": 1.0, "layouts_predicted_measured_error": [],
    }
"""


def test_negative_control_a_planted_sentence_builder_is_named():
    bad = sentence_builders("three_d/planted.py", PLANTED)
    assert len(bad) == 1 and "ratio_summary returns text" in bad[0], bad
    bad = sentence_builders("three_d/planted.py", PLANTED_DICT)
    assert len(bad) == 1 and "cost_rows returns text" in bad[0], bad
    named = sentence_builders("planted.py", "def zero3_sentence():\n    return 1.5\n")
    assert named == ["planted.py: zero3_sentence (named like a sentence builder)"]
    # numbers and short labels pass: a table row, an error message, a dict of one-word keys
    ok = 'def row(x: float) -> str:\n    return f"{x:.2f} s"\n'
    assert sentence_builders("planted.py", ok) == []
    assert sentence_builders("three_d/planted.py", KEYS) == []
    assert prose_words(ast.parse(KEYS).body[0]) < 5 <= len(re.findall(r"_", KEYS))
    # the library's own output is held to the name rule only, whatever package it is planted in
    assert sentence_builders("grading/planted.py", PLANTED) == []
    assert sentence_builders("grading/planted.py", "def hint_clause():\n    return 1\n") == [
        "grading/planted.py: hint_clause (named like a sentence builder)"
    ]
    assert sentence_builders("cost/planted.py", PLANTED) != []
