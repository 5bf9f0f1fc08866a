"""The shape of the code, as docs/architecture.md draws it: imports point one way, down the
layers below, with no cycle; a module is one concept, a package one layer. Read with `ast` from the sources,
so nothing is imported and no third-party tool is needed.

An import of a submodule from outside its package also runs the package's __init__, so it counts
as an import of the package too: a package whose __init__ imports a module that imports back
into the package is a cycle at run time, and is one here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("zerosim", "zero_real")
# Lowest first. A module may import from its own layer or a lower one, never a higher one. A
# package is one layer (or one room of a layer); a module is one concept.
LAYERS = (
    ("foundation", ("zerosim", "zerosim.contract", "zerosim.units", "zerosim.errors",
                    "zerosim.files", "zerosim.commandline", "zerosim.version", "zero_real")),
    ("hardware catalogue", ("zerosim.hardware",)),
    ("frameworks", ("zerosim.frameworks",)),
    ("scenario", ("zerosim.scenario",)),
    ("parallel layout", ("zerosim.parallel",)),
    ("analytic model", ("zerosim.analytic",)),
    ("simulation", ("zerosim.sim",)),
    ("reports", ("zerosim.report",)),
    ("calibration and trade-offs", ("zerosim.calibration", "zerosim.tradeoffs")),
    ("real runs: parts", ("zero_real.parts", "zero_real.checks")),
    ("real runs: stages", ("zero_real.stages",)),
    ("real runs: training and launch", ("zero_real.run",)),
    ("real runs: calibration", ("zero_real.calibration",)),
    ("commands", ("zerosim.cli", "zerosim.__main__", "zero_real.cli", "zero_real.__main__",
                  "zerosim.api", "zero_real.api")),
)
# One concept per module: a module past this is two concepts, and a split names each (its
# docstring's first line). A soft ceiling, not a target: most modules are well under 300.
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@lru_cache(maxsize=None)
def modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _imports(name: str, tree: ast.AST) -> set[str]:
    """Modules of the two packages that `name` imports, anywhere in it (a function's lazy import
    is a dependency too), with the packages whose __init__ those imports run."""
    known, found = modules(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known
                       else node.module for a in node.names]
        else:
            continue
        for target in targets:
            if target.split(".")[0] not in PACKAGES:
                continue
            found.add(target)
            parent = target.rpartition(".")[0]
            while parent and not name.startswith(parent + "."):  # outside: runs its __init__
                found.add(parent)
                parent = parent.rpartition(".")[0]
    found.discard(name)
    return found


@lru_cache(maxsize=None)
def graph() -> dict[str, frozenset[str]]:
    return {name: frozenset(_imports(name, _without_front_door(name, ast.parse(
                path.read_text(encoding="utf-8")))))
            for name, path in modules().items()}


def _without_front_door(name: str, tree: ast.Module) -> ast.Module:
    """A package's module __getattr__ (PEP 562) hands out the API's names (zerosim/api.py,
    zero_real/api.py, on the commands' floor) when first asked for, never on import: every
    `from zerosim.x import y` runs the package's __init__, so its import-time dependencies are
    what the layers are about, and test_the_api_loads_on_first_use proves that one stays out.
    Any other lazy import is a dependency."""
    if name not in PACKAGES:
        return tree
    body = [node for node in tree.body
            if not (isinstance(node, ast.FunctionDef) and node.name == "__getattr__")]
    return ast.Module(body=body, type_ignores=[])


def layer_of(name: str) -> int:
    matches = [(len(prefix), i) for i, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
               if name == prefix or (name.startswith(prefix + ".") and prefix not in PACKAGES)]
    assert matches, f"{name} is in no layer: place it in LAYERS and docs/architecture.md"
    return max(matches)[1]


def cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c in edges), None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_the_cycle_finder_finds_cycles():
    edges = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}),
             "d": frozenset({"a"}), "e": frozenset({"f"}), "f": frozenset({"e"})}
    assert sorted(cycles(edges)) == [["a", "b", "c"], ["e", "f"]]
    assert cycles({"a": frozenset({"b"}), "b": frozenset()}) == []


def test_a_package_import_from_outside_counts_its_init():
    tree = ast.parse("from zerosim.sim.collectives.ring import FLAT\nimport zerosim.sim.engine")
    assert _imports("zerosim.calibration.fit", tree) == {
        "zerosim.sim.collectives.ring", "zerosim.sim.collectives", "zerosim.sim",
        "zerosim.sim.engine"}  # zerosim's own __init__ ran before the importer's
    assert _imports("zerosim.sim.costs", tree) == {"zerosim.sim.collectives.ring",
                                                   "zerosim.sim.collectives", "zerosim.sim.engine"}


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_imports_point_down_the_layers():
    upward = [f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} "
              f"({LAYERS[layer_of(target)][0]})"
              for name, targets in graph().items() for target in sorted(targets)
              if target in modules() and layer_of(target) > layer_of(name)]
    assert upward == []


def test_zerosim_never_imports_zero_real():
    assert [(name, target) for name, targets in graph().items() if name.startswith("zerosim")
            for target in targets if target.startswith("zero_real")] == []


def test_the_contract_depends_on_nothing():
    tree = ast.parse(modules()["zerosim.contract"].read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert imported <= {"__future__", "typing"}


@pytest.mark.parametrize("name", sorted(modules()))
def test_a_module_is_one_named_concept(name):
    """Every module and package says in its docstring's first line what it is (its concept);
    none grows past the ceiling where it is two; no function runs past a screen."""
    text = modules()[name].read_text(encoding="utf-8")
    docstring = ast.get_docstring(ast.parse(text)) or ""
    assert docstring.strip() or name.endswith("__main__"), f"{name}: no docstring naming its concept"
    assert len(text.splitlines()) <= MAX_MODULE_LINES, name
    long = [f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(ast.parse(text))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == [], name


def _fresh_python(code: str) -> subprocess.CompletedProcess:
    """`python -c code` in a new interpreter, so that nothing this test process imported counts."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


def test_the_api_loads_on_first_use():
    """`import zerosim` (and every `from zerosim.x import y`, which runs it) loads none of the
    API's layers; asking for zerosim.load does."""
    code = ("import sys, zerosim, zerosim.units; before = 'zerosim.api' in sys.modules "
            "or 'zerosim.scenario' in sys.modules; zerosim.load; "
            "print(before, 'zerosim.api' in sys.modules)")
    shown = _fresh_python(code)
    assert shown.stdout.split() == ["False", "True"], shown.stderr
    code = ("import sys, zero_real; before = [m for m in ('zero_real.api', 'zero_real.cli', "
            "'torch') if m in sys.modules]; zero_real.measure; print(before, 'zero_real.api' in "
            "sys.modules)")
    shown = _fresh_python(code)
    assert shown.stdout.split() == ["[]", "True"], shown.stderr
