"""The numbers a stage program works from, derived once per stage from the scenario (and its
calibration profile, through costs.py): unit sizes, compute seconds, activation and buffer bytes,
the optimizer's cost, and the limit on how many pieces one simulated step may have."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from zerosim.errors import InputError
from zerosim.frameworks import framework_of
from zerosim.analytic.fetch import fetch_steps
from zerosim.analytic.memory import (MOMENTS, StageMemory, grad_bytes_per_element,
                                     persistent_bytes, shard_elements, stage_memory)
from zerosim.analytic.tensor_comm import TensorCollectives, tensor_collectives, window_flops
from zerosim.analytic.model import (activations, gather_units, gradient_units, root_elements,
                           total_params, unit_activation_bytes, unit_flops, unit_tensor_shapes)
from zerosim.parallel.mesh import Mesh, mesh_of
from zerosim.parallel.tensor import rank_model
from zerosim.sim.stages.family_shape import FamilyShape, family_shape
from zerosim.sim.costs import (OptimizerCost, compute_seconds, gather_buffers, gradient_path,
                               idle_hook_savings, memory_terms, optimizer_cost, overlap_windows)
from zerosim.units import BYTES_PER_ELEMENT, FP32_BYTES, mib_to_bytes


@dataclass(frozen=True)
class StepShape:
    """The numbers every rank of a stage works from, derived once from the scenario."""

    stage: int
    mesh: Mesh
    memory: StageMemory
    gather_elements: list[int]
    gradient_elements: list[int]
    forward_s: list[float]
    backward_s: list[float]
    """Compute seconds of each unit's forward and backward (costs.py)."""
    activation_bytes: list[int]
    recompute_bytes: list[int]
    """Regenerated activations alive during each unit's backward (checkpointed layers only)."""
    param_bytes_per_element: int
    grad_bytes_per_element: int
    params: int
    shard: int
    bucket_bytes: int
    allgather_bucket_bytes: int
    optimizer: OptimizerCost
    optimizer_workspace_per_element: float
    """Temporaries of the optimizer step per element it updates (a profile's measurement)."""
    prefetch_layers: int
    gradient_reduction: str
    overlap_comm: bool
    gradient_accumulation: int
    """Micro-steps (forward and backward of one micro-batch) per optimizer step."""
    persistent_bytes: int
    """Buffers alive all step beyond the model states (DDP's bucket copies; DeepSpeed's whole
    buckets and persistent parameters)."""
    loss_blocks: dict[str, list[int]]
    """The loss's fp32 transients, during the head's forward and backward, tensor by tensor
    (Framework.loss_blocks)."""
    step_blocks: list[tuple[str, int]]
    """What the optimizer step holds for its duration, (category, bytes) per allocation
    (_step_blocks: DeepSpeed's fp32 gradient partition, foreach Adam's square roots)."""
    workspace_bytes: int
    """Transient bytes during backward beyond the named buffers (a profile's measurement)."""
    residue_bytes: int
    """Bytes the allocator keeps after backward (a profile's measurement)."""
    grad_shard_bytes: list[list[int]] = field(default_factory=list)
    """Where sharded gradients come into being as each unit's reduce-scatter completes instead
    of a buffer held all step (Framework.grads_made_in_backward: FSDP2), each unit's parameter
    tensors' parts of the rank's gradient shard."""
    family: FamilyShape = field(default_factory=FamilyShape)
    """Hybrid sharding, offload and ZeRO++ (family_shape.py; stages/family.py runs them)."""
    tensor: TensorCollectives = field(default_factory=TensorCollectives)
    """Tensor parallelism's collectives per unit and pass (analytic/tensor_comm.py; stages/
    tensor.py runs them); none when t = 1."""
    tensor_windows: list[tuple[float, ...]] = field(default_factory=list)
    """Per unit, per backward TP collective: seconds of the GEMM it runs beside under
    Megatron's default (0: it blocks), taken out of backward_s (stages/tensor.py runs that GEMM
    beside it); empty without TP or under tp_comm_overlap."""
    gather_buffers: list[list[int]] = field(default_factory=list)
    """ZeRO-3: per unit, the elements of each flat buffer gathered, one collective each
    (Framework.gather_buffers); empty: one per unit, gather_elements'."""
    fetch: object = None
    """ZeRO-3 module by module (analytic/fetch.fetch_steps: DeepSpeed), the indexed plan
    stages/fetch.py runs; None: whole units."""
    root_elements: int = 0
    """ZeRO-3 with the root kept gathered (Framework.keeps_root_gathered: FSDP1): the elements
    unit 0 gathers for the embedding and the head at once (model.root_elements); 0 otherwise."""
    keeps_last_unit: bool = False
    """ZeRO-3: the last unit stays gathered from its forward into its backward (a profile's
    last_unit_kept mechanism: zero_real's zero3.py)."""
    tied_grad_bytes: int = 0
    """ZeRO-3 with a tied matrix: its whole gradient held from the head's backward to the
    embedding's (a profile's tied_grad_kept mechanism: zero_real's zero3.py); 0: freed with the
    head's gradient once reduced."""
    whole_buckets: bool = False
    """ZeRO-2's buckets are the framework's whole buffers, counted in persistent_bytes
    (Framework.bucket_buffers: DeepSpeed's ipg_buffer); False: they grow as they fill."""
    bucket_pool_bytes: int = 0
    """ZeRO-2's bucket buffers kept from step to step (a profile's bucket_pool mechanism:
    zero_real's ZeRO2), allocated from the step's start; 0: each bucket freed once reduced."""
    bucket_host_s: float = 0.0
    """Host seconds of one gradient bucket's reduction beyond its collective, on the compute
    stream before it launches (a profile's fit.grad_path: zero_real's reduce_bucket)."""
    idle_hook_savings_s: list[float] = field(default_factory=list)
    """Per unit, seconds a backward that does not reduce takes less than backward_s (its hooks
    only count: a profile's fit.grad_path idle_hook_s); empty: the same."""
    state_blocks: list[tuple[str, int]] = field(default_factory=list)
    """Where model states are one tensor per parameter (FSDP2: each sharded parameter, then
    each of its optimizer moments), (category, bytes) in allocation order; else one block per
    category. Either way they add up to memory's bytes exactly."""


# A step costs a few simpy events per bucket and per all-gather chunk, and about ten times that
# per unit; beyond this many pieces (about 10 s) it would take minutes. The shipped scenarios need
# a few thousand.
MAX_STEP_PIECES = 50_000
UNIT_WEIGHT = 10


def _check_size(stage: int, units: int, grad_bytes: int, bucket_bytes: int, param_bytes: int,
                allgather_bytes: int, micro_steps: int = 1) -> None:
    buckets = math.ceil(grad_bytes / bucket_bytes) if stage < 3 else 0
    chunks = math.ceil(param_bytes / allgather_bytes) if stage in (1, 2) else 0
    if micro_steps * (UNIT_WEIGHT * units + buckets) + chunks > MAX_STEP_PIECES:
        parts = [f"{micro_steps:,} micro-steps x ({UNIT_WEIGHT} x {units:,} units"
                 + (f" + {buckets:,} gradient buckets)" if buckets else ")")]
        if micro_steps == 1:
            parts = [f"{UNIT_WEIGHT} x {units:,} units"]
        if buckets and micro_steps == 1:
            parts.append(f"{grad_bytes:,} / {bucket_bytes:,} = {buckets:,} gradient buckets")
        if chunks:
            parts.append(f"{param_bytes:,} / {allgather_bytes:,} = {chunks:,} all-gather chunks")
        raise InputError(
            f"stage {stage} would simulate {' + '.join(parts)}, more than {MAX_STEP_PIECES:,} "
            f"pieces: raise training.reduce_bucket_MiB or allgather_bucket_MiB, or lower "
            f"model.layers or training.gradient_accumulation")


# HBM bytes per element of torch's foreach Adam (FSDP2's and DDP's optimizer; fp32 parameters,
# gradients and moments), pass by pass as torch/optim/adam.py's _multi_tensor_adam makes them:
# AdamW's decay mul_ (read and write the parameter, 8), lerp_ of exp_avg (read it and the
# gradient, write it, 12), mul_ and addcmul_ of exp_avg_sq (8 + 12), sqrt into new tensors (8),
# div_ and add_ eps on those (8 + 8), addcdiv_ into the parameter (read it, exp_avg and the
# roots, write it, 16): 80; Adam without decoupled decay 72. A fused step moves 28. On the H100
# (profiles/h100/microbench_2026-11-24.json) foreach took 0.0298 ns and fused 0.0107 ns per
# element: 2.8x, as 80 / 28 = 2.9 says.
FOREACH_ADAM_BYTES = {"adamw": 80, "adam": 72}


def _split(total: int, weights: list[int]) -> list[int]:
    """total in integer parts proportional to weights, adding up exactly."""
    ends, run, whole = [], 0, max(1, sum(weights))
    for w in weights:
        run += w
        ends.append(total * run // whole)
    return [end - start for start, end in zip([0, *ends], ends)]


def _tensor_shards(scenario, n: int) -> list[list[int]]:
    """Each unit's parameter tensors as a rank holds them, sharded along their rows over n ranks
    (ceil(rows / n) x columns elements; n = 1: whole)."""
    return [[-(-rows // n) * cols for rows, cols in unit]
            for unit in unit_tensor_shapes(rank_model(scenario))]


def _per_tensor(scenario, mesh: Mesh, memory: StageMemory) -> tuple[list[list[int]], list[tuple[str, int]]]:
    """FSDP2's per-parameter states: the gradient shard per unit and tensor, and the allocation
    order of parameters then moments (Adam's exp_avg, exp_avg_sq per parameter)."""
    moments = MOMENTS[scenario.training.optimizer]
    units = _tensor_shards(scenario, mesh.dp_shard)  # FSDP2: stages 2-3 alike
    flat = [w for unit in units for w in unit]
    grads, at = _split(memory.grads_bytes, flat), 0
    per_unit = []
    for unit in units:
        per_unit.append(grads[at:at + len(unit)])
        at += len(unit)
    optimizer = _split(memory.optimizer_bytes, [w for w in flat for _ in range(moments)])
    return per_unit, ([("params", b) for b in _split(memory.params_bytes, flat)]
                      + [("optimizer", b) for b in optimizer])


def _step_blocks(scenario, mesh: Mesh, memory: StageMemory) -> list[tuple[str, int]]:
    """Framework.step_transient_bytes as allocated: DeepSpeed's fp32 gradient partition in one
    buffer; foreach Adam's square roots one tensor per parameter (per shard of it), under
    FSDP2's sharding along rows or whole under DDP."""
    total, whole = memory.step_bytes, framework_of(scenario.training).step_transient_whole
    if not total or whole or scenario.model.is_bare:
        return [(whole or "workspace", total)] if total else []
    weights = [w for unit in _tensor_shards(scenario, mesh.dp_shard) for w in unit]
    return [("workspace", b) for b in _split(total, weights)]


def _fsdp2_states(scenario, mesh: Mesh, memory: StageMemory) -> dict:
    if not framework_of(scenario.training).grads_made_in_backward(scenario.training, mesh.stage):
        return {}
    if scenario.model.is_bare:  # no tensors: each unit's gradient shard in one piece
        total = memory.grads_bytes
        return {"grad_shard_bytes": [[b] for b in _split(total, gradient_units(scenario.model))]}
    grads, states = _per_tensor(scenario, mesh, memory)
    return {"grad_shard_bytes": grads, "state_blocks": states}


def step_shape(scenario, stage: int) -> StepShape:
    m, t, mesh = rank_model(scenario), scenario.training, mesh_of(scenario, stage)
    bp, bg = BYTES_PER_ELEMENT[t.precision], grad_bytes_per_element(t, stage)
    moments = MOMENTS[t.optimizer]
    # Bytes the optimizer moves over HBM per element of its partition: read the gradient, read and
    # write the fp32 master (or the fp32 parameter itself) and each fp32 moment, and under mixed
    # precision write back the 16-bit working copy.
    master = 2 * FP32_BYTES + bp if t.precision != "fp32" else 2 * bp
    traffic = FOREACH_ADAM_BYTES[t.optimizer] if framework_of(t).foreach_adam(t) else 0
    memory = stage_memory(scenario, stage)
    recompute = activations(m, t).recompute_bytes
    psi = total_params(m)
    # Checked before the unit list is built: a bare Ψ may ask for 2**53 layers.
    if mesh.pp == 1:  # a pipeline runs no stage program: sim/pipeline/step.py bounds its ops
        _check_size(stage, m.n_layers + 2, bg * psi, mib_to_bytes(t.reduce_bucket_MiB),
                    bp * psi, mib_to_bytes(t.allgather_bucket_MiB), t.gradient_accumulation)
    units = gather_units(m)
    recompute_bytes = [0] * m.n_layers if m.is_bare else [0] + [recompute] * m.layers + [0]
    flops = unit_flops(m, t)
    forward_s, backward_s = compute_seconds(scenario, flops, stage)
    tensor = tensor_collectives(scenario.model, t, scenario.parallelism, bg, mesh.grad_ways)
    windows = _tensor_windows(scenario, tensor, flops, backward_s)
    backward_s = [s - sum(w) for s, w in zip(backward_s, windows)] if windows else backward_s
    extra = memory_terms(scenario, stage)
    activation_bytes = unit_activation_bytes(m, t)
    if extra["activations"]:  # measured activations: the analytic split, scaled to their total
        total = sum(activation_bytes)
        activation_bytes = ([max(0, round(a * (total + extra["activations"]) / total))
                             for a in activation_bytes] if total else
                            activation_bytes[:-1] + [max(0, round(extra["activations"]))])
    return StepShape(
        stage=stage, mesh=mesh, memory=memory, gather_elements=units,
        **_fsdp2_states(scenario, mesh, memory),
        gradient_elements=gradient_units(m), forward_s=forward_s, backward_s=backward_s,
        activation_bytes=activation_bytes,
        recompute_bytes=recompute_bytes, param_bytes_per_element=bp, grad_bytes_per_element=bg,
        params=psi, shard=shard_elements(psi, mesh.dp_shard),
        bucket_bytes=mib_to_bytes(t.reduce_bucket_MiB),
        allgather_bucket_bytes=mib_to_bytes(t.allgather_bucket_MiB),
        optimizer=optimizer_cost(scenario, traffic or bg + master + 2 * FP32_BYTES * moments),
        optimizer_workspace_per_element=extra["optimizer_per_element"],
        prefetch_layers=t.prefetch_layers, gradient_reduction=t.gradient_reduction,
        overlap_comm=t.overlap_comm, gradient_accumulation=t.gradient_accumulation,
        persistent_bytes=persistent_bytes(scenario, stage),
        whole_buckets=framework_of(t).bucket_buffers(t, stage) > 0,
        loss_blocks=framework_of(t).loss_blocks(m, t),
        step_blocks=_step_blocks(scenario, mesh, memory),
        workspace_bytes=max(0, round(extra["workspace"])),
        residue_bytes=max(0, round(extra["residue"])),
        family=family_shape(scenario, mesh),
        tensor=tensor, tensor_windows=windows,
        bucket_host_s=gradient_path(scenario, stage)[2],
        # at most what is left of each backward (tensor parallelism's windows came out of it)
        idle_hook_savings_s=[min(saved, b) for saved, b in
                             zip(idle_hook_savings(scenario, stage), backward_s)],
        **_zero3_terms(scenario, m, stage, bg, extra),
        bucket_pool_bytes=max(0, round(extra["bucket_pool"])))


def _zero3_terms(scenario, m, stage: int, bg: int, extra: dict) -> dict:
    """What decides how ZeRO-3 gathers: flat buffers per unit, the last unit or the root kept
    gathered, the tied gradient held, a module-by-module plan (StepShape's fields)."""
    t = scenario.training
    root = framework_of(t).keeps_root_gathered(t, stage) and not m.is_bare
    return dict(gather_buffers=gather_buffers(scenario, stage),
                keeps_last_unit=extra["last_unit_kept"] > 0,
                root_elements=root_elements(m) if root else 0,
                tied_grad_bytes=max(0, round(extra["tied_grad_kept"])),
                fetch=fetch_steps(scenario, m, stage, bg))


def _tensor_windows(scenario, tensor: TensorCollectives, flops: list,
                    backward_s: list[float]) -> list[tuple[float, ...]]:
    """StepShape.tensor_windows: each backward TP collective's GEMM, when Megatron's default
    runs it beside one: op by op (costs.overlap_windows), or the GEMM's share of its unit's
    backward FLOPs of the unit's backward seconds (the flat model, a profile's measured time),
    so that a unit never gives more to its windows than it has."""
    if not tensor.backward or tensor.overlap:
        return []
    gemms = overlap_windows(scenario)
    shares = window_flops(rank_model(scenario), scenario.training)

    def window(c, unit: int) -> float:
        if not c.overlaps:
            return 0.0
        if gemms is not None:
            return gemms[c.window]
        return shares[c.window] / flops[unit].backward * backward_s[unit]

    return [tuple(window(c, u) for c in unit) for u, unit in enumerate(tensor.backward)]
