"""Scenario keys from a Hugging Face Accelerate config YAML (what `accelerate config` writes).

Read as Accelerate's own dataclasses read it (src/accelerate/utils/dataclasses.py and
constants.py at huggingface/accelerate 16cb6eb):
- distributed_type: FSDP, DEEPSPEED, or MULTI_GPU (DDP: stage 0, training.framework "ddp");
  any other (NO, XLA, MULTI_CPU, ...) is refused in one line.
- num_machines (default 1) -> cluster.nodes; num_processes, the processes of all machines
  together (default 1) -> cluster.gpus_per_node = num_processes / num_machines.
- mixed_precision "no" | "fp16" | "bf16" (default "no": fp32); "fp8" is not modeled.
- fsdp_config: fsdp_version 1 | 2 (default 1) -> training.framework "fsdp1" | "fsdp2".
  FSDP1's fsdp_sharding_strategy (or its fallback fsdp_reshard_after_forward), by name or by
  FSDP_SHARDING_STRATEGY's number (index + 1): FULL_SHARD (1) stage 3, SHARD_GRAD_OP (2)
  stage 2, NO_SHARD (3) refused (FSDP1 unsharded is not modeled), HYBRID_SHARD (4) stage 3 and HYBRID_SHARD_ZERO2 (5) stage 2
  sharded inside a node (parallelism.shard_group = gpus_per_node, PyTorch's default process
  groups for hybrid sharding); default FULL_SHARD. FSDP2's fsdp_reshard_after_forward true
  (default) is stage 3, false stage 2. fsdp_offload_params: parameters, gradients and the
  optimizer step on the CPU (optimizer_offload and param_offload "cpu"; default false).
  fsdp_activation_checkpointing: each wrapped layer recomputed, "full" (default false).
- parallelism_config (Accelerate's ParallelismConfig): parallelism_config_tp_size ->
  parallelism.tensor_parallel; dp_shard_size with dp_replicate_size > 1 -> shard_group;
  their product times cp_size must be num_processes, as Accelerate requires; cp_size > 1
  (context parallelism) is not modeled.
- deepspeed_config: its deepspeed_config_file (relative to this YAML) is read by deepspeed.py;
  else the keys DeepSpeedPlugin turns into a ds_config: zero_stage (default 2, Accelerate's
  ACCELERATE_DEEPSPEED_ZERO_STAGE), offload_optimizer_device, offload_param_device,
  gradient_accumulation_steps, built into the ds_config DeepSpeedPlugin.__post_init__ writes.
  mixed_precision becomes its fp16/bf16 section, filling a file's "auto".
Every other key is named in the note as not used.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zerosim.errors import InputError
from zerosim.files import MAX_NESTING, check_nesting, read_text
from zerosim.scenario.launch import Launch, boolean, choice, integer, unused_keys

PRECISIONS = {"no": "fp32", "fp16": "fp16", "bf16": "bf16"}
# FSDP_SHARDING_STRATEGY's order (accelerate constants.py); its number is index + 1:
# (name, ZeRO stage, sharded inside a node only)
STRATEGIES = (("FULL_SHARD", 3, False), ("SHARD_GRAD_OP", 2, False), ("NO_SHARD", 0, False),
              ("HYBRID_SHARD", 3, True), ("HYBRID_SHARD_ZERO2", 2, True))
_STRATEGY_OF = {**{name: (stage, hybrid) for name, stage, hybrid in STRATEGIES},
                **{i: (stage, hybrid) for i, (_, stage, hybrid) in enumerate(STRATEGIES, 1)}}
_DS_KEYS = ("zero_stage", "offload_optimizer_device", "offload_param_device",
            "gradient_accumulation_steps")
USED_TOP = frozenset(("distributed_type", "num_machines", "num_processes", "mixed_precision"))
"""The top-level keys taken; of fsdp_config, deepspeed_config and parallelism_config, those
their readers take."""


def load_yaml(path: Path) -> dict[str, Any]:
    """The YAML mapping at `path`, within files.py's limits; PyYAML is imported here only."""
    text = read_text(path, "Accelerate config")
    try:
        import yaml
    except ImportError:
        raise InputError("--accelerate reads YAML with PyYAML, which is not installed: "
                         "pip install pyyaml") from None
    try:  # an alias repeats a node without copying it: a few lines could stand for 9**9 values
        if any(isinstance(token, yaml.AliasToken) for token in yaml.scan(text)):
            raise InputError(f"Accelerate config {path}: YAML aliases (*name) are not read; "
                             f"write the values out")
        data = yaml.safe_load(text)
    except RecursionError:
        raise InputError(f"Accelerate config {path}: nested more than {MAX_NESTING} levels "
                         f"deep") from None
    except yaml.YAMLError as exc:
        raise InputError(f"Accelerate config {path}: YAML syntax error: "
                         f"{' '.join(str(exc).split())}") from None
    except ValueError as exc:  # an integer of more than 4300 digits
        raise InputError(f"Accelerate config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"Accelerate config {path}: expected a mapping of keys, got "
                         f"{type(data).__name__}")
    check_nesting(data, f"Accelerate config {path}")
    return data


def read_accelerate_config(path: Path) -> Launch:
    cfg = load_yaml(path)
    launch = Launch(origin=str(path))
    used = {key for key in USED_TOP if key in cfg}
    read = choice(launch, cfg.get("distributed_type", "NO"), "distributed_type",
                  {"FSDP": _fsdp, "DEEPSPEED": _deepspeed, "MULTI_GPU": _ddp})
    machines, processes = _world(launch, cfg)
    precision = choice(launch, cfg.get("mixed_precision", "no"), "mixed_precision", PRECISIONS)
    if "mixed_precision" not in cfg:
        launch.defaulted.append("precision (mixed_precision \"no\": fp32)")
    launch.set("training", "precision", precision)  # a ds_config's own, or "auto" filled by it
    used |= read(launch, cfg, path, processes // machines)
    used |= _parallelism(launch, _section(launch, cfg, "parallelism_config"), processes)
    launch.unused = unused_keys(cfg, used)
    return launch


def _section(launch: Launch, cfg: dict[str, Any], key: str) -> dict[str, Any]:
    value = cfg.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise launch.fail(f"{key} must be a mapping, got {type(value).__name__}")
    return value


def _world(launch: Launch, cfg: dict[str, Any]) -> tuple[int, int]:
    """(machines, processes); the processes of all machines together, as Accelerate counts."""
    machines = integer(launch, cfg.get("num_machines", 1), "num_machines")
    processes = integer(launch, cfg.get("num_processes", 1), "num_processes")
    if processes % machines:
        raise launch.fail(f"num_processes {processes} is not a multiple of num_machines "
                          f"{machines} ({processes} / {machines} = {processes / machines:g} "
                          f"a machine)")
    for key in ("num_machines", "num_processes"):
        if key not in cfg:
            launch.defaulted.append(f"{key} (1)")
    launch.set("cluster", "nodes", machines)
    launch.set("cluster", "gpus_per_node", processes // machines)
    return machines, processes


def _ddp(launch: Launch, cfg: dict[str, Any], path: Path, per_node: int) -> set[str]:
    """MULTI_GPU: PyTorch's DDP, stage 0."""
    launch.tables["training"]["framework"] = "ddp"
    launch.set("training", "zero_stage", 0)
    return set()


def _fsdp(launch: Launch, cfg: dict[str, Any], path: Path, per_node: int) -> set[str]:
    fsdp = _section(launch, cfg, "fsdp_config")
    version = choice(launch, fsdp.get("fsdp_version", 1), "fsdp_config.fsdp_version", {1: 1, 2: 2})
    launch.tables["training"]["framework"] = {1: "fsdp1", 2: "fsdp2"}[version]
    used = {"fsdp_config.fsdp_version"}
    reshard = fsdp.get("fsdp_reshard_after_forward")
    if version == 2:
        stage = 3 if reshard is None or boolean(
            launch, reshard, "fsdp_config.fsdp_reshard_after_forward") else 2
        hybrid = False
        used.add("fsdp_config.fsdp_reshard_after_forward")
    else:
        key = "fsdp_sharding_strategy" if "fsdp_sharding_strategy" in fsdp or reshard is None \
            else "fsdp_reshard_after_forward"
        value = fsdp.get(key, "FULL_SHARD")
        if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 3:
            value = int(value)  # "1" as accelerate's older configs write the strategy's number
        stage, hybrid = choice(launch, value, f"fsdp_config.{key}", _STRATEGY_OF)
        used.add(f"fsdp_config.{key}")
        if stage == 0:
            raise launch.fail(f"fsdp_config.{key} = {value!r} (NO_SHARD): FSDP without sharding "
                              f"is not modeled (zerosim's fsdp1 runs stages 2-3); DDP is "
                              f"distributed_type MULTI_GPU")
    launch.set("training", "zero_stage", stage)
    if hybrid:
        launch.set("parallelism", "shard_group", per_node)
    offload = boolean(launch, fsdp.get("fsdp_offload_params", False),
                      "fsdp_config.fsdp_offload_params")
    launch.set("training", "optimizer_offload", "cpu" if offload else "none")
    launch.set("training", "param_offload", "cpu" if offload else "none")
    checkpointing = boolean(launch, fsdp.get("fsdp_activation_checkpointing", False),
                            "fsdp_config.fsdp_activation_checkpointing")
    launch.set("training", "activation_checkpointing", "full" if checkpointing else "none")
    return used | {"fsdp_config.fsdp_offload_params", "fsdp_config.fsdp_activation_checkpointing"}


def _deepspeed(launch: Launch, cfg: dict[str, Any], path: Path, per_node: int) -> set[str]:
    """A ds_config for deepspeed.py: the file the YAML names, or the one DeepSpeedPlugin builds
    from its keys. Accelerate refuses both at once; so does this."""
    ds, precision = _section(launch, cfg, "deepspeed_config"), launch.tables["training"]["precision"]
    given = [key for key in _DS_KEYS if key in ds]
    precision_section = {"fp16": {"enabled": precision == "fp16"},
                         "bf16": {"enabled": precision == "bf16"}}
    if ds.get("deepspeed_config_file") is not None:
        if given:
            raise launch.fail(f"deepspeed_config.deepspeed_config_file and deepspeed_config."
                              f"{given[0]} are both given: Accelerate takes the file's (set "
                              f"it there)")
        name = ds["deepspeed_config_file"]
        if not isinstance(name, str):
            raise launch.fail(f"deepspeed_config.deepspeed_config_file must be a path, got "
                              f"{type(name).__name__}")
        launch.deepspeed = path.parent / name
        return {"deepspeed_config.deepspeed_config_file"}
    zero = {"stage": ds.get("zero_stage", 2)}
    if "zero_stage" not in ds:
        launch.defaulted.append("zero_stage (2)")
    for key in ("offload_optimizer", "offload_param"):
        zero[key] = {"device": ds.get(f"{key}_device", "none")}
    config = {"zero_optimization": zero, **precision_section,
              "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto"}
    if "gradient_accumulation_steps" in ds:
        config["gradient_accumulation_steps"] = ds["gradient_accumulation_steps"]
    launch.deepspeed = config
    return {f"deepspeed_config.{key}" for key in given}


def _parallelism(launch: Launch, par: dict[str, Any], processes: int) -> set[str]:
    """Accelerate's ParallelismConfig: dp_replicate x dp_shard x tp x cp = num_processes."""
    if not par:
        return set()
    prefix = "parallelism_config.parallelism_config_"
    sizes = {name: integer(launch, par.get(f"parallelism_config_{name}_size", 1),
                           f"{prefix}{name}_size")
             for name in ("dp_replicate", "dp_shard", "tp", "cp")}
    if sizes["cp"] > 1:
        raise launch.fail(f"{prefix}cp_size = {sizes['cp']}: context parallelism is not modeled")
    product = sizes["dp_replicate"] * sizes["dp_shard"] * sizes["tp"] * sizes["cp"]
    if product != processes:
        raise launch.fail(f"{prefix}dp_replicate_size x dp_shard_size x tp_size x cp_size = "
                          f"{sizes['dp_replicate']} x {sizes['dp_shard']} x {sizes['tp']} x "
                          f"{sizes['cp']} = {product}, not num_processes {processes}")
    launch.set("parallelism", "tensor_parallel", sizes["tp"])
    if sizes["dp_replicate"] > 1:
        launch.set("parallelism", "shard_group", sizes["dp_shard"])
    return {f"{prefix}{name}_size" for name in sizes}
