"""One stage's simulated step as engine.simulate returns it: the critical rank's times, bytes on
the wire, memory peaks, throughput, and the simulated ranks themselves (for traces)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerosim.contract import STAGE_NAMES
from zerosim.analytic.model import model_flops_per_token
from zerosim.sim.device import overhead
from zerosim.sim.rank import RankContext


@dataclass
class StageResult:
    """One stage's simulated step. Times are those of the rank that finished last."""

    stage: int
    step_time_s: float
    compute_s: float
    exposed_comm_s: float
    """step_time_s - compute_s: communication compute did not hide, offload's host operations
    (the CPU's optimizer step among them) and module hooks' host time it did not hide."""
    comm_bytes_per_rank: dict[str, int]
    comm_time_s: float
    """The critical rank's collectives' durations, summed (hidden by compute or not), each from
    the rank's own launch to its end: waiting there for a later rank is communication (rank.py),
    so exposed_comm_s <= comm_time_s + host_time_s."""
    host_bytes_per_rank: dict[str, int]
    """Offload's bytes over the host link and the drives (sim/offload.py), per rank."""
    host_time_s: float
    """The critical rank's host operations' durations (copies, the CPU step, drives; or, where
    ZeRO-3 fetches module by module, its hooks' time per visit), summed, each from the rank's
    own launch."""
    peak_bytes: int
    """The most bytes the rank's buffers ask for at once (the analytic model's peak)."""
    memory_at: dict[str, int]
    peak_allocated_bytes: int
    """What torch.cuda.max_memory_allocated would show: the caching allocator's blocks, rounded."""
    peak_reserved_bytes: int
    """What torch.cuda.max_memory_reserved would show: the allocator's segments."""
    device_bytes: int
    """What nvidia-smi would show: reserved + the CUDA context + NCCL's buffers. `fits` is
    judged on it."""
    tokens_per_s_per_gpu: float
    """Tokens each GPU trains on per second: micro_batch x seq_len x gradient_accumulation per
    step, over the t ranks of a tensor-parallel group (they train on the same tokens)."""
    mfu: float
    """Model FLOPs utilisation: the model's FLOPs per token (no recomputation) x tokens/s per GPU
    over the GPU's dense 16-bit peak."""
    algorithm: str
    mode: str
    ranks_simulated: int
    slowest_rank: int
    notes: list[str] = field(default_factory=list)
    """What the simulation leaves out for this scenario."""
    default_notes: list[str] = field(default_factory=list)
    """The scenario's defaults that decide the answer (scenario/defaults.py); the commands print
    them on stderr, --json carries them."""
    comm_calls_per_rank: dict[str, int] = field(default_factory=dict)
    """Collectives each rank launches in the step, by op (keyed as comm_bytes_per_rank); empty
    under a pipeline, whose plan prices its collectives without launching them one by one."""
    comm_bytes_per_group: dict[str, dict[str, int]] = field(default_factory=dict)
    """Under tensor parallelism, comm_bytes_per_rank by group ("tp", "dp" for groups.WORLD's
    data-parallel ranks, any other subgroup by its name), each by op; empty without it."""
    pipeline: list[dict[str, Any]] = field(default_factory=list)
    """Under pipeline parallelism, each pipeline stage's figures (sim/pipeline/step.py): its
    layers, step time, compute, idle time, activations held at once, peak and device bytes,
    bytes sent; the fields above are the stage that finished last's times and the worst
    stage's memory. Empty without a pipeline."""
    ranks: list[RankContext] = field(repr=False, default_factory=list)
    pipeline_runs: list = field(repr=False, default_factory=list)
    """Each pipeline stage's simulated step (events.StageRun), for traces."""

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "name": STAGE_NAMES[self.stage],
                "step_time_s": self.step_time_s, "compute_s": self.compute_s,
                "exposed_comm_s": self.exposed_comm_s,
                "comm_bytes_per_rank": self.comm_bytes_per_rank,
                "comm_bytes_per_rank_total": sum(self.comm_bytes_per_rank.values()),
                "comm_calls_per_rank": self.comm_calls_per_rank,
                "comm_time_s": self.comm_time_s,
                "host_bytes_per_rank": self.host_bytes_per_rank, "host_time_s": self.host_time_s,
                "peak_bytes": self.peak_bytes, "memory_at": self.memory_at,
                "peak_allocated_bytes": self.peak_allocated_bytes,
                "peak_reserved_bytes": self.peak_reserved_bytes,
                "device_bytes": self.device_bytes,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu,
                "algorithm": self.algorithm, "mode": self.mode,
                "ranks_simulated": self.ranks_simulated, "slowest_rank": self.slowest_rank,
                "notes": self.notes,
                **({"comm_bytes_per_group": self.comm_bytes_per_group}
                   if self.comm_bytes_per_group else {}),
                **({"default_notes": self.default_notes} if self.default_notes else {}),
                **({"pipeline": self.pipeline} if self.pipeline else {})}


def stage_result(engine, contexts: list) -> StageResult:
    """The step the engine (engine.Engine) ran, from its simulated ranks' contexts."""
    scenario = engine.scenario
    # The critical rank: last to finish; among those, the one that computed longest (a straggler).
    last = max(contexts, key=lambda ctx: (ctx.state.end_s, ctx.state.compute_s, -ctx.rank))
    rank0 = contexts[0].state
    t = scenario.training
    # the t ranks of a tensor-parallel group train on the same micro-batches
    tokens_per_s = t.tokens_per_rank / scenario.parallelism.tensor_parallel / last.state.end_s
    reserved = max(ctx.state.memory.allocator.peak_reserved_bytes for ctx in contexts)
    peak = scenario.cluster.peak_tflops * 1e12
    return StageResult(
        stage=engine.stage, step_time_s=last.state.end_s, compute_s=last.state.compute_s,
        exposed_comm_s=last.state.end_s - last.state.compute_s,
        comm_bytes_per_rank={op: round(b) for op, b in sorted(rank0.comm_bytes.items())},
        comm_calls_per_rank=dict(sorted(rank0.comm_calls.items())),
        comm_time_s=last.state.comm_s,
        host_bytes_per_rank={op: round(b) for op, b in sorted(rank0.host_bytes.items())},
        host_time_s=last.state.host_s,
        peak_bytes=max(ctx.state.memory.peak_bytes for ctx in contexts),
        memory_at=dict(rank0.memory.marks), tokens_per_s_per_gpu=tokens_per_s,
        peak_allocated_bytes=max(ctx.state.memory.allocator.peak_allocated_bytes
                                 for ctx in contexts),
        peak_reserved_bytes=reserved,
        device_bytes=reserved + overhead(scenario.cluster, *engine.libraries.values()),
        mfu=model_flops_per_token(scenario.model, t) * tokens_per_s / peak,
        algorithm=algorithms_used(engine),
        mode=engine.mode,
        ranks_simulated=len(contexts), slowest_rank=last.rank, ranks=contexts,
        notes=_notes(scenario), comm_bytes_per_group=_by_group(scenario, rank0.comm_bytes),
        default_notes=list(scenario.default_notes))


def _by_group(scenario, per_op: dict[str, float]) -> dict[str, dict[str, int]]:
    """RankState.comm_bytes ("op" on groups.WORLD, "op (group)" on a subgroup) by group, under
    tensor parallelism (WORLD is then the data-parallel group, "dp")."""
    if scenario.parallelism.tensor_parallel == 1:
        return {}
    out: dict[str, dict[str, int]] = {}
    for key, size in sorted(per_op.items()):
        op, _, group = key.partition(" (")
        out.setdefault(group.rstrip(")") or "dp", {})[op] = round(size)
    return dict(sorted(out.items()))


def algorithms_used(engine) -> str:
    """What ran the step's collectives: the algorithm alone when one ran them all (gloo's
    ring), else per op its algorithm/protocol, the one that moved the most bytes first."""
    if engine.library.library == "gloo" or not engine.used:
        return engine.library.algorithm
    parts = []
    for op, by_label in engine.used.items():
        labels = sorted(by_label, key=lambda label: -by_label[label])
        parts.append(f"{op} {'+'.join(labels)}")
    return ", ".join(parts)


def _notes(scenario) -> list[str]:
    return list(scenario.cluster.notes)
