"""One stage's simulated step as engine.simulate returns it: the critical rank's times, bytes on
the wire, memory peaks, throughput, and the simulated ranks themselves (for traces)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zerosim.contract import STAGE_NAMES
from zerosim.sim.rank import RankContext


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
