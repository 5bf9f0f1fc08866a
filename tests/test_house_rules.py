"""The house's rules that imports alone do not show, read with `ast` from the sources:
- a framework's behaviour is asked of its class (zerosim/frameworks/), never decided by comparing
  its name as a string elsewhere;
- a GPU's figures are written once, in its record in the hardware catalogue (zerosim/hardware/):
  no other module names a GPU, so no second table keyed by one can exist;
- simpy's private fields are touched only by the module that wraps simpy (sim/clock.py).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import simpy

from tests.conftest import ROOT
from zerosim.frameworks import FRAMEWORKS
from zerosim.hardware import GPUS

PACKAGES = ("zerosim", "zero_real")


def sources(*, outside: str = "") -> dict[str, ast.AST]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if outside and rel.startswith(outside):
                continue
            found[rel] = ast.parse(path.read_text(encoding="utf-8"))
    return found


def strings_in(node: ast.AST) -> set[str]:
    """The string constants an expression is or holds (a tuple, list or set of them)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {s for element in node.elts for s in strings_in(element)}
    return set()


def framework_comparisons(tree: ast.AST) -> list[str]:
    """Where a framework's name decides something: compared, the keys of a table by framework
    (a dict with two or more of them), a case's pattern, or a constant given a name (to be
    compared later). A lone dict key is not a table (a sweep file's "deepspeed" config path)."""
    names = set(FRAMEWORKS)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
        elif isinstance(node, ast.Dict):
            keyed = [key for key in node.keys if key is not None and strings_in(key) & names]
            sides = keyed if len(keyed) >= 2 else []
        elif isinstance(node, ast.MatchValue):
            sides = [node.value]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            sides = [node.value] if any(isinstance(t, ast.Name) for t in targets) else []
        else:
            continue
        if any(strings_in(side) & names for side in sides):
            found.append(f"line {node.lineno}")
    return found


@pytest.mark.parametrize("code", [
    'if t.framework in ("fsdp2", "ddp"): pass', 'x = t.framework == "deepspeed"',
    'stages = {"fsdp2": (2, 3), "ddp": (0,)}[t.framework]', 'FSDP = "fsdp2"',
    'match t.framework:\n    case "fsdp2": pass'])
def test_the_framework_rule_sees_a_name_deciding(code):
    assert len(framework_comparisons(ast.parse(code))) == 1


def test_the_framework_rule_lets_a_class_be_asked():
    assert framework_comparisons(ast.parse("x = framework_of(t).keeps_gathered_parameters(t, 2)")) == []
    assert framework_comparisons(ast.parse('out = {"deepspeed": path, "rows": rows}')) == []


def test_no_framework_name_is_compared_outside_the_frameworks_package():
    found = {path: lines for path, tree in sources(outside="zerosim/frameworks/").items()
             if (lines := framework_comparisons(tree))}
    assert found == {}


def gpu_names_in(tree: ast.AST) -> list[str]:
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in GPUS]


def test_the_gpu_rule_sees_a_name():
    name = next(iter(GPUS))
    assert gpu_names_in(ast.parse(f"PEAK_TFLOPS = {{{name!r}: 1.0}}")) == [name]
    assert gpu_names_in(ast.parse("PEAK_TFLOPS = {gpu.name: gpu.hbm_GBps for gpu in GPUS}")) == []


def test_a_gpu_is_named_only_in_its_record():
    """Outside the catalogue no module names a GPU (a GPU's figure keyed by its name elsewhere
    would be a second copy); inside, each name is written once, by its own record."""
    outside = {path: names for path, tree in sources(outside="zerosim/hardware/").items()
               if path.startswith("zerosim/") and (names := gpu_names_in(tree))}
    assert outside == {}
    inside = [name for path, tree in sources().items() if path.startswith("zerosim/hardware/")
              for name in gpu_names_in(tree)]
    assert sorted(inside) == sorted(GPUS), "a GPU's name written twice in the catalogue"


def simpy_private_names() -> set[str]:
    """The underscored attributes simpy's own classes set on themselves (self._x = ...)."""
    found = set()
    for module in (simpy.core, simpy.events, simpy.resources.base, simpy.resources.store,
                   simpy.resources.resource, simpy.resources.container):
        for node in ast.walk(ast.parse(inspect.getsource(module))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id == "self" and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                found.add(node.attr)
    return found


def test_the_simpy_rule_knows_simpys_private_fields():
    assert {"_queue", "_now", "_eid", "_ok", "_value"} <= simpy_private_names()


def test_simpy_private_fields_only_in_the_clock():
    private = simpy_private_names()
    found = {}
    for path, tree in sources().items():
        if path == "zerosim/sim/clock.py" or not path.startswith("zerosim/"):
            continue
        own = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
               and isinstance(node.value, ast.Name) and node.value.id == "self"
               and isinstance(node.ctx, ast.Store)}  # a field the module's own class sets
        uses = sorted({f"{node.attr} (line {node.lineno})" for node in ast.walk(tree)
                       if isinstance(node, ast.Attribute) and node.attr in private - own})
        if uses:
            found[path] = uses
    assert found == {}
