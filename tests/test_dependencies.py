"""Every third-party module that src/minipar imports is declared in pyproject.toml (as a
dependency or in an extra), and requirements.txt installs the package with the extras CI needs."""

import ast
import functools
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


_distributions = functools.cache(packages_distributions)  # every installed package's RECORD


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> dict[str, str]:
    """{distribution: where declared}; "minipar[book,grade]" self-references are skipped."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out = {}
    for where, reqs in [
        ("dependencies", project["dependencies"]),
        *project.get("optional-dependencies", {}).items(),
    ]:
        for req in reqs:
            name = _norm(re.match(r"[A-Za-z0-9_.-]+", req).group(0))
            if name != "minipar":
                out.setdefault(name, where)
    return out


def _statements(tree: ast.Module):
    """Every statement of ``tree``, nested ones (a lazy import in a function) included: an
    import is a statement, so the expressions (most of ``ast.walk``'s nodes) are skipped."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            stack += getattr(node, name, [])


@functools.cache
def _imported() -> dict[str, str]:
    """{top-level module: first file importing it} for modules outside stdlib and minipar."""
    found = {}
    for path in sorted((ROOT / "src" / "minipar").rglob("*.py")):
        for node in _statements(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for n in names:
                top = n.split(".")[0]
                if top not in sys.stdlib_module_names and top != "minipar":
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def _undeclared(declared: dict[str, str]) -> dict[str, str]:
    dists = _distributions()
    return {
        m: where
        for m, where in _imported().items()
        if not any(_norm(d) in declared for d in dists.get(m, [m]))
    }


@pytest.mark.slow
def test_every_import_is_declared():
    missing = _undeclared(_declared())
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_the_check_sees_a_missing_declaration():
    """Negative control: without its [book] entry, matplotlib is reported with a file."""
    declared = _declared()
    assert declared.pop("matplotlib") == "book"
    assert list(_undeclared(declared)) == ["matplotlib"]


def test_the_walk_finds_imports_however_deeply_nested():
    """Negative control of _statements: an import under a method, a with, a loop's else, an
    except clause, a finally clause and a match case is found (as ast.walk, which visits every
    expression too, found it: 0.75 CPU-s for src/minipar, 0.46 this way)."""
    tree = ast.parse(
        "class A:\n"
        "    def f(self):\n"
        "        with x:\n"
        "            for i in y:\n"
        "                pass\n"
        "            else:\n"
        "                try:\n"
        "                    pass\n"
        "                except E:\n"
        "                    try:\n"
        "                        pass\n"
        "                    finally:\n"
        "                        match z:\n"
        "                            case 1:\n"
        "                                import deep\n"
    )
    assert [a.name for n in _statements(tree) if isinstance(n, ast.Import) for a in n.names] == [
        "deep"
    ]


def test_requirements_pin_the_cpu_torch_and_install_the_extras():
    lines = [ln.strip() for ln in (ROOT / "requirements.txt").read_text().splitlines()]
    assert "torch==2.13.0" in lines and "-e .[dev]" in lines
    # the CPU index is explained for a user's machine, but never used as an option here (CI's
    # wheel stays local; an index line would make pip reach the network)
    assert any("download.pytorch.org/whl/cpu" in ln for ln in lines if ln.startswith("#"))
    assert not any(ln.startswith("--") for ln in lines)
    assert set(_declared()) >= {
        "matplotlib",
        "anywidget",
        "nbformat",
        "nbclient",
        "nbval",
        "pytest",
    }
