"""What each piece of a step costs: seconds of compute per unit, seconds of the optimizer step,
the time of a collective on the links, and the memory the real stages hold beyond the analytic
model. Two sources, one interface:

- the preset (no profile): op by op for a model given by shape on a GPU with an op model
  (op_costs.py, the default), else FLOPs / (peak x compute_efficiency) (the flat model, also what
  cluster.compute_model = "flat" or a compute_efficiency picks); optimizer bytes / HBM bandwidth,
  ring steps over links of the preset's bandwidth and latency, no extra memory;
- a calibration profile (cluster.profile): what `zero-real calibrate` measured and
  zerosim.calibration.fit fitted: compute op by op from the box's own record (its op-model
  constants, zerosim/hardware/measured.py), the optimizer's and collectives' α-β segments, the
  memory mechanisms beyond the analytic model (analytic/mechanisms.py). What it did not measure
  (links between nodes, a bare-Ψ model's layers: the flat model) keeps the preset's figures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from zerosim.contract import COLLECTIVE_OPS
from zerosim.frameworks import framework_of
from zerosim.analytic.mechanisms import mechanism_terms
from zerosim.analytic.model import UnitFlops, buffer_elements, gather_units, gradient_units
from zerosim.parallel.tensor import rank_model
from zerosim.sim.collectives.ring import FLAT, Group, Phase
from zerosim.sim.network import INTER
from zerosim.hardware import DEVICES
from zerosim.hardware.measured import record_gpu
from zerosim.sim.op_costs import OpCosts, fsdp2_copies, linear_gemms, op_costs, unit_seconds
from zerosim.units import BYTES_PER_ELEMENT, FP32_BYTES


def op_model(scenario) -> OpCosts | None:
    """The per-op costs that time compute (sim/op_costs.py) under the "op" model (the default
    unless cluster.compute_efficiency is set), for a model given by shape: from the box's own
    record when a calibration profile gives one (zerosim/hardware/measured.py, the record of the
    world of as many ranks per box as the scenario's, or the nearest), else from the GPU's
    catalogue record when it has an op model, its matmuls on the FP32 units when they run in fp32
    (training.compute_dtype); else None (the flat model)."""
    c, profile = scenario.cluster, scenario.profile
    if c.timing != "op" or scenario.model.is_bare:
        return None
    if profile is not None:
        record = profile.record(c.gpus_per_node)
        if record is None:
            return None
        return OpCosts(record_gpu(record, DEVICES[c.gpu]), record["bandwidth_GBps"])
    return op_costs(c, fp32_matmuls=scenario.training.compute_dtype == "fp32")


def gather_buffers(scenario, stage: int) -> list[list[int]]:
    """Per gather unit, the elements of each flat buffer ZeRO-3 gathers for it, one collective
    each (Framework.gather_buffers, counted on a tensor-parallel rank's slice); [] where the
    framework gathers each unit whole."""
    t = scenario.training
    names = framework_of(t).gather_buffers(scenario.model, t, stage)
    return buffer_elements(rank_model(scenario), names) if names else []


def _grad_path_fit(scenario, stage: int) -> dict | None:
    """The profile's fit.grad_path at `stage`, for the world of as many ranks per box as here;
    None without a profile or without that fit."""
    profile = scenario.profile
    return (None if profile is None
            else profile.grad_path(scenario.cluster.gpus_per_node, stage))


def gradient_path(scenario, stage: int) -> tuple[list[float], list[float], float]:
    """The host work of the stage's gradient path beyond its kernels and collectives, as a
    profile measured zero_real's (fit.grad_path, the world of as many ranks per box as here) for
    a framework that runs it: (seconds added to each unit's forward, to its backward, to each
    gradient bucket before its collective). Stages 0-2: each parameter gradient's hook
    (Framework.gradient_hooks) and each bucket. Stage 3: each unit's visits, per flat buffer
    gathered and per byte of it (Framework.gather_buffers). ([], [], 0) without them."""
    t, m = scenario.training, scenario.model
    hooks, buffers = framework_of(t).gradient_hooks(m, t, stage), gather_buffers(scenario, stage)
    measured = _grad_path_fit(scenario, stage) if hooks or buffers else None
    if measured is None:
        return [], [], 0.0
    if hooks:
        return [0.0] * len(hooks), [h * measured["hook_s"] for h in hooks], measured["bucket_s"]
    size = BYTES_PER_ELEMENT[t.precision]
    forward, backward = ([len(b) * per["buffer_s"] + size * sum(b) * per["s_per_byte"]
                          for b in buffers] for per in (measured["forward"], measured["backward"]))
    return forward, backward, 0.0


def idle_hook_savings(scenario, stage: int) -> list[float]:
    """Per unit, the seconds a backward that does not reduce (a micro-step before the last
    under gradient accumulation, stages 0-1) takes less than gradient_path prices: its hooks
    only count (fit.grad_path's idle_hook_s against hook_s); [] where the profile measured no
    such micro-step (calibrate measures none at ZeRO-2, which reduces on each). A pipeline's
    plan prices every micro-batch's backward alike and takes none of it (sim/pipeline/plan.py)."""
    t = scenario.training
    hooks = framework_of(t).gradient_hooks(scenario.model, t, stage)
    measured = _grad_path_fit(scenario, stage) if hooks else None
    if measured is None or "idle_hook_s" not in measured:
        return []
    saved = max(0.0, measured["hook_s"] - measured["idle_hook_s"])
    return [h * saved for h in hooks]


def compute_seconds(scenario, flops: list[UnitFlops],
                    stage: int) -> tuple[list[float], list[float]]:
    """Forward and backward seconds of each unit for one micro-batch on one rank, with the host
    work of the stage's gradient path where a profile measured it (gradient_path)."""
    forward, backward = _unit_seconds(scenario, flops, stage)
    extra_forward, extra_backward, _ = gradient_path(scenario, stage)
    if extra_forward:
        forward = [f + x for f, x in zip(forward, extra_forward)]
        backward = [b + x for b, x in zip(backward, extra_backward)]
    return forward, backward


def _unit_seconds(scenario, flops: list[UnitFlops],
                  stage: int) -> tuple[list[float], list[float]]:
    t = scenario.training
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
    return ([f.forward / rate for f in flops], [f.backward / rate for f in flops])


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

    def seconds(self, elements: int) -> float:
        # the world of as many ranks per box as here, as the record's (op_model)
        profile, n = self.scenario.profile, self.scenario.cluster.gpus_per_node
        measured = profile.optimizer_time(n, elements) if profile is not None else None
        if measured is None:  # the bytes it moves over HBM bandwidth (as measured, op by op)
            measured = hbm_seconds(self.scenario, elements * self.bytes_per_element)
        return measured


def hbm_seconds(scenario, size_bytes: float) -> float:
    """A memory-bound kernel moving size_bytes over HBM: the data sheet's bandwidth, at the
    fraction a streaming kernel reaches under the op model (OpModel.hbm_achievable_fraction)."""
    per_op = op_model(scenario)
    if per_op is not None:  # the streaming fraction of the data sheet's, or a record's own
        return size_bytes / per_op.bandwidth
    return size_bytes / scenario.cluster.hardware.hbm_bytes_per_s


def optimizer_cost(scenario, bytes_per_element: int) -> OptimizerCost:
    return OptimizerCost(scenario, bytes_per_element)


def memory_terms(scenario, stage: int) -> dict[str, float]:
    """Bytes beyond the analytic model, by StepShape term, from the memory mechanisms the
    profile measured or derived (analytic/mechanisms.py); zeros without a profile."""
    return mechanism_terms(scenario, stage)


def price_phases(scenario, op: str, size_bytes: float, group: Group,
                 phases: list[Phase]) -> list[Phase]:
    """Phases inside one node priced by the profile's fit of `op` (its per-step latency and bus
    bandwidth for this message size, as its microbenchmark measured it: no in-step scale);
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
        link_bw = c.hardware.intra.bandwidth_bytes_per_s
        out.append(dataclasses.replace(phase, latency_s=latency_s,
                                       link_scale=link_bw / busbw if busbw > 0 else 0.0))
    return out
