"""The package's import graph (every import statement, lazy ones inside functions included, and
the module names ``minipar.cli`` loads with importlib): no arrow from the library up to the
command-line layer, and no cycle between modules (STYLE 21)."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"

# Changes other owners still have to make; each entry must disappear with its fix (the test
# checks that every entry is still a real arrow, so a stale one fails too).
PENDING: set = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """minipar modules ``path`` imports (``from pkg import mod`` counts as ``pkg.mod``)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()

    def add(target: str) -> None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("minipar"):
                    add(a.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("minipar"):
                continue
            for a in node.names:
                full = f"{mod}.{a.name}"
                add(full if full in modules else mod)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in modules and node.value.startswith("minipar."):
            add(node.value)    # importlib.import_module("minipar.bench.cli") and the like
    return found


def graph() -> dict[str, set[str]]:
    files = sorted((SRC / "minipar").rglob("*.py"))
    modules = {module_name(f) for f in files}
    return {module_name(f): imports_of(f, modules) for f in files}


def is_command_layer(module: str) -> bool:
    return (module == "minipar.cli" or module.startswith("minipar.bench")
            or module.endswith(".cli"))


def upward_arrows(g) -> set[tuple[str, str]]:
    return {(a, b) for a, targets in g.items() for b in targets
            if not is_command_layer(a) and is_command_layer(b)}


def cycles(g) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def _without_pending(g):
    return {a: {b for b in t if (a, b) not in PENDING} for a, t in g.items()}


def test_no_upward_arrow_and_no_cycle():
    g = graph()
    assert all(b in g[a] for a, b in PENDING), "a PENDING arrow is gone: delete its entry"
    g = _without_pending(g)
    assert upward_arrows(g) == set()
    assert cycles(g) == []


def test_the_checks_see_an_upward_arrow_and_a_cycle():
    """Negative control: the arrow pipeline_parallel/experiments.py had (library -> bench) is
    reported as upward, and with bench importing it back, as a cycle."""
    g = _without_pending(graph())
    g["minipar.pipeline_parallel.experiments"].add("minipar.bench.pipeline_parallel")
    assert upward_arrows(g) == {("minipar.pipeline_parallel.experiments",
                                 "minipar.bench.pipeline_parallel")}
    g["minipar.bench.pipeline_parallel"].add("minipar.pipeline_parallel.experiments")
    assert ["minipar.bench.pipeline_parallel", "minipar.pipeline_parallel.experiments"] in cycles(g)


def test_errors_is_a_leaf():
    assert graph()["minipar.errors"] == set()
