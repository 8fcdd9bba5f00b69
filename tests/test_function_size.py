"""No function in src/ runs past 80 lines, except a declarative table: an argument parser whose
statements are (nearly all) ``add_argument``/``add_parser`` calls. ruff's PLR0913, PLR0915 and
C901 hold the parameters, statements and complexity; this holds the length a reader scrolls."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_LINES = 80


def _is_declarative(fn: ast.FunctionDef) -> bool:
    """Nine in ten of the function's statements call ``add_argument``/``add_parser``/
    ``add_argument_group``/``set_defaults`` (an argument parser written out as a table)."""
    stmts = [s for s in ast.walk(fn) if isinstance(s, ast.stmt) and s is not fn]
    calls = sum(
        1
        for s in stmts
        for c in ast.walk(s)
        if isinstance(c, ast.Call)
        and isinstance(c.func, ast.Attribute)
        and c.func.attr in {"add_argument", "add_parser", "add_argument_group", "set_defaults"}
    )
    return bool(stmts) and calls >= 0.9 * len(stmts)


def long_functions(tree: ast.AST) -> list[tuple[str, int]]:
    return [
        (n.name, n.end_lineno - n.lineno + 1)
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.end_lineno - n.lineno + 1 > MAX_LINES
        and not _is_declarative(n)
    ]


@pytest.mark.slow
def test_no_function_in_src_runs_past_80_lines():
    files = sorted(SRC.rglob("*.py"))
    assert len(files) > 100, SRC
    bad = [
        f"{p.relative_to(SRC)}: {name} is {n} lines"
        for p in files
        for name, n in long_functions(ast.parse(p.read_text(), str(p)))
    ]
    assert not bad, "\n".join(bad) + f"\n(split into named steps: at most {MAX_LINES} lines)"


def test_a_long_function_is_named_and_a_parser_table_is_not():
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    table = "\n".join(f"    p.add_argument('--a{i}')" for i in range(85))
    tree = ast.parse(f"def long():\n{body}\n\ndef parser(p):\n{table}\n")
    assert long_functions(tree) == [("long", 86)]
