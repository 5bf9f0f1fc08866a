"""Launch configs people already have: Accelerate's YAML, torchtitan's job TOML, Megatron-LM's
arguments. Each upstream file (tests/fixtures/launch, copied verbatim) is mapped by hand here,
key by key from the file's text and the launcher's documented defaults, and the reader must
give exactly that; the same run written as --set must be the same scenario."""

import json
import shutil
from pathlib import Path

import pytest

from zerosim.analytic.model import total_params
from zerosim.scenario.load import load_scenario

from tests.conftest import ROOT, SCENARIOS, assert_one_line_error, run_zerosim

FIXTURES = ROOT / "tests" / "fixtures" / "launch"
LLAMA = SCENARIOS / "llama2_7b_64gpu.toml"
GPT3 = SCENARIOS / "gpt3_175b_1024gpu.toml"
FLAG = {"accelerate": "--accelerate", "torchtitan": "--torchtitan", "megatron": "--megatron-args"}

# accelerate/fsdp.yaml: distributed_type FSDP (no fsdp_version: 1), mixed_precision 'bf16',
# num_processes 2 (no num_machines: 1), FULL_SHARD, fsdp_offload_params false,
# fsdp_activation_checkpointing false.
FSDP_YAML = {"cluster.nodes": 1, "cluster.gpus_per_node": 2, "training.framework": "fsdp1",
             "training.zero_stage": 3, "training.precision": "bf16",
             "training.optimizer_offload": "none", "training.param_offload": "none",
             "training.activation_checkpointing": "none"}
# accelerate/deepspeed.yaml names zero_stage1_config.json: fp16 enabled, AdamW, stage 1,
# allgather_bucket_size 2e8 elements of 2 bytes, overlap_comm true, gradient_accumulation_steps
# 1; reduce_bucket_size and the micro-batch "auto": the scenario's (25 MiB: zerosim's default; 1)
DEEPSPEED_YAML = {"cluster.nodes": 1, "cluster.gpus_per_node": 2,
                  "training.framework": "deepspeed", "training.zero_stage": 1,
                  "training.precision": "fp16", "training.optimizer": "adamw",
                  "training.allgather_bucket_MiB": 2e8 * 2 / 2**20,
                  "training.reduce_bucket_MiB": 25.0, "training.overlap_comm": True,
                  "training.gradient_accumulation": 1, "training.micro_batch": 1,
                  "training.optimizer_offload": "none"}
MULTI_GPU_YAML = {"cluster.nodes": 1, "cluster.gpus_per_node": 2, "training.framework": "ddp",
                  "training.zero_stage": 0, "training.precision": "bf16"}
# torchtitan/llama3_8b.toml: local_batch_size 1, seq_len 8192, no global batch (one micro-step),
# dp_shard -1 (FSDP2, resharding after forward: stage 3), no pipeline, AC "selective" with "op",
# AdamW; job_config.py's defaults: mixed_precision_param bfloat16, _reduce float32.
LLAMA3_8B = {"training.framework": "fsdp2", "training.zero_stage": 3, "training.micro_batch": 1,
             "training.seq_len": 8192, "training.gradient_accumulation": 1,
             "training.precision": "bf16", "training.reduce_dtype": "fp32",
             "training.activation_checkpointing": "selective_op", "training.optimizer": "adamw",
             "training.flash_attention": True, "parallelism.tensor_parallel": 1,
             "parallelism.sequence_parallel": False, "parallelism.tp_comm_overlap": False,
             "parallelism.pipeline_parallel": 1}
# llama3_70b.toml: local_batch_size 8, 8-way TP (with torchtitan's sequence parallelism), AC
# "full".
LLAMA3_70B = {**LLAMA3_8B, "training.micro_batch": 8, "training.activation_checkpointing": "full",
              "parallelism.tensor_parallel": 8, "parallelism.sequence_parallel": True}
# megatron/train_gpt3_175b_distributed.sh: 96 layers x 12288, 96 heads, seq 2048 = positions
# (learned, Megatron's default), GELU with ffn 4h = 49152, LayerNorm with biases, tied, dropout
# 0.1; micro-batch 1 of a global 1536, --fp16, TP 8 x PP 16 (1F1B); no distributed optimizer
# (stage 0), no recomputation. On 1024 ranks: 1024 / (8 x 16) = 8 data-parallel ranks, so
# 1536 / (1 x 8) = 192 micro-batches. Its vocabulary is a file's: the scenario's 50257 stays.
GPT3_ARGS = {"model.name": "train_gpt3_175b_distributed.sh", "model.layers": 96,
             "model.hidden": 12288, "model.heads": 96, "model.max_seq_len": 2048,
             "model.mlp": "gelu", "model.ffn": 49152, "model.norm": "layernorm",
             "model.bias": True, "model.norm_bias": True, "model.tied_embeddings": True,
             "model.position": "learned", "model.dropout": True, "model.fused_qkv": True,
             "model.vocab": 50257, "training.framework": "zero", "training.micro_batch": 1,
             "training.seq_len": 2048, "training.precision": "fp16", "training.optimizer": "adam",
             "training.zero_stage": 0, "training.gradient_reduction": "reduce_scatter",
             "training.activation_checkpointing": "none", "training.gradient_accumulation": 192,
             "parallelism.tensor_parallel": 8, "parallelism.sequence_parallel": False,
             "parallelism.tp_comm_overlap": False, "parallelism.pipeline_parallel": 16,
             "parallelism.pipeline_schedule": "1f1b", "parallelism.virtual_stages": 1}

CASES = [("accelerate", "accelerate/fsdp.yaml", LLAMA, FSDP_YAML),
         ("accelerate", "accelerate/deepspeed.yaml", LLAMA, DEEPSPEED_YAML),
         ("accelerate", "accelerate/multi_gpu.yaml", LLAMA, MULTI_GPU_YAML),
         ("torchtitan", "torchtitan/llama3_8b.toml", LLAMA, LLAMA3_8B),
         ("torchtitan", "torchtitan/llama3_70b.toml", LLAMA, LLAMA3_70B),
         ("megatron", "megatron/train_gpt3_175b_distributed.sh", GPT3, GPT3_ARGS)]


def value_of(scenario, dotted: str):
    table, key = dotted.split(".")
    return getattr(getattr(scenario, table), key)


def as_sets(expected: dict) -> list[str]:
    return [f"{key}={json.dumps(value)}" for key, value in expected.items()]


@pytest.mark.parametrize("kind, fixture, base, expected", CASES, ids=[c[1] for c in CASES])
def test_each_fixture_gives_its_hand_mapping(kind, fixture, base, expected):
    scenario = load_scenario(base, launch=(kind, FIXTURES / fixture))
    assert {key: value_of(scenario, key) for key in expected} == expected


@pytest.mark.parametrize("kind, fixture, base, expected", CASES, ids=[c[1] for c in CASES])
def test_the_reader_is_the_same_run_as_its_keys_given_with_set(kind, fixture, base, expected):
    by_file = load_scenario(base, launch=(kind, FIXTURES / fixture))
    assert by_file == load_scenario(base, as_sets(expected))


def test_through_the_command_line_too():
    """memory --json of the file equals memory --json of its keys as --set (micro-batches and
    all), and a --set after the file still wins."""
    fixture = FIXTURES / "megatron/train_gpt3_175b_distributed.sh"
    by_file = run_zerosim("memory", GPT3, "--json", "--megatron-args", fixture)
    by_sets = run_zerosim("memory", GPT3, "--json", *[a for s in as_sets(GPT3_ARGS)
                                                      for a in ("--set", s)])
    assert by_file.code == by_sets.code == 0, by_file.stderr + by_sets.stderr
    assert by_file.json == by_sets.json
    later = run_zerosim("memory", GPT3, "--json", "--megatron-args", fixture,
                        "--set", "parallelism.tensor_parallel=4")
    assert later.code == 0, later.stderr
    # 1024 / (4 x 16) = 16 data-parallel ranks: 1536 / 16 = 96 micro-batches, settled after --set
    assert "training.gradient_accumulation=96" in later.stderr


def test_the_megatron_shape_is_gpt3s_exact_count():
    """Brown et al. 2020's GPT-3 175B by shape (the scenario file's comment): 174,604,259,328."""
    fixture = FIXTURES / "megatron/train_gpt3_175b_distributed.sh"
    assert total_params(load_scenario(GPT3, launch=("megatron", fixture)).model) == 174_604_259_328


@pytest.mark.parametrize("kind, fixture, base, unused", [
    ("accelerate", "accelerate/fsdp.yaml", LLAMA,
     "not used: fsdp_config.fsdp_auto_wrap_policy, fsdp_config.fsdp_backward_prefetch, "
     "fsdp_config.fsdp_cpu_ram_efficient_loading, fsdp_config.fsdp_forward_prefetch, "
     "fsdp_config.fsdp_state_dict_type, fsdp_config.fsdp_sync_module_states, "
     "fsdp_config.fsdp_use_orig_params"),
    ("accelerate", "accelerate/deepspeed.yaml", LLAMA, "not used: deepspeed_config.zero3_init_flag"),
    ("torchtitan", "torchtitan/llama3_8b.toml", LLAMA,
     "not used: [job], [profiling], [metrics], optimizer.lr, optimizer.eps, [lr_scheduler], "
     "training.max_norm, training.steps, training.dataset, [checkpoint], [compile], [quantize], "
     "[validation], its [model] (the scenario's [model] gives the shape)"),
    ("megatron", "megatron/train_gpt3_175b_distributed.sh", GPT3,
     "not used: --adam-beta1, --adam-beta2, --clip-grad, --data-path, --eval-interval, "
     "--eval-iters, --init-method-std, --load, --log-interval, --lr, --lr-decay-iters, "
     "--lr-decay-style, --lr-warmup-fraction, --master_addr, --master_port, --merge-file, "
     "--min-lr, --nnodes, --nproc_per_node, --save, --save-interval, --split, "
     "--step-batch-size-schedule, --tensorboard-dir, --train-iters, --vocab-file, "
     "--weight-decay"),
])
def test_the_note_names_every_key_not_used(kind, fixture, base, unused):
    """Every key of the file the reader did not take, read off the file by hand."""
    notes = []
    load_scenario(base, launch=(kind, FIXTURES / fixture), notes=notes)
    assert notes[0].startswith(f"from {FIXTURES / fixture}: ")
    assert notes[0].endswith(unused)


def test_accelerate_deepspeed_file_note_is_deepspeeds(write):
    """The ds_config an Accelerate YAML names is read by --deepspeed's reader, which says what it
    did not use (the template's scheduler and clipping among them)."""
    notes = []
    load_scenario(LLAMA, launch=("accelerate", FIXTURES / "accelerate/deepspeed.yaml"),
                  notes=notes)
    assert "zero_stage1_config.json: precision=fp16, zero_stage=1" in notes[1]
    assert "gradient_clipping, scheduler, steps_per_print" in notes[1]


def yaml(write, text: str):
    return write("acc.yaml", text)


@pytest.mark.parametrize("text, expected", [
    # FSDP_SHARDING_STRATEGY's numbers (index + 1): 2 is SHARD_GRAD_OP
    ("distributed_type: FSDP\nnum_processes: 16\nnum_machines: 2\nfsdp_config:\n"
     "  fsdp_sharding_strategy: 2\n",
     {"training.zero_stage": 2, "cluster.nodes": 2, "cluster.gpus_per_node": 8}),
    # HYBRID_SHARD (4): shards inside each node of 8, replicas across the 2 nodes
    ("distributed_type: FSDP\nnum_processes: 16\nnum_machines: 2\nfsdp_config:\n"
     "  fsdp_sharding_strategy: '4'\n",
     {"training.zero_stage": 3, "parallelism.shard_group": 8}),
    ("distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_version: 2\n"
     "  fsdp_reshard_after_forward: false\n  fsdp_activation_checkpointing: true\n",
     {"training.framework": "fsdp2", "training.zero_stage": 2,
      "training.activation_checkpointing": "full"}),
    ("distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 8\ndeepspeed_config:\n"
     "  zero_stage: 3\n  offload_optimizer_device: cpu\n  gradient_accumulation_steps: 4\n",
     {"training.framework": "deepspeed", "training.zero_stage": 3, "training.precision": "bf16",
      "training.optimizer_offload": "cpu", "training.gradient_accumulation": 4}),
])
def test_accelerate_spellings(write, text, expected):
    scenario = load_scenario(LLAMA, launch=("accelerate", yaml(write, text)))
    assert {key: value_of(scenario, key) for key in expected} == expected


NO_AC = '[activation_checkpoint]\nmode = "none"\n'
"""torchtitan's default, selective checkpointing of one layer in 2, is refused: not modeled."""


def toml(write, text: str):
    return write("job.toml", NO_AC + text)


def test_torchtitan_global_batch_hybrid_shards_and_pipeline(write):
    """64 ranks. global 1024 / (local 2 x 64 data-parallel ranks) = 8 micro-steps; replicate 2 of
    shard -1: 64 / 2 = 32 ranks a shard group; a pipeline of 2 with 4-sequence local batches in
    micro-batches of 1: 4 micro-batches, and FSDP2 keeps its units gathered (stage 2)."""
    t = load_scenario(LLAMA, launch=("torchtitan", toml(write, (
        "[training]\nlocal_batch_size = 2\nglobal_batch_size = 1024\n"))))
    assert (t.training.micro_batch, t.training.gradient_accumulation) == (2, 8)
    h = load_scenario(LLAMA, launch=("torchtitan", toml(write, (
        "[parallelism]\ndata_parallel_replicate_degree = 2\n"))))
    assert h.parallelism.shard_group == 32
    p = load_scenario(LLAMA, launch=("torchtitan", toml(write, (
        "[training]\nlocal_batch_size = 4\n[parallelism]\npipeline_parallel_degree = 2\n"))))
    assert (p.training.micro_batch, p.training.gradient_accumulation, p.training.zero_stage,
            p.parallelism.pipeline_parallel) == (1, 4, 2, 2)


def test_torchtitan_flavor_needs_a_shape(write, monkeypatch):
    """A flavor is a name: with no shape in the scenario, one line says what to give; a config.json
    in hf_assets_path (relative to the working directory) gives it."""
    bare = write("bare.toml", "[model]\n[training]\nseq_len = 512\n")
    job = FIXTURES / "torchtitan/llama3_8b.toml"
    assert_one_line_error(run_zerosim("memory", bare, "--torchtitan", job),
                          "'llama3 8B', a flavor zerosim cannot size", "model.hf_config")
    assets = bare.parent / "assets/hf/Llama-3.1-8B"
    assets.mkdir(parents=True)
    shutil.copy(SCENARIOS / "hf_configs/llama-2-7b-hf.json", assets / "config.json")
    monkeypatch.chdir(bare.parent)
    scenario = load_scenario(bare, launch=("torchtitan", job))
    assert total_params(scenario.model) == 6_738_415_616  # the config.json's Llama-2-7B
    assert scenario.model.name == "llama3 8B"


def test_megatron_argument_list_with_llama_layout(write):
    """A plain argument list. ffn: none given, so SwiGLU's int(4 x 4096 x 2/3 / 64) x 64 = 10880;
    vocab 50257 padded to a multiple of 128 x TP 8 = 1024: 51200; 32 layers / PP 4 / 2 a chunk =
    4 virtual stages; --recompute-activations is selective."""
    args = write("args.txt", (
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
        "--num-query-groups 8 --seq-length 4096 --max-position-embeddings 4096 --swiglu "
        "--normalization RMSNorm --disable-bias-linear --position-embedding-type rope "
        "--untie-embeddings-and-output-weights --vocab-size 50257 --micro-batch-size 1 "
        "--global-batch-size 256 --bf16 --use-distributed-optimizer --recompute-activations "
        "--tensor-model-parallel-size 8 --sequence-parallel --pipeline-model-parallel-size 4 "
        "--num-layers-per-virtual-pipeline-stage 2 --hidden-dropout 0 --attention-dropout 0.0\n"))
    notes = []
    s = load_scenario(LLAMA, launch=("megatron", args), notes=notes)
    m, t, p = s.model, s.training, s.parallelism
    # arguments.py: under --bf16 the gradients accumulate in fp32, which zerosim does not count
    assert notes[0].endswith("not modeled: the fp32 gradient buffer Megatron keeps under --bf16 "
                             "(zerosim counts 16-bit gradients)")
    assert (m.kv_heads, m.ffn, m.vocab, m.mlp, m.norm, m.bias, m.tied_embeddings, m.position,
            m.dropout) == (8, 10880, 51200, "swiglu", "rmsnorm", False, False, "rope", False)
    assert (t.precision, t.zero_stage, t.activation_checkpointing) == ("bf16", 1, "selective")
    # 64 ranks / (8 x 4) = 2 data-parallel ranks: 256 / (1 x 2) = 128 micro-batches
    assert t.gradient_accumulation == 128
    assert (p.tensor_parallel, p.sequence_parallel, p.pipeline_parallel, p.pipeline_schedule,
            p.virtual_stages) == (8, True, 4, "interleaved_1f1b", 4)


@pytest.mark.parametrize("kind, name, text, fragments", [
    ("accelerate", "a.yaml", "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: "
     "QUARTER_SHARD\n", ["fsdp_sharding_strategy = 'QUARTER_SHARD' is not modeled", "FULL_SHARD"]),
    ("accelerate", "a.yaml", "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 3\n",
     ["fsdp_sharding_strategy = 3 (NO_SHARD)", "MULTI_GPU"]),
    ("accelerate", "a.yaml", "distributed_type: FSDP\nnum_processes: two\n",
     ["num_processes must be a whole number, got 'two'"]),
    ("accelerate", "a.yaml", "distributed_type: [FSDP\n", ["YAML syntax error"]),
    ("accelerate", "a.yaml", "distributed_type: TPU\n", ["distributed_type = 'TPU' is not modeled"]),
    ("accelerate", "a.yaml", "- 1\n", ["expected a mapping of keys, got list"]),
    ("accelerate", "a.yaml", "a: &x [1, 1]\nb: [*x, *x]\n", ["YAML aliases (*name) are not read"]),
    ("accelerate", "a.yaml", "a: " + "[" * 40 + "]" * 40 + "\n", ["nested more than 32 levels"]),
    ("accelerate", "a.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n", ["nested more than 32"]),
    ("accelerate", "a.yaml", "num_processes: 3\nnum_machines: 2\ndistributed_type: MULTI_GPU\n",
     ["num_processes 3 is not a multiple of num_machines 2"]),
    ("accelerate", "a.yaml", "distributed_type: FSDP\nmixed_precision: fp8\n",
     ["mixed_precision = 'fp8' is not modeled"]),
    ("torchtitan", "t.toml", "[parallelism]\npipeline_parallel_degree = 2\n"
     "pipeline_parallel_schedule = \"ZBVZeroBubble\"\n", ["'ZBVZeroBubble' is not modeled"]),
    ("torchtitan", "t.toml", "[training]\nlocal_batch_size = \"eight\"\n",
     ["training.local_batch_size must be a whole number"]),
    ("torchtitan", "t.toml", "[training\n", ["TOML syntax error"]),
    ("torchtitan", "t.toml", "[training]\nglobal_batch_size = 1000\n",
     ["global batch 1000 is not a multiple of local batch 8 x data-parallel ranks 64 = 512"]),
    ("torchtitan", "t.toml", "[parallelism]\ncontext_parallel_degree = 2\n", ["not modeled"]),
    ("torchtitan", "t.toml", "[parallelism]\ndata_parallel_shard_degree = 16\n",
     ["dp_replicate 1 x dp_shard 16 x tp 1 x pp 1 = 16 ranks", "cluster has 64"]),
    ("megatron", "m.txt", "--num-layers ninety --hidden-size 64 --num-attention-heads 4\n",
     ["--num-layers must be a whole number, got 'ninety'"]),
    ("megatron", "m.txt", "--num-layers 2 --hidden-size 64 --num-attention-heads 4 "
     "--max-position-embeddings 8 --position-embedding-type none\n",
     ["--position-embedding-type = 'none' is not modeled"]),
    ("megatron", "m.txt", "--num-layers $LAYERS\n", ["--num-layers $LAYERS: a shell variable"]),
    ("megatron", "m.txt", "--num-layers 2 --split \"949,50\n", ["cannot split into words"]),
    ("megatron", "m.txt", "--num-layers 2 --hidden-size 64 --num-attention-heads 4 "
     "--max-position-embeddings 8 --context-parallel-size 2\n", ["--context-parallel-size 2"]),
    # values of the wrong shape that used to end in a traceback (a review, 2026-11-29)
    ("accelerate", "a.yaml", "distributed_type: [FSDP]\n", ["distributed_type = ['FSDP'] is "
     "not modeled"]),
    ("accelerate", "a.yaml", "distributed_type: FSDP\nmixed_precision: {a: 1}\n",
     ["mixed_precision = {'a': 1} is not modeled"]),
    ("accelerate", "a.yaml", "distributed_type: FSDP\nnum_processes: \"--5\"\n",
     ["num_processes must be a whole number, got '--5'"]),
    ("accelerate", "a.yaml", "distributed_type: FSDP\nnum_processes: \"" + "9" * 5000 + "\"\n",
     ["num_processes = '999", "must be between 1 and 2**53"]),
    ("accelerate", "a.yaml", "distributed_type: FSDP\nnum_processes: " + "9" * 5000 + "\n",
     ["Accelerate config", "4300"]),
    ("accelerate", "a.yaml", "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: "
     "\"\u00b2\"\n", ["fsdp_sharding_strategy = '\u00b2' is not modeled"]),
    ("torchtitan", "t.toml", "[optimizer]\nname = [\"AdamW\"]\n", ["optimizer.name = ['AdamW']"
     " is not modeled"]),
    ("torchtitan", "t.toml", "[model]\nhf_assets_path = \"" + "a" * 5000 + "\"\n",
     ["model.hf_assets_path = 'aaa", "is not a folder name this system can open"]),
    ("megatron", "m.txt", "--num-layers 2 --hidden-size 64 --num-attention-heads 4 "
     "--max-position-embeddings 8 --seq-length " + "1" * 5000 + "\n", ["--seq-length = '111", "must be between 1 and 2**53"]),
])
def test_bad_launch_configs_are_one_line(write, kind, name, text, fragments):
    text = NO_AC + text if kind == "torchtitan" and "[training\n" not in text else text
    result = run_zerosim("memory", LLAMA, FLAG[kind], write(name, text))
    assert_one_line_error(result, *fragments)


@pytest.mark.parametrize("kind", FLAG)
def test_a_missing_launch_config_is_one_line(kind):
    assert_one_line_error(run_zerosim("memory", LLAMA, FLAG[kind], "no/such/file"),
                          "not found", "no/such/file")


def test_one_launch_config_at_a_time_and_not_in_sweep(write):
    fixture = str(FIXTURES / "accelerate/fsdp.yaml")
    assert_one_line_error(run_zerosim("memory", LLAMA, "--accelerate", fixture, "--torchtitan",
                                      str(FIXTURES / "torchtitan/llama3_8b.toml")),
                          "not allowed with argument")
    out = str(write("o.csv", "").parent / "s.csv")
    for kind, path in (("accelerate", fixture), ("torchtitan", "torchtitan/llama3_8b.toml"),
                       ("megatron", "megatron/train_gpt3_175b_distributed.sh")):
        assert_one_line_error(run_zerosim("sweep", LLAMA, "--vary", "cluster.nodes=1,2", "--out",
                                          out, FLAG[kind], str(FIXTURES / path)),
                              f"{FLAG[kind]} is not taken by sweep")


def test_the_python_api_takes_the_launch_configs():
    import zerosim

    fixture = FIXTURES / "torchtitan/llama3_70b.toml"
    assert zerosim.load(LLAMA, torchtitan=fixture) == load_scenario(LLAMA, as_sets(LLAMA3_70B))
    with pytest.raises(TypeError, match="give one of"):
        zerosim.load(LLAMA, torchtitan=fixture, megatron_args=fixture)
    with pytest.raises(TypeError, match="go with a scenario file"):
        zerosim.load(model={"params": 10**9}, accelerate=fixture)


def test_the_note_docs_scenarios_shows_is_the_real_one(monkeypatch):
    """docs/scenarios.md shows a launch config's note (its stdout is a checked sample too)."""
    from tests.test_readme import found

    shown = found("note")
    assert [page for page, _, _ in shown] == ["docs/scenarios.md"]
    monkeypatch.chdir(ROOT)  # the note names the path as typed on the page
    for _, argv, text in shown:
        result = run_zerosim(*argv.split())
        assert result.code == 0, result.stderr
        assert result.stderr == text


def test_without_pyyaml_accelerate_says_so_in_one_line(monkeypatch):
    import sys

    from zerosim.errors import InputError

    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` raises ImportError
    with pytest.raises(InputError, match="pip install pyyaml"):
        load_scenario(LLAMA, launch=("accelerate", FIXTURES / "accelerate/fsdp.yaml"))


JUNK = ("", "x", "-1", "0", "9" * 20, "1.5", "true", "[", "]", "{", ": ", "\n", "'", '"', "#",
        "nan", "--", "--num-layers", "$X", "\t", "１", "= 3", "\udcff")


@pytest.mark.parametrize("kind, fixture", [(c[0], c[1]) for c in CASES if c[1] in (
    "accelerate/fsdp.yaml", "accelerate/deepspeed.yaml", "torchtitan/llama3_8b.toml",
    "megatron/train_gpt3_175b_distributed.sh")])
def test_launch_config_fuzz(scratch, kind, fixture):
    """Each fixture with junk written into it somewhere: an answer, or one line and exit 2."""
    from hypothesis import given, strategies as st

    from tests.fuzzing import GENERATED, fuzz, generated

    text = (FIXTURES / fixture).read_text(encoding="utf-8")
    base = GPT3 if kind == "megatron" else LLAMA

    @fuzz(25)
    @given(at=st.integers(0, len(text)), cut=st.integers(0, 8), junk=st.sampled_from(JUNK))
    def run(at, cut, junk):
        generated("test_launch_config_fuzz")
        target = scratch / Path(fixture).name
        target.write_text(text[:at] + junk + text[at + cut:], encoding="utf-8",
                          errors="surrogateescape")
        result = run_zerosim("memory", base, FLAG[kind], target)
        if result.code != 0:
            assert_one_line_error(result)

    before = GENERATED["test_launch_config_fuzz"]
    run()
    assert GENERATED["test_launch_config_fuzz"] - before == 25


def test_a_set_that_disagrees_with_the_global_batch_is_one_line(write):
    """torchtitan's global 1024 over 64 ranks of local 2 is 8 micro-steps; --set 3 contradicts
    it, shown with the arithmetic (as --deepspeed's train_batch_size is)."""
    job = toml(write, "[training]\nlocal_batch_size = 2\nglobal_batch_size = 1024\n")
    assert_one_line_error(run_zerosim("memory", LLAMA, "--torchtitan", job, "--set",
                                      "training.gradient_accumulation=3"),
                          "global batch 1024 != micro-batch 2 x gradient_accumulation 3 x "
                          "data-parallel ranks 64 = 384")
    ok = run_zerosim("memory", LLAMA, "--json", "--torchtitan", job, "--set",
                     "training.gradient_accumulation=8")
    assert ok.code == 0, ok.stderr


def test_the_other_fixtures_load_or_say_why_not():
    """latest_fsdp.yaml: Accelerate's own test config, one process, mixed_precision 'no' (fp32).
    tp_hsdp.yaml: TP 2 x dp_replicate 2 x dp_shard 2 = num_processes 8 on FSDP2; hybrid sharding
    beside tensor parallelism is refused in one line by the scenario's own check, and without
    the shard group it loads. debug_model.toml: torchtitan's selective checkpointing with its
    default option "2" (one layer in 2), not modeled: one line."""
    s = load_scenario(LLAMA, launch=("accelerate", FIXTURES / "accelerate/latest_fsdp.yaml"))
    assert (s.world_size, s.training.precision, s.training.framework, s.training.zero_stage) == (
        1, "fp32", "fsdp1", 3)
    hsdp = FIXTURES / "accelerate/tp_hsdp.yaml"
    assert_one_line_error(run_zerosim("memory", LLAMA, "--accelerate", hsdp),
                          "hybrid sharding beside tensor parallelism")
    t = load_scenario(LLAMA, ["parallelism.shard_group=0"], launch=("accelerate", hsdp))
    assert (t.world_size, t.parallelism.tensor_parallel, t.training.framework,
            t.training.zero_stage, t.training.precision) == (8, 2, "fsdp2", 3, "bf16")
    assert_one_line_error(run_zerosim("memory", LLAMA, "--torchtitan",
                                      FIXTURES / "torchtitan/debug_model.toml"),
                          "selective_ac_option = '2'", "not modeled")
