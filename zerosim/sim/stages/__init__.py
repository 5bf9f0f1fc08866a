"""The stage programs: what one rank does in one training step, mirroring zero_real/stages/.

Read them in the paper's order, each the difference it makes to the one before:

| stage | program | module | what it changes |
|---|---|---|---|
| 0 | `DDP` | replicated.py | everything replicated; gradients all-reduced in buckets at the end of backward |
| 1 | `ZeRO1` | replicated.py | optimizer states sharded: reduce-scatter, step on the shard, all-gather |
| 2 | `ZeRO2` | replicated.py | gradients sharded too: buckets copied out and freed once reduced |
| 3 | `ZeRO3` | zero3.py | parameters sharded: each unit gathered before forward and backward |
| 2 under FSDP2 | `KeepGathered` | fsdp2.py | ZeRO-3 that keeps forward's gathered units until backward |
| 3 under FSDP1 | `RootKept` | fsdp1.py | ZeRO-3 whose root (embedding and head) is gathered once and kept |
| 3 under DeepSpeed | `ModuleFetch` | fetch.py | ZeRO-3 gathered module by module, as DeepSpeed's fetch plan says |

The ZeRO family (offload, hybrid sharding, ZeRO++) is mixed into any of them by family.py from
the numbers of family_shape.py, tensor parallelism's collectives by tensor.py; step_shape.py derives everything a program works from, once per
stage. `stage_program` is the one place a scenario picks its program.
"""

from __future__ import annotations

from zerosim.contract import STAGES
from zerosim.frameworks import framework_of
from zerosim.sim.stages.family import with_family
from zerosim.analytic.fetch import fetches_by_module
from zerosim.sim.stages.fetch import ModuleFetch
from zerosim.sim.stages.fsdp1 import RootKept
from zerosim.sim.stages.fsdp2 import KeepGathered
from zerosim.sim.stages.replicated import DDP, ZeRO1, ZeRO2
from zerosim.sim.stages.tensor import with_tensor_parallel
from zerosim.sim.stages.zero3 import ZeRO3

STAGE_PROGRAMS = dict(zip(STAGES, (DDP, ZeRO1, ZeRO2, ZeRO3)))


def stage_program(scenario, stage: int) -> type:
    """The program a rank runs for `stage` under the scenario's framework and family schemes."""
    t = scenario.training
    keeps = framework_of(t).keeps_gathered_parameters(t, stage)
    root = framework_of(t).keeps_root_gathered(t, stage) and not scenario.model.is_bare
    program = (KeepGathered if keeps else RootKept if root
               else ModuleFetch if fetches_by_module(scenario, stage) else STAGE_PROGRAMS[stage])
    return with_tensor_parallel(with_family(program, scenario), scenario)
