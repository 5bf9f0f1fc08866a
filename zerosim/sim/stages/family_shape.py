"""The numbers the ZeRO family's stage programs (stages/family.py) work from, derived once per
stage: which group shards, what follows each reduction, the host operations of the optimizer
step and of each parameter fetch, and ZeRO++'s switches. The layout itself (shard degree,
replicas, hpZ, qgZ, the node) is the step's mesh (StepShape.mesh), not copied here."""

from __future__ import annotations

from dataclasses import dataclass, field

from zerosim.analytic.memory import MOMENTS, grad_bytes_per_element, shard_elements
from zerosim.analytic.model import total_params
from zerosim.parallel.mesh import Mesh
from zerosim.parallel.tensor import rank_model
from zerosim.scenario.family import offloads, zeropp
from zerosim.sim.groups import HPZ, SHARD, WORLD
from zerosim.sim.network import CPU_ADAM, H2D, NVME_READ, NVME_WRITE
from zerosim.sim.offload import GRAD_TO_HOST_BYTES, kernel_seconds
from zerosim.units import BYTES_PER_ELEMENT, FP32_BYTES


@dataclass(frozen=True)
class FamilyShape:
    group: str = WORLD
    """The group that shards the model states: the world, or hybrid sharding's shard group."""
    replica_every_micro_step: bool = True
    """Under hybrid sharding (the mesh's replicas), whether every micro-step all-reduces them."""
    offload: bool = False
    offload_every_micro_step: bool = False
    """Stages 2-3 copy each micro-step's reduced partition down (no GPU shard holds them in
    between: memory.stage_memory); stage 1 reduces in the last one only."""
    grad_to_host_per_byte: float = 0.0
    """Bytes copied to the host per byte of gradient the rank reduces (its part, in fp32)."""
    step_ops: list[tuple[str, float]] = field(default_factory=list)
    """The optimizer step's host operations in order (op, bytes; the CPU step: elements)."""
    fetch_ops: list[tuple[str, float]] = field(default_factory=list)
    """Parameter offload: host operations before each all-gather, per byte it gathers."""
    delayed: bool = False
    backward_group: str = WORLD
    """Where backward's all-gathers run (ZeRO++ hpZ: the secondary partition's group)."""
    quantized_weights: bool = False
    kernel_s_per_byte: float = 0.0
    """Seconds per byte of a memory-bound kernel (quantization: offload.kernel_seconds)."""


def family_shape(scenario, mesh: Mesh) -> FamilyShape:
    t, p, stage = scenario.training, scenario.parallelism, mesh.stage
    ways, grouped = mesh.dp_shard, mesh.hybrid
    bp, bg = BYTES_PER_ELEMENT[t.precision], grad_bytes_per_element(t, stage)
    offload = t.optimizer_offload != "none" and stage >= 1
    shard = shard_elements(total_params(rank_model(scenario)), ways)
    states = FP32_BYTES * (1 + MOMENTS[t.optimizer])
    params_off = stage == 3 and t.param_offload != "none"
    step_ops: list[tuple[str, float]] = []
    if offload:
        nvme = t.optimizer_offload == "nvme"
        step_ops = ([(NVME_READ, states * shard)] if nvme else []) + [(CPU_ADAM, shard)]
        step_ops += [(NVME_WRITE, states * shard)] if nvme else []
        if not params_off:  # the updated 16-bit partition goes back to the GPU
            step_ops.append((H2D, bp * shard))
        elif t.param_offload == "nvme":  # the host's parameters go back to the drives
            step_ops.append((NVME_WRITE, bp * shard))
    fetch = []
    if params_off:
        fetch = ([(NVME_READ, 1 / ways)] if t.param_offload == "nvme" else []) + [(H2D, 1 / ways)]
    return FamilyShape(
        group=SHARD if grouped else WORLD,
        replica_every_micro_step=p.replica_allreduce == "every_micro_step",
        offload=offload, offload_every_micro_step=stage >= 2,
        grad_to_host_per_byte=GRAD_TO_HOST_BYTES / (bg * ways) if offload else 0.0,
        step_ops=step_ops, fetch_ops=fetch, delayed=t.delayed_update and offload,
        backward_group=HPZ if mesh.hpz else (SHARD if grouped else WORLD),
        quantized_weights=t.quantized_weights and stage == 3,
        kernel_s_per_byte=kernel_seconds(scenario, 1.0))


def uses_family(scenario) -> bool:
    """Whether a stage program needs stages/family.py's behaviour at all."""
    t, p = scenario.training, scenario.parallelism
    return bool(p.shard_group or offloads(t) or zeropp(t, p))
