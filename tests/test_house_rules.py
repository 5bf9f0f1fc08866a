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


def _framework_sides(node: ast.AST, names: set[str]) -> list[ast.AST]:
    """The parts of `node` where a framework's name would decide something."""
    if isinstance(node, ast.Compare):
        return [node.left, *node.comparators]
    if isinstance(node, ast.Dict):  # a table by framework: every key one of them
        keys = [key for key in node.keys if key is not None]
        return keys if keys and all(strings_in(key) & names for key in keys) else []
    if isinstance(node, ast.MatchValue):
        return [node.value]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):  # a name for it, to compare later
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [node.value] if node.value and any(isinstance(t, ast.Name) for t in targets) else []
    if isinstance(node, ast.Subscript):  # REGISTRY["fsdp2"], {...}.get is a Call below
        return [node.slice]
    if isinstance(node, ast.Call):  # an argument, or a keyword named after one (dict(fsdp2=...))
        named = [ast.Constant(k.arg) for k in node.keywords if k.arg in names]
        return [*node.args, *named]
    if isinstance(node, ast.arguments):  # a default (framework="fsdp2")
        return [*node.defaults, *(d for d in node.kw_defaults if d is not None)]
    return []


def framework_comparisons(tree: ast.AST) -> list[str]:
    """Where a framework's name decides something: compared, the keys of a table by framework,
    a case's pattern, a name given to it, an index, an argument or a default. A dict with other
    keys beside one is not a table by framework (a sweep file's "deepspeed" config path)."""
    names = set(FRAMEWORKS)
    return [f"line {getattr(node, 'lineno', 0)}" for node in ast.walk(tree)
            if any(strings_in(side) & names or _registry_entry(side) and isinstance(node, ast.Compare)
                   for side in _framework_sides(node, names))]


def _registry_entry(node: ast.AST) -> bool:
    """FRAMEWORKS[i]: a name by its place in the registry, which decides as the name would."""
    return (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and node.value.id == "FRAMEWORKS")


@pytest.mark.parametrize("code", [
    'if t.framework in ("fsdp2", "ddp"): pass', 'x = t.framework == "deepspeed"',
    'stages = {"fsdp2": (2, 3), "ddp": (0,)}[t.framework]', 'FSDP = "fsdp2"',
    'OFFLOADERS = ("zero", "deepspeed")', 'match t.framework:\n    case "fsdp2": pass',
    'f = REGISTRY["fsdp2"]', 'x = {"fsdp2": 3}.get(t.framework)', 'x = dict(fsdp2=3)',
    'def f(framework="fsdp2"): pass', 'x = t.framework == FRAMEWORKS[0]'])
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
               if (names := gpu_names_in(tree))}  # zerosim's other modules and zero_real
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


def simpy_private_uses(tree: ast.AST, private: set[str]) -> list[str]:
    """Where a module reads or writes one of simpy's private fields: on any object but `self`,
    and on `self` unless the module's own class sets that field."""
    own = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
           and isinstance(node.value, ast.Name) and node.value.id == "self"
           and isinstance(node.ctx, ast.Store)}
    return sorted({f"{node.attr} (line {node.lineno})" for node in ast.walk(tree)
                   if isinstance(node, ast.Attribute) and node.attr in private
                   and not (isinstance(node.value, ast.Name) and node.value.id == "self"
                            and node.attr in own)})


def test_the_simpy_rule_sees_a_private_field():
    planted = ast.parse("class Slot:\n    def __init__(self):\n        self._value = 0\n"
                        "    def fire(self, event):\n        event._ok = True\n"
                        "        return self._value, env._queue, event._value")
    assert simpy_private_uses(planted, {"_ok", "_value", "_queue"}) == [
        "_ok (line 5)", "_queue (line 6)", "_value (line 6)"]


def test_simpy_private_fields_only_in_the_clock():
    private = simpy_private_names()
    found = {path: uses for path, tree in sources().items()
             if path.startswith("zerosim/") and path != "zerosim/sim/clock.py"
             and (uses := simpy_private_uses(tree, private))}
    assert found == {}
