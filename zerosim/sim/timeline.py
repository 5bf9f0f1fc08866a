"""The memory of one simulated rank through the step: named buffers allocated and freed in time.

Categories are those of the analytic model and of zero_real's ledger: params, grads, optimizer
(fp32 master copy and moments), activations, buckets (stage 2 gradient buckets), gathered (stage 3
parameters gathered for compute) and layer_grads (stage 3 full gradients awaiting their
reduce-scatter), and what a calibration profile measured beyond them: workspace (transient
during backward) and allocator (kept after it). Only GPU memory is tracked; host memory under offload is reported analytically.

Every buffer also goes through a model of PyTorch's caching allocator (allocator.py), which gives
what torch.cuda.max_memory_allocated (rounded blocks) and max_memory_reserved (segments) would
report for this sequence of allocations.
"""

from __future__ import annotations

from collections import Counter

from zerosim.sim.allocator import CachingAllocator

CATEGORIES = ("params", "grads", "optimizer", "activations", "buckets", "gathered", "layer_grads",
              "workspace", "allocator")


class MemoryTimeline:
    def __init__(self, rank: int, keep_samples: bool = True) -> None:
        self.rank = rank
        self.live: dict[object, tuple[str, int]] = {}
        self.by_category: Counter[str] = Counter({c: 0 for c in CATEGORIES})
        self.total_bytes = 0
        self.peak_bytes = 0
        self.marks: dict[str, int] = {}
        self.operations = 0
        """Allocations, frees and marks so far."""
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._keep_samples = keep_samples
        self.allocator = CachingAllocator()

    def alloc(self, now_s: float, key: object, category: str, size_bytes: int,
              stream: str = "compute") -> None:
        """`stream`: the CUDA stream the buffer is allocated for (the allocator keeps a pool per
        stream)."""
        if key in self.live:
            raise RuntimeError(f"buffer {key!r} allocated twice on rank {self.rank}")
        self.live[key] = (category, size_bytes)
        self.allocator.malloc(key, size_bytes, stream)
        self._change(now_s, category, size_bytes)

    def free(self, now_s: float, key: object) -> None:
        category, size_bytes = self.live.pop(key)
        self.allocator.free(key)
        self._change(now_s, category, -size_bytes)

    def mark(self, label: str) -> None:
        """Remember the total at a steady point of the step (after_forward, ...)."""
        self.marks[label] = self.total_bytes
        self.operations += 1

    def _change(self, now_s: float, category: str, delta: int) -> None:
        self.operations += 1
        self.by_category[category] += delta
        self.total_bytes += delta
        self.peak_bytes = max(self.peak_bytes, self.total_bytes)
        if self._keep_samples:
            if self.samples and self.samples[-1][0] == now_s:
                self.samples.pop()  # several changes at one instant: keep the last state
            self.samples.append((now_s, dict(self.by_category)))
