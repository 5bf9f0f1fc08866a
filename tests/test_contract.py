"""The shared vocabulary of zerosim and zero_real is written once, in zerosim/contract.py: no
second literal list of its names in either package or in bench/, no second profile format, no
record of the step-event schema built by hand. Read with `ast`: nothing is imported but the
contract itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT
from zerosim import contract

CONTRACT = ROOT / "zerosim" / "contract.py"
SOURCES = sorted(p for folder in ("zerosim", "zero_real", "bench")
                 for p in (ROOT / folder).rglob("*.py") if p != CONTRACT)
# Each group: names that a second literal list would restate.
VOCABULARIES = {
    "collective ops": set(contract.OPS),
    "unit kinds": set(contract.UNIT_KINDS),
    "memory points": set(contract.MEMORY_POINTS),
    "step phases": set(contract.STEP_PHASES),
    "simulation modes": set(contract.SIM_MODES),
    "collective implementations": set(contract.COLLECTIVE_IMPLS),
    "stage names": set(contract.STAGE_NAMES.values()),
}
EVENT_KEYS = set(contract.StepEvent.__annotations__)
SAMPLE_KEYS = set(contract.MemorySample.__annotations__)


def _literals(node: ast.AST) -> list:
    """The constant elements of a tuple, list or set display, or of a dict's keys."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        elements = node.elts
    elif isinstance(node, ast.Dict):
        elements = [k for k in node.keys if k is not None]
    else:
        return []
    return [e.value for e in elements if isinstance(e, ast.Constant)]


def restatements(source: str, where: str) -> list[str]:
    """Every literal collection in `source` naming two or more words of one vocabulary, or the
    four stages; every hand-built step event or memory sample; any second profile format."""
    found = []
    for node in ast.walk(ast.parse(source)):
        values = _literals(node)
        strings = {v for v in values if isinstance(v, str)}
        for group, words in VOCABULARIES.items():
            if len(strings & words) >= 2:
                found.append(f"{where}:{node.lineno}: {group} {sorted(strings & words)}")
        numbers = {v for v in values if type(v) is int}
        if numbers == set(contract.STAGES) or strings == set(map(str, contract.STAGES)):
            found.append(f"{where}:{node.lineno}: the stages")
        if isinstance(node, ast.Dict) and (EVENT_KEYS <= strings or SAMPLE_KEYS <= strings):
            found.append(f"{where}:{node.lineno}: a record built by hand (use contract's TypedDict)")
        if isinstance(node, ast.Constant) and node.value == contract.PROFILE_FORMAT:
            found.append(f"{where}:{node.lineno}: the profile format")
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id in ("FORMAT", "VERSION", "PROFILE_VERSION")
                for t in node.targets):
            found.append(f"{where}:{node.lineno}: a second profile format or version")
    return found


def test_the_checker_sees_restated_names():
    source = ('OPS = ("all_reduce", "reduce_scatter")\n'
              'x = {"embedding": 1, "head": 2}\n'
              'if p in ["after_init", "after_step"]: pass\n'
              'for s in (0, 1, 2, 3): pass\n'
              'e = {"rank": 0, "stream": "comm", "name": "b", "phase": "forward", "layer": None,\n'
              '     "op": None, "bytes": 0, "start_s": 0.0, "end_s": 1.0}\n'
              'VERSION = 1\n'
              'f = "zerosim-profile"\n')
    found = restatements(source, "x.py")
    assert sorted(line.split(": ", 1)[1].split(" [")[0] for line in found) == sorted([
        "a second profile format or version", "collective ops", "unit kinds", "memory points",
        "the stages", "a record built by hand (use contract's TypedDict)", "the profile format"])
    # One name alone, or names of different vocabularies, are not a list of either.
    assert restatements('a = ("all_reduce", "scatter")\nb = ("auto", "ring", "hierarchical")\n'
                        'c = (0, 1)\n', "y.py") == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_second_list_of_a_shared_name(path: Path):
    assert restatements(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))) == []


def test_the_contract_holds_what_both_sides_rely_on():
    assert contract.COLLECTIVE_OPS == ("all_reduce", "reduce_scatter", "all_gather")
    assert set(contract.COLLECTIVE_OPS) < set(contract.OPS)
    assert set(contract.RING_WALKS) == set(contract.OPS)
    # nccl-tests' bus bandwidth factors (PERFORMANCE.md), and a ring's n - 1 steps per walk
    assert [contract.busbw_factor(op, 8) for op in contract.OPS] == [1.75, 0.875, 0.875, 1, 1]
    assert [contract.ring_steps(op, 8) for op in contract.OPS] == [14, 7, 7, 14, 14]
    assert contract.MEASUREMENT_REQUIRED == ("scenario", "stage", "world_size", "events", "ranks",
                                             "memory_samples", "steps")
    assert list(contract.STAGE_NAMES) == list(contract.STAGES)
