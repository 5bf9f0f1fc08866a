"""Device memory no allocator counts: the CUDA context, and NCCL's connection buffers for the
cluster's collectives. What nvidia-smi shows is the allocator's reserved bytes plus these; `plan`
and `memory` subtract them from a GPU's memory before judging what fits, `simulate` adds them to
the reserved bytes it simulates (engine.StageResult.device_bytes)."""

from __future__ import annotations

from zerosim.sim.collectives import Collectives
from zerosim.sim.groups import subgroups, world_group


def overhead(cluster, collectives: Collectives, *others: Collectives) -> int:
    """The CUDA context (cluster.cuda_context_bytes) and NCCL's buffers for `collectives` and
    for the communicators of the subgroups beside it (Collectives.buffer_bytes each)."""
    return cluster.cuda_context_bytes + sum(c.buffer_bytes for c in (collectives, *others))


def overhead_bytes(scenario, stage: int | None = None) -> int:
    """overhead() for collectives over the whole world and every subgroup the scenario's
    schemes use at `stage` (default: the scenario's; sim/groups.py: hybrid sharding, ZeRO++)."""
    c = scenario.cluster
    stage = scenario.training.zero_stage if stage is None else stage
    world = world_group(scenario, stage)
    return overhead(c, Collectives(scenario, world), *(
        Collectives(scenario, group, node_gpus=world.gpus_per_node)
        for group in subgroups(scenario, stage).values()))
