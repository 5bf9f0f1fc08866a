"""Runs one training step of a stage on the simulated cluster and collects what happened.

Every simulated rank has a compute stream (its stage program, stages.py) and communication streams
(rank.py: FIFO queues served one collective at a time, like CUDA streams carrying NCCL kernels). A
collective starts when every simulated rank has launched it, and moves its bytes over the links of
the cluster (network.py) in the phases of its algorithm (collectives/).

A uniform cluster is simulated through one representative rank: every rank does the same thing
at the same time, so rank 0's compute, memory and links (plus the one link per role a flat
ring needs) stand for all of them. That turns O(n) processes per collective into O(1). With
stragglers or degraded links, ranks fall into classes: one representative of the uniform ranks,
each straggler, and each degraded link are simulated ("classes"). Jitter makes every rank
different, so every rank is simulated ("per_rank"). On the same input the modes give identical
numbers (tests/zerosim/test_engine.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator

import simpy

from zerosim.contract import SIM_MODES, STAGE_NAMES
from zerosim.errors import InputError
from zerosim.model import model_flops_per_token
from zerosim.scenario.config import Scenario
from zerosim.scenario.variation import VariationConfig
from zerosim.sim.collectives import Collectives, bytes_sent_per_rank
from zerosim.sim.collectives.ring import FLAT, Group, representatives, run_phases
from zerosim.sim.costs import op_model, price_phases
from zerosim.sim.device import overhead
from zerosim.sim.network import Cluster
from zerosim.sim.rank import RankContext
from zerosim.sim.stage_fsdp2 import stage_program
from zerosim.sim.step_shape import step_shape

# Simulating every rank costs O(ranks) processes per collective phase: about 25 s per stage at
# 256 ranks on one core; beyond this a run would take many minutes.
MAX_PER_RANK = 512


class Engine:
    """One step of one stage on the simulated cluster: the ranks it simulates, their links, and
    the collectives they join."""

    def __init__(self, scenario: Scenario, stage: int, mode: str = "auto",
                 keep_events: bool = True) -> None:
        if mode not in SIM_MODES:
            raise ValueError(f"mode {mode!r} is not one of {SIM_MODES}")
        self.scenario, self.stage = scenario, stage
        self.env = simpy.Environment()
        c = scenario.cluster
        self.group = Group(c.world_size, c.gpus_per_node)
        self.library = Collectives(scenario, self.group)
        self.used: dict[str, dict[str, float]] = {}
        """op -> the algorithm (and protocol) that ran it -> bytes of the calls it ran."""
        v = scenario.variation
        if mode == "symmetric" and not v.is_uniform:
            raise InputError("--mode symmetric needs a uniform cluster, but [variation] sets "
                             "stragglers, degraded links or jitter")
        if mode == "per_rank" or v.jitter_pct:
            self.mode = "per_rank"  # jitter makes every rank different
        else:
            self.mode = "symmetric" if v.is_uniform else "classes"
        if self.mode == "per_rank" and c.world_size > MAX_PER_RANK:
            raise InputError(
                f"simulating every rank of {c.world_size} ranks (needed for jitter or "
                f"--mode per_rank) is limited to {MAX_PER_RANK} ranks: it costs O(ranks) per "
                f"collective (about 25 s per stage at 256 ranks)")
        scopes = {FLAT} if self.library.flat else set()
        if self.mode == "per_rank":
            self.compute_ranks = self.link_ranks = list(range(c.world_size))
        else:
            # Ranks in one class do the same thing at the same time: one uniform representative
            # (the first rank that is neither slow) stands for all of them, every straggler is
            # simulated, and every degraded link joins the representative links.
            uniform = next((r for r in range(c.world_size) if r not in v.slow), None)
            self.compute_ranks = sorted(v.slow | ({uniform} if uniform is not None else set()))
            self.link_ranks = sorted(v.degraded.union(representatives(self.group, scopes)))
            if len(self.compute_ranks) > MAX_PER_RANK:
                raise InputError(f"{len(self.compute_ranks)} slow ranks are more than the "
                                 f"{MAX_PER_RANK} ranks the engine simulates one by one")
        self.cluster = Cluster(self.env, scenario, self.link_ranks)
        self.sm_share = sm_share(scenario, self.library)
        """The share of a GPU's SMs one collective's kernel takes from compute (op-by-op compute
        only: the flat fraction of peak already stands for everything a step loses)."""
        self.keep_events = keep_events
        self.keep_samples = keep_events
        self._pending: dict[tuple[str, int], list] = {}
        self._phases: dict[tuple[str, float], list] = {}
        self.moved = 0
        """Collectives completed so far."""
        self.progress: Callable[[int, int], None] | None = None
        self.collectives = 0
        """The step's collectives, known when progress is reported (count_collectives)."""

    def collective(self, key: tuple[str, int], op: str, size_bytes: float) -> simpy.Event:
        """Join collective `key`; fires with (start_s, bytes sent per rank) once it completes.
        It starts when the last simulated rank has joined."""
        entry = self._pending.get(key)
        if entry is None:
            entry = self._pending[key] = [0, self.env.event()]
        entry[0] += 1
        if entry[0] == len(self.compute_ranks):
            del self._pending[key]
            self.env.process(self._run_collective(op, size_bytes, entry[1]))
        return entry[1]

    def _run_collective(self, op: str, size_bytes: float, done: simpy.Event) -> Iterator:
        start_s = self.env.now
        sent_bytes = yield from self.move(op, size_bytes)
        done.succeed((start_s, sent_bytes))

    def move(self, op: str, size_bytes: float) -> Iterator:
        """Process body: the collective's phases over the simulated links; returns the bytes
        each rank sent. Priced phases are cached: buckets mostly share one size."""
        cached = self._phases.get((op, size_bytes))
        if cached is None:
            choice = self.library.choose(op, size_bytes)
            cached = self._phases[op, size_bytes] = (choice.label, price_phases(
                self.scenario, op, size_bytes, self.group, choice.phases, self.stage))
        label, phases = cached
        by_label = self.used.setdefault(op, {})
        by_label[label] = by_label.get(label, 0.0) + size_bytes
        yield from run_phases(self.env, self.cluster, self.group, phases, self.link_ranks)
        self.moved += 1
        if self.progress is not None:
            self.progress(min(self.moved, self.collectives), self.collectives)
        return bytes_sent_per_rank(phases)

    def run(self) -> list[RankContext]:
        """Every simulated rank runs the stage's program to the end of the step."""
        shape = step_shape(self.scenario, self.stage)
        program = stage_program(self.scenario.training, self.stage)
        contexts = [RankContext(self, rank) for rank in self.compute_ranks]
        for ctx in contexts:
            self.env.process(self._rank_step(ctx, program(ctx, shape).run()))
        self.env.run()
        if self._pending:
            raise RuntimeError(f"collectives never completed: {sorted(self._pending)}")
        return contexts

    def _rank_step(self, ctx: RankContext, step: Iterator) -> Iterator:
        yield from step
        ctx.state.end_s = self.env.now


@dataclass
class StageResult:
    """One stage's simulated step. Times are those of the rank that finished last."""

    stage: int
    step_time_s: float
    compute_s: float
    exposed_comm_s: float
    """step_time_s - compute_s: communication compute did not hide, plus any bookkeeping time a
    calibration profile measured (its other_s)."""
    comm_bytes_per_rank: dict[str, int]
    comm_time_s: float
    """The critical rank's collectives' durations, summed (hidden by compute or not)."""
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
    step."""
    mfu: float
    """Model FLOPs utilisation: the model's FLOPs per token (no recomputation) x tokens/s per GPU
    over the GPU's dense 16-bit peak."""
    algorithm: str
    mode: str
    ranks_simulated: int
    slowest_rank: int
    notes: list[str] = field(default_factory=list)
    """What the simulation leaves out for this scenario."""
    ranks: list[RankContext] = field(repr=False, default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "name": STAGE_NAMES[self.stage],
                "step_time_s": self.step_time_s, "compute_s": self.compute_s,
                "exposed_comm_s": self.exposed_comm_s,
                "comm_bytes_per_rank": self.comm_bytes_per_rank,
                "comm_bytes_per_rank_total": sum(self.comm_bytes_per_rank.values()),
                "comm_time_s": self.comm_time_s,
                "peak_bytes": self.peak_bytes, "memory_at": self.memory_at,
                "peak_allocated_bytes": self.peak_allocated_bytes,
                "peak_reserved_bytes": self.peak_reserved_bytes,
                "device_bytes": self.device_bytes,
                "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu, "mfu": self.mfu,
                "algorithm": self.algorithm, "mode": self.mode,
                "ranks_simulated": self.ranks_simulated, "slowest_rank": self.slowest_rank,
                "notes": self.notes}


def count_collectives(scenario: Scenario, stage: int) -> int:
    """The collectives of one step. They follow the stage program's structure, not its timing,
    so every rank under any [variation] runs the same ones: counted on the uniform cluster, whose
    one representative rank costs little next to simulating every rank."""
    engine = Engine(replace(scenario, variation=VariationConfig()), stage, keep_events=False)
    engine.run()
    return engine.moved


def simulate(scenario: Scenario, stage: int, mode: str = "auto", keep_events: bool = True,
             progress: Callable[[int, int], None] | None = None) -> StageResult:
    """One training step of `stage` for the scenario's model on its cluster. `progress(done,
    total)` hears of every collective completed when every rank is simulated (the mode whose cost
    grows with the ranks: minutes at 512), otherwise once at the end of the step."""
    if scenario.training.seq_len is None:
        raise InputError("simulating a step needs training.seq_len: a bare-Ψ model computes "
                         "6 * Ψ FLOPs per token (e.g. --set training.seq_len=1024)")
    engine = Engine(scenario, stage, mode, keep_events=keep_events)
    each = progress is not None and engine.mode == "per_rank"
    if each:
        engine.progress, engine.collectives = progress, count_collectives(scenario, stage)
    contexts = engine.run()
    if progress is not None and not each:
        progress(engine.moved, engine.moved)
    if not all(math.isfinite(ctx.state.end_s) for ctx in contexts):
        raise InputError("the step time overflows a float: check the scenario's bandwidths, "
                         "FLOP/s and sizes for values off by many orders of magnitude")
    # The critical rank: last to finish; among those, the one that computed longest (a straggler).
    last = max(contexts, key=lambda ctx: (ctx.state.end_s, ctx.state.compute_s, -ctx.rank))
    rank0 = contexts[0].state
    t = scenario.training
    tokens_per_s = t.tokens_per_rank / last.state.end_s
    reserved = max(ctx.state.memory.allocator.peak_reserved_bytes for ctx in contexts)
    peak = scenario.cluster.peak_tflops * 1e12
    return StageResult(
        stage=stage, step_time_s=last.state.end_s, compute_s=last.state.compute_s,
        exposed_comm_s=last.state.end_s - last.state.compute_s,
        comm_bytes_per_rank={op: round(b) for op, b in sorted(rank0.comm_bytes.items())},
        comm_time_s=last.state.comm_s,
        peak_bytes=max(ctx.state.memory.peak_bytes for ctx in contexts),
        memory_at=dict(rank0.memory.marks), tokens_per_s_per_gpu=tokens_per_s,
        peak_allocated_bytes=max(ctx.state.memory.allocator.peak_allocated_bytes
                                 for ctx in contexts),
        peak_reserved_bytes=reserved,
        device_bytes=reserved + overhead(scenario.cluster, engine.library),
        mfu=model_flops_per_token(scenario.model, t) * tokens_per_s / peak,
        algorithm=algorithms_used(engine),
        mode=engine.mode,
        ranks_simulated=len(contexts), slowest_rank=last.rank, ranks=contexts,
        notes=_notes(scenario))


def sm_share(scenario: Scenario, library) -> float:
    """NCCL runs a collective as one thread block per channel, each on an SM of its own, for as
    long as the kernel runs (NCCL's channels: collectives.comm.Comm.channels); under
    cluster.compute_model = "op" compute gets the SMs left (gpu_specs' SM count)."""
    per_op = op_model(scenario)
    if per_op is None or library.comm is None:
        return 0.0
    return library.comm.channels / per_op.spec.sm_count


def algorithms_used(engine: Engine) -> str:
    """What ran the step's collectives: the algorithm alone when one ran them all (gloo's
    ring), else per op its algorithm/protocol, the one that moved the most bytes first."""
    if engine.library.library == "gloo" or not engine.used:
        return engine.library.algorithm
    parts = []
    for op, by_label in engine.used.items():
        labels = sorted(by_label, key=lambda label: -by_label[label])
        parts.append(f"{op} {'+'.join(labels)}")
    return ", ".join(parts)


def _notes(scenario: Scenario) -> list[str]:
    notes = list(scenario.cluster.notes)
    if scenario.training.optimizer_offload == "cpu":
        notes.append("optimizer_offload = cpu: memory is modeled, time is not (the optimizer "
                     "step is timed as if on the GPU, with no PCIe transfers)")
    return notes
