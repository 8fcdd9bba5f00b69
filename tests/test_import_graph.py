"""The package's import graph (every import statement, lazy ones inside functions included, and
the module names ``minipar.cli`` loads with importlib): no arrow from the library up to the
command-line layer, no cycle between modules, and every arrow pointing down the layers that
CONTRIBUTING.md describes."""

import ast
import functools
from pathlib import Path

from minipar import chapters

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
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("minipar"):
                continue
            for a in node.names:
                full = f"{mod}.{a.name}"
                add(full if full in modules else mod)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value in modules
            and node.value.startswith("minipar.")
        ):
            add(node.value)  # importlib.import_module("minipar.bench.cli") and the like
    return found


@functools.cache
def _parsed() -> dict[str, frozenset[str]]:
    files = sorted((SRC / "minipar").rglob("*.py"))
    modules = {module_name(f) for f in files}
    return {module_name(f): frozenset(imports_of(f, modules)) for f in files}


def graph() -> dict[str, set[str]]:
    """Module -> the minipar modules it imports: a fresh copy each call (a negative control adds
    arrows to its own), of a graph parsed once per test process."""
    return {module: set(targets) for module, targets in _parsed().items()}


def is_command_layer(module: str) -> bool:
    return module == "minipar.cli" or module.startswith("minipar.bench") or module.endswith(".cli")


def upward_arrows(g) -> set[tuple[str, str]]:
    return {
        (a, b)
        for a, targets in g.items()
        for b in targets
        if not is_command_layer(a) and is_command_layer(b)
    }


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
    assert upward_arrows(g) == {
        ("minipar.pipeline_parallel.experiments", "minipar.bench.pipeline_parallel")
    }
    g["minipar.bench.pipeline_parallel"].add("minipar.pipeline_parallel.experiments")
    assert ["minipar.bench.pipeline_parallel", "minipar.pipeline_parallel.experiments"] in cycles(g)


def test_errors_is_a_leaf():
    assert graph()["minipar.errors"] == set()


# ------------------------------------------------------------------ layers (CONTRIBUTING.md)
# the chapters of layer 1, in the course's order: the registry's, less the composition chapter
CHAPTERS = tuple(s for s in chapters.SLUGS if s != "three_d")
COMMANDS = (
    "minipar.cli",
    "minipar.bench",
    "minipar.cost.cli",
    "minipar.grading.cli",
)
FLOOR = (
    "minipar",
    "minipar.errors",
    "minipar.chapters",
    "minipar.jsonio",
    "minipar.cost",
    "minipar.runtime",
    "minipar.dist",
    "minipar.grid",
    "minipar.model",
    "minipar.plotting",
)


# What an explorer (layer 3) may import besides minipar.widgets: the pure cost model, the errors,
# and these pure chapter modules (standard library only: the pipeline's cost model is its
# schedule, simulated on paper). CONTRIBUTING.md's table says the same.
EXPLORER_IMPORTS = (
    "minipar.cost",
    "minipar.errors",
    "minipar.widgets",
    "minipar.pipeline_parallel.schedules",
    "minipar.pipeline_parallel.simulate",
)


def _under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer_of(module: str) -> int:
    """0 floor, 1 chapters, 2 composition, 3 explorers, 4 grading, 5 commands."""
    if _under(module, COMMANDS):
        return 5
    if _under(module, ("minipar.grading",)):
        return 4
    if _under(module, ("minipar.widgets",)):
        return 3
    if _under(module, ("minipar.three_d",)):
        return 2
    if _under(module, tuple(f"minipar.{c}" for c in CHAPTERS)):
        return 1
    if module == "minipar" or _under(module, FLOOR[1:]):
        return 0
    raise AssertionError(f"{module} is in no layer: add it to CONTRIBUTING.md and this test")


def package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def _chapter_index(module: str) -> int:
    return CHAPTERS.index(module.split(".")[1])


def layer_violations(g) -> set[tuple[str, str]]:
    """Arrows that point up a layer, a chapter importing a later chapter (a chapter may build on
    an earlier one's public API, as CP × TP builds on TP's block; shared helpers live in the
    floor), the pure cost model importing anything outside itself and minipar.errors, or an
    explorer importing anything but :data:`EXPLORER_IMPORTS`."""
    bad = set()
    for a, targets in g.items():
        for b in targets:
            la, lb = layer_of(a), layer_of(b)
            if lb > la:
                bad.add((a, b))
            elif la == lb == 1 and _chapter_index(b) > _chapter_index(a):
                bad.add((a, b))
            elif la == 3 and not _under(b, EXPLORER_IMPORTS):
                bad.add((a, b))
            elif (
                _under(a, ("minipar.cost",))
                and not _under(a, COMMANDS)
                and not _under(b, ("minipar.cost", "minipar.errors"))
            ):
                bad.add((a, b))
    return bad


def test_every_module_is_in_a_layer():
    for module in graph():
        layer_of(module)  # raises for a module no layer names


def test_every_arrow_points_down_the_layers():
    g = _without_pending(graph())
    assert layer_violations(g) == set()


def test_the_layer_check_sees_arrows_that_break_the_layers():
    """Negative control: tensor parallelism importing a later chapter (context parallelism),
    the cost model importing the runtime, and the runtime importing a chapter, are reported."""
    g = _without_pending(graph())
    g["minipar.tensor_parallel.layers"].add("minipar.context_parallel.ring")
    g["minipar.cost.model"].add("minipar.runtime.tracer")
    g["minipar.runtime.launch"].add("minipar.collectives.ring")
    g["minipar.widgets.pipeline_parallel"].add("minipar.pipeline_parallel.executor")
    assert layer_violations(g) == {
        ("minipar.tensor_parallel.layers", "minipar.context_parallel.ring"),
        ("minipar.cost.model", "minipar.runtime.tracer"),
        ("minipar.runtime.launch", "minipar.collectives.ring"),
        ("minipar.widgets.pipeline_parallel", "minipar.pipeline_parallel.executor"),
    }


def test_explorers_load_no_torch():
    """The explorers' Python side imports only the pure modules of EXPLORER_IMPORTS, and their
    packages' __init__ files load no torch either: importing every explorer leaves torch
    unloaded."""
    import subprocess
    import sys

    code = (
        "import sys, pkgutil, importlib, minipar.widgets as w\n"
        "for m in pkgutil.iter_modules(w.__path__): importlib.import_module(f'minipar.widgets.{m.name}')\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out


def figures() -> dict:
    """The graph's figures: packages, layers, arrows between packages, upward arrows, cycles."""
    g = graph()
    arrows = {
        (package_of(a), package_of(b))
        for a, t in g.items()
        for b in t
        if package_of(a) != package_of(b)
    }
    return dict(
        modules=len(g),
        packages=len({package_of(m) for m in g}),
        layers=len({layer_of(m) for m in g}),
        package_arrows=len(arrows),
        upward=len(layer_violations(g)),
        cycles=len(cycles(g)),
    )


if __name__ == "__main__":  # python tests/test_import_graph.py: the figures for a review
    print(figures())


COST_ROOMS = ("kernels", "network", "chapters", "planner", "validation")  # CONTRIBUTING.md's order


def cost_arrows_up(g) -> set[tuple[str, str]]:
    """Arrows from a cost sub-package to one listed after it."""
    room = {m: m.split(".")[2] for m in g if m.count(".") >= 3 and m.split(".")[2] in COST_ROOMS}
    return {
        (a, b)
        for a, targets in g.items()
        for b in targets
        if a in room and b in room and COST_ROOMS.index(room[b]) > COST_ROOMS.index(room[a])
    }


def test_cost_sub_packages_import_only_those_before_them():
    g = graph()
    assert {
        m.split(".")[2] for m in g if m.startswith("minipar.cost.") and m.count(".") >= 3
    } == set(COST_ROOMS)
    assert not cost_arrows_up(g)
    # negative control: the kernels reaching up into a chapter's model is named
    g["minipar.cost.kernels.compute"] = g["minipar.cost.kernels.compute"] | {
        "minipar.cost.chapters.memory_time"
    }
    assert cost_arrows_up(g) == {
        ("minipar.cost.kernels.compute", "minipar.cost.chapters.memory_time")
    }
