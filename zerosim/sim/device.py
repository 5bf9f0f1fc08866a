"""Device memory no allocator counts: the CUDA context, and NCCL's connection buffers for the
cluster's collectives. What nvidia-smi shows is the allocator's reserved bytes plus these; `plan`
and `memory` subtract them from a GPU's memory before judging what fits, `simulate` adds them to
the reserved bytes it simulates (engine.StageResult.device_bytes)."""

from __future__ import annotations

from zerosim.sim.collectives import Collectives
from zerosim.sim.collectives.ring import Group


def overhead_bytes(scenario) -> int:
    """The CUDA context (cluster.cuda_context_bytes) and NCCL's buffers for a group of the whole
    world (Collectives.buffer_bytes)."""
    c = scenario.cluster
    return c.cuda_context_bytes + Collectives(scenario, Group(c.world_size, c.gpus_per_node)).buffer_bytes
