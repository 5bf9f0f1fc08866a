"""Device memory no allocator counts: the CUDA context, and NCCL's connection buffers for the
cluster's collectives. What nvidia-smi shows is the allocator's reserved bytes plus these; `plan`
and `memory` subtract them from a GPU's memory before judging what fits, `simulate` adds them to
the reserved bytes it simulates (engine.StageResult.device_bytes)."""

from __future__ import annotations

from zerosim.sim.collectives import Collectives
from zerosim.sim.collectives.ring import Group


def overhead(cluster, collectives: Collectives) -> int:
    """The CUDA context (cluster.cuda_context_bytes) and NCCL's buffers for `collectives`
    (Collectives.buffer_bytes)."""
    return cluster.cuda_context_bytes + collectives.buffer_bytes


def overhead_bytes(scenario) -> int:
    """overhead() for collectives over the whole world."""
    c = scenario.cluster
    return overhead(c, Collectives(scenario, Group(c.world_size, c.gpus_per_node)))
