"""Every refusal made before a rank starts, written once for `zero-real run` and `calibrate`: torch
present, what this box has, an output path that can be written, enough devices and memory (the
ranks' own processes counted, not the model alone), and scenario settings zero_real does not
implement (refused, never ignored). Each failure is one InputError line; nothing here starts a
process. Flags are in range already: they are parsed by flags.py's types."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from zerosim.errors import InputError
from zerosim.files import check_writable, refuse_special
from zerosim.frameworks import REGISTRY, framework_of
from zerosim.units import GiB, MiB

TORCH_MISSING = ("torch is not installed; install the build you want (e.g. pip install torch), "
                 "then pip install 'zerosim[real]'")
MEMORY_FRACTION = 0.8  # of MemAvailable: leave the box room for the launcher and the page cache
# What a rank holds beyond its model, and the fork server it starts from, measured once on a
# 2-core x86_64 box with torch 2.13.0+cpu: /proc/PID/smaps_rollup of each gloo rank after
# train() ran 3 steps of the tiny scenario (2 ranks at stage 3, 4 at stage 0, 1 at stage 1 with
# 30 timed steps): Private_Clean + Private_Dirty 122-147 MiB, the same at every rank count and
# stage (torch's import, gloo, the profiler), of an RSS of ~276 MiB whose rest (~130 MiB) the
# ranks share with the fork server; the fork server's RSS (torch and zero_real imported) was
# 254 MiB. A CUDA build of torch holds more: these are floors.
PROCESS_BYTES = 150 * MiB
FORK_SERVER_BYTES = 256 * MiB


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


def check_out(out: str | None) -> None:
    """An output file that can be written: checked before the run, not after it (a typo must
    not cost the whole run). The write itself is whole or nothing (zerosim.files). No named
    pipe, socket or device: opening one for the measurement would wait, after the whole run,
    for a reader that may never come."""
    if out == "":
        raise InputError("--out is empty; give a file name, e.g. --out m.json")
    if out is not None:
        refuse_special(out, "--out")
        check_writable(Path(out), "--out")


def check_overrides_agree(overrides, decided: dict[str, tuple[str, Any]]) -> None:
    """A `--set` of a key that a flag decides (`decided`: table.key -> the flag and its value)
    agrees with the flag, or is refused: the flag wins, and a run of something other than the
    --set asked for would be measured without a word (`--set training.zero_stage=7` under
    `--stage 3`). The scenario file's own value is the flag's to replace: a file serves every
    stage and world."""
    from zerosim.scenario.load import parse_override

    for text in overrides:
        table, key, value = parse_override(text)
        name = f"{table}.{key}"
        if name in decided and value != decided[name][1]:
            flag, wanted = decided[name]
            raise InputError(f"--set {text} disagrees with {flag}, which makes {name} = {wanted} "
                             f"in zero-real: leave {name} out, or set it to {wanted}")


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
    trainable = ", ".join(name for name, f in REGISTRY.items() if f.runs_in_zero_real)
    unsupported = [
        ("training.framework", t.framework, framework_of(t).runs_in_zero_real,
         f"the ZeRO paper's stages ({trainable})"),
        ("training.reduce_dtype", t.reduce_dtype, t.reduce_dtype == "param",
         "gradients reduced in the parameters' dtype (param)"),
        ("training.optimizer", t.optimizer, t.optimizer in ("adam", "adamw"),
         "Adam only (adam, adamw)"),
        ("training.optimizer_offload", t.optimizer_offload, t.optimizer_offload != "nvme",
         "optimizer states on the training device (none) or in host memory (cpu)"),
        ("training.param_offload", t.param_offload, t.param_offload == "none",
         "parameter shards on the training device only (none)"),
        ("training.delayed_update", str(t.delayed_update).lower(), not t.delayed_update,
         "the optimizer step after each step's backward only (false)"),
        ("parallelism.hpz_partition", scenario.parallelism.hpz_partition,
         scenario.parallelism.hpz_partition <= 1,
         "no ZeRO++ secondary partition (0 or 1)"),
        ("training.quantized_weights", str(t.quantized_weights).lower(), not t.quantized_weights,
         "16- or 32-bit parameter all-gathers only (false)"),
        ("training.quantized_gradients", str(t.quantized_gradients).lower(),
         not t.quantized_gradients, "16- or 32-bit gradient reduce-scatters only (false)"),
        ("training.activation_checkpointing", t.activation_checkpointing,
         t.activation_checkpointing == "none", "no activation checkpointing (none)"),
        ("training.gradient_reduction", t.gradient_reduction,
         t.gradient_reduction == "reduce_scatter", "the ZeRO paper's reduce_scatter only"),
        ("training.flash_kernel", t.flash_kernel, t.flash_kernel == "fa2",
         "PyTorch SDPA's fused kernels, timed in zerosim as fa2"),
        ("training.norm_kernel", t.norm_kernel, t.norm_kernel == "fused",
         "nn.RMSNorm and nn.LayerNorm (fused)"),
        ("model.head_size", m.head_size, m.q_width == m.hidden,
         "heads x head_size = hidden (unset)"),
        ("model.qkv_bias", str(m.qkv_bias).lower(), m.qkv_biased == m.bias,
         "biases on every projection or none (model.bias; qkv_bias unset)"),
        ("model.norm_bias", str(m.norm_bias).lower(),
         m.norm_biased == (m.norm == "layernorm" and m.bias),
         "a LayerNorm's bias with the projections' (model.bias; norm_bias unset)"),
        ("model.qk_norm", str(m.qk_norm).lower(), not m.qk_norm, "no per-head Q/K norms (false)"),
        ("model.layer_norms", m.layer_norms, m.layer_norms == 2, "two norms a layer (2)"),
        ("model.sliding_window", m.sliding_window, not m.windowed_layers,
         "attention over the whole causal prefix (SDPA is_causal; sliding_window unset)"),
        ("parallelism.tp_comm_overlap", str(scenario.parallelism.tp_comm_overlap).lower(),
         not scenario.parallelism.tp_comm_overlap,
         "tensor parallelism's collectives blocking the compute, Megatron's default (false)"),
    ]
    for key, value, ok, supported in unsupported:
        if not ok:
            raise InputError(f"{key} = {value} is not implemented by zero_real; it supports "
                             f"{supported}")
    check_pipeline(scenario)
    if m.position == "rope" and m.head_dim % 2:
        raise InputError(f"model.position = rope needs an even head dimension; model.hidden / "
                         f"model.heads = {m.hidden} / {m.heads} = {m.head_dim} is odd")


def check_pipeline(scenario) -> None:
    """A pipeline zero_real runs (parts/pipeline.py): GPipe or 1F1B, one chunk per stage; DDP or
    ZeRO-1 over each stage's data-parallel ranks (the paper's stages 2 and 3 reduce or gather in
    every micro-batch, which a pipeline's interleaved micro-batches would need per stage); no
    fp16 loss scale (its overflow check would have to span the stages). What the world, the
    layers and the framework need of p is zerosim.scenario.axes's check."""
    from zerosim.parallel.pipeline import layout_of

    layout = layout_of(scenario)
    if layout is None:
        return
    key = f"parallelism.pipeline_parallel = {layout.stages}"
    if layout.schedule not in ("gpipe", "1f1b"):
        raise InputError(f"parallelism.pipeline_schedule = {layout.schedule} is not implemented by "
                         f"zero_real; it runs gpipe and 1f1b")
    stage = scenario.training.zero_stage
    if stage > 1:
        raise InputError(f"{key} with ZeRO stage {stage} is not implemented by zero_real; it runs "
                         f"a pipeline with stage 0 (DDP) or 1 (ZeRO-1), as DeepSpeed's pipeline "
                         f"engine and Megatron's distributed optimizer do")
    if scenario.training.precision == "fp16":
        raise InputError(f"{key} with training.precision = fp16 is not implemented by zero_real "
                         f"(its loss scale is not shared across stages); use bf16 or fp32")


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
    """On CPU, ranks share the box's memory: refuse a run that cannot fit, rather than let the
    kernel's OOM killer pick a rank mid-run (or swap the box to a halt)."""
    from zerosim.analytic.memory import stage_memory

    check_fits(procs, stage_memory(scenario, stage).peak_bytes,
               f"zerosim's peak for stage {stage} at world size {world}")


def check_fits(procs: int, per_rank_bytes: float, what: str) -> None:
    """procs ranks, each its process (PROCESS_BYTES) and `per_rank_bytes` of `what`, and the
    fork server they start from, within MEMORY_FRACTION of MemAvailable; unchecked where
    MemAvailable cannot be read."""
    available = mem_available()
    if available is None:
        return
    need = FORK_SERVER_BYTES + procs * (PROCESS_BYTES + per_rank_bytes)
    if need > MEMORY_FRACTION * available:
        raise InputError(
            f"not enough memory: {procs} process(es) x ({PROCESS_BYTES / MiB:.0f} MiB per "
            f"process + {per_rank_bytes / GiB:.3f} GiB {what}) + {FORK_SERVER_BYTES / MiB:.0f} "
            f"MiB fork server = {need / GiB:.2f} GiB needed; available: {MEMORY_FRACTION:.0%} "
            f"of MemAvailable {available / GiB:.2f} GiB = {MEMORY_FRACTION * available / GiB:.2f} "
            f"GiB")
