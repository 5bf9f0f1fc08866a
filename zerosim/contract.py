"""The shared contract of zerosim and zero_real: every name both sides must spell the same way,
defined here once. No imports beyond the standard library, so either package (and a reader) can
take it alone.

What is here: the stages, the collective ops and their nccl-tests figures, the unit kinds of a
model, the points and passes of a step, the simulator's modes, the collective implementations, the
exit codes of both commands and validate's default tolerance, the calibration profile's format and
version, and the records of the step-event schema and the measurement file (TypedDicts: plain
dicts at run time, named keys for a reader and a type checker).
"""

from __future__ import annotations

from typing import Any, TypedDict

# ---- stages: DeepSpeed's zero_optimization.stage numbers -----------------------------------------

STAGES = (0, 1, 2, 3)
STAGE_NAMES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}
STAGE2_LIVE_BUCKETS = 2
"""Gradient buckets alive at once in stage 2: one filling during backward, one being reduced
(zerosim's memory model; zero_real's ZeRO-2 pools at most this many buffers)."""

# ---- collectives: torch.distributed's / NCCL's names -----------------------------------------------

COLLECTIVE_OPS = ("all_reduce", "reduce_scatter", "all_gather")
"""What a training step runs and `zero-real calibrate` measures."""
ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER = COLLECTIVE_OPS
OPS = (*COLLECTIVE_OPS, "broadcast", "reduce")
"""What `zerosim collective` can simulate."""
BROADCAST, REDUCE = OPS[len(COLLECTIVE_OPS):]
REDUCING_OPS = (ALL_REDUCE, REDUCE_SCATTER, REDUCE)
"""The ops that reduce (nccl-tests' redop column reads "sum" for them, "none" for the rest)."""

RING_WALKS = {"all_reduce": ("reduce_scatter", "all_gather"),
              "reduce_scatter": ("reduce_scatter",), "all_gather": ("all_gather",),
              "broadcast": ("scatter", "all_gather"), "reduce": ("reduce_scatter", "gather")}
"""The walks around a ring each op takes (Thakur, Rabenseifner and Gropp 2005, §4; van de Geijn's
scatter + all-gather broadcast). zerosim's simulated ring and zero_real's ring of send/recv both
follow it; a ring of n ranks takes n - 1 steps per walk."""


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus bandwidth over algorithm bandwidth (PERFORMANCE.md): 2(n-1)/n for
    all_reduce, (n-1)/n for reduce_scatter and all_gather, 1 for the rest."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in COLLECTIVE_OPS:
        return (n - 1) / n
    return 1.0


def ring_steps(op: str, n: int) -> int:
    """Steps of `op` around a ring of n ranks: n - 1 per walk."""
    return len(RING_WALKS[op]) * (n - 1)


COLLECTIVE_IMPLS = ("native", "ring")
"""How zero_real runs a collective: the library's own (NCCL, gloo), or its ring of send/recv; a
profile prices each separately (cluster.collective_impl)."""

# ---- the model and the step -----------------------------------------------------------------------

UNIT_KINDS = ("embedding", "block", "head")
"""Kinds of ZeRO-3 gather unit, in forward order: zero_real times one of each, a profile fits one
line per kind, zerosim prices each unit by its kind (zerosim.analytic.model.unit_kinds)."""
EMBEDDING, BLOCK, HEAD = UNIT_KINDS

PASSES = ("forward", "backward")
"""The two passes a unit's compute is timed in."""
STEP_PHASES = (*PASSES, "step")
"""The `phase` of a step event: forward, backward, or the optimizer step."""
MEMORY_POINTS = ("after_init", "after_forward", "after_backward", "after_step")
"""The quiet points of a step where memory is sampled (a measurement's `phases`)."""
STREAMS = ("compute", "comm")
"""The `stream` of a step event."""
COMPUTE, COMM = STREAMS
QUEUES = (COMPUTE, COMM, "gather", "reduce")
"""The simulated streams of every stage's ranks (SimulatedEvent.queue), one timeline lane each."""
FAMILY_QUEUES = REPLICA_QUEUE, DELAYED_QUEUE = ("replica", "host")
"""The streams the ZeRO family adds: ZeRO-3's replica all-reduce after its reduce-scatter, and
the delayed update's host operations beside the whole step."""
PIPELINE_SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")
"""The pipeline schedules both sides run: GPipe's (Huang et al. 2019: every forward, then every
backward), PipeDream-flush's one-forward-one-backward (Narayanan et al. 2021, §2.2.1) and
Megatron-LM's interleaved one with v model chunks per stage (§2.2.2)."""
P2P = "p2p"
"""The stream (and event name) of a pipeline's point-to-point transfers between stages."""
P2P_OPS = ("send", "recv")
"""A point-to-point transfer's two sides (torch.distributed's isend/irecv, NCCL's ncclSend/Recv)."""

SIM_MODES = ("auto", "symmetric", "per_rank")
"""How many ranks the engine simulates: one representative of a uniform cluster (symmetric), every
rank (per_rank), or what the scenario needs (auto)."""

# ---- exit codes of `zerosim` and `zero-real` -------------------------------------------------------

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
"""0 success; 1 what ran failed (validate over its tolerance, a rank of a real run); 2 bad input,
one line on stderr."""

DEFAULT_TIME_TOLERANCE_PCT = 10.0
"""The largest error of any time metric (step, compute, exposed communication, each collective)
`zerosim validate` accepts unless told otherwise: the 10% its single tolerance had, now on every
time metric rather than on a mean that memory's ~0% diluted."""
DEFAULT_MEMORY_TOLERANCE_PCT = 2.0
"""The largest error of any memory metric `zerosim validate` accepts unless told otherwise: a
profile fits memory beyond the analytic model, so a calibrated run lands within about 0.1%; 2%
leaves room for allocator rounding, not for a missing buffer."""

# ---- files -----------------------------------------------------------------------------------------

PROFILE_FORMAT, PROFILE_VERSION = "zerosim-profile", 2
"""A calibration profile's `format` and `version` (zerosim.scenario.profile reads it)."""


class StepEvent(TypedDict):
    """One thing that happened on a rank's stream, simulated or measured. `bytes` is the whole
    buffer of a collective (nccl-tests convention), None or 0 for compute."""

    rank: int
    stream: str
    name: str
    phase: str
    layer: int | None
    op: str | None
    bytes: int | None
    start_s: float
    end_s: float


class SimulatedEvent(StepEvent):
    queue: str
    """The simulated stream (compute, comm, gather, reduce): one lane of a timeline."""


class MeasuredEvent(StepEvent):
    step: int
    """The training step it belongs to."""


class MemorySample(TypedDict):
    """A rank's memory by category at one instant (zerosim: every change; zero_real: the ledger
    at each memory point)."""

    rank: int
    t_s: float
    bytes_by_category: dict[str, int]


class _MeasuredSample(MemorySample):
    point: str
    """One of MEMORY_POINTS."""
    step: int


class MeasuredSample(_MeasuredSample, total=False):
    measured_bytes: int
    """The allocator's (CUDA) or the profiler's (CPU) figure; absent after profiling stopped."""
    reserved_bytes: int
    """CUDA only: the caching allocator's reservation now (torch.cuda.memory_reserved)."""
    device_used_bytes: int
    """CUDA only: the device's used memory as the driver reports it (total - free from
    cudaMemGetInfo): what nvidia-smi shows, the CUDA context and NCCL's buffers included."""


class _RankMeasurement(TypedDict):
    rank: int
    peak_bytes: int
    phases: dict[str, int | None]
    """Measured bytes at each of MEMORY_POINTS, as last measured."""
    ledger: dict[str, Any]
    ledger_phases: dict[str, dict[str, int]]


class RankMeasurement(_RankMeasurement, total=False):
    peak_reserved_bytes: int
    """CUDA only: the caching allocator's peak reservation (torch.cuda.max_memory_reserved);
    peak_bytes is its peak allocation. Absent on CPU."""
    peak_device_used_bytes: int
    """CUDA only: the most device memory in use (cudaMemGetInfo) at any memory point measured."""
    pipeline_stage: int
    """Under pipeline parallelism: the pipeline stage the rank ran (rank // (N / p))."""


class _MeasurementCore(TypedDict):
    """What `zerosim validate` needs of a measurement."""

    scenario: str
    stage: int
    world_size: int
    events: list[MeasuredEvent]
    ranks: list[RankMeasurement]
    memory_samples: list[MeasuredSample]
    steps: int


class Measurement(_MeasurementCore, total=False):
    """The file `zero-real run --out` writes."""

    overrides: list[str]
    stage_name: str
    processes: int
    fake_world_size: int | None
    backend: str
    collectives: str
    timed_steps: int
    seed: int
    torch_version: str
    hardware: str
    losses: list[float]
    zerosim_memory: dict[str, int]
    zerosim_pipeline_memory: list[dict[str, int]]
    """Under pipeline parallelism: zerosim's memory of each pipeline stage (analytic/memory.py's
    pipeline_memory), which each rank's ledger is compared with (RankMeasurement.pipeline_stage)."""
    timings_under_profiler: bool
    overlap_comm: bool


MEASUREMENT_REQUIRED = tuple(_MeasurementCore.__annotations__)
"""The keys a measurement must have, in the order they are reported missing."""
