"""The golden cases: zerosim command lines whose stdout and exit code must not change while the
code is reorganised. Each is an argv as typed at the repository root (relative paths, so both the
recorded run and the checked one print the same paths). Recorded at a84d8a7, the commit before
the layered tree; `python bench/golden.py record --ref REF` re-records them.

Old key spellings on purpose (`training.shard_group`, `training.hpz_partition`, ...): a scenario
written before a rename must keep loading. Cases stay small (jitter on a few ranks, one stage where
all four add nothing) so that the whole list runs in well under a minute on two cores.
"""

from __future__ import annotations

from dataclasses import dataclass

ZERO_PAPER = "scenarios/zero_paper_7b5_64gpu.toml"  # bare Ψ, 64 V100, NCCL
LLAMA = "scenarios/llama2_7b_64gpu.toml"            # shaped, 64 A100-80GB
LLAMA_HF = "scenarios/llama2_7b_hf_64gpu.toml"      # shaped from a Hugging Face config.json
MEGATRON = "scenarios/megatron_7b5_64gpu.toml"      # shaped, 64 V100, full checkpointing
GPT3 = "scenarios/gpt3_175b_1024gpu.toml"           # 1024 ranks, one representative
GPT3_3D = "scenarios/gpt3_175b_1024gpu_3d.toml"     # t 8 x p 8 x d 16, 1F1B, ZeRO-1
TINY = "scenarios/tiny_gpt_4rank_cpu.toml"          # 4 CPU ranks, gloo
OFFLOAD = "scenarios/family_zero_offload_10b_v100.toml"    # ZeRO-Offload, one V100
INFINITY = "scenarios/family_zero_infinity_1xdgx2.toml"    # ZeRO-Infinity, 16 V100
ZEROPP = "scenarios/family_zeropp_384xv100.toml"           # ZeRO++, 384 V100
DS_CONFIG = "scenarios/deepspeed/zero2_cpu_offload.json"
MEASUREMENTS = "profiles/measurements/h100_2026-11-24"
H100_PROFILE = "profiles/h100_record_2026-11-24.json"

OUT = "{out}"
"""In an argv, the stem of the file the command writes: the harness puts it in a temporary folder
and records the file beside stdout (printed paths read {out} again)."""

ONE_NODE = ("--set", "cluster.nodes=1")
TWO_NODES = ("--set", "cluster.nodes=2")


@dataclass(frozen=True)
class Case:
    name: str
    """Unique, a file name: the test's id and the recorded output's file."""
    argv: tuple[str, ...]
    """What follows `zerosim` on the command line."""


def sets(*pairs: str) -> tuple[str, ...]:
    """--set KEY=VALUE for each pair."""
    return tuple(arg for pair in pairs for arg in ("--set", pair))


def case(name: str, *argv: str) -> Case:
    return Case(name, tuple(argv))


README_SAMPLES = [  # README.md's `<!-- sample: zerosim ... -->` lines, verbatim
    case("readme_simulate", "simulate", ZERO_PAPER),
    case("readme_memory", "memory", ZERO_PAPER),
    case("readme_collective_sweep", "collective", LLAMA, "--op", "all_reduce",
         "--sweep", "4K:4G:4"),
    case("readme_plan", "plan", ZERO_PAPER),
    case("readme_offload", "simulate", OFFLOAD, "--stage", "2"),
    case("readme_hsdp", "simulate", LLAMA, "--stage", "3",
         *sets("training.shard_group=8", "cluster.inter_node_bandwidth_GBps=1.5625")),
    case("readme_zeropp", "simulate", LLAMA, "--stage", "3",
         *sets("training.framework=deepspeed", "training.hpz_partition=8",
               "training.quantized_weights=true", "training.quantized_gradients=true",
               "cluster.inter_node_bandwidth_GBps=1.5625")),
]

SIMULATE = [
    # every scenario file, every stage (no --stage: all four)
    case("sim_zero_paper", "simulate", ZERO_PAPER, "--json"),
    case("sim_llama2", "simulate", LLAMA, "--json"),
    case("sim_llama2_hf", "simulate", LLAMA_HF, "--json"),
    case("sim_megatron", "simulate", MEGATRON, "--json"),
    case("sim_gpt3_1024", "simulate", GPT3, "--stage", "3", "--json"),
    case("sim_tiny_gloo", "simulate", TINY, "--json"),
    case("sim_tiny_gloo_text", "simulate", TINY),
    case("sim_megatron_text", "simulate", MEGATRON),
    # one stage at a time
    *(case(f"sim_llama2_stage{s}", "simulate", LLAMA, "--stage", str(s), "--json",
           *sets(f"training.zero_stage={s}")) for s in range(4)),
    # frameworks
    case("sim_fw_deepspeed", "simulate", LLAMA, "--json", *sets("training.framework=deepspeed")),
    case("sim_fw_fsdp2_stage2", "simulate", LLAMA, "--stage", "2", "--json",
         *sets("training.framework=fsdp2", "training.zero_stage=2")),
    case("sim_fw_fsdp2_stage3_fp32_reduce", "simulate", LLAMA, "--stage", "3", "--json",
         *sets("training.framework=fsdp2", "training.reduce_dtype=fp32")),
    case("sim_fw_ddp", "simulate", LLAMA, "--stage", "0", "--json",
         *sets("training.framework=ddp", "training.zero_stage=0")),
    case("sim_fw_ddp_bucket_view", "simulate", LLAMA, "--stage", "0", "--json",
         *sets("training.framework=ddp", "training.zero_stage=0",
               "training.gradient_as_bucket_view=true")),
    case("sim_fw_zero_h100", "simulate", LLAMA, "--json", *sets("cluster.gpu=H100-80GB")),
    # offload: ZeRO-Offload and ZeRO-Infinity
    case("sim_offload_10b", "simulate", OFFLOAD, "--stage", "2", "--json"),
    case("sim_offload_10b_delayed", "simulate", OFFLOAD, "--stage", "2", "--json",
         *sets("training.delayed_update=true")),
    case("sim_offload_10b_stage1", "simulate", OFFLOAD, "--stage", "1", "--json",
         *sets("training.zero_stage=1")),
    case("sim_infinity", "simulate", INFINITY, "--stage", "3", "--json"),
    case("sim_infinity_cpu_cpu", "simulate", INFINITY, "--stage", "3", "--json",
         *sets("training.optimizer_offload=cpu", "training.param_offload=cpu")),
    case("sim_infinity_nvme_nvme", "simulate", INFINITY, "--stage", "3", "--json",
         *sets("training.optimizer_offload=nvme", "training.param_offload=nvme")),
    case("sim_infinity_nvme_opt", "simulate", INFINITY, "--stage", "3", "--json",
         *sets("training.optimizer_offload=nvme")),
    case("sim_infinity_cpu_delayed_accum", "simulate", INFINITY, "--stage", "3", "--json",
         *sets("training.optimizer_offload=cpu", "training.delayed_update=true",
               "training.gradient_accumulation=2")),
    case("sim_zero_paper_offload_stages", "simulate", ZERO_PAPER, "--json",
         *sets("training.zero_stage=1", "training.optimizer_offload=cpu")),
    case("sim_deepspeed_config", "simulate", LLAMA, "--deepspeed", DS_CONFIG, "--json"),
    case("sim_deepspeed_config_text", "simulate", LLAMA, "--deepspeed", DS_CONFIG, "--stage", "2"),
    # hybrid sharding (HSDP, MiCS)
    case("sim_hsdp_node", "simulate", LLAMA, "--stage", "3", "--json",
         *sets("training.shard_group=8")),
    case("sim_hsdp_once_per_step", "simulate", LLAMA, "--stage", "3", "--json",
         *sets("training.shard_group=8", "training.replica_allreduce=once_per_step",
               "training.gradient_accumulation=4")),
    case("sim_hsdp_every_micro_step_accum", "simulate", LLAMA, "--stage", "3", "--json",
         *sets("training.shard_group=8", "training.replica_allreduce=every_micro_step",
               "training.gradient_accumulation=4")),
    case("sim_hsdp_two_nodes", "simulate", LLAMA, "--json", *sets("training.shard_group=16")),
    case("sim_hsdp_half_node_stage1", "simulate", LLAMA, "--stage", "1", "--json",
         *sets("training.shard_group=4", "training.zero_stage=1")),
    case("sim_hsdp_fsdp2", "simulate", LLAMA, "--stage", "3", "--json",
         *sets("training.framework=fsdp2", "training.shard_group=8",
               "training.reduce_dtype=fp32")),
    case("sim_hsdp_offload", "simulate", MEGATRON, "--stage", "2", "--json",
         *sets("training.zero_stage=2", "training.shard_group=8",
               "training.optimizer_offload=cpu")),
    # ZeRO++
    case("sim_zeropp_hpz", "simulate", LLAMA, "--stage", "3", "--json",
         *sets("training.hpz_partition=8")),
    case("sim_zeropp_qwz", "simulate", LLAMA, "--stage", "3", "--json",
         *sets("training.framework=deepspeed", "training.quantized_weights=true")),
    case("sim_zeropp_qgz", "simulate", LLAMA, "--stage", "3", "--json",
         *sets("training.quantized_gradients=true")),
    case("sim_zeropp_384_all", "simulate", ZEROPP, "--stage", "3", "--json",
         *sets("training.hpz_partition=16", "training.quantized_weights=true",
               "training.quantized_gradients=true")),
    case("sim_zeropp_384_plain", "simulate", ZEROPP, "--stage", "3", "--json"),
    case("sim_zeropp_offload", "simulate", INFINITY, "--stage", "3", "--json",
         *sets("training.optimizer_offload=cpu", "training.param_offload=cpu",
               "training.hpz_partition=4")),
    # [variation]: jitter, stragglers, degraded links (every rank simulated: few ranks)
    case("sim_jitter_tiny", "simulate", TINY, "--json",
         *sets("variation.jitter_pct=10", "variation.seed=1")),
    case("sim_jitter_tiny_seed2", "simulate", TINY, "--stage", "3", "--json",
         *sets("variation.jitter_pct=25", "variation.seed=2")),
    case("sim_straggler_tiny", "simulate", TINY, "--json",
         *sets("variation.slow_ranks=[1]", "variation.slowdown=2.0")),
    case("sim_degraded_tiny", "simulate", TINY, "--json",
         *sets("variation.degraded_links=[2]", "variation.link_bandwidth_factor=0.25")),
    case("sim_jitter_llama_node", "simulate", LLAMA, "--stage", "3", "--json", *ONE_NODE,
         *sets("variation.jitter_pct=5", "variation.seed=3")),
    case("sim_straggler_llama_2nodes", "simulate", LLAMA, "--json", *TWO_NODES,
         *sets("variation.slow_ranks=[3]", "variation.slowdown=1.25")),
    case("sim_degraded_zero_paper", "simulate", ZERO_PAPER, "--json", *ONE_NODE,
         *sets("variation.degraded_links=[0]", "variation.link_bandwidth_factor=0.5")),
    case("sim_jitter_hsdp_accum", "simulate", LLAMA, "--stage", "3", "--json", *TWO_NODES,
         *sets("training.shard_group=8", "training.replica_allreduce=once_per_step",
               "training.gradient_accumulation=2", "variation.jitter_pct=5")),
    case("sim_jitter_delayed_update", "simulate", INFINITY, "--stage", "3", "--json",
         *sets("cluster.gpus_per_node=4", "training.optimizer_offload=cpu",
               "training.delayed_update=true", "variation.jitter_pct=10")),
    case("sim_jitter_zeropp", "simulate", LLAMA, "--stage", "3", "--json", *ONE_NODE,
         *sets("training.hpz_partition=4", "training.quantized_gradients=true",
               "variation.jitter_pct=5", "variation.slow_ranks=[5]")),
    case("sim_per_rank_mode", "simulate", TINY, "--mode", "per_rank", "--json"),
    case("sim_symmetric_mode", "simulate", TINY, "--mode", "symmetric", "--json"),
    case("sim_jitter_text", "simulate", TINY, *sets("variation.jitter_pct=10")),
    # gradient accumulation, precision, optimizer, checkpointing, collectives, compute models
    case("sim_accum_all_stages", "simulate", LLAMA, "--json",
         *sets("training.gradient_accumulation=4")),
    case("sim_accum_zero_paper", "simulate", ZERO_PAPER, "--json",
         *sets("training.gradient_accumulation=8")),
    case("sim_fp32_sgd_momentum", "simulate", MEGATRON, "--json",
         *sets("training.precision=fp32", "training.optimizer=sgd_momentum")),
    case("sim_selective_ckpt", "simulate", MEGATRON, "--json",
         *sets("training.activation_checkpointing=selective", "training.flash_attention=false")),
    case("sim_selective_op_ckpt", "simulate", LLAMA, "--stage", "3", "--json",
         *sets("training.activation_checkpointing=selective_op", "cluster.gpu=H100-80GB")),
    case("sim_all_reduce_reduction", "simulate", LLAMA, "--json",
         *sets("training.gradient_reduction=all_reduce")),
    case("sim_no_overlap", "simulate", LLAMA, "--json", *sets("training.overlap_comm=false")),
    case("sim_no_prefetch_small_buckets", "simulate", MEGATRON, "--stage", "3", "--json",
         *sets("training.prefetch_layers=0", "training.reduce_bucket_MiB=5",
               "training.allgather_bucket_MiB=5")),
    case("sim_flat_compute", "simulate", LLAMA, "--json", *sets("cluster.compute_model=flat")),
    case("sim_h200", "simulate", LLAMA, "--json", *sets("cluster.gpu=H200-141GB")),
    case("sim_a100_40gb_16nodes", "simulate", LLAMA, "--json",
         *sets("cluster.gpu=A100-40GB", "cluster.nodes=16")),
    case("sim_h100_power_limit", "simulate", LLAMA, "--stage", "3", "--json",
         *sets("cluster.gpu=H100-80GB", "cluster.power_limit_W=500")),
    case("sim_algo_ring_simple", "simulate", LLAMA, "--json",
         *sets("cluster.collective_algorithm=ring", "cluster.collective_protocol=Simple")),
    case("sim_algo_hierarchical", "simulate", ZERO_PAPER, "--json",
         *sets("cluster.collective_algorithm=hierarchical")),
    case("sim_off_rail_oversubscribed", "simulate", LLAMA, "--json",
         *sets("cluster.rail_optimized=false", "cluster.oversubscription=2")),
    case("sim_gloo_on_gpus", "simulate", MEGATRON, "--json",
         *sets("cluster.collective_library=gloo", "cluster.intra_node_latency_us=20",
               "cluster.inter_node_latency_us=50")),
    case("sim_tiny_profile", "simulate", TINY, "--json",
         *sets("cluster.profile=profiles/cpu_gloo_tiny.json")),
    case("sim_tiny_profile_ring_impl", "simulate", TINY, "--json",
         *sets("cluster.profile=profiles/cpu_gloo_tiny.json", "cluster.collective_impl=ring")),
    case("sim_h100_profile", "simulate", MEGATRON, "--json",
         *sets(f"cluster.profile={H100_PROFILE}", "cluster.gpu=H100-80GB",
               "training.precision=bf16", "training.flash_attention=true",
               "training.activation_checkpointing=none", "model.layers=24", "model.hidden=2048",
               "model.heads=16", "cluster.nodes=1")),
    case("sim_hf_two_layers", "simulate", LLAMA_HF, "--json", *sets("model.layers=2")),
]

MEMORY = [
    case("mem_zero_paper", "memory", ZERO_PAPER, "--json"),
    case("mem_llama2", "memory", LLAMA, "--json"),
    case("mem_llama2_hf", "memory", LLAMA_HF, "--json"),
    case("mem_megatron", "memory", MEGATRON, "--json"),
    case("mem_gpt3", "memory", GPT3, "--json"),
    case("mem_tiny", "memory", TINY, "--json"),
    case("mem_tiny_text", "memory", TINY),
    case("mem_offload_10b", "memory", OFFLOAD, "--json"),
    case("mem_offload_10b_text", "memory", OFFLOAD),
    case("mem_infinity_nvme", "memory", INFINITY, "--json",
         *sets("training.optimizer_offload=nvme", "training.param_offload=nvme")),
    case("mem_hsdp", "memory", LLAMA, "--json", *sets("training.shard_group=8")),
    case("mem_hsdp_text", "memory", LLAMA, *sets("training.shard_group=16",
                                                 "training.replica_allreduce=once_per_step")),
    case("mem_zeropp", "memory", LLAMA, "--json",
         *sets("training.hpz_partition=8", "training.quantized_weights=true",
               "training.quantized_gradients=true")),
    case("mem_fw_deepspeed", "memory", LLAMA, "--json", *sets("training.framework=deepspeed")),
    case("mem_fw_fsdp2", "memory", LLAMA, "--json",
         *sets("training.framework=fsdp2", "training.reduce_dtype=fp32")),
    case("mem_fw_ddp", "memory", LLAMA, "--json",
         *sets("training.framework=ddp", "training.zero_stage=0")),
    case("mem_accum_selective", "memory", MEGATRON, "--json",
         *sets("training.gradient_accumulation=4", "training.activation_checkpointing=selective",
               "training.micro_batch=4")),
    case("mem_deepspeed_config", "memory", LLAMA, "--deepspeed", DS_CONFIG, "--json"),
    case("mem_sgd_fp16", "memory", ZERO_PAPER, "--json",
         *sets("training.optimizer=sgd", "cluster.nodes=2")),
]

PLAN = [
    case("plan_zero_paper", "plan", ZERO_PAPER, "--json"),
    case("plan_llama2", "plan", LLAMA, "--json"),
    case("plan_llama2_text", "plan", LLAMA),
    case("plan_llama2_allow_all", "plan", LLAMA, "--json", "--allow", "offload,hybrid,zeropp"),
    case("plan_megatron_16GiB", "plan", MEGATRON, "--json", "--gpu-memory-GiB", "16"),
    case("plan_tiny", "plan", TINY, "--json"),
    case("plan_offload_10b_allow", "plan", OFFLOAD, "--allow", "offload"),
]

AXES = [  # tensor and pipeline parallelism (issues 29 and 30)
    case("sim_gpt3_tp8", "simulate", GPT3, "--stage", "3", "--json",
         *sets("parallelism.tensor_parallel=8", "parallelism.sequence_parallel=true")),
    case("sim_gpt3_3d", "simulate", GPT3_3D, "--json"),
    case("sim_gpt3_3d_text", "simulate", GPT3_3D),
    case("sim_gpt3_3d_gpipe", "simulate", GPT3_3D, "--stage", "1", "--json",
         *sets("parallelism.pipeline_schedule=gpipe", "training.gradient_accumulation=16")),
    case("sim_gpt3_3d_interleaved", "simulate", GPT3_3D, "--stage", "1", "--json",
         *sets("parallelism.pipeline_schedule=interleaved_1f1b", "parallelism.virtual_stages=2")),
    case("sim_gpt3_3d_deepspeed", "simulate", GPT3_3D, "--stage", "1", "--json",
         *sets("training.framework=deepspeed")),
    case("sim_llama2_fsdp2_pp4", "simulate", LLAMA, "--json",
         *sets("training.framework=fsdp2", "training.zero_stage=2",
               "parallelism.pipeline_parallel=4", "training.gradient_accumulation=8")),
    case("mem_gpt3_3d", "memory", GPT3_3D, "--json"),
    case("mem_gpt3_3d_text", "memory", GPT3_3D),
    case("mem_gpt3_3d_uneven", "memory", GPT3_3D, "--json",
         *sets("parallelism.pipeline_layers=[11,12,12,13,13,12,12,11]")),
    case("bad_pp_world", "memory", GPT3_3D, *sets("parallelism.pipeline_parallel=3")),
    case("bad_pp_deepspeed_stage2", "simulate", GPT3_3D,
         *sets("training.framework=deepspeed", "training.zero_stage=2")),
    case("bad_pp_stage2_flag", "simulate", GPT3_3D, "--stage", "2"),
    case("bad_pp_uneven", "memory", GPT3_3D, *sets("parallelism.pipeline_parallel=64")),
    case("bad_pp_interleaved_v1", "memory", GPT3_3D,
         *sets("parallelism.pipeline_schedule=interleaved_1f1b")),
]

COLLECTIVE = [
    *(case(f"coll_llama2_{op}", "collective", LLAMA, "--op", op, "--size-bytes", "1e9", "--json")
      for op in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")),
    case("coll_llama2_sweep_json", "collective", LLAMA, "--op", "all_gather", "--sweep",
         "1K:1G:16", "--json"),
    case("coll_ranks_8", "collective", LLAMA, "--op", "all_reduce", "--size-bytes", "256e6",
         "--ranks", "8", "--json"),
    case("coll_h100_nvls", "collective", LLAMA, "--op", "all_reduce", "--size-bytes", "1e9",
         "--ranks", "8", "--json", *sets("cluster.gpu=H100-80GB")),
    case("coll_tree_ll", "collective", LLAMA, "--op", "all_reduce", "--size-bytes", "1e6", "--json",
         *sets("cluster.collective_algorithm=tree", "cluster.collective_protocol=LL")),
    case("coll_zero_paper_text", "collective", ZERO_PAPER, "--op", "reduce_scatter",
         "--size-bytes", "4e9"),
    case("coll_tiny_gloo_sweep", "collective", TINY, "--op", "all_reduce", "--sweep", "8:64M:8"),
    case("coll_tiny_gloo_json", "collective", TINY, "--op", "all_gather", "--size-bytes", "1e6",
         "--json"),
    case("coll_degraded_per_rank", "collective", LLAMA, "--op", "all_reduce", "--size-bytes", "1e8",
         "--mode", "per_rank", "--json", *TWO_NODES, *sets("variation.degraded_links=[9]")),
    case("coll_gpt3_1024", "collective", GPT3, "--op", "all_reduce", "--size-bytes", "1e9",
         "--json"),
]

WRITES = [  # commands whose output is a file
    case("sweep_tiny_csv", "sweep", TINY, "--vary", "training.zero_stage=0,1,2,3",
         "--vary", "cluster.nodes=1,2", "--out", f"{OUT}.csv", "--jobs", "1"),
    case("sweep_llama2_family_json", "sweep", LLAMA, "--vary", "training.shard_group=0,8,16",
         "--vary", "training.replica_allreduce=every_micro_step,once_per_step",
         *sets("training.zero_stage=3", "training.gradient_accumulation=2"),
         "--out", f"{OUT}.json", "--jobs", "1", "--quiet"),
    case("trace_tiny_stage3", "simulate", TINY, "--stage", "3", "--trace", f"{OUT}.json"),
    case("trace_tiny_jitter", "simulate", TINY, "--stage", "2", "--trace", f"{OUT}.json",
         *sets("variation.jitter_pct=10", "cluster.nodes=2", "cluster.gpus_per_node=2")),
]

VALIDATE = [
    case("validate_references_json", "validate", "--references", "references/", "--json"),
    case("validate_references_text", "validate", "--references", "references/"),
    case("validate_references_flat", "validate", "--references", "references/", "--json",
         *sets("cluster.compute_model=flat")),
    case("validate_h100_7b5_s3", "validate", f"{MEASUREMENTS}/gpt7b5_s3_w8.json",
         "--profile", H100_PROFILE),
    case("validate_h100_350m_s1_json", "validate", f"{MEASUREMENTS}/gpt350m_s1_w8.json",
         "--profile", H100_PROFILE, "--json"),
    case("validate_h100_1b3_s2_tolerant", "validate", f"{MEASUREMENTS}/gpt1b3_s2_w8_mb3.json",
         "--profile", H100_PROFILE, "--memory-tolerance-pct", "20", "--time-tolerance-pct", "30"),
]

BAD_INPUT = [  # exit 2: the one error line is recorded too
    case("bad_key_typo", "simulate", LLAMA, *sets("training.shard_grop=8")),
    case("bad_stage", "simulate", LLAMA, *sets("training.zero_stage=4")),
    case("bad_shard_group", "simulate", LLAMA, *sets("training.shard_group=3")),
    case("bad_fsdp2_stage1", "memory", LLAMA, *sets("training.framework=fsdp2",
                                                    "training.zero_stage=1")),
    case("bad_zeropp_with_hsdp", "simulate", LLAMA, *sets("training.shard_group=8",
                                                          "training.hpz_partition=8")),
    case("bad_nvme_without_rates", "memory", LLAMA, *sets("training.optimizer_offload=nvme")),
    case("bad_jitter", "simulate", TINY, *sets("variation.jitter_pct=100")),
    case("bad_slow_rank", "simulate", TINY, *sets("variation.slow_ranks=[4]")),
    case("bad_missing_scenario", "simulate", "scenarios/no_such_file.toml"),
    case("bad_op", "collective", LLAMA, "--op", "all_to_all", "--size-bytes", "1e6"),
    case("bad_sweep_spec", "collective", LLAMA, "--op", "all_reduce", "--sweep", "8:4:2"),
    case("bad_symmetric_with_straggler", "simulate", TINY, "--mode", "symmetric",
         *sets("variation.slow_ranks=[0]")),
    case("bad_references_dir", "validate", "--references", "no_such_dir/"),
]

CASES = [*README_SAMPLES, *SIMULATE, *MEMORY, *PLAN, *AXES, *COLLECTIVE, *WRITES, *VALIDATE,
         *BAD_INPUT]

assert len({c.name for c in CASES}) == len(CASES), "case names must be unique"
