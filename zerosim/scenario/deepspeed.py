"""[training] keys from a DeepSpeed ds_config.json: stage, offload, precision, buckets, micro-batch.

A ds_config describes a DeepSpeed run, so a key it leaves out takes DeepSpeed's default, as
DeepSpeed itself would (deepspeed/runtime/zero/config.py, runtime/config.py):
- zero_optimization.stage (default 0); offload_optimizer.device "none" | "cpu" (default "none");
  the legacy cpu_offload = true;
- fp16.enabled / bf16.enabled (alias bfloat16): neither means fp32; both is an error there too;
- zero_optimization.reduce_bucket_size / allgather_bucket_size: ELEMENTS of the gradient dtype
  (default 5e8 each).
Two keys have no DeepSpeed default that fixes them, so the scenario's value stays when they are
absent: train_micro_batch_size_per_gpu, and optimizer.type (Adam, AdamW, SGD; absent when the
training script builds its own optimizer). "auto" (the Hugging Face Trainer's placeholder) also
keeps the scenario's value. Every key kept that way is named in the note the CLI prints.
- offload_optimizer / offload_param .device "none" | "cpu" | "nvme"; ZeRO++'s
  zero_hpz_partition_size, zero_quantized_weights, zero_quantized_gradients and MiCS's
  mics_shard_size, taken when given.
- zero_optimization.stage3_prefetch_bucket_size, stage3_max_live_parameters,
  stage3_max_reuse_distance, stage3_param_persistence_threshold (elements): how ZeRO-3 fetches
  module by module, taken when given; load.py leaves them out, with a note, under a framework
  that gathers whole units.
- zero_optimization.overlap_comm: DeepSpeed's default is true at stage 3 and false below
  (DeepSpeedZeroConfig.overlap_comm_valid: `stage == ZeroStageEnum.weights`).
- The batch, as runtime/config.py's _set_batch_related_parameters derives it:
  gradient_accumulation_steps (default 1 when train_batch_size is absent), and
  train_batch_size = micro-batch x gradient_accumulation_steps x world size, checked against the
  scenario's world once the cluster is known, or giving the micro-batch or the steps the file
  (and --set) leave open: `derive_batch`.
- training.framework = "deepspeed": a ds_config describes a DeepSpeed run, whose memory is
  DeepSpeed's (its fp32 gradient partition, its buckets, module-by-module ZeRO-3), not the
  paper's accounting; a --set after it still wins.
Every other key (schedulers, logging, clipping, communication options, ...) is named in the note
as not used: they change neither memory nor time as zerosim models them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zerosim.errors import InputError
from zerosim.files import read_json_object
from zerosim.scenario.checks import MAX_VALUE, is_finite_number
from zerosim.units import BYTES_PER_ELEMENT, MiB

DS_DEFAULT_BUCKET_ELEMENTS = 500_000_000  # reduce_bucket_size and allgather_bucket_size
_OPTIMIZERS = {"adam": "adam", "adamw": "adamw", "fusedadam": "adam", "cpuadam": "adam",
               "deepspeedcpuadam": "adam", "sgd": "sgd"}
AUTO = "auto"
TRAIN_BATCH = "train_batch_size"  # not a [training] key: checked against the world (derive_batch)
USED_TOP = frozenset(("fp16", "bf16", "bfloat16", "zero_optimization", "optimizer",
                      "train_micro_batch_size_per_gpu", TRAIN_BATCH, "gradient_accumulation_steps"))
"""The ds_config's top-level keys this reader takes."""
USED_ZERO = frozenset((
    "stage", "offload_optimizer", "offload_param", "cpu_offload", "reduce_bucket_size",
    "allgather_bucket_size", "overlap_comm", "zero_hpz_partition_size", "zero_quantized_weights",
    "zero_quantized_gradients", "mics_shard_size", "stage3_prefetch_bucket_size",
    "stage3_max_live_parameters", "stage3_max_reuse_distance",
    "stage3_param_persistence_threshold"))
"""The zero_optimization keys it takes."""


class _Reader:
    def __init__(self, cfg: dict[str, Any], origin: str):
        self.cfg, self.origin = cfg, origin
        self.defaulted: list[str] = []  # absent: DeepSpeed's default applies
        self.kept: list[str] = []  # absent or "auto" with no default: the scenario's value stays

    def fail(self, message: str) -> InputError:
        return InputError(f"{self.origin}: {message}")

    def section(self, parent: dict[str, Any], key: str, where: str = "") -> dict[str, Any]:
        value = parent.get(key, {})
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"{where}{key} must be an object, got {value!r}")
        return value

    def integer(self, value: Any, key: str, minimum: int) -> int:
        if not is_finite_number(value) or value != int(value):
            raise self.fail(f"{key} must be an integer, got {value!r}")
        if not minimum <= value <= MAX_VALUE:
            raise self.fail(f"{key} = {value} must be between {minimum} and 2**53")
        return int(value)

    def enabled(self, key: str) -> bool | None:
        """True/False, or None for "auto"."""
        value = self.section(self.cfg, key).get("enabled", False)
        if value == AUTO:
            return None
        if not isinstance(value, bool):
            raise self.fail(f"{key}.enabled must be true, false or \"auto\", got {value!r}")
        return value

    def device(self, section: dict[str, Any], key: str) -> str | None:
        value = section.get("device", "none")
        if value == AUTO:
            return None
        if value is None or value == "none":
            return "none"
        if value in ("cpu", "nvme"):
            return value
        raise self.fail(f"zero_optimization.{key}.device = {value!r} is not modeled "
                        f"(zerosim models \"none\", \"cpu\" and \"nvme\")")


def read_deepspeed_config(path: str | Path | dict[str, Any], *, precision: str = "bf16",
                          notes: list[str] | None = None, origin: str = "") -> dict[str, Any]:
    """[training] overrides from a ds_config: a file, or its keys (what Accelerate's
    DeepSpeedPlugin builds) named by `origin`. `precision` is the scenario's, used only when the
    ds_config leaves it to "auto"; a summary of what was taken and kept is appended to `notes`.
    A train_batch_size comes back under TRAIN_BATCH, for `derive_batch` once the world size
    is known; it is not a [training] key."""
    cfg = path if isinstance(path, dict) else read_json_object(Path(path), "DeepSpeed config")
    r = _Reader(cfg, origin or str(path))
    out: dict[str, Any] = {}
    _precision(r, out)
    zero = r.section(r.cfg, "zero_optimization")
    _stage_and_offload(r, zero, out)
    _buckets(r, zero, out, BYTES_PER_ELEMENT[out.get("precision", precision)])
    _fetch(r, zero, out)
    micro = r.cfg.get("train_micro_batch_size_per_gpu")
    if micro is None and r.cfg.get(TRAIN_BATCH) not in (None, AUTO):
        pass  # derived from train_batch_size once the world is known (derive_batch)
    elif micro is None or micro == AUTO:
        r.kept.append("micro_batch (" + ("\"auto\"" if micro else "not given") + ")")
    else:
        out["micro_batch"] = r.integer(micro, "train_micro_batch_size_per_gpu", 1)
    _optimizer(r, out)
    _accumulation(r, zero, out)
    out["framework"] = "deepspeed"
    if notes is not None:
        taken = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in out.items()
                          if k != TRAIN_BATCH)
        defaulted = f"; DeepSpeed defaults for {', '.join(r.defaulted)}" if r.defaulted else ""
        kept = f"; kept the scenario's {', '.join(r.kept)}" if r.kept else ""
        unused = sorted(set(r.cfg) - USED_TOP) + sorted(
            f"zero_optimization.{key}" for key in set(zero) - USED_ZERO)
        ignored = f"; not used: {', '.join(unused)}" if unused else ""
        notes.append(f"from {r.origin}: {taken}{defaulted}{kept}{ignored}")
    return out


def _precision(r: _Reader, out: dict[str, Any]) -> None:
    fp16 = r.enabled("fp16")
    bf16_flags = [r.enabled(key) for key in ("bf16", "bfloat16")]
    bf16 = True if True in bf16_flags else None if None in bf16_flags else False
    if fp16 and bf16:
        raise r.fail("fp16.enabled and bf16.enabled are both true; DeepSpeed allows one "
                     "(\"bfloat16 and fp16 modes cannot be simultaneously enabled\")")
    if fp16 is None or bf16 is None:
        r.kept.append("precision (\"auto\")")
    else:
        out["precision"] = "fp16" if fp16 else "bf16" if bf16 else "fp32"
        if out["precision"] == "fp32":
            r.defaulted.append("precision (no fp16/bf16 enabled: DeepSpeed trains in fp32)")


def _stage_and_offload(r: _Reader, zero: dict[str, Any], out: dict[str, Any]) -> None:
    if "stage" not in zero:
        r.defaulted.append("zero_stage")
    stage = zero.get("stage", 0)
    if stage == AUTO:
        r.kept.append("zero_stage (\"auto\")")
    else:
        out["zero_stage"] = r.integer(stage, "zero_optimization.stage", 0)
    offload = r.device(r.section(zero, "offload_optimizer", "zero_optimization."), "offload_optimizer")
    if zero.get("cpu_offload") is True:
        offload = "cpu"
    if offload is None:
        r.kept.append("optimizer_offload (\"auto\")")
    else:
        out["optimizer_offload"] = offload
    params = r.device(r.section(zero, "offload_param", "zero_optimization."), "offload_param")
    if params is None:
        r.kept.append("param_offload (\"auto\")")
    elif params != "none" or "offload_param" in zero:
        out["param_offload"] = params
    _zeropp_and_mics(r, zero, out)


def _zeropp_and_mics(r: _Reader, zero: dict[str, Any], out: dict[str, Any]) -> None:
    """ZeRO++ (zero_hpz_partition_size, zero_quantized_weights, zero_quantized_gradients) and
    MiCS (mics_shard_size: shards inside groups of that size, replicas all-reduced at the
    accumulation boundary), each taken only when the ds_config gives it."""
    if "zero_hpz_partition_size" in zero:
        out["hpz_partition"] = r.integer(zero["zero_hpz_partition_size"],
                                         "zero_optimization.zero_hpz_partition_size", 1)
    for ds_key, our_key in (("zero_quantized_weights", "quantized_weights"),
                            ("zero_quantized_gradients", "quantized_gradients")):
        if ds_key in zero:
            if not isinstance(zero[ds_key], bool):
                raise r.fail(f"zero_optimization.{ds_key} must be true or false, got "
                             f"{zero[ds_key]!r}")
            out[our_key] = zero[ds_key]
    size = zero.get("mics_shard_size", -1)
    if size not in (-1, None):  # DeepSpeed's default -1: MiCS off
        out["shard_group"] = r.integer(size, "zero_optimization.mics_shard_size", 1)
        out["replica_allreduce"] = "once_per_step"


def _buckets(r: _Reader, zero: dict[str, Any], out: dict[str, Any], grad_bytes: int) -> None:
    """Bucket sizes are elements of the gradient dtype in DeepSpeed, MiB here."""
    for ds_key, our_key in (("reduce_bucket_size", "reduce_bucket_MiB"),
                            ("allgather_bucket_size", "allgather_bucket_MiB")):
        if ds_key not in zero:
            r.defaulted.append(f"{our_key} (5e8 elements)")
        elements = zero.get(ds_key, DS_DEFAULT_BUCKET_ELEMENTS)
        if elements == AUTO:
            r.kept.append(f"{our_key} (\"auto\")")
        else:
            elements = r.integer(elements, f"zero_optimization.{ds_key}", 1)
            out[our_key] = elements * grad_bytes / MiB


_FETCH_KEYS = (("stage3_prefetch_bucket_size", "prefetch_bucket_elements"),
               ("stage3_max_live_parameters", "max_live_parameters"),
               ("stage3_max_reuse_distance", "max_reuse_distance"),
               ("stage3_param_persistence_threshold", "param_persistence_threshold"))


def _fetch(r: _Reader, zero: dict[str, Any], out: dict[str, Any]) -> None:
    """ZeRO-3's fetch keys, in elements, each taken when given (absent: DeepSpeed's default,
    which the framework applies); "auto" keeps the scenario's value."""
    for ds_key, our_key in _FETCH_KEYS:
        value = zero.get(ds_key)
        if value is None:
            continue
        if value == AUTO:
            r.kept.append(f"{our_key} (\"auto\")")
        else:
            out[our_key] = r.integer(value, f"zero_optimization.{ds_key}", 0)


def _optimizer(r: _Reader, out: dict[str, Any]) -> None:
    optimizer = r.section(r.cfg, "optimizer")
    kind = optimizer.get("type")
    if kind is None or kind == AUTO:
        r.kept.append("optimizer (" + ("\"auto\"" if kind else "not given") + ")")
        return
    if not isinstance(kind, str) or kind.lower() not in _OPTIMIZERS:
        raise r.fail(f"optimizer.type = {kind!r} is not modeled (zerosim knows Adam, AdamW, SGD)")
    out["optimizer"] = _OPTIMIZERS[kind.lower()]
    momentum = r.section(optimizer, "params", "optimizer.").get("momentum", 0)
    if momentum not in (None, AUTO):
        if not is_finite_number(momentum):
            raise r.fail(f"optimizer.params.momentum must be a number, got {momentum!r}")
        if out["optimizer"] == "sgd" and momentum != 0:
            out["optimizer"] = "sgd_momentum"


def _accumulation(r: _Reader, zero: dict[str, Any], out: dict[str, Any]) -> None:
    """gradient_accumulation_steps and train_batch_size, and overlap_comm's stage-dependent
    default. Dropping the steps would price one micro-step as the whole step (tokens/s and the
    offloaded copies per step both depend on it)."""
    total = r.cfg.get(TRAIN_BATCH)
    steps = r.cfg.get("gradient_accumulation_steps")
    if total is not None and total != AUTO:
        # (total, the figures the file leaves open: "auto" keeps the scenario's, which then counts)
        open_keys = {key for key, value in (("micro_batch", r.cfg.get("train_micro_batch_size_per_gpu")),
                                            ("gradient_accumulation", steps)) if value is None}
        out[TRAIN_BATCH] = (r.integer(total, TRAIN_BATCH, 1), open_keys)
    if steps == AUTO:
        r.kept.append("gradient_accumulation (\"auto\")")
    elif steps is not None:
        out["gradient_accumulation"] = r.integer(steps, "gradient_accumulation_steps", 1)
    elif TRAIN_BATCH not in out:
        out["gradient_accumulation"] = 1
        r.defaulted.append("gradient_accumulation (1)")
    overlap = zero.get("overlap_comm")
    if overlap == AUTO:
        r.kept.append("overlap_comm (\"auto\")")
    elif overlap is not None:
        if not isinstance(overlap, bool):
            raise r.fail(f"zero_optimization.overlap_comm must be true or false, got {overlap!r}")
        out["overlap_comm"] = overlap
    elif isinstance(out.get("zero_stage"), int):
        out["overlap_comm"] = out["zero_stage"] == 3
        r.defaulted.append(f"overlap_comm ({'true at stage 3' if out['overlap_comm'] else 'false below stage 3'})")


def derive_batch(train_batch: int, micro_batch: int | None, accumulation: int | None,
                 world_size: int, origin: str) -> tuple[int, int]:
    """(micro-batch, accumulation steps) as DeepSpeed's _set_batch_related_parameters makes them
    from train_batch_size = micro x steps x world: None is a figure the run does not fix (absent
    from the ds_config and from --set), derived from the others; with neither, steps are 1.
    A split that does not come out whole, or figures that disagree, are one line."""
    if micro_batch is not None and accumulation is not None:
        if train_batch != micro_batch * accumulation * world_size:
            raise InputError(f"{origin}: train_batch_size {train_batch} != micro-batch {micro_batch} "
                             f"x gradient_accumulation {accumulation} x world size {world_size} "
                             f"= {micro_batch * accumulation * world_size}")
        return micro_batch, accumulation
    if accumulation is None:
        accumulation = 1 if micro_batch is None else None
    known, name = ((micro_batch, "micro-batch") if accumulation is None
                   else (accumulation, "gradient_accumulation"))
    per = known * world_size
    if train_batch % per:
        raise InputError(f"{origin}: train_batch_size {train_batch} is not a multiple of "
                         f"{name} {known} x world size {world_size} = {per}")
    return (micro_batch, train_batch // per) if accumulation is None else (train_batch // per,
                                                                            accumulation)
