"""The ZeRO family beyond the four stages, as [training] and [parallelism] keys say it:
optimizer and parameter offload (ZeRO-Offload, ZeRO-Infinity), hybrid sharding (HSDP, MiCS) and
ZeRO++. What goes with what is checked here, once: every impossible combination is one
InputError naming the keys.

Which ranks share a collective under hybrid sharding (shard_group = g of N ranks, n per node):
the shard group is g consecutive ranks (inside a node when g <= n, whole nodes when g > n); the
replica group is the N / g ranks with the same place in their shard groups (one per node when
g = n). ZeRO++'s hpZ group is h consecutive ranks inside a node; qgZ's second all-to-all runs
among the ranks with the same local index on every node.
"""

from __future__ import annotations

from zerosim.errors import InputError
from zerosim.frameworks import REGISTRY, framework_of


def zeropp(t, p=None) -> list[str]:
    """The ZeRO++ techniques the [training] (t) and [parallelism] (p; None: [training]'s alone)
    keys turn on, each named by its key (hpZ needs a partition of 2 or more)."""
    on = (("parallelism.hpz_partition", p is not None and p.hpz_partition > 1),
          ("training.quantized_weights", t.quantized_weights),
          ("training.quantized_gradients", t.quantized_gradients))
    return [key for key, set_ in on if set_]


def offloads(t) -> bool:
    return t.optimizer_offload != "none" or t.param_offload != "none"


def check_training(t) -> None:
    """The combinations [training] alone rules out."""
    stage = t.zero_stage
    if t.param_offload != "none" and stage != 3:
        raise InputError(f"training.param_offload = {t.param_offload!r} offloads the parameter "
                         f"shards of ZeRO-3, but training.zero_stage = {stage}")
    if t.optimizer_offload != "none" and stage == 0:
        raise InputError(f"training.optimizer_offload = {t.optimizer_offload!r} needs a ZeRO "
                         f"stage (1-3: DeepSpeed offloads the optimizer's partition), not "
                         f"training.zero_stage = 0")
    if t.param_offload != "none" and t.optimizer_offload == "none":
        raise InputError(f"training.param_offload = {t.param_offload!r} without "
                         f"optimizer_offload: DeepSpeed offloads parameters only with the "
                         f"optimizer (set training.optimizer_offload too)")
    if t.delayed_update and t.optimizer_offload == "none":
        raise InputError("training.delayed_update = true delays the CPU's optimizer step, but "
                         "training.optimizer_offload = 'none'")
    if offloads(t) and not framework_of(t).offloads:
        able = " or ".join(repr(name) for name, f in REGISTRY.items() if f.offloads)
        raise InputError(f"offload is modelled as DeepSpeed runs it; training.framework = "
                         f"{t.framework!r} (use {able})")
    _refuse_zeropp(t, zeropp(t))


def _refuse_zeropp(t, on: list[str]) -> None:
    """ZeRO++ (the keys `on`) runs on ZeRO-3, as DeepSpeed runs it."""
    if on and t.zero_stage != 3:
        raise InputError(f"{on[0]} is ZeRO++, which works on ZeRO-3, but "
                         f"training.zero_stage = {t.zero_stage}")
    if on and not framework_of(t).runs_zeropp:
        raise InputError(f"{on[0]} is ZeRO++ (DeepSpeed), but training.framework = "
                         f"{t.framework!r}")


def check_layout(t, p) -> None:
    """The combinations [training] and [parallelism] rule out together."""
    stage, g = t.zero_stage, p.shard_group
    on = zeropp(t, p)
    _refuse_zeropp(t, on)
    if on and g:
        raise InputError(f"parallelism.shard_group = {g} with {on[0]}: hybrid "
                         f"sharding and ZeRO++ are separate schemes here; set one of them")
    if g and stage == 0:
        raise InputError(f"parallelism.shard_group = {g} shards model states, but "
                         f"training.zero_stage = 0 replicates them all")


def check_scenario(scenario) -> None:
    """The combinations that depend on the cluster."""
    t, c, p = scenario.training, scenario.cluster, scenario.parallelism
    check_layout(t, p)
    world, n = c.world_size, c.gpus_per_node
    g = p.shard_group
    if g:
        if g > world or world % g:
            raise InputError(f"parallelism.shard_group = {g} must divide the world size "
                             f"{world} ({c.nodes} nodes x {n} GPUs)")
        if g % n and n % g:
            raise InputError(f"parallelism.shard_group = {g} must divide gpus_per_node = {n} or be "
                             f"a multiple of it, so that groups follow node boundaries")
    h = p.hpz_partition
    if h > 1 and (h > min(n, world) or min(n, world) % h):
        raise InputError(f"parallelism.hpz_partition = {h} must divide the GPUs of a node "
                         f"({min(n, world)}): hpZ's secondary partition stays inside a node")
    if offloads(t):
        for name, rate in vars(c.host).items():
            if rate is not None and not 0 < rate < float("inf"):
                raise InputError(f"the host's {name.replace('_', ' ')} comes to {rate:g} from "
                                 f"cluster's host keys (host_link_GBps, gpus_per_host_link, "
                                 f"cpu_cores_per_gpu, cpu_adam_Melements_per_s_per_core, "
                                 f"nvme_*_GBps): it must be a positive finite number")
    nvme = "nvme" in (t.optimizer_offload, t.param_offload)
    unset = [k for k in ("nvme_read_GBps", "nvme_write_GBps") if getattr(c, k) is None]
    if nvme and unset:
        raise InputError(
            f"offload to nvme needs {' and '.join('cluster.' + k for k in unset)} (per node; "
            f"measured: DeepNVMe 10 / 5 GB/s on 4 Gen4 drives, 27 / 11 on 4 Gen5, 48 / 26 on 8 "
            f"Gen5; ZeRO-Infinity's DGX-2 25.6 GB/s read)")


def hpz(p) -> int:
    """hpZ's secondary partition size under the [parallelism] table, or 0 when off."""
    return p.hpz_partition if p.hpz_partition > 1 else 0
