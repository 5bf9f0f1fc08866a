"""What offload and ZeRO++ cost beyond the collectives: copies between a GPU and host memory,
the CPU's optimizer step, NVMe reads and writes, and the quantization kernels.

A copy, the CPU step and a drive transfer are "host operations": a stage program queues them on
a communication stream like a collective (rank.RankContext.comm with group HOST), so they take
their turn on that stream (DeepSpeed copies each reduced gradient partition to the host on its
reduction stream under overlap_comm) and are recorded as events. Each is one phase over a link
of the rank's own (network.py: each GPU's host link in each direction, its CPU cores, its share
of the node's drives), priced at that link's rate: seconds = bytes (the CPU step: elements) /
rate. Host operations use copy engines and the CPU, not SMs: compute keeps its SMs beside them.

Bytes moved per rank per optimizer step, DeepSpeed's code paths (docs/research/offload_hybrid.md
§2, §4): each micro-step that reduces copies the rank's reduced gradient partition down in fp32
(4 bytes per element; stage_1_and_2.py casts it on the GPU first); after the CPU step the
16-bit partition goes up (bp bytes per element), unless the parameters themselves live on the
host (stage 3 with param_offload, which copies each unit's 16-bit shard up before every
all-gather). On NVMe the step reads and writes the fp32 master and moments (4 + 4 x moments
bytes per element each way, pipeline_read/write off: DeepSpeed's default), and offloaded
parameters are read before each all-gather and written after the step.

Simplifications, each a departure from DeepSpeed's code paths: with gradient accumulation,
stages 2 and 3 copy every micro-step's reduced partition down in fp32 (DeepSpeed's stage 2 moves
a 16-bit host accumulator up and back instead, about as many bytes split over both directions;
its stage 3 keeps a 16-bit gradient partition on the GPU between micro-steps and copies once,
at the boundary, so it moves fewer bytes and holds bg x Ψ/N more GPU memory than modelled here;
zero_real copies every micro-step as modelled). A host operation, queued like a collective,
starts once every simulated rank has joined it, though a copy is each rank's own: where ranks
differ (jitter, stragglers) that can delay it; it stayed hidden in every case tried.
"""

from __future__ import annotations

from zerosim.sim.collectives.ring import Phase
from zerosim.sim.costs import hbm_seconds
from zerosim.sim.network import HOST_OPS

HOST = "host"
"""The group of host operations (engine.Engine.group_of)."""
GRAD_TO_HOST_BYTES = 4
"""Bytes per element of a gradient partition copied to the host (fp32, as DeepSpeed does)."""

# ZeRO++ qwZ (DeepSpeed partition_parameters.py, CUDAQuantizer): symmetric INT8, one fp32
# scale per group of at most 8000 elements: 1 + 4 / 8000 bytes per element on the wire.
QWZ_BYTES_PER_ELEMENT = 1 + 4 / 8000
# qgZ (coalesced_collectives.py, all_to_all_quant_reduce): INT4, two elements per byte, one
# fp32 scale per group of at most 8000 (the same quantizer).
QGZ_BYTES_PER_ELEMENT = 0.5 + 4 / 8000


def host_phases(op: str, size: float) -> list[Phase]:
    """One phase of `size` bytes (elements for the CPU step) over the rank's `op` link."""
    if op not in HOST_OPS:
        raise ValueError(f"{op!r} is not a host operation {HOST_OPS}")
    return [Phase(op, op, 1, float(size), 0.0)] if size > 0 else []


def kernel_seconds(scenario, size_bytes: float) -> float:
    """A quantize or dequantize kernel moving size_bytes over HBM at the rate the optimizer
    step is priced at (costs.hbm_seconds): DeepSpeed's quantizers are fused CUDA kernels. Our
    eager torch version on an H100 is 6-8x slower (profiles/h100/
    offload_microbench_2026-11-26.json, gpu_quantize), the bound for an unfused one."""
    return hbm_seconds(scenario, size_bytes)
