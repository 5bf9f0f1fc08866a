"""Device memory no allocator counts: the CUDA context, and NCCL's connection buffers for the
cluster's collectives. What nvidia-smi shows is the allocator's reserved bytes plus these; `plan`
and `memory` subtract them from a GPU's memory before judging what fits, `simulate` adds them to
the reserved bytes it simulates (engine.StageResult.device_bytes)."""

from __future__ import annotations

from zerosim.analytic.memory import stage_memory
from zerosim.contract import STAGES
from zerosim.scenario.checks import within_cap
from zerosim.sim.collectives import Collectives
from zerosim.sim.groups import node_gpus, subgroups, world_group


def overhead(cluster, collectives: Collectives, *others: Collectives) -> int:
    """The CUDA context (cluster.cuda_context_bytes) and NCCL's buffers for `collectives` and
    for the communicators of the subgroups beside it (Collectives.buffer_bytes each)."""
    return cluster.cuda_context_bytes + sum(c.buffer_bytes for c in (collectives, *others))


def overhead_bytes(scenario, stage: int | None = None) -> int:
    """overhead() for collectives over the data-parallel ranks (the whole world without tensor
    parallelism) and every subgroup the scenario's schemes use at `stage` (default: the
    scenario's; sim/groups.py: tensor parallelism's group, hybrid sharding, ZeRO++): a rank
    holds one communicator of each."""
    c = scenario.cluster
    stage = scenario.training.zero_stage if stage is None else stage
    n = node_gpus(scenario, stage)
    return overhead(c, Collectives(scenario, world_group(scenario, stage), node_gpus=n), *(
        Collectives(scenario, group, node_gpus=n)
        for group in subgroups(scenario, stage).values()))


def check_device_scale(scenario):
    """The scenario, if each stage's peak plus what no allocator counts (the CUDA context, NCCL's
    buffers: overhead_bytes), the device bytes simulate and sweep report, stays within 2**53
    (review I6: cuda_context_MiB = 2**33 passed its own cap and device_bytes did not)."""
    for s in STAGES:
        peak, extra = stage_memory(scenario, s).peak_bytes, overhead_bytes(scenario, s)
        within_cap(f"stage {s} device bytes", peak + extra,
                   f"peak {peak:,} + {extra:,} of CUDA context and NCCL buffers")
    return scenario
