"""Timing on every rank at once: the ranks of a calibration world time the same thing together
(they share the box as they do in a run), for as long as the slowest of them needs, so that none
gets the box to itself. Rank 0's numbers are reported; the number of iterations is agreed first
(a MAX all-reduce of the warm-up time). Used by bench.py (units, optimizer, collectives) and
ops.py (the op model's microbenchmarks).
"""

from __future__ import annotations

import math
import statistics
import time

import torch
import torch.distributed as dist

COMPUTE_TARGET_S, COMPUTE_ITERATIONS = 0.05, (5, 5000)
WARMUP = 2


# Bytes written between timed calls so that the next one finds its operands in memory, not in
# cache, as a training step's optimizer finds its states after forward and backward (issue 31: on
# a 2-core EPYC with 32 MiB of L3, Adam over 118,528 fp32 elements took 0.25 ms hot, 0.41 ms
# after a flush, 0.44-0.47 ms inside the tiny scenario's step). Larger than the last-level cache
# of the CPUs and GPUs this runs on (an H100's L2 is 50 MB); triton.testing.do_bench flushes the
# same way, zeroing a 256 MB buffer before each repetition.
FLUSH_BYTES = {"cpu": 64 * 2**20, "cuda": 256 * 2**20}
_FLUSH: dict = {}


def flush_caches(device: torch.device) -> None:
    """Write FLUSH_BYTES through the device's caches (the buffer is made once per device)."""
    key = str(device)
    if key not in _FLUSH:
        _FLUSH[key] = torch.empty(FLUSH_BYTES[device.type] // 4, dtype=torch.int32, device=device)
    _FLUSH[key].zero_()


def release_flush(device: torch.device) -> None:
    """Free the flush buffer: on CUDA it would stay in the allocator's peaks of later runs."""
    _FLUSH.pop(str(device), None)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def max_over_ranks(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # not through Collectives: bookkeeping, not measured
    return t.tolist()


def barrier(device: torch.device) -> None:
    dist.all_reduce(torch.zeros(1, device=device))  # works the same on gloo and nccl


def iterations(warmup_s: float, target_s: float, bounds: tuple[int, int], device) -> int:
    """Timed iterations for about target_s, the same on every rank (the slowest rank's warm-up)."""
    slowest = max_over_ranks([warmup_s], device)[0]
    lo, hi = bounds
    return int(min(hi, max(lo, math.ceil(target_s / max(slowest, 1e-9)))))


def until(once, cost, device, target_s: float = COMPUTE_TARGET_S) -> list:
    """Warm up, then time `once` until every rank has spent target_s on it, in rounds whose
    length all ranks agree on (a slow warm-up alone must not cut the measurement short)."""
    lo, hi = COMPUTE_ITERATIONS
    estimate_s = cost([once() for _ in range(WARMUP)][-1])
    samples: list = []
    while True:
        spent_s = sum(cost(s) for s in samples)
        least_spent, slowest = max_over_ranks([-spent_s, estimate_s], device)
        least_spent = -least_spent
        if len(samples) >= hi or (len(samples) >= lo and least_spent >= target_s):
            return samples
        k = math.ceil((target_s - least_spent) / max(slowest, 1e-9))
        samples += [once() for _ in range(min(hi - len(samples), max(lo - len(samples), k, 1)))]
        estimate_s = statistics.median(cost(s) for s in samples)
