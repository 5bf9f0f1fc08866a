"""What each piece of a step costs: seconds of compute per unit, seconds of the optimizer step,
the time of a collective on the links, and the memory the real stages hold beyond the analytic
model. Two sources, one interface:

- the preset (no profile): op by op for a model given by shape on a GPU with an op model
  (op_costs.py, the default), else FLOPs / (peak x compute_efficiency) (the flat model, also what
  cluster.compute_model = "flat" or a compute_efficiency picks); optimizer bytes / HBM bandwidth,
  ring steps over links of the preset's bandwidth and latency, no extra memory;
- a calibration profile (cluster.profile): the lines and α-β segments `zero-real calibrate`
  measured and zerosim.calibration.fit fitted, for what it measured. What it did not measure (a bare-Ψ
  model's layers, links between nodes) keeps the preset's figures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from zerosim.contract import COLLECTIVE_OPS, PASSES
from zerosim.frameworks import framework_of
from zerosim.analytic.model import UnitFlops, gather_units, gradient_units, unit_kinds
from zerosim.parallel.tensor import rank_model
from zerosim.sim.collectives.ring import FLAT, Group, Phase
from zerosim.sim.network import INTER
from zerosim.sim.op_costs import OpCosts, fsdp2_copies, linear_gemms, op_costs, unit_seconds
from zerosim.units import BYTES_PER_ELEMENT, FP32_BYTES


def op_model(scenario) -> OpCosts | None:
    """The per-op costs that time compute (sim/op_costs.py) under the "op" model (the default
    unless cluster.compute_efficiency is set), when the model has a shape, the GPU an op model
    and no calibration profile times it; else None (the flat model)."""
    c = scenario.cluster
    if c.timing != "op" or scenario.profile is not None or scenario.model.is_bare:
        return None
    return op_costs(c)


def compute_seconds(scenario, flops: list[UnitFlops],
                    stage: int) -> tuple[list[float], list[float]]:
    """Forward and backward seconds of each unit for one micro-batch on one rank."""
    t, profile = scenario.training, scenario.profile
    per_op = op_model(scenario)
    if per_op is not None:
        m = rank_model(scenario)  # a tensor-parallel rank's GEMMs are its slice's shapes
        forward, backward = unit_seconds(per_op, m, t)
        if framework_of(t).copies_through_flat_buffers(t, stage):
            reduce_bytes = FP32_BYTES if t.reduce_dtype == "fp32" else BYTES_PER_ELEMENT[t.precision]
            copies = fsdp2_copies(per_op, gather_units(m), gradient_units(m), reduce_bytes,
                                  regather=stage == 3)
            forward = [f + c for f, c in zip(forward, copies[0])]
            backward = [b + c for b, c in zip(backward, copies[1])]
        return forward, backward
    rate = scenario.cluster.hardware.compute_flops_per_s
    tokens = t.micro_batch * (t.seq_len or 0)
    forward, backward = [], []
    for kind, f in zip(unit_kinds(scenario.model), flops):
        for phase, out in zip(PASSES, (forward, backward)):
            work = getattr(f, phase)
            measured = None
            if profile is not None and not scenario.model.is_bare:
                measured = profile.unit_time(scenario.world_size, kind, phase, work, tokens)
            out.append(measured * compute_scale(scenario, stage) if measured is not None
                       else work / rate)
    return forward, backward


def overlap_windows(scenario) -> dict[tuple[str, str], float] | None:
    """Seconds of each GEMM a tensor-parallel collective may hide behind, op by op
    (op_costs.linear_gemms, keyed by (linear, "dgrad" | "wgrad")); None where compute is timed
    otherwise (the flat model, a profile: step_shape takes the GEMM's share of its unit's FLOPs
    of the unit's time then)."""
    per_op = op_model(scenario)
    return None if per_op is None else linear_gemms(per_op, rank_model(scenario),
                                                        scenario.training)


@dataclass(frozen=True)
class OptimizerCost:
    """Seconds of the optimizer step over a partition of `elements`."""

    scenario: object
    bytes_per_element: int
    scale: float = 1.0

    def seconds(self, elements: int) -> float:
        profile, n = self.scenario.profile, self.scenario.world_size
        measured = profile.optimizer_time(n, elements) if profile is not None else None
        if measured is None:  # the bytes it moves over HBM bandwidth (as measured, op by op)
            measured = hbm_seconds(self.scenario, elements * self.bytes_per_element)
        return measured * self.scale


def hbm_seconds(scenario, size_bytes: float) -> float:
    """A memory-bound kernel moving size_bytes over HBM: the data sheet's bandwidth, at the
    fraction a streaming kernel reaches under the op model (OpModel.hbm_achievable_fraction)."""
    bandwidth = scenario.cluster.hardware.hbm_bytes_per_s
    per_op = op_model(scenario)
    if per_op is not None:
        bandwidth *= per_op.model.hbm_achievable_fraction
    return size_bytes / bandwidth


def optimizer_cost(scenario, bytes_per_element: int, stage: int) -> OptimizerCost:
    return OptimizerCost(scenario, bytes_per_element, compute_scale(scenario, stage))


def compute_scale(scenario, stage: int) -> float:
    """In-step compute over microbenchmarked compute, as the profile's real steps showed."""
    profile = scenario.profile
    return profile.compute_scale(scenario.world_size, stage) if profile is not None else 1.0


def other_s(scenario, stage: int) -> float:
    """Time per step in neither compute nor a collective (the profile's real steps)."""
    profile = scenario.profile
    return profile.other_s(scenario.world_size, stage) if profile is not None else 0.0


def memory_terms(scenario, stage: int) -> dict[str, int]:
    """Bytes beyond the analytic model (activations, allocator residue, workspace) the profile
    measured for this stage; zeros without a profile."""
    zero = {"activations": 0, "residue": 0, "workspace": 0, "optimizer_per_element": 0.0}
    profile, t, m = scenario.profile, scenario.training, scenario.model
    if profile is None or m.is_bare:
        return zero
    terms = profile.memory_terms(scenario.world_size, stage, t.micro_batch * t.seq_len)
    return terms if terms is not None else zero


def price_phases(scenario, op: str, size_bytes: float, group: Group, phases: list[Phase],
                 stage: int | None = None) -> list[Phase]:
    """Phases inside one node priced by the profile's fit of `op` (its per-step latency and bus
    bandwidth for this message size), times the in-step scale of `stage` when one is given;
    phases between nodes keep the preset's links. For the ops
    a profile measured, its fit wins over cluster.intra_node_bandwidth_GBps and latency (those
    keys then describe only what it did not measure: broadcast, reduce)."""
    profile = scenario.profile
    if profile is None or not phases or op not in COLLECTIVE_OPS:
        return phases
    c = scenario.cluster
    out = []
    for phase in phases:
        if phase.scope == INTER or (phase.scope == FLAT and group.nodes > 1) or phase.alongside:
            out.append(phase)  # a pipelined hierarchy keeps its model: it crosses nodes too
            continue
        k = group.size if phase.scope == FLAT else group.gpus_per_node
        terms = profile.ring_terms(c.collective_impl, op, k, size_bytes)
        if terms is None:
            out.append(phase)
            continue
        latency_s, busbw = terms
        # in a training step (stage given), as the profile's real steps showed
        scale = 1.0 if stage is None else profile.collective_scale(
            scenario.world_size, stage, op, c.collective_impl)
        link_bw = c.hardware.intra.bandwidth_bytes_per_s
        out.append(dataclasses.replace(phase, latency_s=latency_s * scale,
                                       link_scale=scale * link_bw / busbw if busbw > 0 else 0.0))
    return out
