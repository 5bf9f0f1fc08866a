"""The executors' contracts (sim/executor.py) hold on every side: each implementation has every
member of its Protocol, with the Protocol's parameters; the two ranks a stage program may run on
offer the same methods, so a method added to one fails here until the other and the Protocol
have it; and nothing asks a member its contract lacks (read with `ast` from the sources: what
the stage programs ask of their rank, what the rank asks of its engine, what the lockstep asks
of the engine). Which executor runs a step is chosen in one place (executor.choose)."""

from __future__ import annotations

import ast
import inspect

import pytest

from tests.conftest import ROOT, SCENARIOS
from zerosim.scenario.load import load_scenario
from zerosim.sim import executor
from zerosim.sim.engine import Engine
from zerosim.sim.executor import Executor, LockstepHost, ProgramClock, Rank, Rendezvous, Slots
from zerosim.sim.lockstep.ranks import Ranks
from zerosim.sim.lockstep.replay import Replay
from zerosim.sim.lockstep.strands import Lockstep
from zerosim.sim.rank import RankContext
from zerosim.sim.stages.replicated import DDP
from zerosim.sim.stages.zero3 import ZeRO3

TINY = SCENARIOS / "tiny_gpt_4rank_cpu.toml"
DELAYED = ["training.zero_stage=2", "training.framework='deepspeed'",
           "training.optimizer_offload='cpu'", "training.delayed_update=true"]
SIM = ROOT / "zerosim" / "sim"


def members(protocol: type) -> dict[str, object]:
    """A Protocol's members: its annotated attributes (None) and its methods."""
    return {**{name: None for name in protocol.__annotations__}, **methods(protocol)}


def methods(protocol: type) -> dict[str, object]:
    return {name: value for name, value in vars(protocol).items()
            if callable(value) and not name.startswith("_")}


def public_methods(cls: type) -> set[str]:
    return {name for name, value in inspect.getmembers(cls, callable)
            if not name.startswith("_") and name not in vars(object)}


def implementations() -> list[tuple[type, object]]:
    """(Protocol, an instance of each implementation), built as the executors build them."""
    engine = Engine(load_scenario(TINY), 3)
    rank = RankContext(engine, 0)
    lockstep = Lockstep(engine, engine.scenario.world_size)
    ranks = Ranks(lockstep)
    return [(Rank, rank), (Rank, ranks), (Slots, rank.slots(2)), (Slots, ranks.slots(2)),
            (ProgramClock, engine.env), (ProgramClock, lockstep), (Rendezvous, engine),
            (Rendezvous, Replay(engine, {})), (LockstepHost, engine)]


def accepts(protocol_method, method) -> list[str]:
    """What in `method`'s signature differs from the Protocol's: every parameter of the Protocol
    in its place, by name, kind and default; any more only with a default."""
    want = list(inspect.signature(protocol_method).parameters.values())[1:]  # less self
    have = list(inspect.signature(method).parameters.values())
    wrong = [f"{w} as {h}" for w, h in zip(want, have)
             if (w.name, w.kind, w.default) != (h.name, h.kind, h.default)]
    wrong += [f"{w} missing" for w in want[len(have):]]
    wrong += [f"{h} more, without a default" for h in have[len(want):] if h.default is h.empty]
    return wrong


@pytest.mark.parametrize("protocol, instance", implementations(),
                         ids=lambda x: getattr(x, "__name__", type(x).__name__))
def test_every_implementation_has_every_member_of_its_protocol(protocol, instance):
    missing = [name for name in members(protocol) if not hasattr(instance, name)]
    assert missing == []
    wrong = {name: bad for name, method in methods(protocol).items()
             if (bad := accepts(method, getattr(instance, name)))}
    assert wrong == {}


def test_the_two_ranks_offer_the_same_methods_and_the_same_slots():
    """A method added to one rank (or its slots) and not the other fails here: a stage program
    that called it would run on one executor and not on the other."""
    assert public_methods(RankContext) == public_methods(Ranks) == set(methods(Rank))
    pairs = [type(instance) for protocol, instance in implementations() if protocol is Slots]
    assert [public_methods(cls) for cls in pairs] == [set(methods(Slots))] * 2


def attributes_of(path, receivers: set[str]) -> set[str]:
    """Attributes read on `receivers` (a name, `self.name`, or `x.name`) in a module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute):
            owner = node.value
            name = owner.id if isinstance(owner, ast.Name) else (
                owner.attr if isinstance(owner, ast.Attribute) else None)
            if name in receivers:
                found.add(node.attr)
    return found


def slot_names(path) -> set[str]:
    """The attributes a stage program keeps its slots in (self.x = ctx.slots(n))."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "slots"):
            found |= {t.attr for t in node.targets if isinstance(t, ast.Attribute)}
    return found


def test_stage_programs_ask_their_rank_only_what_the_contract_offers():
    programs = sorted((SIM / "stages").glob("*.py"))
    asked = set().union(*(attributes_of(p, {"ctx"}) for p in programs))
    assert asked and asked <= set(members(Rank))
    clock = set().union(*(attributes_of(p, {"env"}) for p in programs))
    assert clock == set(members(ProgramClock))
    slots = set().union(*(slot_names(p) for p in programs))
    assert slots == {"free_buckets", "gather_slots", "grad_slots"}
    used = set().union(*(attributes_of(p, slots) for p in programs))
    assert used == set(members(Slots))


def test_a_rank_asks_its_engine_only_what_the_rendezvous_offers():
    assert attributes_of(SIM / "rank.py", {"engine"}) == set(members(Rendezvous))


def test_the_lockstep_asks_the_engine_only_what_its_host_contract_offers():
    asked = set().union(*(attributes_of(SIM / "lockstep" / name, {"engine"})
                          for name in ("strands.py", "ranks.py", "replay.py")))
    assert asked == set(members(LockstepHost))


class Delayed(DDP):
    stream_beside_step = True


@pytest.mark.parametrize("granularity, mode, program, world_size, expected", [
    ("phase", "symmetric", DDP, 4, Executor.PHASE),
    ("phase", "per_rank", ZeRO3, 4, Executor.PHASE),
    ("collective", "symmetric", ZeRO3, 4, Executor.BATCHED),
    ("collective", "classes", DDP, 4, Executor.BATCHED),
    ("collective", "per_rank", DDP, 4, Executor.LOCKSTEP),
    ("collective", "per_rank", ZeRO3, 4, Executor.LOCKSTEP),
    ("collective", "per_rank", DDP, 1, Executor.BATCHED),  # one rank: nothing to vectorize
    ("collective", "per_rank", Delayed, 4, Executor.BATCHED),  # a stream beside the step
])
def test_one_place_chooses_the_executor(granularity, mode, program, world_size, expected):
    assert executor.choose(granularity, mode, program, world_size) is expected


def test_closed_forms_are_the_programs_whose_collectives_have_their_links_alone():
    assert [Executor.BATCHED.closed_forms(p) for p in (DDP, ZeRO3, Delayed)] == [True, False,
                                                                                 False]
    assert [e.closed_forms(DDP) for e in Executor] == [False, True, True]
    with pytest.raises(ValueError, match="granularity 'chunk'"):
        executor.choose("chunk", "symmetric", DDP, 4)


def test_the_stage_programs_say_what_the_engine_needs():
    """A delayed update's host stream runs beside the whole step: batched without closed forms
    even at stages 0-2, and not in lockstep under jitter."""
    plain = load_scenario(TINY)
    assert [Engine(plain, stage).program.collectives_share_links for stage in range(4)] == [
        False, False, False, True]
    delayed = load_scenario(TINY, [*DELAYED, "variation.jitter_pct=5"])
    engine = Engine(delayed, 2)
    assert engine.program.stream_beside_step and not engine.program.collectives_share_links
    assert (engine.executor, engine.closed_form) == (Executor.BATCHED, False)
    jittered = Engine(load_scenario(TINY, ["variation.jitter_pct=5"]), 2)
    assert (jittered.executor, jittered.closed_form) == (Executor.LOCKSTEP, True)
