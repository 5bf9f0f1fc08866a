"""Every refusal made before a rank starts, written once for `zero-real run` and `calibrate`: torch
present, what this box has, flags in range, an output path that can be written, enough devices
and memory, and scenario settings zero_real does not implement (refused, never ignored). Each
failure is one InputError line; nothing here starts a process."""

from __future__ import annotations

import math
import os
from typing import Any

from zerosim.errors import InputError
from zerosim.units import GiB

TORCH_MISSING = ("torch is not installed; install the build you want (e.g. pip install torch), "
                 "then pip install 'zerosim[real]'")
MEMORY_FRACTION = 0.8  # of MemAvailable: leave the box room for the launcher, fork server, page cache


def require_torch():
    """The torch module, or the one line that says how to get it."""
    try:
        import torch
    except ImportError:
        raise InputError(TORCH_MISSING) from None
    return torch


def box_info() -> dict[str, Any]:
    """torch version, distributed backends and accelerators visible to this process."""
    torch = require_torch()
    try:
        import torch.distributed as dist
    except ImportError:
        raise InputError(TORCH_MISSING) from None

    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    available = dist.is_available()
    return {
        "torch_version": torch.__version__,
        "distributed": available,
        "gloo": available and dist.is_gloo_available(),
        "nccl": available and dist.is_nccl_available(),
        "cuda_devices": devices,
        "cpu_count": os.cpu_count(),
    }


def positive(flag: str, value: float | None) -> None:
    """None (not given), or a finite number > 0."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise InputError(f"{flag} {value:g} must be a positive number")


def at_least(flag: str, value: int | None, least: int) -> None:
    if value is not None and value < least:
        raise InputError(f"{flag} {value} must be >= {least}")


def check_out(out: str) -> None:
    """An output file that can be written: before the run, not after it (a typo must not cost
    the whole run)."""
    parent = os.path.dirname(os.path.abspath(out))
    if os.path.isdir(out):
        raise InputError(f"--out {out} is a directory; give a file name, e.g. {out}/NAME.json")
    if not os.path.isdir(parent):
        raise InputError(f"--out {out}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise InputError(f"--out {out}: directory {parent} is not writable")


def check_devices(backend: str, local_procs: int) -> None:
    """NCCL needs a CUDA device per local process."""
    if backend != "nccl":
        return
    count = require_torch().cuda.device_count()
    if count < local_procs:
        raise InputError(f"--backend nccl needs {local_procs} CUDA devices, this box has "
                         f"{count}; use --backend gloo on CPU")


def check_scenario(scenario, path: str) -> None:
    """A scenario zero_real can build and train: a shape, and only the settings it implements."""
    t, m = scenario.training, scenario.model
    if m.is_bare:
        raise InputError(f"{path}: zero_real needs a model shape (hidden, heads, vocab, "
                         f"...), not a bare parameter count")
    unsupported = [
        ("training.optimizer", t.optimizer, t.optimizer in ("adam", "adamw"),
         "Adam only (adam, adamw)"),
        ("training.optimizer_offload", t.optimizer_offload, t.optimizer_offload == "none",
         "optimizer states on the training device only (none)"),
        ("training.activation_checkpointing", t.activation_checkpointing,
         t.activation_checkpointing == "none", "no activation checkpointing (none)"),
        ("training.flash_attention", str(t.flash_attention).lower(), not t.flash_attention,
         "plain attention only (false)"),
        ("training.gradient_reduction", t.gradient_reduction,
         t.gradient_reduction == "reduce_scatter", "the ZeRO paper's reduce_scatter only"),
    ]
    for key, value, ok, supported in unsupported:
        if not ok:
            raise InputError(f"{key} = {value} is not implemented by zero_real; it supports "
                             f"{supported}")
    if m.position == "rope" and m.head_dim % 2:
        raise InputError(f"model.position = rope needs an even head dimension; model.hidden / "
                         f"model.heads = {m.hidden} / {m.heads} = {m.head_dim} is odd")


def mem_available() -> int | None:
    """The box's MemAvailable in bytes; None where it cannot be read (not Linux)."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_memory(scenario, stage: int, procs: int, world: int) -> None:
    """On CPU, ranks share the box's memory: refuse a run zerosim says cannot fit, rather than
    let the kernel's OOM killer pick a rank mid-run (or swap the box to a halt)."""
    from zerosim.memory import stage_memory

    available = mem_available()
    if available is None:
        return
    per_rank = stage_memory(scenario, stage).peak_bytes
    if per_rank * procs > MEMORY_FRACTION * available:
        raise InputError(
            f"not enough memory: {procs} process(es) x {per_rank / GiB:.2f} GiB (zerosim's peak "
            f"for stage {stage} at world size {world}) = {per_rank * procs / GiB:.2f} GiB > "
            f"{MEMORY_FRACTION:.0%} of MemAvailable {available / GiB:.2f} GiB = "
            f"{MEMORY_FRACTION * available / GiB:.2f} GiB")
