"""What a rank measures about itself: a byte ledger, memory at four points of the step and the
peak, and timed events in the step-event schema (zerosim.contract).

Two independent views of memory, so that one checks the other:
- the ledger: bytes of the buffers the stage owns, by category, kept by the stage as it allocates
  and frees them; activations are what autograd saved (saved-tensor hooks, unique storages).
- the measurement: on GPU the CUDA caching allocator's statistics; on CPU the torch profiler's
  memory events, whose "Total Allocated" is a running total of every CPU tensor allocation made
  while profiling (c10's ProfiledCPUMemoryReporter). Profiling starts before the model exists.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import time
from collections import defaultdict

import torch

from zerosim.contract import COMM, COMPUTE, MeasuredEvent, MeasuredSample

STATE_CATEGORIES = ("params", "grads", "master", "moments")
# autograd_grads: a gradient autograd allocated that the stage has not yet taken (ZeRO-2 copies
# each into buckets and frees it; a tied weight's first part waits there for its second).
CATEGORIES = STATE_CATEGORIES + ("activations", "buckets", "gathered", "autograd_grads")
HOST = "host"  # model states in host memory under optimizer offload (Ledger.add_host)
MARK = "zero_real.mark."


class Ledger:
    """Persistent model states (fixed after init) plus live transient buffers with their peaks;
    and, under optimizer offload, the states in host memory (by STATE_CATEGORIES, apart).

    `host_is_device`: a CPU-only run, whose "device" memory is the host's: host states are then
    part of what the device holds (`now`, which the measured memory is compared with)."""

    def __init__(self, host_is_device: bool = True):
        self.states: dict[str, int] = defaultdict(int)
        self.padding_bytes = 0.0
        self.host: dict[str, int] = defaultdict(int)
        self.host_padding_bytes = 0.0
        self.host_is_device = host_is_device
        self.live: dict[str, int] = defaultdict(int)
        self.peak: dict[str, int] = defaultdict(int)

    def add_state(self, category: str, t: torch.Tensor, ideal_elements: float) -> None:
        """`ideal_elements`: what an unpadded, evenly divided buffer would hold (Ψ or Ψ/N);
        the rest of the allocation is padding, reported so it can be told apart."""
        assert category in STATE_CATEGORIES
        self.states[category] += t.numel() * t.element_size()
        self.padding_bytes += (t.numel() - ideal_elements) * t.element_size()

    def add_host(self, category: str, t: torch.Tensor, ideal_elements: float) -> None:
        """A model state in host memory (offload), as add_state."""
        assert category in STATE_CATEGORIES
        self.host[category] += t.numel() * t.element_size()
        self.host_padding_bytes += (t.numel() - ideal_elements) * t.element_size()

    def alloc(self, category: str, nbytes: int) -> None:
        self.live[category] += nbytes
        self.peak[category] = max(self.peak[category], self.live[category])

    def free(self, category: str, nbytes: int) -> None:
        self.live[category] -= nbytes

    def now(self) -> dict[str, int]:
        out = {c: self.states.get(c, 0) + self.live.get(c, 0) for c in CATEGORIES}
        if self.host and self.host_is_device:
            out[HOST] = self.host_bytes()
        return out

    def host_bytes(self) -> int:
        return sum(self.host.values())

    def model_states_bytes(self) -> int:
        return sum(self.states.values())

    def as_dict(self) -> dict:
        """Model states, and each transient category at its peak (the ledger's worst case)."""
        out = {c: self.states.get(c, 0) for c in STATE_CATEGORIES}
        out.update({c: self.peak.get(c, 0) for c in CATEGORIES[4:]})
        out["model_states"] = self.model_states_bytes()
        out["total"] = sum(out[c] for c in CATEGORIES)
        out["padding_bytes"] = round(self.padding_bytes, 3)
        # Host memory (zerosim's host_bytes): 0 without offload; by category where there is some.
        out[HOST] = self.host_bytes()
        out.update({f"{HOST}_{c}": self.host[c] for c in STATE_CATEGORIES if self.host.get(c)})
        out["host_padding_bytes"] = round(self.host_padding_bytes, 3)
        return out


class ActivationTracker:
    """Bytes autograd saves for backward: unique storages, parameters excluded."""

    def __init__(self, ledger: Ledger, is_param_storage):
        self.ledger, self.is_param_storage = ledger, is_param_storage
        self.seen: dict[int, int] = {}

    def _pack(self, t: torch.Tensor):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr and ptr not in self.seen and not self.is_param_storage(ptr):
            self.seen[ptr] = storage.nbytes()
            self.ledger.alloc("activations", storage.nbytes())
        return t

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def release(self) -> None:
        """After backward: autograd has dropped what it saved."""
        self.ledger.free("activations", sum(self.seen.values()))
        self.seen.clear()


@contextlib.contextmanager
def _quiet_stderr():
    """Kineto prints 'USDT ... profiler_start/stop' lines straight to file descriptor 2 on every
    start and stop; hide them there, and only there."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class Recorder:
    """Events of one rank in the step-event schema, and memory marks at the phase points."""

    def __init__(self, rank: int, device: torch.device, profile_memory: bool = True):
        self.rank, self.device = rank, device
        self.ledger = Ledger(host_is_device=device.type == "cpu")
        self.events: list[MeasuredEvent] = []
        self.samples: list[MeasuredSample] = []
        self.phase, self.layer = "forward", None
        self.step = 0  # the training step events belong to (set by the training loop)
        self.peak_bytes: int | None = None  # once memory measurement has stopped
        # CUDA only: the caching allocator's peak reservation (segments it holds from the driver,
        # allocated or not); the profiler has no such figure on CPU.
        self.peak_reserved_bytes: int | None = None
        self.peak_device_used_bytes: int | None = None  # CUDA: the driver's figure, at the marks
        self._open = None  # the compute segment being timed: (name, phase, layer, start_s)
        self.cuda = device.type == "cuda"
        self._profiler = None
        if not self.cuda and profile_memory:
            self._profiler = torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True)
            with _quiet_stderr():
                self._profiler.__enter__()
        self.t0 = time.perf_counter()

    def _now(self) -> float:
        return time.perf_counter() - self.t0

    def _event(self, stream: str, name: str, op, nbytes, start_s: float, phase=None,
               layer=None) -> None:
        self.events.append(MeasuredEvent(rank=self.rank, step=self.step, stream=stream, name=name,
                                         phase=phase or self.phase, layer=layer, op=op,
                                         bytes=nbytes, start_s=start_s, end_s=self._now()))

    def _close_compute(self) -> None:
        """End the open compute segment now (it stays open as far as `compute` is concerned)."""
        name, phase, layer, start = self._open
        if self.cuda:
            torch.cuda.synchronize(self.device)
        self._event(COMPUTE, name, None, None, start, phase, layer)

    @contextlib.contextmanager
    def comm(self, name: str, op: str, nbytes: int):
        # A collective launched inside a compute region (a gradient bucket from autograd's hook)
        # splits it: compute up to here, the collective, then compute again. Events never nest,
        # so a layer's compute time is its compute alone.
        open_compute = self._open
        if open_compute is not None:
            self._close_compute()
        start = self._now()
        yield
        if self.cuda:
            torch.cuda.synchronize(self.device)  # time the transfer, not the launch
        self._event(COMM, name, op, nbytes, start, layer=self.layer)
        if open_compute is not None:
            self._open = (*open_compute[:3], self._now())

    @contextlib.contextmanager
    def transfers(self, stream: str, items: list[tuple[str, int, str]]):
        """Point-to-point transfers posted together (a pipeline's batch of sends and receives):
        one event per (op, bytes, pass) of `items`, each from the batch's start to its end."""
        start = self._now()
        yield
        if self.cuda:
            torch.cuda.synchronize(self.device)
        for op, nbytes, phase in items:
            self._event(stream, stream, op, nbytes, start, phase)

    @contextlib.contextmanager
    def compute(self, name: str, layer):
        self.layer = layer
        self._open = (name, self.phase, layer, self._now())
        try:
            yield
            self._close_compute()
        finally:
            self._open = None

    def mark(self, point: str, step: int) -> None:
        """A memory sample: the ledger now, and (on GPU at once, on CPU after the run) measured."""
        sample = MeasuredSample(rank=self.rank, t_s=self._now(), point=point, step=step,
                                bytes_by_category=self.ledger.now())
        if self.cuda:
            torch.cuda.synchronize(self.device)
            sample["measured_bytes"] = torch.cuda.memory_allocated(self.device)
            sample["reserved_bytes"] = torch.cuda.memory_reserved(self.device)
            free, total = torch.cuda.mem_get_info(self.device)
            sample["device_used_bytes"] = total - free
        elif self.profiling:
            with torch.profiler.record_function(f"{MARK}{len(self.samples)}"):
                pass
        self.samples.append(sample)

    @property
    def profiling(self) -> bool:
        """CPU memory profiling is on: every op pays its overhead, so timings are slower."""
        return self._profiler is not None and self.peak_bytes is None

    def finish(self) -> int:
        """Stop measuring memory; fill in measured bytes of every sample so far; return the peak
        in bytes. Later steps run without the profiler (timed steps); later marks carry only the
        ledger on CPU. Idempotent."""
        if self.peak_bytes is None:
            self.peak_bytes = self._finish()
        return self.peak_bytes

    def _finish(self) -> int:
        if self.cuda:
            self.peak_reserved_bytes = torch.cuda.max_memory_reserved(self.device)
            used = [s["device_used_bytes"] for s in self.samples if "device_used_bytes" in s]
            self.peak_device_used_bytes = max(used) if used else None
            return torch.cuda.max_memory_allocated(self.device)
        if self._profiler is None:
            return 0
        with _quiet_stderr():
            self._profiler.__exit__(None, None, None)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            self._profiler.export_chrome_trace(path)
            with open(path, encoding="utf-8") as f:
                trace = json.load(f)
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        memory, marks = [], {}
        for e in events:
            name = e.get("name", "")
            if name == "[memory]" and e.get("args", {}).get("Device Type") in (0, None):
                args = e["args"]
                memory.append((float(e["ts"]), int(args["Total Allocated"]), int(args["Bytes"])))
            elif name.startswith(MARK):
                marks[int(name[len(MARK):])] = float(e["ts"])
        memory.sort()
        # The running total is process-wide and survives earlier profiling sessions: count from
        # what it was just before this session's first allocation.
        base = memory[0][1] - memory[0][2] if memory else 0
        memory = [(ts, total - base) for ts, total, _ in memory]
        for i, sample in enumerate(self.samples):
            before = [total for ts, total in memory if ts <= marks[i]]
            sample["measured_bytes"] = before[-1] if before else 0
        return max((total for _, total in memory), default=0)

