"""Scenario keys from a torchtitan job config (TOML): FSDP2 with tensor and pipeline parallelism.

Read as torchtitan's JobConfig reads it (torchtitan/config/job_config.py at pytorch/torchtitan
238fa99, the last commit with TOML job configs; an absent key takes that file's default):
- [training] local_batch_size (default 8) -> training.micro_batch; seq_len (2048);
  global_batch_size (-1: local x data-parallel degree) -> gradient_accumulation =
  global / (local x dp_replicate x dp_shard), settled once the world is known;
  mixed_precision_param "bfloat16" (default) | "float32" -> precision; mixed_precision_reduce
  "float32" -> reduce_dtype "fp32"; dtype "bfloat16" (no fp32 master) is not modeled;
  enable_cpu_offload -> optimizer and parameter offload (which zerosim's fsdp2 refuses).
- [parallelism] data_parallel_shard_degree (-1: the ranks left) and
  data_parallel_replicate_degree (1): FSDP2 (training.framework "fsdp2"), HSDP when both are > 1
  (parallelism.shard_group = the shard degree), DDP ("ddp", stage 0) when the shard degree is 1;
  fsdp_reshard_after_forward "always" stage 3, "never" stage 2, "default" stage 3 but 2 under a
  pipeline (llama3/infra/parallelize.py apply_fsdp: `reshard_after_forward = not pp_enabled`);
  tensor_parallel_degree, with torchtitan's sequence parallelism (its TP plan shards the norms'
  sequence) and enable_async_tensor_parallel -> tp_comm_overlap; pipeline_parallel_degree with
  pipeline_parallel_schedule "1F1B" | "GPipe" (the looped ones are not modeled here: --set
  them) and pipeline_parallel_microbatch_size (1), the micro-batch a local batch is split into.
  context_parallel_degree and expert_parallel_degree above 1 are not modeled.
- [activation_checkpoint] mode "none" | "full" | "selective" (default), selective_ac_option
  "op" (torchtitan's per-op policy: "selective_op") or a layer period, of which "1" is every
  layer ("full"; default "2", every other layer, is not modeled).
- [optimizer] name "AdamW" (default) | "Adam".
- [model] name and flavor name a model zerosim cannot size: the scenario's [model] gives the
  shape; where it gives none, hf_assets_path's config.json does (relative to the working
  directory, where torchtitan runs), else one line says to give one.
Flash attention is set: torchtitan's attention is scaled_dot_product_attention, whose CUDA
kernels never store the s x s scores. Every other key (and every table none of whose keys is
used) is named in the note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from zerosim.errors import InputError, brief
from zerosim.files import check_nesting, read_text
from zerosim.scenario.launch import Launch, boolean, choice, integer, unused_keys
from zerosim.scenario.parse import TOMLDecodeError, parse_toml

_PRECISION = {"bfloat16": "bf16", "float32": "fp32"}
_SCHEDULES = {"1F1B": "1f1b", "GPipe": "gpipe"}
_CHECKPOINTING = {"none": "none", "full": "full", "selective": "selective"}


def read_torchtitan_config(path: Path) -> Launch:
    text = read_text(path, "torchtitan job config")
    try:
        cfg = parse_toml(text, str(path))
    except TOMLDecodeError as exc:
        raise InputError(f"torchtitan job config {path}: TOML syntax error: {exc}") from None
    check_nesting(cfg, f"torchtitan job config {path}")
    launch = Launch(origin=str(path))
    sections = {name: _table(launch, cfg, name) for name in
                ("training", "parallelism", "activation_checkpoint", "optimizer", "model")}
    used: set[str] = set()
    pp = _parallelism(launch, sections["parallelism"], used)
    _training(launch, sections["training"], sections["parallelism"], pp, used)
    _checkpointing(launch, sections["activation_checkpoint"], used)
    name = sections["optimizer"].get("name", "AdamW")
    launch.set("training", "optimizer", choice(launch, name, "optimizer.name",
                                               {"AdamW": "adamw", "Adam": "adam"}))
    used.add("optimizer.name")
    _model(launch, sections["model"], used)
    launch.set("training", "flash_attention", True)
    launch.unused = unused_keys(cfg, used)
    return launch


def _table(launch: Launch, cfg: dict[str, Any], name: str) -> dict[str, Any]:
    value = cfg.get(name, {})
    if not isinstance(value, dict):
        raise launch.fail(f"{name} must be a table [{name}]")
    return value


def _get(table: dict[str, Any], section: str, key: str, default: Any, used: set[str]) -> Any:
    used.add(f"{section}.{key}")
    return table.get(key, default)


def _parallelism(launch: Launch, par: dict[str, Any], used: set[str]) -> int:
    """The mesh's degrees; the pipeline's degree comes back (the training table needs it)."""
    def degree(key: str, default: int = 1, minimum: int = 1) -> int:
        return integer(launch, _get(par, "parallelism", key, default, used),
                       f"parallelism.{key}", minimum)

    for key in ("context_parallel_degree", "expert_parallel_degree"):
        if degree(key) > 1:
            raise launch.fail(f"parallelism.{key} = {par[key]}: not modeled by zerosim")
    replicate, shard = degree("data_parallel_replicate_degree"), degree(
        "data_parallel_shard_degree", -1, -1)
    if shard == 0 or shard < -1:
        raise launch.fail(f"parallelism.data_parallel_shard_degree = {shard} must be -1 (the "
                          f"ranks left) or >= 1")
    tp, pp = degree("tensor_parallel_degree"), degree("pipeline_parallel_degree")
    launch.set("parallelism", "tensor_parallel", tp)
    launch.set("parallelism", "sequence_parallel", tp > 1)
    launch.set("parallelism", "tp_comm_overlap", boolean(launch, _get(
        par, "parallelism", "enable_async_tensor_parallel", False, used),
        "parallelism.enable_async_tensor_parallel"))
    launch.set("parallelism", "pipeline_parallel", pp)
    if pp > 1:
        launch.set("parallelism", "pipeline_schedule", choice(launch, _get(
            par, "parallelism", "pipeline_parallel_schedule", "1F1B", used),
            "parallelism.pipeline_parallel_schedule", _SCHEDULES))
    if shard == 1:  # no sharding: torchtitan replicates with DDP
        launch.tables["training"]["framework"] = "ddp"
        launch.set("training", "zero_stage", 0)
        return pp
    launch.tables["training"]["framework"] = "fsdp2"
    policy = _get(par, "parallelism", "fsdp_reshard_after_forward", "default", used)
    reshard = choice(launch, policy, "parallelism.fsdp_reshard_after_forward",
                     {"default": pp == 1, "always": True, "never": False})
    launch.set("training", "zero_stage", 3 if reshard else 2)
    if replicate > 1 and shard > 1:
        launch.set("parallelism", "shard_group", shard)
    elif replicate > 1:  # the shard degree is the ranks left: known with the world
        launch.shard_replicas = replicate
    if shard > 1:
        launch.ranks = (replicate * shard * tp * pp,
                        f"dp_replicate {replicate} x dp_shard {shard} x tp {tp} x pp {pp}")
    return pp


def _training(launch: Launch, training: dict[str, Any], par: dict[str, Any], pp: int,
              used: set[str]) -> None:
    def get(key: str, default: Any) -> Any:
        return _get(training, "training", key, default, used)

    local = integer(launch, get("local_batch_size", 8), "training.local_batch_size")
    micro = local
    if pp > 1:
        micro = integer(launch, _get(par, "parallelism", "pipeline_parallel_microbatch_size", 1,
                                     used),
                        "parallelism.pipeline_parallel_microbatch_size")
    launch.set("training", "micro_batch", micro)
    launch.set("training", "seq_len", integer(launch, get("seq_len", 2048), "training.seq_len"))
    total = integer(launch, get("global_batch_size", -1), "training.global_batch_size", -1)
    if total == -1:
        if local % micro:
            raise launch.fail(f"training.local_batch_size {local} is not a multiple of "
                              f"pipeline_parallel_microbatch_size {micro}")
        launch.set("training", "gradient_accumulation", local // micro)
    elif total < 1:
        raise launch.fail(f"training.global_batch_size = {total} must be -1 or >= 1")
    else:
        launch.global_batch, launch.local_batch = total, local
    if get("dtype", "float32") != "float32":
        raise launch.fail(f"training.dtype = {training['dtype']!r} (every state in that dtype, "
                          f"no fp32 master) is not modeled")
    launch.set("training", "precision", choice(launch, get("mixed_precision_param", "bfloat16"),
                                               "training.mixed_precision_param", _PRECISION))
    launch.set("training", "reduce_dtype", choice(
        launch, get("mixed_precision_reduce", "float32"), "training.mixed_precision_reduce",
        {"float32": "fp32"}))
    if boolean(launch, get("enable_cpu_offload", False), "training.enable_cpu_offload"):
        launch.set("training", "optimizer_offload", "cpu")
        launch.set("training", "param_offload", "cpu")


def _checkpointing(launch: Launch, ac: dict[str, Any], used: set[str]) -> None:
    mode = choice(launch, _get(ac, "activation_checkpoint", "mode", "selective", used),
                  "activation_checkpoint.mode", _CHECKPOINTING)
    if mode == "selective":
        option = str(_get(ac, "activation_checkpoint", "selective_ac_option", "2", used))
        if option == "op":
            mode = "selective_op"
        elif option == "1":  # every layer checkpointed whole
            mode = "full"
        else:
            raise launch.fail(f"activation_checkpoint.selective_ac_option = {option!r} "
                              f"(one layer in {option} checkpointed) is not modeled: zerosim "
                              f"checkpoints every layer or none (\"op\", \"1\")")
    launch.set("training", "activation_checkpointing", mode)


def _model(launch: Launch, model: dict[str, Any], used: set[str]) -> None:
    """The shape of the model named by name and flavor: hf_assets_path's config.json if there
    is one, taken only where the scenario's [model] gives no shape (launch.apply)."""
    name = f"{model.get('name', 'llama3')} {model.get('flavor', 'debugmodel')}"
    assets = model.get("hf_assets_path")
    config = Path(assets) / "config.json" if isinstance(assets, str) else None
    used.update(("model.name", "model.flavor", "model.hf_assets_path"))
    try:
        found = config is not None and config.is_file()
    except (OSError, ValueError):  # a name too long for the file system, or holding a NUL
        raise launch.fail(f"model.hf_assets_path = {brief(assets)} is not a folder name this "
                          f"system can open") from None
    if found:
        launch.model_if_open = {"name": name, "hf_config": str(config.resolve())}
    where = f"{assets}/config.json not found, " if isinstance(assets, str) and not found else ""
    launch.unsized = (f"{launch.origin}: [model] names {name!r}, a flavor zerosim cannot size "
                      f"({where}no shape given): give the shape as [model] keys in the "
                      f"scenario, or a Hugging Face config.json as model.hf_config (--set "
                      f"model.hf_config=PATH)")
