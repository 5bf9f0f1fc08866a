"""The caching-allocator model against a real one: two FSDP2 runs on an H100 recorded every
allocation and free of PyTorch's CUDA caching allocator (torch.cuda.memory._record_memory_history,
profiles/h100/allocator_trace_*.json.gz, bench/h100/fsdp2_memory.py with FSDP2_MEMORY_SNAPSHOT).
Replayed through sim/allocator.py, in the same order and on the same streams, the model must
reserve exactly what torch.cuda.max_memory_reserved reported on the GPU, and allocate exactly
max_memory_allocated: every rounding, split, segment size and per-stream pool has to agree with
CUDACachingAllocator.cpp for 8,000-19,000 events to land on the same byte count."""

import gzip
import json
from pathlib import Path

import pytest

from zerosim.sim.allocator import CachingAllocator

TRACES = sorted((Path(__file__).resolve().parents[2] / "profiles" / "h100").glob(
    "allocator_trace_*.json.gz"))


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name.split("_2026")[0])
def test_replaying_an_h100_trace_reserves_what_the_gpu_reserved(path):
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    allocator = CachingAllocator()
    for action, address, size, stream in trace["events"]:
        if action == "a":
            allocator.malloc(address, size, stream=stream)
        else:
            allocator.free(address)
    assert allocator.peak_reserved_bytes == trace["max_memory_reserved"]
    assert allocator.peak_allocated_bytes == trace["max_memory_allocated"]
    # the point of the model: reserved exceeds allocated, here by gigabytes
    assert allocator.peak_reserved_bytes - allocator.peak_allocated_bytes > 4 << 30


def test_the_traces_are_there():
    assert len(TRACES) == 2
